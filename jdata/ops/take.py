"""take: the first ``count`` elements. See ``Dataset.take``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._constants import INFINITE, UNKNOWN
from jdata._plan import Node, Unchanged
from jdata.runtime import iterator
from jdata.runtime.iterator import UnaryIterator


@dataclasses.dataclass(frozen=True, eq=False)
class TakeNode(Unchanged):
    """See ``Dataset.take``. ``count == -1`` takes everything."""

    input: Node
    count: int
    op_name: ClassVar[str] = "take"
    keeps_access: ClassVar[bool] = True

    def cardinality(self) -> int:
        n = self.input.cardinality()
        if self.count == 0:
            return 0
        if self.count < 0 or n == UNKNOWN:
            return n
        if n == INFINITE:
            return self.count
        return min(n, self.count)


class _TakeReader:
    def __init__(self, node: TakeNode, ctx, epoch: int):
        self._input = _planner.make_reader(node.input, ctx, epoch)
        self.prefers_blocks = getattr(self._input, "prefers_blocks", False)
        n = len(self._input)
        self._len = n if node.count < 0 else min(n, node.count)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        return self._input[index]

    def read_block(self, lo: int, hi: int):
        return iterator.read_block(self._input, lo, hi)


class _TakeIterator(UnaryIterator):
    """Counts input slots, failed ones included, like the reader's indices.

    An element whose UDF raised below still uses up one of the ``count``
    slots, so ``take`` gives the same elements whether it runs through its
    reader or here (tf.data counts only successful elements).
    """

    OP = "take"
    COUNTERS = ("taken",)

    def __init__(self, node: TakeNode, ctx, epoch: int):
        super().__init__(_planner.make_iterator(node.input, ctx, epoch))
        self._count = node.count

    def __next__(self):
        if 0 <= self._count <= self._taken:
            raise StopIteration
        self._taken += 1  # before pulling, so an element that fails uses up its slot
        try:
            return next(self._input)
        except StopIteration:
            self._taken -= 1
            raise


_planner.register(TakeNode, iterator=_TakeIterator, reader=_TakeReader)
