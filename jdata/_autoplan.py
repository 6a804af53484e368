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
import threading
import time
import weakref
from typing import Any, Callable

from jdata import _plan, _planprofile, _plantrial
from jdata._planprofile import leaves, main_chain
from jdata.ops import index_cache
from jdata.ops.cache import CacheNode
from jdata.ops.index_cache import IndexCacheNode
from jdata.optimize import cedar
from jdata.runtime import part_times

# How long the first iterator profiles after its first element before the planner
# decides, and the fewest elements a profile must hold (a shorter epoch decides at its
# end).
PROFILE_SEC = 2.0
_MIN_ELEMENTS = _plantrial.MIN_ELEMENTS

_lock = threading.Lock()
_PLACEMENTS: dict[str, Placement] = {}  # by the optimized plan's fingerprint
_SERVICES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # ServiceRef ->
_SCALE_ERRORS: dict[str, str] = {}  # by fingerprint: why svc.scale failed


@dataclasses.dataclass(frozen=True)
class Placement:
    """A decision applied to a plan: ``cut`` and ``cache`` index ``chain`` (source first,
    by op names as ``explain()`` gives them), ``cache_part`` a place inside a fused op;
    ``costs`` the profile it was made from (a fused op's parts one by one where they were
    timed)."""

    chain: tuple[str, ...]
    cut: int | None
    cache: int | None
    workers: int
    reasons: tuple[str, ...]
    costs: tuple[cedar.OpCost, ...]
    demand: float
    # The cache inside fused op ``cache``: after this many of its UDFs (None: after it).
    cache_part: int | None = None
    # Where each of ``costs`` is: its op's index in ``chain``, and how many of a fused
    # op's UDFs it ends (None: the op's end).
    places: tuple[tuple[int, int | None], ...] = ()
    # Elements/s the profiled iterator made after its first element (nan: unknown).
    rate: float = math.nan
    # A cache the planner chose, to be measured: the first epoch that reads it back must
    # make _TRIAL_GAIN more than the profiled one, or the cache goes (``Trial``).
    on_trial: bool = False

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
    names = _names(plan) + tuple(_plan.part_label(op, fn) for node in main_chain(plan)
                                 for op, fn in leaves(getattr(node, "fn", None)))
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


def decided(plan: _plan.Node, fingerprint: str) -> Placement | None:
    with _lock:
        placement = _PLACEMENTS.get(fingerprint)
    if placement is None or placement.chain != _names(plan):
        return None
    return placement


def apply(plan: _plan.Node, cut: int | None, cache: int | None, options,
          part: int | None = None, source: _plan.Node | None = None) -> _plan.Node:
    """``plan`` with a ``cache()`` over chain op ``cache`` (with ``part``: inside that
    fused op, after its first ``part`` UDFs) and a ``distribute`` over chain op ``cut``
    (``None``: none). The ops below the lower of the two are the plan's own nodes (their
    caches and parked workers serve both plans); with neither, the plan is returned as
    it is. A cache inside a fused op goes into ``source`` (the pipeline as written) after
    the UDF's own op, and that is optimized again (the cache splits the fusion)."""
    if cut is None and cache is None:
        return plan
    distribute = _distribute_over(options) if cut is not None else None
    if cache is not None and part is not None:
        placed = _cache_inside(plan, cache, part, options, source)
        if cut is None:
            return placed
        # A cut is below the cache (cedar.decide), where the plans are alike: checked.
        old, new = main_chain(plan), main_chain(placed)
        if cut >= cache or _plan.op_label(old[cut]) != _plan.op_label(new[cut]):
            raise ValueError(f"the plan with a cache inside {_plan.op_label(old[cache])} "
                             f"has no op {_plan.op_label(old[cut])} to cut after")
        plan, cache = placed, None
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


def _cache_inside(plan: _plan.Node, op: int, part: int, options,
                  source: _plan.Node | None) -> _plan.Node:
    """The pipeline as written (``source``) with a cache after the op of the ``part``-th
    UDF of fused chain op ``op``, optimized."""
    from jdata import optimize

    udfs = leaves(getattr(main_chain(plan)[op], "fn", None))
    if source is None or not 0 < part < len(udfs):
        raise ValueError(f"no place {part} inside {_plan.op_label(main_chain(plan)[op])}")
    fn = udfs[part - 1][1]
    written = main_chain(source)
    at = next((i for i, node in enumerate(written) if getattr(node, "fn", None) is fn), None)
    if at is None:
        raise ValueError(f"{_plan.part_label(*udfs[part - 1])} is no op of the pipeline as "
                         "written (an optimization rewrote it)")
    node = _cache_over(written[at])
    for above in written[at + 1:]:
        node = dataclasses.replace(above, input=node)
    placed = optimize.optimize(node, options).plan
    for cache in _plan.walk(placed):  # the rules rebuild it over the ops they fuse below
        if isinstance(cache, IndexCacheNode):
            index_cache.keep(cache)
    return placed


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


def matching(plan: _plan.Node, signature: str, options,
             source: _plan.Node | None = None) -> _plan.Node | None:
    """The placed plan whose structure is ``signature`` (a state's), or None; ``source``:
    the pipeline as written (for caches inside fused ops)."""
    chain = main_chain(plan)
    cuts = [None] + (list(range(len(chain))) if options.service is not None else [])
    caches = [(None, None)] + [(i, None) for i in range(len(chain))] + [
        (i, part) for i, node in enumerate(chain)
        for part in range(1, len(leaves(getattr(node, "fn", None))))]
    for cache, part in caches:
        for cut in cuts:
            if "distribute" not in signature and cut is not None:
                continue
            try:
                placed = apply(plan, cut, cache, options, part, source)
            except ValueError:  # not splittable there
                continue
            if _plan.structure_signature(placed) == signature:
                return placed
    return None


