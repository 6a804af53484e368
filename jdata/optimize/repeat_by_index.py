"""Reads ``repeat()`` (forever) of a random-access input by index: tf.data's
shuffle-and-repeat fusion, for every random-access input.

Unfused, each pass builds the input's iterator again: a full ``shuffle``
draws its permutation anew, and a parallel ``map`` below starts its thread or
process pool again (process workers are forked and sent the job each pass).
By index, element ``i`` is element ``i % n`` of pass ``i // n``, with the
pass's own randomness as before (``jdata._random.repeat_epoch``), so the
elements are the same, and one pool serves every pass. A ``batch`` above
still spans passes as it did. Repeats with a count are random access
already; a forever repeat of an empty input stays empty.
"""

from __future__ import annotations


from jdata._plan import Node
from jdata.ops.repeat import RepeatByIndexNode, RepeatNode
from jdata.optimize.rewrite import bottom_up


class RepeatByIndexRule:
    name = "repeat_by_index"

    def apply(self, plan: Node, options) -> Node:
        def fuse(node: Node) -> Node:
            if type(node) is RepeatNode and node.count is None and node.input.random_access():
                return RepeatByIndexNode(node.input)
            return node

        return bottom_up(plan, fuse)
