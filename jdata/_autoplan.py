"""Cedar's planner at work (``Options(plan=jdata.AUTOTUNE)``): profile, decide, apply.

A pipeline's first iterator runs the optimized plan as it is and profiles it:
after ``PROFILE_SEC`` (or at its end, if sooner) its statistics give each op
of the main chain (the ops from the output down to the first op with other than
one input) its cost per element the consumer receives, and the consumer's
demand (the elements per second it takes when it never waits);
``jdata.optimize.cedar.decide`` chooses the cut, the remote workers and the
cache. The decision is kept for the pipeline's fingerprint in this process,
and every later iterator of a pipeline with that fingerprint runs it: a
``cache()`` over the op it names, a ``distribute(svc)`` over the op it cuts
after (its worker count set with ``svc.scale``). The first batch never waits
for the planner, and the elements are the same whatever the plan: the cache
is below every random op, the cut above an index-based prefix in
deterministic dynamic mode, whose output is the local one.

A state records its plan in its structure (``cache`` and ``distribute`` in its
ops): ``ds.iterator(state)`` runs the plan the state was taken under.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import weakref
from typing import Any, Callable

from jdata import _plan
from jdata._constants import INFINITE, UNKNOWN
from jdata._opsummary import _Plan
from jdata.ops import index_cache
from jdata.ops.cache import CacheNode
from jdata.ops.index_cache import IndexCacheNode
from jdata.optimize import cedar

# How long the first iterator profiles before the planner decides, and the fewest
# elements a profile must hold (a shorter epoch decides at its end).
PROFILE_SEC = 2.0
_MIN_ELEMENTS = 8
# The share of the RAM budget a planned cache may take.
_CACHE_SHARE = 0.5

_lock = threading.Lock()
_PLACEMENTS: dict[str, Placement] = {}  # by the optimized plan's fingerprint
_SERVICES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # ServiceRef ->
_SCALE_ERRORS: dict[str, str] = {}  # by fingerprint: why svc.scale failed


@dataclasses.dataclass(frozen=True)
class Placement:
    """A decision applied to a plan: ``cut`` and ``cache`` index ``chain`` (source first,
    by op names as ``explain()`` gives them); ``costs`` the profile it was made from."""

    chain: tuple[str, ...]
    cut: int | None
    cache: int | None
    workers: int
    reasons: tuple[str, ...]
    costs: tuple[cedar.OpCost, ...]
    demand: float

    def describe(self) -> list[str]:
        """What ``explain()`` prints of it."""
        lines = [f"Cedar's plan (profiled; demand {_rate(self.demand)}):"]
        lines += [f"  {reason}" for reason in self.reasons]
        for op in reversed(self.costs):
            lines.append(f"    {op.name}: {op.sec * 1e6:,.1f} us/element, "
                         f"{op.bytes_out:,.0f} bytes/element out"
                         + (", may be cut" if op.cut else "")
                         + (", may be cached" if op.cache else ""))
        return lines


def check_pins(plan: _plan.Node, options) -> None:
    """A ``ValueError`` now, not on the planner's thread, for pins no plan can keep."""
    pins = options.plan_pins()
    names = _names(plan)
    for what in ("cut", "cache"):
        name = getattr(pins, what)
        if name not in (None, cedar.LOCAL if what == "cut" else cedar.NONE) and (
                name not in names):
            raise ValueError(f"PlanPins({what}={name!r}): no op of the plan is named so; the "
                             f"ops: {', '.join(names)}")
    if options.service is None and (pins.workers or pins.cut not in (None, cedar.LOCAL)):
        raise ValueError(f"{pins}: the pins put work on a service, but none is given: pass "
                         "Options(service=svc) or use ds.with_service(svc)")


def remember(service: Any) -> None:
    """Keeps ``service`` reachable from its ``ServiceRef`` (``Options(service=...)``)."""
    _SERVICES[service.ref] = service


def main_chain(plan: _plan.Node) -> list[_plan.Node]:
    """The ops from the output down to the first with other than one input, source
    first."""
    chain = [plan]
    while len(chain[-1].inputs()) == 1 and hasattr(chain[-1], "input"):
        chain.append(chain[-1].input)
    return chain[::-1]


def decided(plan: _plan.Node, fingerprint: str) -> Placement | None:
    with _lock:
        placement = _PLACEMENTS.get(fingerprint)
    if placement is None or placement.chain != _names(plan):
        return None
    return placement