class Profiler:
    """Decides for ``fingerprint`` from an iterator's statistics, once: ``PROFILE_SEC``
    after its first element (on a thread of its own) or at its end, whichever comes
    first. What the first element took is the start's (first calls, imports, pools
    started): the profile leaves it out where enough came after it (``_baseline``)."""

    def __init__(self, plan: _plan.Node, fingerprint: str, options,
                 source: _plan.Node | None = None) -> None:
        self._plan, self._fingerprint, self._options = plan, fingerprint, options
        self._source = source  # the pipeline as written: caches inside fused ops
        self._done = False
        self._lock = threading.Lock()  # the profile's thread and the iterator's end decide
        self._ops = None
        self._parts: part_times.profiling | None = None  # fused UDFs time their parts
        self._baseline: list[tuple[float, float]] | None = None  # each op's work, outputs
        self._first: tuple[float, int] | None = None  # when the start ended, elements then
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jdata-plan-profile",
                                        daemon=True)

    def start(self, ops) -> None:
        self._ops, self._started = ops, time.monotonic()
        self._parts = part_times.profiling()
        self._parts.start()
        self._thread.start()

    def _elements(self) -> int:
        return sum(t.elements for t in self._ops.tallies(self._plan, callers=True))

    def _run(self) -> None:
        deadline = time.monotonic() + PROFILE_SEC
        while not self._stop.wait(_plantrial.POLL_SEC):
            elements = self._elements()
            if elements > 0:  # the start is over: the profile counts from here
                try:
                    baseline = [(op.sec * elements, op.outputs * elements) for op in
                                _planprofile.op_costs(self._plan, self._ops, elements,
                                                      self._options)]
                except Exception:  # noqa: BLE001 - no baseline: the profile counts it all
                    baseline = None
                with self._lock:
                    self._baseline, self._first = baseline, (time.monotonic(), elements)
                break
            if time.monotonic() >= deadline:  # no element yet: the profile counts it all
                self.decide()
                return
        if not self._stop.wait(PROFILE_SEC):
            self.decide()

    def _stop_parts(self) -> None:
        with self._lock:
            parts, self._parts = self._parts, None
        if parts is not None:
            parts.stop()

    def decide(self, ended: bool = False) -> None:
        with self._lock:
            if self._done or self._ops is None:
                return
            root = self._elements()
            if root < _MIN_ELEMENTS and not ended:
                return
            self._done = True
            baseline, first = self._baseline, self._first
        self._stop.set()
        self._stop_parts()
        if root == 0:
            return
        try:
            placement = plan_from(self._plan, self._ops, self._options, root, self._source,
                                  baseline, _plantrial.rate_since(self._started, first, root))
        except Exception as e:  # noqa: BLE001 - on the profile's thread: said in explain()
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
        self._stop.set()
        self._stop_parts()


def trial(plan: _plan.Node, fingerprint: str, placement: Placement,
          placed: _plan.Node) -> _plantrial.Trial | None:
    """The measurement of the planner's cache in ``placed``, if this iterator is the one
    that judges it: the first to start with the cache filled."""
    if not placement.on_trial or not _plantrial.caches_filled(placed):
        return None

    def settle(tried: Placement, judged: Placement) -> None:
        with _lock:
            if _PLACEMENTS.get(fingerprint) is tried:
                _PLACEMENTS[fingerprint] = judged
    return _plantrial.Trial(placement, settle)


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


def plan_from(plan: _plan.Node, ops, options, elements: int,
              source: _plan.Node | None = None,
              baseline: list[tuple[float, float]] | None = None,
              rate: float = math.nan) -> Placement:
    """The decision for ``plan`` from the statistics ``ops`` of an iterator that gave
    ``elements``; ``source``: the pipeline as written (for caches inside fused ops);
    ``baseline``: each op's work and outputs at the start's end (left out);
    ``rate``: the elements/s the iterator made since."""
    costs, where = _planprofile.profile(plan, ops, elements, options, baseline)
    service = _SERVICES.get(options.service) if options.service is not None else None
    resources = _planprofile.resources(ops, options, elements, service)
    pins = options.plan_pins()
    names = _names(plan)
    while True:
        decision = cedar.decide(costs, resources, pins)
        cut = None if decision.cut is None else where[decision.cut][0]
        cache, part = (None, None) if decision.cache is None else where[decision.cache]
        on_trial = (cache is not None and cut is None and pins.cache is None
                    and math.isfinite(rate))
        placement = Placement(names, cut, cache, decision.workers, decision.reasons,
                              tuple(costs), resources.demand, part, tuple(where), rate,
                              on_trial)
        if part is None:
            return placement
        try:  # a cache inside a fused op goes where its UDF was written: it may not
            apply(plan, cut, cache, options, part, source)
            return placement
        except ValueError:
            if pins.cache is not None:
                raise
            costs[decision.cache] = dataclasses.replace(costs[decision.cache], cache=False)


def _names(plan: _plan.Node) -> tuple[str, ...]:
    labels = _plan.op_labels(plan)
    return tuple(labels[id(n)] for n in main_chain(plan))


_rate = _plantrial.rate_text
