"""Cedar's planner's profile (``jdata._autoplan``): each op of a pipeline's main chain,
measured in an iterator's statistics, as ``jdata.optimize.cedar.OpCost`` per element the
consumer received.

A fused op is weighed part by part where its parts were timed (``part_times``): the
planner may cache between them. The start of an iterator (its first calls, imports,
pools) is left out where enough came after it (``profile``'s ``baseline``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from typing import Any

from jdata import _plan
from jdata._constants import INFINITE, UNKNOWN
from jdata._opsummary import _Plan
from jdata.optimize import cedar
from jdata.runtime import part_times

# The share of the RAM budget a planned cache may take.
CACHE_SHARE = 0.5


def main_chain(plan: _plan.Node) -> list[_plan.Node]:
    """The ops from the output down to the first with other than one input, source
    first."""
    chain = [plan]
    while len(chain[-1].inputs()) == 1 and hasattr(chain[-1], "input"):
        chain.append(chain[-1].input)
    return chain[::-1]


def leaves(fn: Any) -> list[tuple[str, Any]]:
    """A fused UDF's UDFs in order, as ``(op, fn)`` (``[]`` for none, or one not fused)."""
    parts = getattr(fn, "op_parts", None)
    if not parts:
        return []
    return [leaf for op, part in parts for leaf in (leaves(part) or [(op, part)])]


def profile(plan: _plan.Node, ops, elements: int, options,
            baseline: list[tuple[float, float]] | None = None,
            ) -> tuple[list[cedar.OpCost], list[tuple[int, int | None]]]:
    """Each op of the main chain, source first, as ``cedar.OpCost`` per element the
    consumer received (``elements``), a fused op's UDFs one by one where their parts were
    timed (``part_times``); and where each is: its op's index in the chain, and how many
    of a fused op's UDFs it ends (``None``: the op's end). With a ``baseline`` (each op's
    work and outputs when the start ended), each op's work is what it did since, where
    enough came since (``_since``)."""
    chain = main_chain(plan)
    wholes, sizes = _measured(plan, ops, elements, options)
    if baseline is not None and len(baseline) == len(wholes):
        wholes = [_since(op, elements, *then) for op, then in zip(wholes, baseline)]
    costs, where = [], []
    for i, (node, whole, count) in enumerate(zip(chain, wholes, sizes)):
        cardinality = node.cardinality()
        random_below = any(n.random for n in _plan.walk(node) if n is not node)
        sec, outputs = whole.sec, whole.outputs
        units = _timed_parts(getattr(node, "fn", None), options.plan_pins().cache)
        if units is None:
            udfs = leaves(getattr(node, "fn", None))
            costs.append(dataclasses.replace(whole, aliases=(_plan.part_label(*udfs[-1]),))
                         if udfs else whole)
            where.append((i, None))
            continue
        random = random_below
        for k, (label, share, size, part_random, end) in enumerate(units):
            random = random or part_random
            if k == len(units) - 1:  # the op's end, named by its part and as the op
                costs.append(dataclasses.replace(whole, name=label, sec=sec * share,
                                                 aliases=(whole.name,)))
                where.append((i, None))
                continue
            costs.append(cedar.OpCost(
                label, sec * share, (size or 0.0) * outputs, outputs, False,
                cardinality != INFINITE and not random,
                count * size if count is not None and size is not None else None))
            where.append((i, end))
    return costs, where


def _since(op: cedar.OpCost, elements: int, work: float, outputs: float) -> cedar.OpCost:
    """``op`` (of ``elements`` the consumer received) by what it did since it had done
    ``work`` seconds for ``outputs`` elements of its own, where at least half its elements
    came since (the stages below a consumer run ahead of it: by its first element they
    may have made most of a short epoch)."""
    made = op.outputs * elements
    if made <= 0 or 2 * (made - outputs) < made:
        return op
    per_output = max(0.0, op.sec * elements - work) / (made - outputs)
    return dataclasses.replace(op, sec=per_output * op.outputs)


def op_costs(plan: _plan.Node, ops, elements: int, options) -> list[cedar.OpCost]:
    """Each op of the main chain as a whole, source first, per element the consumer
    received (``elements``)."""
    return _measured(plan, ops, elements, options)[0]


