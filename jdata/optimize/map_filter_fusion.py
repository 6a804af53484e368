"""Fuses a parallel ``map(f).filter(p)``: the predicate runs on the map's workers.

Unfused, ``p`` runs on the consumer's thread, one element at a time, after
the workers computed ``f``; a costly predicate then limits the whole
pipeline. The rule rewrites the pair as::

    map(f then p, same parallelism).filter(flag).map(drop flag)

The workers compute ``y = f(x)`` (normalized as the map's output) and
``p(y)``, checked as a filter checks it, and return ``(y, flag)``. The filter
keeps the elements whose flag says so and the last map drops the flag. If
``p`` raised or returned something a filter rejects, the flag says so and the
filter calls ``p(y)`` again on the consumer's thread, so the same error is
reported, by the ``filter`` op, at the same position (``p`` is assumed
pure, as the optimizer assumes of every UDF). Only maps with
``num_parallel_calls`` fuse: for a sequential map, the block loops already
run ``f`` and ``p`` back to back.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jdata import _tree
from jdata._plan import Node
from jdata.ops.filter import FilterNode, predicate_result
from jdata.ops.map import MapNode
from jdata.optimize.rewrite import bottom_up, udf_name
from jdata.runtime import udf

_DROP, _KEEP, _ASK_AGAIN = np.int8(0), np.int8(1), np.int8(-1)


class _MapThenPredicate:
    """``(f(x), p's verdict on f(x))`` (picklable, for process workers)."""

    def __init__(self, f, p):
        self.f, self.p = f, p
        self.__qualname__ = f"{udf_name(f)}+{udf_name(p)}"
        self.op_parts = (("map", f), ("filter", p))  # how stats and traces name it

    def __call__(self, *args):
        y = _tree.normalize(self.f(*args), "map")
        try:
            keep = predicate_result(udf.call_unpacked(self.p, y), "filter", None)
        except Exception:  # reported by the filter, which asks p again
            return y, _ASK_AGAIN
        return y, _KEEP if keep else _DROP


class _Flag:
    """The filter's predicate: the flag, or ``p``'s own result where it failed."""

    def __init__(self, p):
        self.p = p
        self.__qualname__ = f"flag({udf_name(p)})"

    def __call__(self, y, flag):
        if flag == _ASK_AGAIN:
            return udf.call_unpacked(self.p, y)
        return bool(flag)


def _drop_flag(y, flag):
    return y


def _fusable(node: Node) -> bool:
    if type(node) is not FilterNode or isinstance(node.predicate, _Flag):
        return False
    inner = node.input
    return (type(inner) is MapNode and inner.num_parallel_calls is not None
            and not inner.vectorize)


class MapFilterFusionRule:
    name = "map_filter_fusion"

    def apply(self, plan: Node, options) -> Node:
        def fuse(node: Node) -> Node:
            if not _fusable(node):
                return node
            inner = node.input
            mapped = dataclasses.replace(inner, fn=_MapThenPredicate(inner.fn, node.predicate))
            kept = dataclasses.replace(node, input=mapped, predicate=_Flag(node.predicate))
            return MapNode(kept, _drop_flag)

        return bottom_up(plan, fuse)
