"""Fuses ``map(f).map(g)`` into ``map(g . f)``: one UDF call per element instead of two.

The fused function unpacks ``f``'s tuple outputs for ``g`` and normalizes
them exactly as the first map would, and lets exceptions through
unwrapped, so the fused map reports ``UDFError("map", position)`` with the
original exception, as either map would have (both count positions alike).
Only maps with the same parallelism and order fuse, and both or neither
vectorized: two vectorized maps become one ``jit(vmap(g . f))``, one XLA
program per block instead of two with a trip through NumPy between them.
"""

from __future__ import annotations

import dataclasses
import time

from jdata import _tree
from jdata._plan import Node
from jdata.ops.map import MapNode
from jdata.optimize.rewrite import bottom_up, udf_name
from jdata.runtime import part_times, udf


class _Composed:
    """``g(f(x))`` with the map's calling convention between them (picklable)."""

    def __init__(self, f, g):
        self.f, self.g = f, g
        self.__qualname__ = f"{udf_name(g)}.{udf_name(f)}"
        self.op_parts = (("map", f), ("map", g))  # how stats and traces name the fused map

    def __call__(self, *args):
        if part_times.sampled():  # Cedar's planner profiles: each part timed
            return self._timed(args)
        middle = _tree.normalize(self.f(*args), "map")
        return udf.call_unpacked(self.g, middle)

    def _timed(self, args: tuple):
        start = time.perf_counter()
        middle = _tree.normalize(self.f(*args), "map")
        between = time.perf_counter()
        out = udf.call_unpacked(self.g, middle)
        part_times.record(self, [between - start, time.perf_counter() - between],
                          [middle, out])
        return out


class _ComposedTraced:
    """``g(f(x))`` for vectorized maps: traced by JAX, so no NumPy normalization between."""

    def __init__(self, f, g):
        self.f, self.g = f, g
        self.__qualname__ = f"{udf_name(g)}.{udf_name(f)}"
        self.op_parts = (("map", f), ("map", g))

    def __call__(self, *args):
        middle = self.f(*args)
        return udf.call_unpacked(self.g, middle)


def fusable(outer: MapNode, inner: Node) -> bool:
    return (type(outer) is MapNode and type(inner) is MapNode
            and outer.vectorize == inner.vectorize
            and outer.num_parallel_calls == inner.num_parallel_calls
            and outer.deterministic == inner.deterministic)


class MapFusionRule:
    name = "map_fusion"

    def apply(self, plan: Node, options) -> Node:
        def fuse(node: Node) -> Node:
            if isinstance(node, MapNode) and fusable(node, node.input):
                inner = node.input
                compose = _ComposedTraced if node.vectorize else _Composed
                return dataclasses.replace(node, input=inner.input,
                                           fn=compose(inner.fn, node.fn))
            return node

        return bottom_up(plan, fuse)
