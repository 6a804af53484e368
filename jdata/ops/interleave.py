"""interleave: maps elements to datasets and cycles through them. See ``Dataset.interleave``."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar

from jdata import _nested, _planner, _probe
from jdata._constants import UNKNOWN
from jdata._plan import Node
from jdata.runtime import chunks, prefetch, states, udf
from jdata.runtime.context import Context
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class InterleaveNode(Node):
    """See ``Dataset.interleave``."""

    input: Node
    fn: Callable
    cycle_length: int
    block_length: int
    num_parallel_calls: int | None = None
    deterministic: bool | None = None
    op_name: ClassVar[str] = "interleave"
    parallel: ClassVar[bool] = True

    def cardinality(self) -> int:
        return UNKNOWN

    def compute_spec(self):
        return nested_output_spec(self.input, self.fn, self.op_name)


def nested_output_spec(input_node: Node, fn: Callable, op: str):
    """The element spec of the dataset ``fn`` builds from the first input element."""
    first = _probe.first_element(input_node, op)
    return _nested.dataset_node(udf.call(fn, first, op, 0), op).element_spec()


_MISSING = object()
# Elements a parallel slot's thread hands over at a time.
_CHUNK = 64


@dataclasses.dataclass
class _Slot:
    """An open dataset of the cycle and where its outer element came from."""

    before: Any  # the input's state just before the outer element was pulled
    position: int  # the outer element's position in the input
    inner: Iterator


class InterleaveIterator(Iterator):
    """tf.data's sequential interleave; ``flat_map`` is its 1-slot, 1-element-block case.

    A cycle of ``cycle_length`` slots: from the current slot take up to
    ``block_length`` elements, then move on; an exhausted slot is emptied and
    the cycle moves on; an empty slot is filled from the next input element
    (without moving). The iteration ends when the input is exhausted and every
    slot is empty.

    A slot's state keeps the input's state from before its outer element was
    pulled, so a restore can pull that element again, rebuild its dataset and
    move the dataset's iterator to the saved inner state. Over a random-access
    input that is just ``{"index": i}``.
    """

    def __init__(self, input_iterator: Iterator, fn: Callable, cycle_length: int,
                 block_length: int, op: str, ctx: Context, epoch: int,
                 threads: int | None = None):
        self._input = input_iterator
        # With threads, the first `threads` slots each fill a buffer of a block
        # on a thread of their own; the cycle's order stays the sequential one.
        self._threads = min(threads or 0, cycle_length)
        self._fn = fn
        self._block_length = block_length
        self._op = op
        self._ctx = ctx
        self._epoch = epoch
        self._slots: list[_Slot | None] = [None] * cycle_length
        self._num_open = 0
        self._cycle_index = 0
        self._block_index = 0
        self._end_of_input = False
        self._position = 0  # outer elements pulled so far

    def __next__(self):
        while not self._end_of_input or self._num_open:
            slot = self._slots[self._cycle_index]
            if slot is None:
                if self._end_of_input:
                    self._next_slot()
                else:
                    self._open_slot()
                continue
            try:
                element = next(slot.inner)
            except StopIteration:
                self._close_slot(self._cycle_index)
                self._next_slot()
                continue
            self._block_index += 1
            if self._block_index == self._block_length:
                self._next_slot()
            return element
        raise StopIteration

    def _next_slot(self) -> None:
        self._block_index = 0
        self._cycle_index = (self._cycle_index + 1) % len(self._slots)

    def _open_slot(self) -> None:
        before = self._input.snapshot()
        try:
            element = next(self._input)
        except StopIteration:
            self._end_of_input = True
            return
        position = self._position
        self._position = position + 1  # before fn runs, so a failing element is skipped
        inner = _nested.open_dataset(self._fn, element, self._op, position, self._ctx,
                                    self._epoch)
        self._slots[self._cycle_index] = _Slot(before, position,
                                               self._prefetched(inner, self._cycle_index))
        self._num_open += 1

    def _close_slot(self, index: int) -> None:
        self._slots[index].inner.close()
        self._slots[index] = None
        self._num_open -= 1

    def snapshot(self):
        return {
            "input": self._input.snapshot(),
            "position": self._position,
            "end_of_input": self._end_of_input,
            "cycle_index": self._cycle_index,
            "block_index": self._block_index,
            "slots": [None if s is None else
                      {"input": s.before, "position": s.position, "inner": s.inner.snapshot()}
                      for s in self._slots],
        }

    def set_state(self, state):
        fields = states.Fields(state, self._op, ("input", "position", "end_of_input",
                                                 "cycle_index", "block_index", "slots"))
        position, end_of_input = fields.int("position"), fields.bool("end_of_input")
        cycle_index = fields.int("cycle_index", 0, len(self._slots) - 1)
        block_index = fields.int("block_index", 0, self._block_length - 1)
        slots = fields.list("slots", len(self._slots))
        for index, slot in enumerate(self._slots):
            if slot is not None:
                self._close_slot(index)
        # Each slot moves the input back to its outer element; the input's own
        # state is set last.
        for index, saved in enumerate(slots):
            if saved is not None:
                self._slots[index] = self._restore_slot(saved, index, position)
                self._num_open += 1
        self._input.set_state(state["input"])
        self._position, self._end_of_input = position, end_of_input
        self._cycle_index, self._block_index = cycle_index, block_index

    def _prefetched(self, inner: Iterator, index: int) -> Iterator:
        if index < self._threads:
            # The slot's thread reads ahead in chunks: one handoff per chunk.
            chunk = max(self._block_length, _CHUNK)
            return chunks.Unchunk(prefetch.PrefetchIterator(chunks.Chunks(inner, chunk, self._op),
                                                            2), self._op)
        return inner

    def _restore_slot(self, saved, index: int, pulled: int) -> _Slot:
        position = states.Fields(saved, self._op, ("input", "position", "inner")).int(
            "position", 0, pulled - 1)
        self._input.set_state(saved["input"])
        element = next(self._input, _MISSING)
        if element is _MISSING:
            raise states.invalid(self._op, "slots", "a slot's outer element is past the input")
        inner = self._prefetched(_nested.open_dataset(self._fn, element, self._op, position,
                                                     self._ctx, self._epoch), index)
        inner.set_state(saved["inner"])
        return _Slot(saved["input"], position, inner)

    def close(self):
        for index, slot in enumerate(self._slots):
            if slot is not None:
                self._close_slot(index)
        self._input.close()


def _iterator(node: InterleaveNode, ctx, epoch: int):
    # num_parallel_calls only changes speed, never the output (even with
    # deterministic=False: slots are read in cycle order).
    threads, _ = _planner.op_parallelism(node, ctx)
    return InterleaveIterator(_planner.make_iterator(node.input, ctx, epoch), node.fn,
                              node.cycle_length, node.block_length, "interleave", ctx, epoch,
                              threads)


_planner.register(InterleaveNode, iterator=_iterator)
