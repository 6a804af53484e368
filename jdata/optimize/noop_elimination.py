"""Removes ops that change nothing: ``take(-1)``, ``skip(0)``, ``repeat(1)``, ``prefetch(0)``."""

from __future__ import annotations

from jdata._plan import Node
from jdata.ops.prefetch import PrefetchNode
from jdata.ops.repeat import RepeatNode
from jdata.ops.skip import SkipNode
from jdata.ops.take import TakeNode
from jdata.optimize.rewrite import bottom_up


def is_noop(node: Node) -> bool:
    if isinstance(node, TakeNode):
        return node.count == -1
    if isinstance(node, SkipNode):
        return node.count == 0
    if isinstance(node, RepeatNode):
        return node.count == 1
    if isinstance(node, PrefetchNode):
        return node.buffer_size == 0
    return False


class NoopEliminationRule:
    name = "noop_elimination"

    def apply(self, plan: Node, options) -> Node:
        return bottom_up(plan, lambda node: node.input if is_noop(node) else node)
