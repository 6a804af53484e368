"""batch: stacks consecutive elements. See ``Dataset.batch``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner, _spec, _tree
from jdata._constants import INFINITE, UNKNOWN
from jdata._plan import BatchSizes, Node
from jdata.runtime import parallel
from jdata.runtime.iterator import Iterator, UnaryIterator, read_block


@dataclasses.dataclass(frozen=True, eq=False)
class BatchNode(Node):
    """See ``Dataset.batch``."""

    input: Node
    batch_size: int
    drop_remainder: bool = False
    num_parallel_calls: int | None = None
    deterministic: bool | None = None
    op_name: ClassVar[str] = "batch"
    parallel: ClassVar[bool] = True
    batching: ClassVar[bool] = True

    def cardinality(self) -> int:
        return batched_cardinality(self.input.cardinality(), self.batch_size,
                                   self.drop_remainder)

    def random_access(self) -> bool:
        return self.input.random_access()

    def static_batch_size(self) -> int | None:
        return self.batch_size if self.drop_remainder else None

    def static_batch_sizes(self) -> BatchSizes:
        return batched_sizes(self.input.cardinality(), self.batch_size, self.drop_remainder)

    def compute_spec(self):
        return _spec.batched(self.input.element_spec(),
                             self.batch_size if self.drop_remainder else None)


def batched_sizes(n: int, batch_size: int, drop_remainder: bool) -> BatchSizes:
    """The rows of full batches and of the last one, of ``n`` input elements."""
    if drop_remainder or n == INFINITE or (n >= 0 and n % batch_size == 0):
        return BatchSizes(batch_size, batch_size)
    if n == UNKNOWN:
        return BatchSizes(batch_size, None)
    return BatchSizes(batch_size, n % batch_size)


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


def stack(elements):
    return _tree.stack(elements, "batch")


def _reader(node: BatchNode, ctx, epoch: int):
    return BatchReader(_planner.make_reader(node.input, ctx, epoch), node.batch_size,
                       node.drop_remainder, stack)


def _iterator(node: BatchNode, ctx, epoch: int):
    input_iterator = _planner.make_iterator(node.input, ctx, epoch)
    threads, deterministic = _planner.op_parallelism(node, ctx)
    if threads:
        # Elements are pulled in order on the consumer's thread (as lists);
        # only the stacking, a copy that releases the GIL, runs on the pool.
        groups = BatchIterator(input_iterator, node.batch_size, node.drop_remainder, list)
        return parallel.ParallelMapIterator(groups, lambda group, _: stack(group), threads,
                                            deterministic, op="batch")
    return BatchIterator(input_iterator, node.batch_size, node.drop_remainder, stack)


_planner.register(BatchNode, iterator=_iterator, reader=_reader)
