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
Other ops that keep positions (``Node.keeps_positions``: ``with_options``,
``prefetch``) are crossed where a sequential ``map`` lies below them, so they
do not hide one from the rule; an ``autocache`` marker is not (nothing moves
across it: the plan below it is the prefix its cache would hold).

A ``shard`` that reaches a TFRecord or text-lines source becomes the
source's own: it passes over the other shards' records there (a TFRecord
reader seeks past their data without reading it), so a host reads only its
records' data. The elements and errors are the same in either plan: a
shard drops another shard's unreadable record, and raises damage that loses
the rest of a file (its records too).
"""

from __future__ import annotations

from jdata._plan import Node
from jdata.ops.autocache import AutocacheNode
from jdata.ops.map import MapNode
from jdata.ops.shard import ShardNode
from jdata.ops.skip import SkipNode
from jdata.ops.take import TakeNode
from jdata.optimize.rewrite import bottom_up, sink


def _crosses(node: Node, below: Node) -> bool:
    """Whether ``node`` moves below ``below``: an op that keeps positions
    (``Node.keeps_positions``: ``with_options``, ``prefetch``) is crossed on the way to a
    ``map`` of a sequential input, which is what the move saves. Never an ``autocache``
    marker: what lies below it is what a cache there holds."""
    while below.keeps_positions and type(below) is not AutocacheNode:
        if type(below) is MapNode:
            return not below.input.random_access()
        below = below.input
    return False


def _into_source(node: Node) -> Node:
    """A shard right over a source that reads shards itself (TFRecord, text lines)."""
    if type(node) is ShardNode and node.input.reads_shards:
        return node.input.sharded(node.num_shards, node.index)
    return node


class PushdownRule:
    name = "pushdown"

    def apply(self, plan: Node, options) -> Node:
        sunk = bottom_up(plan, lambda node: sink(node, _crosses)
                         if isinstance(node, (ShardNode, SkipNode, TakeNode)) else node)
        return bottom_up(sunk, _into_source)