def apply(plan: _plan.Node, cut: int | None, cache: int | None, options) -> _plan.Node:
    """``plan`` with a ``cache()`` over chain op ``cache`` and a ``distribute`` over chain
    op ``cut`` (``None``: none). The ops below the lower of the two are the plan's own
    nodes (their caches and parked workers serve both plans); with neither, the plan is
    returned as it is."""
    if cut is None and cache is None:
        return plan
    distribute = _distribute_over(options) if cut is not None else None
    chain = main_chain(plan)
    lowest = min(i for i in (cut, cache) if i is not None)
    node = chain[lowest]
    for i in range(lowest, len(chain)):
        if i > lowest:
            node = dataclasses.replace(chain[i], input=node)
        if i == cache:
            node = _cache_over(node)
        if i == cut:
            node = distribute(node)
    return node


def _cache_over(node: _plan.Node) -> _plan.Node:
    """A cache of ``node``'s output: read by index where ``node`` is (the ops above may
    read it so: a full shuffle must), else in order (``cache()``)."""
    if not node.random_access():
        return CacheNode(node)
    cached = IndexCacheNode(node)
    index_cache.keep(cached)
    return cached


def _distribute_over(options: Any) -> Callable[[_plan.Node], _plan.Node]:
    from jdata.service import client

    ref = options.service
    if ref is None:
        raise ValueError("Options(plan=...): the plan runs part of the pipeline on a "
                         "service, but none is given: pass Options(service=svc) or use "
                         "ds.with_service(svc)")

    def wrap(node: _plan.Node) -> _plan.Node:
        client.check_splittable(node, "dynamic")
        return client.DistributeNode(node, ref, "dynamic", None, True)
    return wrap


def state_signature(state: Any) -> str | None:
    """A state's plan structure, or None where it has none to read (the iterator's own
    checks then say what is wrong with it)."""
    if isinstance(state, (str, bytes)):
        try:
            state = json.loads(state)
        except (ValueError, RecursionError):
            return None
    signature = state.get("plan") if isinstance(state, dict) else None
    return signature if isinstance(signature, str) else None


def matching(plan: _plan.Node, signature: str, options) -> _plan.Node | None:
    """The placed plan whose structure is ``signature`` (a state's), or None."""
    chain = main_chain(plan)
    cuts = [None] + (list(range(len(chain))) if options.service is not None else [])
    for cache in [None] + list(range(len(chain))):
        for cut in cuts:
            if "distribute" not in signature and cut is not None:
                continue
            try:
                placed = apply(plan, cut, cache, options)
            except ValueError:  # not splittable there
                continue
            if _plan.structure_signature(placed) == signature:
                return placed
    return None


class Profiler:
    """Decides for ``fingerprint`` from an iterator's statistics, once: ``PROFILE_SEC``
    after it starts (on a timer thread) or at its end, whichever comes first."""

    def __init__(self, plan: _plan.Node, fingerprint: str, options) -> None:
        self._plan, self._fingerprint, self._options = plan, fingerprint, options
        self._done = False
        self._lock = threading.Lock()  # the timer thread and the iterator's end both decide
        self._ops = None
        self._timer = threading.Timer(PROFILE_SEC, self.decide)
        self._timer.daemon = True

    def start(self, ops) -> None:
        self._ops = ops
        self._timer.start()

    def decide(self, ended: bool = False) -> None:
        with self._lock:
            if self._done or self._ops is None:
                return
            root = sum(t.elements for t in self._ops.tallies(self._plan, callers=True))
            if root < _MIN_ELEMENTS and not ended:
                return
            self._done = True
        self._timer.cancel()
        if root == 0:
            return
        try:
            placement = plan_from(self._plan, self._ops, self._options, root)
        except Exception as e:  # noqa: BLE001 - on a timer thread: said in explain()
            placement = Placement(_names(self._plan), None, None, 0, (
                f"the planner failed, so the plan runs as written: {type(e).__name__}: "
                f"{e}",), (), math.inf)
        with _lock:
            _PLACEMENTS[self._fingerprint] = placement
        service = _SERVICES.get(self._options.service) if placement.workers else None
        if service is not None:  # the workers start meanwhile: the next epoch finds them
            threading.Thread(target=_scale, args=(service, placement.workers,
                                                  self._fingerprint),
                             name="jdata-plan-scale", daemon=True).start()

    def cancel(self) -> None:
        self._timer.cancel()


def _scale(service: Any, workers: int, fingerprint: str) -> None:
    try:
        service.scale(workers)
    except Exception as e:  # noqa: BLE001 - on its own thread: said in explain()
        with _lock:
            _SCALE_ERRORS[fingerprint] = f"{type(e).__name__}: {e}"


