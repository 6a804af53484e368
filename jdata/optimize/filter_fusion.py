"""Fuses ``filter(p).filter(q)`` into ``filter(p and q)``: one pass, one UDF call chain.

``q`` runs only on elements ``p`` keeps, as before. ``p``'s result is
checked as a filter checks it. An error in ``q`` is reported at the
element's position in the fused filter's input, which is ``p``'s input
(unfused, ``q`` counted positions among the elements ``p`` kept).
"""

from __future__ import annotations

import dataclasses

from jdata._plan import Node
from jdata.ops.filter import FilterNode, predicate_result
from jdata.optimize.rewrite import bottom_up, udf_name


class _Both:
    """``p(x) and q(x)`` with ``p``'s result checked (picklable)."""

    def __init__(self, p, q):
        self.p, self.q = p, q
        self.__qualname__ = f"{udf_name(p)}&{udf_name(q)}"
        self.op_parts = (("filter", p), ("filter", q))  # how stats and traces name it

    def __call__(self, *args):
        if not predicate_result(self.p(*args), "filter", None):
            return False
        return self.q(*args)


class FilterFusionRule:
    name = "filter_fusion"

    def apply(self, plan: Node, options) -> Node:
        def fuse(node: Node) -> Node:
            if type(node) is FilterNode and type(node.input) is FilterNode:
                inner = node.input
                return dataclasses.replace(node, input=inner.input,
                                           predicate=_Both(inner.predicate, node.predicate))
            return node

        return bottom_up(plan, fuse)
