"""A cache Cedar's planner chose, on trial (``jdata._autoplan``): the first epoch that
reads it back is measured against the profiled one, and the cache goes where it did not
make that epoch faster. The model's savings are work summed over ops; what an epoch makes
also depends on pools that share the cores and on the consumer, which the model does not
see (SimCLR's cache after decoding, ASR's after the spectrogram, measured:
``benchmarks/cedar/cache.py``).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Any, Callable

from jdata import _plan
from jdata.ops import cache as cache_op
from jdata.ops import index_cache
from jdata.ops.cache import CacheNode
from jdata.ops.index_cache import IndexCacheNode

MIN_ELEMENTS = 8  # the fewest elements after the first that give a rate
POLL_SEC = 0.01  # how often a thread looks for an iterator's first element
# A cache the planner chose stays if the first epoch that reads it back makes this much
# more than the profiled epoch (less is within an epoch's noise on a shared machine).
GAIN = 0.05
MIN_SEC = 0.1  # the shortest stretch of an epoch whose rate is compared


def rate_text(rate: float) -> str:
    return "unbounded" if math.isinf(rate) else f"{rate:,.0f} elements/s"


def rate_since(start: float, first: tuple[float, int] | None, elements: int) -> float:
    """Elements/s since ``first`` (when the start ended, and the elements then), or since
    ``start`` where too few came after it (a short epoch's prefetched batches come at
    once); nan where that took under ``MIN_SEC`` (too short to compare)."""
    if first is None or elements - first[1] < MIN_ELEMENTS:
        first = (start, 0)
    took = time.monotonic() - first[0]
    return (elements - first[1]) / took if took >= MIN_SEC else math.nan


class FirstElement:
    """When an iterator's first element came, and the elements then (``count()``, polled
    on a thread of its own)."""

    def __init__(self, count: Callable[[], int]) -> None:
        self.started = time.monotonic()
        self.seen: tuple[float, int] | None = None
        self._count, self._stop = count, threading.Event()
        threading.Thread(target=self._run, name="jdata-plan-trial", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_SEC):
            elements = self._count()
            if elements > 0:
                self.seen = (time.monotonic(), elements)
                return

    def stop(self) -> None:
        self._stop.set()


def caches_filled(plan: _plan.Node) -> bool:
    caches = [n for n in _plan.walk(plan) if isinstance(n, (CacheNode, IndexCacheNode))]
    return bool(caches) and all(
        cache_op.filled(n) if isinstance(n, CacheNode) else
        index_cache.filled(n) == n.cardinality() for n in caches)


def judge(placement: Any, rate: float) -> Any:
    """``placement`` after its cache's trial, where the epoch that read it back made
    ``rate`` elements/s: kept if that is ``GAIN`` more than the profiled epoch, else
    without it; the reason says which, and the two rates."""
    measured = (f"measured: the epoch that read it back made {rate_text(rate)}, the "
                f"profiled one {rate_text(placement.rate)}")
    if rate >= placement.rate * (1 + GAIN):
        return _reason(placement, f"{placement.reasons[0]}; kept ({measured})")
    chosen = placement.reasons[0].removeprefix("cache: ")
    return dataclasses.replace(
        _reason(placement, f"cache: none (the planner's, {chosen}, went: {measured}, not "
                           f"{GAIN:.0%} more)"), cache=None, cache_part=None)


def _reason(placement: Any, cache: str) -> Any:
    """``placement`` off trial, with ``cache`` as its cache's reason."""
    return dataclasses.replace(placement, on_trial=False,
                               reasons=(cache, *placement.reasons[1:]))


class Trial:
    """Measures the first epoch that reads the planner's cache back (an iterator's
    ``profiler``): where it made less than ``1 + GAIN`` times what the profiled
    epoch made, each after its first element, the cache goes from the plan (what the
    model said it saves did not show: pools that share the cores, a consumer that
    bounds the stream), else it stays; either is said in ``explain()``."""

    def __init__(self, placement: Any, settle: Callable[[Any, Any], None]) -> None:
        self._placement, self._settle = placement, settle
        self._first: FirstElement | None = None
        self._ops = None

    def start(self, ops) -> None:
        self._ops = ops
        self._first = FirstElement(lambda: sum(
            t.elements for t in ops.tallies(ops.plan, callers=True)))

    def decide(self, ended: bool = False) -> None:
        if not ended or self._first is None:
            return
        self._first.stop()
        elements = sum(t.elements for t in self._ops.tallies(self._ops.plan, callers=True))
        rate = rate_since(self._first.started, self._first.seen, elements)
        placement = self._placement
        if not math.isfinite(rate):  # too short to compare: the model's cache stays
            judged = _reason(placement, f"{placement.reasons[0]}; kept (its epoch took under "
                                        f"{MIN_SEC * 1e3:.0f} ms: too short to measure)")
        else:
            judged = judge(placement, rate)
        self._settle(placement, judged)

    def cancel(self) -> None:
        if self._first is not None:
            self._first.stop()
