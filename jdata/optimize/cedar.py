"""Cedar's planner, its decisions: where a pipeline is cut between the service and this
process, how many remote workers, and where to cache (``Options(plan=jdata.AUTOTUNE)``).

A pure function of profiles: ``decide(chain, resources, pins)`` takes the
pipeline's main chain of ops, source first, each with its measured cost
(``OpCost``: seconds of work and bytes out per element the consumer receives),
and the resources (``Resources``: this process's cores, the consumer's demand
in elements per second, the service's workers), and returns a ``Decision``
with the reason for each choice. Nothing here runs a pipeline or imports Ray:
``jdata._autoplan`` profiles and applies; the tests drive this module alone.

The model (Cedar's, OSDI '24 artifact's terms): a part of the chain run in a
pool of ``n`` cores makes ``n / work`` elements per second, ``work`` the sum
of its ops' seconds per element. Local capacity is the local ops' work, plus
receiving what crosses from the service (``recv_sec_per_byte`` per byte and
``recv_sec_per_element``), over ``local_cores``; remote capacity
``workers * worker_cores`` over the remote prefix's work. The pipeline makes
the smaller of the two.

1. **Cache** (decided first: it changes the work of every epoch after the
   first): the position before the first random op whose output, one epoch of
   it, fits ``cache_bytes``, and where reading it back saves the most work per
   element; none where reading back costs more than recomputing (an inflating
   prefix), or where nothing below it costs enough to matter.
2. **Cut and workers** (Cedar's demand-driven sizing): zero remote workers when
   the local capacity meets the demand; otherwise, among the cuts that may be
   run remotely (index-based prefixes: the output is the same), the one that
   meets the demand with the fewest workers, and that count; where none meets
   it within ``max_workers``, the cut and the fewest workers that make the most
   elements per second, if that beats running locally.

PlanPins (``PlanPins``) fix any of the three; the others are decided around them.
"""

from __future__ import annotations

import dataclasses
import math

from jdata._options import PlanPins

# Demand is met with this headroom, so that a plan at its limit does not make the
# consumer wait at every jitter of a shared machine.
HEADROOM = 1.1
# A remote plan must beat the local one by this much to be worth a service job.
_REMOTE_GAIN = 1.1
# A cache must save this share of an element's work, and this many seconds of it, to be
# worth its memory (less is within the profile's noise).
_CACHE_MIN_SAVING = 0.1
_CACHE_MIN_SEC = 20e-6
# Cache places whose savings differ by less than this share save alike.
_CACHE_TIE = 0.02
# Receiving from the service, per element and per byte (Ray's object store on one node:
# a block of elements, deserialized; measured by benchmarks/service.py's transfer case).
RECV_SEC_PER_ELEMENT = 20e-6
RECV_SEC_PER_BYTE = 0.5e-9
# Reading an element back from an in-memory cache: new containers over frozen arrays.
CACHE_SEC_PER_ELEMENT = 2e-6
CACHE_SEC_PER_BYTE = 0.0

LOCAL = "local"  # a cut pin: nothing on the service
NONE = "none"  # a cache pin: no cache


@dataclasses.dataclass(frozen=True)
class OpCost:
    """One op of the main chain, measured.

    ``sec``: its own seconds of work per element the consumer receives (an op under a
    ``batch(32)`` does 32 elements' work per batch). ``bytes_out``: the bytes of its
    output per element the consumer receives (what crosses a cut after it).
    ``outputs``: its output elements per element the consumer receives (32 under a
    ``batch(32)``). ``cut``: the service may run it and every op below it (an
    index-based prefix, whose output through the service is the local one).
    ``cache``: a cache may keep its output (no random op at or below it, and the
    plan stays valid with one there).
    ``epoch_bytes``: one epoch of its output (``None``: unknown or infinite; no
    cache there). ``aliases``: other names pins may give it (a fused op's last part
    is both the op and that part).
    """

    name: str
    sec: float
    bytes_out: float
    outputs: float = 1.0
    cut: bool = False
    cache: bool = False
    epoch_bytes: float | None = None
    aliases: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Resources:
    """What the plan may use. ``demand``: elements per second the consumer takes when it
    never waits (``math.inf``: as many as the pipeline makes). ``max_workers``: the
    service's bound (0: no service)."""

    local_cores: float
    demand: float = math.inf
    max_workers: int = 0
    worker_cores: float = 1.0
    cache_bytes: float = 0.0
    recv_sec_per_element: float = RECV_SEC_PER_ELEMENT
    recv_sec_per_byte: float = RECV_SEC_PER_BYTE

    def __post_init__(self) -> None:
        if not self.local_cores > 0 or not self.worker_cores > 0:
            raise ValueError(f"Resources: cores must be > 0 (got local_cores="
                             f"{self.local_cores!r}, worker_cores={self.worker_cores!r})")
        if not self.demand > 0:
            raise ValueError(f"Resources: demand={self.demand!r} must be > 0 elements/s")
        if self.max_workers < 0:
            raise ValueError(f"Resources: max_workers={self.max_workers!r} must be >= 0")


