"""batch: stacks consecutive elements. See ``Dataset.batch``."""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

from jdata import _planner, _spec, _tree
from jdata._constants import INFINITE, UNKNOWN
from jdata._plan import Node
from jdata.ops import map as map_op
from jdata.ops.map import MapNode
from jdata.runtime import engine, parallel
from jdata.runtime.iterator import Iterator, UnaryIterator, read_block


@dataclasses.dataclass(frozen=True, eq=False)
class BatchNode(Node):
    """See ``Dataset.batch``."""

    input: Node
    batch_size: int
    drop_remainder: bool = False
    num_parallel_calls: int | None = None
    deterministic: bool | None = None
    # Set by the optimizer's map_batch_fusion: a parallel map fused into this
    # batch, so its workers compute and stack whole batches.
    map_fn: Callable | None = None
    op_name: ClassVar[str] = "batch"

    def cardinality(self) -> int:
        return batched_cardinality(self.input.cardinality(), self.batch_size,
                                   self.drop_remainder)

    def random_access(self) -> bool:
        return self.map_fn is None and self.input.random_access()

    def static_batch_size(self) -> int | None:
        return self.batch_size if self.drop_remainder else None

    def compute_spec(self):
        elements = self.input if self.map_fn is None else MapNode(self.input, self.map_fn)
        return _spec.batched(elements.element_spec(),
                             self.batch_size if self.drop_remainder else None)


def batched_cardinality(n: int, batch_size: int, drop_remainder: bool) -> int:
    if n in (INFINITE, UNKNOWN):
        return n
    return n // batch_size if drop_remainder else -(-n // batch_size)


class BatchReader:
    """Batch ``i`` of a random-access input; shared with ``padded_batch``."""

    def __init__(self, input_reader, batch_size: int, drop_remainder: bool, stack):
        self._input = input_reader
        self._n = len(input_reader)
        self._batch_size = batch_size
        self._len = batched_cardinality(self._n, batch_size, drop_remainder)
        self._stack = stack

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        start = index * self._batch_size
        stop = min(start + self._batch_size, self._n)
        elements, error = read_block(self._input, start, stop)
        if error is not None:
            raise error
        return self._stack(elements)


class BatchIterator(UnaryIterator):
    """Pulls up to ``batch_size`` elements per batch; shared with ``padded_batch``.

    A batch is pulled within one ``__next__``, so the state is the input's.
    """

    OP = "batch"

    def __init__(self, input_iterator: Iterator, batch_size: int, drop_remainder: bool, stack):
        super().__init__(input_iterator)
        self._batch_size = batch_size
        self._drop_remainder = drop_remainder
        self._stack = stack

    def __next__(self):
        size = self._batch_size
        elements = self._input.next_many(size)
        while 0 < len(elements) < size:
            more = self._input.next_many(size - len(elements))
            if not more:
                break
            elements += more
        if not elements or (self._drop_remainder and len(elements) < self._batch_size):
            raise StopIteration
        return self._stack(elements)


def _stack(elements):
    return _tree.stack(elements, "batch")


def _reader(node: BatchNode, ctx, epoch: int):
    return BatchReader(_planner.make_reader(node.input, ctx, epoch), node.batch_size,
                       node.drop_remainder, _stack)


class _MapGroups(UnaryIterator):
    """Lists of up to ``batch_size`` input elements, for a fused map's workers.

    A last, short group that ``drop_remainder`` drops is still mapped here
    (and discarded), so that its errors surface as they would unfused.
    """

    OP = "batch"
    COUNTERS = ("group",)

    def __init__(self, input_iterator: Iterator, batch_size: int, drop_remainder: bool, fn):
        super().__init__(input_iterator)
        self._groups = BatchIterator(input_iterator, batch_size, False, list)
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


def _iterator(node: BatchNode, ctx, epoch: int):
    input_iterator = _planner.make_iterator(node.input, ctx, epoch)
    threads, deterministic = _planner.op_parallelism(node, ctx)
    if node.map_fn is not None:
        fn, size = node.map_fn, node.batch_size
        groups = _MapGroups(input_iterator, size, node.drop_remainder, fn)
        return parallel.ParallelMapIterator(
            groups, lambda group, index: _stack(_map_group(fn, group, index * size)),
            threads or 1, deterministic, engine.op_engine(node, ctx), ctx.options.cpu_budget,
            engine.engine_key(node), "batch")
    if threads:
        # Elements are pulled in order on the consumer's thread (as lists);
        # only the stacking, a copy that releases the GIL, runs on the pool.
        groups = BatchIterator(input_iterator, node.batch_size, node.drop_remainder, list)
        return parallel.ParallelMapIterator(groups, lambda group, _: _stack(group), threads,
                                            deterministic, op="batch")
    return BatchIterator(input_iterator, node.batch_size, node.drop_remainder, _stack)


_planner.register(BatchNode, iterator=_iterator, reader=_reader)