def scale_error(fingerprint: str) -> str | None:
    """Why setting the planned worker count failed, if it did."""
    with _lock:
        return _SCALE_ERRORS.get(fingerprint)


def plan_from(plan: _plan.Node, ops, options, elements: int) -> Placement:
    """The decision for ``plan`` from the statistics ``ops`` of an iterator that gave
    ``elements``."""
    costs = profile(plan, ops, elements, options)
    resources = _resources(ops, options, elements)
    decision = cedar.decide(costs, resources, options.plan_pins())
    return Placement(tuple(c.name for c in costs), decision.cut, decision.cache,
                     decision.workers, decision.reasons, tuple(costs), resources.demand)


def profile(plan: _plan.Node, ops, elements: int, options) -> list[cedar.OpCost]:
    """Each op of the main chain, source first, as ``cedar.OpCost`` per element the
    consumer received (``elements``)."""
    from jdata.service import _split_point

    numbers = _Plan(ops)
    chain = main_chain(plan)
    labels = ops.names
    costs, counts = [], _counts(numbers, chain, elements)
    staged = {id(n) for root in ops.by_index_roots() for n in _plan.walk(root)}
    for i, node in enumerate(chain):
        inside = _plan.walk(node) if i == 0 else [node]  # the first op: with its inputs
        sec = sum(_work(numbers, ops, n, staged) for n in inside) / elements
        per = max((t.bytes_per_element for t in numbers.inner.get(id(node), ())),
                  default=0.0)
        outputs = counts[i] / elements
        try:
            cut = options.service is not None and _split_point.find(node).kind == "range"
        except ValueError:
            cut = False
        cardinality = node.cardinality()
        cacheable = cardinality != INFINITE and not any(n.random for n in _plan.walk(node))
        epoch = None if cardinality in (INFINITE, UNKNOWN) else cardinality * per
        costs.append(cedar.OpCost(labels[id(node)], sec, per * outputs, outputs, cut,
                                  cacheable, epoch))
    return costs


def _work(numbers: _Plan, ops, node: _plan.Node, staged: set[int]) -> float:
    """``node``'s own seconds of work: its stage's where it has one or runs in a by-index
    stage (``_opsummary``'s), else the CPU its calls took less its inputs' (the wall time of
    an op above a stage is mostly waits for it: charged to whichever sampled op timed them,
    they are no work)."""
    stage = numbers.stage(node)
    if id(node) in staged or (stage is not None and stage.kind != "prefetch"):
        return numbers.work.get(id(node), 0.0)
    own = sum(t.seconds(cpu=True) for t in ops.tallies(node))
    inputs = sum(t.seconds(cpu=True) for c in node.inputs()
                 for t in ops.tallies(c, callers=True))
    return max(0.0, own - inputs)


def _counts(numbers: _Plan, chain: list, elements: int) -> list[float]:
    """Each chain op's outputs; an op whose count was not measured (inside worker
    processes) takes its parent's, as the maps there keep counts."""
    counts: list[float | None] = [numbers.elements(n) for n in chain]
    counts[-1] = counts[-1] or elements
    for i in range(len(counts) - 2, -1, -1):
        counts[i] = counts[i] or counts[i + 1]
    return [float(c) for c in counts]


def _resources(ops, options, elements: int) -> cedar.Resources:
    samples = ops.throughput()
    first, last = samples[0], samples[-1]
    own = (last["time"] - first["time"]) - (last["busy_sec"] - first["busy_sec"])
    count = last["elements"] - first["elements"]
    # The consumer's own seconds per element, outside next(): its demand is their inverse.
    demand = count / own if count > 0 and own > 1e-3 * count * 1e-3 else math.inf
    cores = options.cpu_budget or len(os.sched_getaffinity(0))
    service = _SERVICES.get(options.service) if options.service is not None else None
    most = 0
    if service is not None:
        status = service.status()
        most = status.autoscaler.max_workers if status.autoscaler else len(status.workers)
    ram = options.ram_budget or _available_memory() / 2
    return cedar.Resources(local_cores=float(cores), demand=demand, max_workers=most,
                           cache_bytes=_CACHE_SHARE * ram)


def _available_memory() -> float:
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 0.0


def _names(plan: _plan.Node) -> tuple[str, ...]:
    labels = _plan.op_labels(plan)
    return tuple(labels[id(n)] for n in main_chain(plan))


def _rate(rate: float) -> str:
    return "unbounded" if math.isinf(rate) else f"{rate:,.0f} elements/s"