@dataclasses.dataclass(frozen=True)
class Decision:
    """The plan: ``cut`` and ``cache`` index the chain (``None``: none); ``rate`` the
    elements per second the model expects; ``reasons`` one line per choice."""

    cut: int | None
    workers: int
    cache: int | None
    rate: float
    local_rate: float
    reasons: tuple[str, ...]


def decide(chain: list[OpCost], resources: Resources, pins: PlanPins = PlanPins()) -> Decision:
    """The plan for ``chain`` (source first) with ``resources``; see the module's text."""
    if not chain:
        raise ValueError("decide: the chain has no ops")
    cache, cache_reason = _cache(chain, resources, pins)
    work = [0.0 if cache is not None and i <= cache else op.sec for i, op in enumerate(chain)]
    if cache is not None:
        work[cache] = _read_back(chain[cache])
        # No cut at or above the cache: the service's workers would each cache only their
        # own splits.
        chain = [op if i < cache else dataclasses.replace(op, cut=False)
                 for i, op in enumerate(chain)]
    cut, workers, rate, local, cut_reason = _offload(chain, work, resources, pins)
    return Decision(cut, workers, cache, rate, local, (cache_reason, cut_reason))


def _read_back(op: OpCost) -> float:
    """Seconds per consumer element to read ``op``'s output back from the cache."""
    return CACHE_SEC_PER_ELEMENT * op.outputs + CACHE_SEC_PER_BYTE * op.bytes_out


def _find(chain: list[OpCost], name: str, what: str) -> int:
    for i, op in enumerate(chain):
        if op.name == name or name in op.aliases:
            return i
    raise ValueError(f"PlanPins({what}={name!r}): no op of the plan is named so; the ops: "
                     f"{', '.join(op.name for op in chain)}")


def _cache(chain: list[OpCost], resources: Resources, pins: PlanPins) -> tuple[int | None, str]:
    if pins.cache == NONE:
        return None, "cache: none (pinned)"
    if pins.cache is not None:
        at = _find(chain, pins.cache, "cache")
        if not chain[at].cache:
            raise ValueError(f"PlanPins(cache={pins.cache!r}): no cache can go there: a "
                             "random op at or below it makes its output differ from epoch "
                             "to epoch, or the op above reads it by index (cache below the "
                             "first random op, where the ops above read in order)")
        return at, f"cache: after {chain[at].name} (pinned)"
    total = sum(op.sec for op in chain)
    best, best_saving, most, why_not = None, 0.0, 0.0, "no place below the first random op"
    below = 0.0
    for i, op in enumerate(chain):
        below += op.sec
        if not op.cache:
            continue
        if op.epoch_bytes is None:
            why_not = f"the epoch's size is unknown at {op.name}"
            continue
        if op.epoch_bytes > resources.cache_bytes:
            why_not = (f"an epoch after {op.name} ({_mb(op.epoch_bytes)}) exceeds the cache "
                       f"budget ({_mb(resources.cache_bytes)})")
            continue
        saving = below - _read_back(op)
        # Of places that save alike (within _CACHE_TIE of the most), the highest: the ops
        # above a cache run every epoch, and some cost more than their measured work
        # (a prefetch's hand-off between threads, a stack of large elements).
        if saving > 0 and saving >= most * (1 - _CACHE_TIE):
            best, most = i, max(most, saving)
            best_saving = saving
        elif best is None:
            why_not = f"reading {op.name}'s output back costs more than computing it"
    if best is None or total <= 0 or best_saving < max(_CACHE_MIN_SAVING * total,
                                                       _CACHE_MIN_SEC):
        if best is not None:
            why_not = (f"the best place, after {chain[best].name}, saves "
                       f"{_us(best_saving)} of {_us(total)} per element: a cache must save "
                       f"{_CACHE_MIN_SAVING:.0%} of it and {_us(_CACHE_MIN_SEC)}")
        return None, f"cache: none ({why_not})"
    return best, (f"cache: after {chain[best].name} (saves {_us(best_saving)} of "
                  f"{_us(total)} per element from the second epoch on, "
                  f"{_mb(chain[best].epoch_bytes)})")


