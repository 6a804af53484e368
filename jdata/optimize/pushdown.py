"""Pushes ``shard``, ``skip`` and ``take`` below ``map``s toward the source, so dropped
elements are never mapped.

Over a random-access input the reader already computes only the elements
it serves, so the rule rewrites only sequential inputs (a generator, a
filter...), where ``map(f).shard(n, i)`` would compute ``f`` on every
element and drop ``n - 1`` of each ``n``, and ``map(f, num_parallel_calls=8).take(n)``
would compute elements past the ``n``-th ahead of time and drop them.
``map`` computes each element from that element alone, so the outputs are
the same; a ``UDFError`` then reports the element's position in the
smaller stream. ``random_map`` is not crossed: its keys depend on positions.
"""

from __future__ import annotations

from jdata._plan import Node
from jdata.ops.map import MapNode
from jdata.ops.shard import ShardNode
from jdata.ops.skip import SkipNode
from jdata.ops.take import TakeNode
from jdata.optimize.rewrite import bottom_up, sink


def _crosses(node: Node, below: Node) -> bool:
    return type(below) is MapNode and not below.input.random_access()


class PushdownRule:
    name = "pushdown"

    def apply(self, plan: Node, options) -> Node:
        return bottom_up(plan, lambda node: sink(node, _crosses)
                         if isinstance(node, (ShardNode, SkipNode, TakeNode)) else node)
