"""unbatch: splits each element along its first dimension. See ``Dataset.unbatch``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner, _spec, _tree
from jdata._constants import INFINITE, UNKNOWN
from jdata._plan import Node
from jdata.runtime import states
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class UnbatchNode(Node):
    """See ``Dataset.unbatch``."""

    input: Node
    op_name: ClassVar[str] = "unbatch"

    def cardinality(self) -> int:
        return unbatched_cardinality(self.input)

    def compute_spec(self):
        return _spec.unbatched(self.input.element_spec())


def unbatched_cardinality(node: Node) -> int:
    """The number of rows in ``node``'s batches, when static facts fix the batch size.

    tf.data reads the leading dimension from the element spec, whose shapes
    are traced. Here a spec of UDF outputs or of an opaque source is inferred
    from the first elements: a count built on it can be wrong (18 rows
    reported, 16 read), and ``UNKNOWN`` is better than wrong.
    """
    n = node.cardinality()
    if n in (0, UNKNOWN):
        return n
    rows = node.static_batch_size()
    if rows is None:
        return UNKNOWN
    if n == INFINITE:
        return 0 if rows == 0 else INFINITE
    return n * rows


class UnbatchIterator(Iterator):
    """The rows of the input's batches; shared with ``rebatch``.

    The state is the input's state from before the current batch plus the
    offset in it: a restore re-reads that one batch. Over a random-access
    input that is just the batch's index and the offset.
    """

    def __init__(self, input_iterator: Iterator, op: str = "unbatch"):
        self._input = input_iterator
        self._op = op
        self._batch = None
        self._size = 0
        self._rows: list | None = None  # the batch split into rows, made on first use
        self._offset = 0
        self._before: dict | None = None  # the input's state before the current batch

    def _has_rows(self) -> bool:
        """Pulls batches until one has rows left; False at the end of the input."""
        while self._offset >= self._size:
            before = self._input.snapshot()
            try:
                batch = next(self._input)
            except StopIteration:
                return False
            self._set_batch(batch, before, 0)
        return True

    def _set_batch(self, batch, before, offset: int) -> None:
        self._size = _tree.batch_size_of(batch, self._op)
        self._batch, self._rows, self._before, self._offset = batch, None, before, offset

    def __next__(self):
        if not self._has_rows():
            raise StopIteration
        if self._rows is None:
            self._rows = _tree.unstack(self._batch, self._size)
        self._offset += 1
        return self._rows[self._offset - 1]

    def next_slice(self, limit: int):
        """Up to ``limit`` (at least one) next rows, as a slice of one batch."""
        if not self._has_rows():
            raise StopIteration
        start = self._offset
        stop = self._offset = min(start + limit, self._size)
        return _tree.map(lambda leaf: leaf[start:stop], self._batch)

    def snapshot(self):
        if self._offset >= self._size:
            return {"input": self._input.snapshot(), "offset": 0}
        return {"input": self._before, "offset": self._offset}

    def set_state(self, state):
        offset = states.Fields(state, self._op, ("input", "offset")).int("offset")
        self._input.set_state(state["input"])
        self._batch, self._rows, self._size, self._offset = None, None, 0, 0
        if offset:  # inside a batch: read it again, and check the offset against it
            batch = next(self._input, None)
            size = 0 if batch is None else _tree.batch_size_of(batch, self._op)
            if offset >= size:
                raise states.invalid(self._op, "offset", f"{offset} is past the batch's "
                                     f"{size} rows")
            self._set_batch(batch, state["input"], offset)

    def close(self):
        self._input.close()


def _iterator(node: UnbatchNode, ctx, epoch: int):
    return UnbatchIterator(_planner.make_iterator(node.input, ctx, epoch))


_planner.register(UnbatchNode, iterator=_iterator)
