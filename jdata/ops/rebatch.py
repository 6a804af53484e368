"""rebatch: re-splits batches into batches of new sizes. See ``Dataset.rebatch``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from jdata import _planner, _spec, _tree
from jdata._constants import INFINITE, UNKNOWN
from jdata._plan import Node
from jdata.ops.unbatch import UnbatchIterator, unbatched_cardinality
from jdata.runtime import states
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class RebatchNode(Node):
    """See ``Dataset.rebatch``."""

    input: Node
    batch_sizes: tuple
    drop_remainder: bool = False
    op_name: ClassVar[str] = "rebatch"
    batching: ClassVar[bool] = True

    def cardinality(self) -> int:
        rows = unbatched_cardinality(self.input)
        if rows in (INFINITE, UNKNOWN):
            return rows
        return _count_batches(rows, self.batch_sizes, self.drop_remainder)

    def static_batch_size(self) -> int | None:
        # As ``_batch_size``, from the input's static batch size, not its spec.
        if len(set(self.batch_sizes)) != 1:
            return None
        size = self.batch_sizes[0]
        rows = self.input.static_batch_size()
        if self.drop_remainder or (rows is not None and rows % size == 0):
            return size
        return None

    def compute_spec(self):
        spec = self.input.element_spec()
        return _spec.batched(_spec.unbatched(spec), self._batch_size(spec))

    def _batch_size(self, input_spec) -> int | None:
        """The size of every output batch, when known (as tf.data knows it).

        With one size, every batch is full if remainders are dropped, or if the
        size divides the input's fixed batch size (so it divides the row count).
        """
        if len(set(self.batch_sizes)) != 1:
            return None
        size = self.batch_sizes[0]
        input_sizes = {leaf.shape[0] for leaf in _tree.leaves(input_spec)}
        if self.drop_remainder or (None not in input_sizes
                                   and all(n % size == 0 for n in input_sizes)):
            return size
        return None


def _count_batches(rows: int, sizes: tuple, drop_remainder: bool) -> int:
    cycle = sum(sizes)
    count, rows = len(sizes) * (rows // cycle), rows % cycle
    for size in sizes:
        if rows == 0 or (drop_remainder and rows < size):
            break
        count += 1
        rows -= min(size, rows)
    return count


class _RebatchIterator(Iterator):
    """Takes each batch's rows as slices of the input batches, joined per leaf.

    A batch is assembled within one ``__next__``, so the state is the row
    stream's plus the index of the next size.
    """

    def __init__(self, node: RebatchNode, ctx, epoch: int):
        self._rows = UnbatchIterator(_planner.make_iterator(node.input, ctx, epoch), "rebatch")
        self._sizes = node.batch_sizes
        self._drop_remainder = node.drop_remainder
        self._size_index = 0

    def __next__(self):
        size = self._sizes[self._size_index]
        pieces, count = [], 0
        while count < size:
            try:
                piece = self._rows.next_slice(size - count)
            except StopIteration:
                break
            pieces.append(piece)
            count += _tree.batch_size_of(piece, "rebatch")
        if count == 0 or (self._drop_remainder and count < size):
            raise StopIteration
        self._size_index = (self._size_index + 1) % len(self._sizes)
        return pieces[0] if len(pieces) == 1 else _concatenate(pieces)

    def snapshot(self):
        return {"rows": self._rows.snapshot(), "size_index": self._size_index}

    def set_state(self, state):
        fields = states.Fields(state, "rebatch", ("rows", "size_index"))
        size_index = fields.int("size_index", 0, len(self._sizes) - 1)
        self._rows.set_state(state["rows"])
        self._size_index = size_index

    def close(self):
        self._rows.close()


def _concatenate(pieces: list):
    first_leaves, treedef = _tree.flatten(pieces[0])
    columns = [first_leaves]
    for piece in pieces[1:]:
        piece_leaves, piece_tree = _tree.flatten(piece)
        if piece_tree != treedef:
            raise ValueError(f"rebatch: input batches have structures {treedef} and "
                             f"{piece_tree}; every batch must have the same structure")
        columns.append(piece_leaves)
    return _tree.unflatten(treedef, [_join([c[j] for c in columns])
                                     for j in range(len(first_leaves))])


def _join(leaves: list) -> np.ndarray:
    try:
        return np.concatenate(leaves)
    except ValueError as e:
        shapes = sorted({np.shape(leaf)[1:] for leaf in leaves})
        raise ValueError(
            f"rebatch: cannot join rows of shapes {shapes} into one batch; map() the input "
            "batches to one row shape first") from e


_planner.register(RebatchNode, iterator=_RebatchIterator)
