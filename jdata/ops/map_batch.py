"""map_batch: a parallel ``map`` fused into the ``batch`` after it, so workers compute
and stack whole batches (the optimizer's ``map_batch_fusion``).

Users never build it: ``map(f, num_parallel_calls=n).batch(b)`` over a
sequential input becomes this node. Elements, errors and their positions
are those of the map and the batch it replaces.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

from jdata import _placement, _planner, _spec
from jdata._plan import BatchSizes, Node
from jdata.ops import batch as batch_op
from jdata.ops import map as map_op
from jdata.ops.map import MapNode
from jdata.runtime import parallel
from jdata.runtime.iterator import Iterator, UnaryIterator


@dataclasses.dataclass(frozen=True, eq=False)
class MapBatchNode(Node):
    """``batch(batch_size, drop_remainder)`` of ``map(fn)``; the map's parallelism."""

    input: Node
    fn: Callable
    batch_size: int
    drop_remainder: bool
    num_parallel_calls: int | None
    deterministic: bool | None
    op_name: ClassVar[str] = "map_batch"
    parallel: ClassVar[bool] = True
    batching: ClassVar[bool] = True

    def op_parts(self):
        return (("map", self.fn), ("batch", None))

    def cardinality(self) -> int:
        return batch_op.batched_cardinality(self.input.cardinality(), self.batch_size,
                                            self.drop_remainder)

    def static_batch_size(self) -> int | None:
        return self.batch_size if self.drop_remainder else None

    def static_batch_sizes(self) -> BatchSizes:
        return batch_op.batched_sizes(self.input.cardinality(), self.batch_size,
                                      self.drop_remainder)

    def parallel_udf(self) -> Callable:
        return self.fn

    def compute_spec(self):
        return _spec.batched(MapNode(self.input, self.fn).element_spec(),
                             self.batch_size if self.drop_remainder else None)


class _MapGroups(UnaryIterator):
    """Lists of up to ``batch_size`` input elements, for the workers to map and stack.

    A last, short group that ``drop_remainder`` drops is still mapped here
    (and discarded), so that its errors surface as they would unfused.
    """

    OP = "map_batch"
    COUNTERS = ("group",)

    def __init__(self, input_iterator: Iterator, batch_size: int, drop_remainder: bool, fn):
        super().__init__(input_iterator)
        self._groups = batch_op.BatchIterator(input_iterator, batch_size, False, list)
        self._batch_size, self._drop_remainder, self._fn = batch_size, drop_remainder, fn

    def __next__(self):
        group = next(self._groups)
        index = self._group
        self._group = index + 1
        if self._drop_remainder and len(group) < self._batch_size:
            _map_group(self._fn, group, index * self._batch_size)
            raise StopIteration
        return group


def _map_group(fn, group: list, first_position: int) -> list:
    return [map_op.apply(fn, element, first_position + i) for i, element in enumerate(group)]


def _iterator(node: MapBatchNode, ctx, epoch: int):
    threads, deterministic = _planner.op_parallelism(node, ctx)
    fn, size = node.fn, node.batch_size
    groups = _MapGroups(_planner.make_iterator(node.input, ctx, epoch), size,
                        node.drop_remainder, fn)
    return parallel.ParallelMapIterator(
        groups, lambda group, index: batch_op.stack(_map_group(fn, group, index * size)),
        threads or 1, deterministic, _placement.op_engine(node, ctx), ctx.options.cpu_budget,
        _placement.engine_key(node), node.op_name)


_planner.register(MapBatchNode, iterator=_iterator)
