"""Fuses a parallel ``map(f)`` into the ``batch`` after it: workers compute whole batches.

tf.data's map-and-batch fusion. Over a random-access input jdata already
computes whole batches on the workers (by index), so the rule rewrites
only sequential inputs (a generator, a filter...). There, unfused, the
map's workers return single elements and the consumer's thread stacks
them; fused, the consumer's thread only pulls the input elements, and each
worker maps a batch's elements (same positions, same errors) and stacks
them, in threads or processes as the map's engine decides.

The map's ``num_parallel_calls`` and ``deterministic`` become the batch's.
After a ``UDFError`` a fused batch, like a batch read by index, resumes at
the next batch's first element (unfused, right after the failing one), so
plans with ``ignore_errors()``, whose outputs would then differ, are left
alone.
"""

from __future__ import annotations

from jdata._plan import Node, walk
from jdata.ops.batch import BatchNode
from jdata.ops.ignore_errors import IgnoreErrorsNode
from jdata.ops.map import MapNode
from jdata.ops.map_batch import MapBatchNode
from jdata.optimize.rewrite import bottom_up


def _fusable(node: Node) -> bool:
    if type(node) is not BatchNode:
        return False
    inner = node.input
    return (type(inner) is MapNode and inner.num_parallel_calls is not None
            and not inner.vectorize and not inner.input.random_access())


class MapBatchFusionRule:
    name = "map_batch_fusion"

    def apply(self, plan: Node, options) -> Node:
        if any(isinstance(n, IgnoreErrorsNode) for n in walk(plan)):
            return plan

        def fuse(node: Node) -> Node:
            if not _fusable(node):
                return node
            inner = node.input
            return MapBatchNode(inner.input, inner.fn, node.batch_size, node.drop_remainder,
                                inner.num_parallel_calls, inner.deterministic)

        return bottom_up(plan, fuse)
