"""Cedar's reordering, driven by what UDFs declare (``jdata.declare``) and by their specs.

- A *selection* that shrinks the element (a crop: fewer bytes out than in,
  by the element specs, or measured on the first elements when sizes
  vary) moves before the
  *pointwise* maps it follows, so they compute on the crop only (e.g. crop
  before float conversion). Pointwise maps keep shapes and compute each
  value alone, so the result is the same; the selection reads the same
  positions and, in a ``random_map``, the same keys (maps keep positions).
- A ``filter`` whose declared ``reads`` a preceding ``map`` does not
  ``write`` (for dict elements) moves before it, so the map runs only on
  the elements kept; the filter sees the same field values.

For each crop it moves, the rule also times both orders on the first
elements and ``explain()`` prints the per-element times. The decision
itself follows sizes, not times: times vary between runs, and a plan that
changed with them would not accept the checkpoints of an earlier run.

Only plain ``map``s are crossed (a ``random_map``'s keys follow positions,
which a filter changes). A UDFError then reports the position in the
reordered stream.
"""

from __future__ import annotations

import time

import numpy as np

from jdata import _probe, _tree
from jdata._declare import traits_of
from jdata._plan import Node
from jdata.ops import map as map_op
from jdata.ops.filter import FilterNode
from jdata.ops.map import MapNode
from jdata.ops.random_map import RandomMapNode
from jdata.optimize.rewrite import (
    Rewritten,
    bottom_up,
    element_bytes,
    pointwise_map,
    sink,
    udf_name,
)
from jdata.runtime import udf


def _shrinking_selection(node: Node) -> bool:
    if type(node) not in (MapNode, RandomMapNode):
        return False
    traits = traits_of(node.fn)
    if traits is None or not traits.selection:
        return False
    after, before = element_bytes(node), element_bytes(node.input)
    return after is not None and before is not None and after < before


def _filter_independent_of(filter_node: FilterNode, map_node: Node) -> bool:
    if type(map_node) is not MapNode:
        return False
    reads = getattr(traits_of(filter_node.predicate), "reads", None)
    writes = getattr(traits_of(map_node.fn), "writes", None)
    return reads is not None and writes is not None and not reads & writes


def _measured(selection: Node) -> str | None:
    """What moving ``selection`` below the pointwise maps under it saves, timed on the
    first elements (for ``explain()``); ``None`` if they cannot be run."""
    maps, below = [], selection.input
    while pointwise_map(below):
        maps.append(below)
        below = below.input
    extra = (np.zeros(2, np.uint32),) if type(selection) is RandomMapNode else ()

    def select(element):
        return _tree.normalize(udf.call(selection.fn, element, "reorder", 0, *extra), "reorder")

    def pointwise(element):
        for m in reversed(maps):
            element = map_op.apply(m.fn, element, 0)
        return element

    try:
        elements = _probe.first_elements(below, "reorder")
        written = _best_time(lambda: [select(pointwise(e)) for e in elements])
        reordered = _best_time(lambda: [pointwise(select(e)) for e in elements])
    except Exception:
        return None
    n = len(elements)
    crossed = ", ".join(_short_name(m.fn) for m in maps)
    return (f"{_short_name(selection.fn)} before {crossed}: {written / n * 1e6:,.0f} -> "
            f"{reordered / n * 1e6:,.0f} us per element, timed on the first {n}; moves "
            "follow element sizes, which unlike times are the same in every run, so a "
            "restored iterator gets the same plan")


def _short_name(fn) -> str:
    return udf_name(fn).split(".<locals>.")[-1]  # image.normalize(...)'s is "normalize"


def _best_time(run, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


class ReorderRule:
    name = "reorder"

    def apply(self, plan: Node, options) -> Rewritten:
        notes: list[str] = []

        def move(node: Node) -> Node:
            # The cheap check first: measuring sizes may run the pipeline's first elements.
            if (type(node) in (MapNode, RandomMapNode) and pointwise_map(node.input)
                    and _shrinking_selection(node)):
                note = _measured(node)
                if note is not None:
                    notes.append(note)
                return sink(node, lambda _, below: pointwise_map(below))
            if type(node) is FilterNode:
                return sink(node, _filter_independent_of)
            return node

        return Rewritten(bottom_up(plan, move), tuple(notes))
