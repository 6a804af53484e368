"""skip: all but the first ``count`` elements. See ``Dataset.skip``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._constants import INFINITE, UNKNOWN
from jdata._errors import UDFError
from jdata._plan import Node, Unchanged
from jdata.runtime import iterator
from jdata.runtime.iterator import UnaryIterator


@dataclasses.dataclass(frozen=True, eq=False)
class SkipNode(Unchanged):
    """See ``Dataset.skip``. ``count == -1`` skips everything."""

    input: Node
    count: int
    op_name: ClassVar[str] = "skip"
    keeps_access: ClassVar[bool] = True

    def cardinality(self) -> int:
        if self.count < 0:
            return 0
        n = self.input.cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return max(0, n - self.count)


class _SkipReader:
    def __init__(self, node: SkipNode, ctx, epoch: int):
        self._input = _planner.make_reader(node.input, ctx, epoch)
        self.prefers_blocks = getattr(self._input, "prefers_blocks", False)
        n = len(self._input)
        self._offset = n if node.count < 0 else min(n, node.count)
        self._len = n - self._offset

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        return self._input[index + self._offset]

    def read_block(self, lo: int, hi: int):
        return iterator.read_block(self._input, lo + self._offset, hi + self._offset)


class _SkipIterator(UnaryIterator):
    """Pulls and drops ``count`` input elements before the first output.

    A skipped element whose UDF raised is dropped like any other: the reader
    never computes skipped elements, and the two must give the same results.
    """

    OP = "skip"
    COUNTERS = ("skipped",)

    def __init__(self, node: SkipNode, ctx, epoch: int):
        super().__init__(_planner.make_iterator(node.input, ctx, epoch))
        self._count = node.count

    def __next__(self):
        if self._count < 0:
            # As in tf.data, skip(-1) ends at once without reading its input, so it
            # also ends over an infinite input instead of skipping forever.
            raise StopIteration
        while self._skipped < self._count:
            self._skipped += 1
            try:
                next(self._input)
            except StopIteration:
                self._skipped -= 1
                raise
            except UDFError:
                pass
        return next(self._input)


_planner.register(SkipNode, iterator=_SkipIterator, reader=_SkipReader)
