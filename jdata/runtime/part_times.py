"""The parts of a fused UDF, timed: what each of the ops fused into one call costs.

A fused map (``map(f).map(g)`` as one call of ``g . f``, or a chain of maps and
random maps as one ``random_map``) is one op to the runtime's statistics. Cedar's
planner (``jdata._autoplan``) may cache between its parts, so while a planner
profiles an iterator (``profiling()``), every ``EVERY``-th call of a fused UDF in
this process times each of its parts and measures the bytes each part puts out.
The fused UDF records them under itself (``record``); ``shares(fused)`` gives each
part's share of the fused call's time and its output bytes. Calls in worker
processes are not seen here (the planner then treats the fused op as one).

Outside a profile a fused call pays one read of a module global.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

from jdata.runtime.stats import element_bytes

# One call in this many is timed part by part: a prime, as a fused UDF's parts that are
# fused UDFs count calls on the same clock (with an even period, a chain of two would time
# only its outer calls).
EVERY = 17
_MIN_SAMPLES = 4  # fewer timed calls say nothing

_lock = threading.Lock()
_active = 0  # profiles in progress in this process
_tick = itertools.count()
_records: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # fused UDF -> _Record


class _Record:
    __slots__ = ("calls", "seconds", "bytes_out")

    def __init__(self, parts: int) -> None:
        self.calls = 0
        self.seconds = [0.0] * parts
        self.bytes_out = [0.0] * parts


def sampled() -> bool:
    """Whether this call of a fused UDF should time its parts (a profile is on, and it is
    the ``EVERY``-th call)."""
    return _active > 0 and next(_tick) % EVERY == 0


def record(fused: Any, seconds: list[float], outputs: list[Any]) -> None:
    """One timed call of ``fused``: each part's seconds and its output. The first is
    dropped: a first call's warm-up (imports, caches, plans built) is no part's cost."""
    sizes = [float(element_bytes(out)) for out in outputs]
    with _lock:
        entry = _records.get(fused)
        if entry is None:
            _records[fused] = _Record(len(seconds))
            return
        entry.calls += 1
        for i, (sec, size) in enumerate(zip(seconds, sizes)):
            entry.seconds[i] += sec
            entry.bytes_out[i] += size


def shares(fused: Any) -> list[tuple[float, float]] | None:
    """Each part's ``(share of the fused call's time, bytes out per call)``, or ``None``
    before ``_MIN_SAMPLES`` timed calls."""
    with _lock:
        entry = _records.get(fused)
        if entry is None or entry.calls < _MIN_SAMPLES:
            return None
        total = sum(entry.seconds)
        count = len(entry.seconds)
        return [((sec / total) if total > 0 else 1.0 / count, size / entry.calls)
                for sec, size in zip(entry.seconds, entry.bytes_out)]


class profiling:
    """While held (a context manager, or ``start()``/``stop()``), fused UDFs in this
    process time their parts."""

    def start(self) -> None:
        global _active
        with _lock:
            _active += 1

    def stop(self) -> None:
        global _active
        with _lock:
            _active -= 1

    def __enter__(self) -> profiling:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