def _measured(plan: _plan.Node, ops, elements: int,
              options) -> tuple[list[cedar.OpCost], list[float | None]]:
    """``op_costs``, and each op's elements in an epoch (``None``: infinite or not known):
    its cardinality, or where that is unknown (an ``unbatch``, a ``filter``), the nearest
    known one below it times the ratio of the elements the two made."""
    from jdata.service import _split_point

    numbers = _Plan(ops)
    chain = main_chain(plan)
    labels = ops.names
    costs, counts = [], _counts(numbers, chain, elements)
    sizes: list[float | None] = []
    known: tuple[float, float] | None = None  # the nearest cardinality below, its count
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
        if cardinality == INFINITE:
            size, known = None, None
        elif cardinality != UNKNOWN:
            size, known = float(cardinality), (float(cardinality), counts[i])
        else:
            size = None if known is None or known[1] <= 0 else known[0] * counts[i] / known[1]
        sizes.append(size)
        costs.append(cedar.OpCost(labels[id(node)], sec, per * outputs, outputs, cut,
                                  cacheable, None if size is None else size * per))
    return costs, sizes


def _timed_parts(fn: Any, pin: str | None) -> list[tuple[str, float, float | None, bool,
                                                      int]] | None:
    """A fused UDF's UDFs as timed (``part_times``), ``None`` for a UDF not fused: for
    each, its name, share of the call's time, bytes out per call, whether it is random,
    and how many of the fused UDF's ``leaves`` end with it. UDFs whose parts were not
    timed (too few calls, calls in worker processes, fusions that do not time) are one,
    unless the ``pin`` names one of them: then each, with the time of their group on its
    last and no bytes (``None``: the planner chooses no cache there)."""
    parts = getattr(fn, "op_parts", None)
    if not parts:
        return None
    shares = part_times.shares(fn)
    if shares is None or len(shares) != len(parts):
        udfs = leaves(fn)
        if pin not in {_plan.part_label(o, f) for o, f in udfs[:-1]}:
            return None
        random = list(itertools.accumulate(o == "random_map" for o, _ in udfs))
        return [(_plan.part_label(o, f), float(k == len(udfs)), None, bool(r), k)
                for k, ((o, f), r) in enumerate(zip(udfs, random), 1)]
    units, done = [], 0
    for (op, part), (share, size) in zip(parts, shares):
        inner = _timed_parts(part, pin)
        if inner is None and getattr(part, "op_parts", None):  # fused, not timed: one
            done += len(leaves(part))
            units.append((_plan.part_label(op, part), share, size,
                          any(o == "random_map" for o, _ in leaves(part)), done))
            continue
        if inner is None:  # one UDF
            done += 1
            units.append((_plan.part_label(op, part), share, size, op == "random_map", done))
            continue
        inner[-1] = inner[-1][:2] + (size,) + inner[-1][3:]  # the group's output: timed
        units += [(label, share * s, b, r, done + end) for label, s, b, r, end in inner]
        done += len(leaves(part))
    return units


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


def resources(ops, options, elements: int, service: Any) -> cedar.Resources:
    """What the plan may use: this process's cores, the consumer's demand, the
    ``service``'s bound (``None``: no service) and the cache's share of the RAM budget."""
    samples = ops.throughput()
    first, last = samples[0], samples[-1]
    own = (last["time"] - first["time"]) - (last["busy_sec"] - first["busy_sec"])
    count = last["elements"] - first["elements"]
    # The consumer's own seconds per element, outside next(): its demand is their inverse.
    demand = count / own if count > 0 and own > 1e-3 * count * 1e-3 else math.inf
    cores = options.cpu_budget or len(os.sched_getaffinity(0))
    most = 0
    if service is not None:
        status = service.status()
        most = status.autoscaler.max_workers if status.autoscaler else len(status.workers)
    ram = options.ram_budget or _available_memory() / 2
    return cedar.Resources(local_cores=float(cores), demand=demand, max_workers=most,
                           cache_bytes=CACHE_SHARE * ram)


def _available_memory() -> float:
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 0.0