def _offload(chain: list[OpCost], work: list[float], resources: Resources,
             pins: PlanPins) -> tuple[int | None, int, float, float, str]:
    local = _rate(resources.local_cores, sum(work))
    demand = resources.demand * HEADROOM
    if pins.cut == LOCAL or pins.workers == 0 or resources.max_workers == 0 and (
            pins.cut is None):
        why = ("pinned" if pins.cut == LOCAL or pins.workers == 0 else "no service")
        return None, 0, local, local, f"cut: none, 0 remote workers ({why}; {_per_sec(local)})"
    cuts = range(len(chain)) if pins.cut is None else [_find(chain, pins.cut, "cut")]
    if pins.cut is not None and not chain[cuts[0]].cut:
        raise ValueError(f"PlanPins(cut={pins.cut!r}): the service cannot run {pins.cut} and the "
                         "ops below it with the same output (the prefix must be read by "
                         "index: sources, a full shuffle(key), map, random_map)")
    if pins.cut is None and pins.workers is None and local >= demand:
        return None, 0, local, local, (
            f"cut: none, 0 remote workers (local capacity {_per_sec(local)} meets the "
            f"demand {_per_sec(resources.demand)})")
    most = resources.max_workers if pins.workers is None else pins.workers
    options = []  # (meets the demand, workers, elements/s, cut)
    for cut in cuts:
        if not chain[cut].cut:
            continue
        tail = _rate(resources.local_cores, sum(work[cut + 1:]) + _receive(chain[cut],
                                                                            resources))
        per_worker = _rate(resources.worker_cores, sum(work[:cut + 1]))
        if pins.workers is not None:
            count = pins.workers
        elif min(tail, per_worker * most) >= demand:  # a finite demand this cut meets
            count = _workers_for(demand, per_worker)
        else:  # the fewest workers that make what this cut makes at most
            count = min(most, _workers_for(0.99 * min(tail, per_worker * most), per_worker))
        rate = min(tail, per_worker * count)
        options.append((rate >= demand, count, rate, cut))
    if not options:
        return None, 0, local, local, (
            f"cut: none, 0 remote workers (no op's prefix can run on the service with the "
            f"same output; {_per_sec(local)} locally)")
    # Meeting the demand with the fewest workers (then the most elements/s), else the most
    # elements/s with the fewest workers.
    meets, count, rate, cut = min(options, key=lambda o: (
        not o[0], o[1] if o[0] else 0, -o[2], o[1]))
    pinned = pins.cut is not None or pins.workers is not None
    if not pinned and not meets and rate < local * _REMOTE_GAIN:
        return None, 0, local, local, (
            f"cut: none, 0 remote workers (the best remote plan, {count} workers after "
            f"{chain[cut].name}, makes {_per_sec(rate)}, not over {_per_sec(local)} locally)")
    goal = (f"meets the demand {_per_sec(resources.demand)}" if meets
            else f"the most this cut makes within {most} workers; demand "
                 f"{_per_sec(resources.demand)}")
    return cut, count, rate, local, (
        f"cut: after {chain[cut].name}, {count} remote worker{'s' * (count != 1)} "
        f"({_per_sec(rate)}: {goal}; {_per_sec(local)} locally"
        f"{', pinned' if pinned else ''})")


def _workers_for(rate: float, per_worker: float) -> int:
    """The fewest workers (at least one) that make ``rate`` elements per second."""
    if math.isinf(per_worker) or rate <= 0:
        return 1
    return max(1, math.ceil(rate / per_worker - 1e-9))


def _receive(op: OpCost, resources: Resources) -> float:
    return (resources.recv_sec_per_element * op.outputs
            + resources.recv_sec_per_byte * op.bytes_out)


def _rate(cores: float, work: float) -> float:
    return math.inf if work <= 0 else cores / work


def _per_sec(rate: float) -> str:
    return "unbounded" if math.isinf(rate) else f"{rate:,.0f}/s"


def _us(sec: float) -> str:
    return f"{sec * 1e6:,.1f} us"


def _mb(size: float) -> str:
    return f"{size / 1e6:,.1f} MB"
