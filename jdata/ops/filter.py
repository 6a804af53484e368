"""filter: keeps the elements a predicate accepts. See ``Dataset.filter``."""

from __future__ import annotations

import dataclasses
from itertools import compress
from typing import Callable, ClassVar

import numpy as np

from jdata import _planner
from jdata._constants import UNKNOWN
from jdata._plan import Node, Unchanged
from jdata.runtime import states, udf
from jdata.runtime.iterator import IndexIterator, Iterator, UnaryIterator, read_block

# Input elements per block of _BlockFilterIterator: the first block, and the largest.
_MIN_BLOCK = 16
_MAX_BLOCK = 1024


@dataclasses.dataclass(frozen=True, eq=False)
class FilterNode(Unchanged):
    """See ``Dataset.filter``."""

    input: Node
    predicate: Callable
    op_name: ClassVar[str] = "filter"

    def cardinality(self) -> int:
        # As in tf.data: even over an infinite input, every element may be dropped.
        return 0 if self.input.cardinality() == 0 else UNKNOWN


def predicate_result(value, op: str, position: int | None) -> bool:
    """A predicate's output as a Python bool; shared with ``take_while``.

    Like tf.data, only scalar booleans are accepted: a truthy int or an array
    is almost always a bug (``x % 2`` instead of ``x % 2 == 1``).
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if getattr(value, "shape", None) == () and getattr(value, "dtype", None) == np.bool_:
        return bool(value)  # a 0-d NumPy or JAX bool array
    described = type(value).__name__
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        described += f" of shape {tuple(value.shape)} and dtype {value.dtype}"
    where = "an element" if position is None else f"the element at position {position}"
    raise TypeError(
        f"{op}: the predicate returned a {described} for {where}; "
        "it must return a scalar bool, e.g. x > 0 (use np.all(...) or np.any(...) to "
        "reduce arrays)")


class _FilterIterator(UnaryIterator):
    OP = "filter"
    COUNTERS = ("position",)

    def __init__(self, input_iterator: Iterator, predicate: Callable):
        super().__init__(input_iterator)
        self._predicate = predicate

    def __next__(self):
        while True:
            element = next(self._input)
            position = self._position
            self._position = position + 1  # before the call, so a failure moves past it
            keep = udf.call(self._predicate, element, "filter", position)
            if predicate_result(keep, "filter", position):
                return element


class _BlockFilterIterator(Iterator):
    """A filter over a random-access input: one tight loop per block of its reader.

    It reads a block of input elements, runs the predicate over all of them
    and serves the kept ones. Blocks grow from ``_MIN_BLOCK`` to ``_MAX_BLOCK``
    elements, so a consumer that stops early has made it compute about as
    many elements ahead as it consumed. Its state is the state a
    ``_FilterIterator`` over the input's ``IndexIterator`` would have after
    the same elements: the input index after the last element served (and
    the position), so the two are interchangeable and a restore rescans the
    dropped rest of the block. An error that ended a block (reading the input
    or in the predicate) is raised after the block's kept elements.
    """

    def __init__(self, input_iterator: IndexIterator, predicate: Callable):
        self._input = input_iterator  # holds the state only; blocks come from its reader
        self._reader = input_iterator.reader
        self._len = len(self._reader)
        self._predicate = predicate
        self._block_size = _MIN_BLOCK
        self._start_at(0, 0)

    def _start_at(self, index: int, position: int) -> None:
        """An empty block at ``index``, the ``position``-th input element of this filter."""
        self._lo = self._end = index
        self._first_position = self._end_position = position
        self._keeps: list = []  # the predicate's results for the block
        # Where the block's kept elements are in it: made on the block's first snapshot
        # (asynchronous stages take one per element; plain iteration takes none).
        self._kept_offsets: list | None = None
        self._kept: list = []
        self._served = 0
        self._error: Exception | None = None

    def __next__(self):
        while self._served == len(self._kept):
            self._advance()
        served = self._served
        self._served = served + 1
        return self._kept[served]

    def next_many(self, n: int) -> list:
        out: list = []
        while True:
            served = self._served
            taken = self._kept[served:served + n - len(out)]
            out += taken
            self._served = served + len(taken)
            if len(out) == n:
                return out
            try:
                self._advance()
            except StopIteration:
                return out

    def _advance(self) -> None:
        """Raises the block's error or ``StopIteration``, or reads the next block."""
        error = self._error
        if error is not None or self._end >= self._len:
            self._start_at(self._end, self._end_position)
            raise StopIteration if error is None else error
        self._read_block()

    def _read_block(self) -> None:
        lo, position = self._end, self._end_position
        hi = min(lo + self._block_size, self._len)
        self._block_size = min(2 * self._block_size, _MAX_BLOCK)
        elements, input_error = read_block(self._reader, lo, hi)
        keeps, error = udf.call_block(self._predicate, elements, "filter", position)
        keeps, invalid = _check_results(keeps, position)
        if invalid is not None or error is not None:
            # The failing element was pulled, and counted, before the predicate ran.
            self._end = lo + len(keeps) + 1
            self._end_position = position + len(keeps) + 1
            error = invalid or error
        elif input_error is not None:
            self._end = lo + len(elements) + 1
            self._end_position = position + len(elements)
            error = input_error
        else:
            self._end, self._end_position = hi, position + len(elements)
        self._lo, self._first_position = lo, position
        self._keeps, self._kept_offsets = keeps, None
        self._kept = list(compress(elements, keeps))
        self._served, self._error = 0, error

    def snapshot(self):
        index, position = self._lo, self._first_position
        if self._served:
            # The offset in the block of the last element served, and the count up to it.
            if self._kept_offsets is None:
                self._kept_offsets = list(compress(range(len(self._keeps)), self._keeps))
            offset = self._kept_offsets[self._served - 1] + 1
            index, position = index + offset, position + offset
        self._input.index = index
        return {"input": self._input.snapshot(), "position": position}

    def set_state(self, state):
        position = states.Fields(state, "filter", ("input", "position")).int("position")
        self._input.set_state(state["input"])
        self._block_size = _MIN_BLOCK
        self._start_at(self._input.index, position)

    def close(self):
        self._input.close()
        self._reader = None  # as the input lets go of it (it may hold open files)


def _check_results(keeps: list, position: int) -> tuple[list, TypeError | None]:
    """``predicate_result`` on each: the bools up to the first invalid result, and its error."""
    types = list(map(type, keeps))
    n = types.count(np.bool_)  # what NumPy comparisons return: one count, mostly
    if n == len(types) or n + types.count(bool) == len(types):
        return keeps, None
    out: list = []
    try:
        out.extend(predicate_result(keep, "filter", position + i) for i, keep in enumerate(keeps))
    except TypeError as e:
        return out, e
    return out, None


def _iterator(node: FilterNode, ctx, epoch: int):
    input_iterator = _planner.make_iterator(node.input, ctx, epoch)
    if type(input_iterator) is IndexIterator:
        return _BlockFilterIterator(input_iterator, node.predicate)
    return _FilterIterator(input_iterator, node.predicate)


_planner.register(FilterNode, iterator=_iterator)
