"""repeat: the input again and again. See ``Dataset.repeat``.

Pass ``r`` iterates the input with epoch ``_random.repeat_epoch(epoch, r)``,
so random ops below a repeat (shuffle, random_map) draw fresh randomness each
pass, and the same randomness whether a pass is read by index or iterated.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner, _random
from jdata._constants import INFINITE, UNKNOWN
from jdata._plan import Node, Unchanged
from jdata.runtime import iterator, states
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class RepeatNode(Unchanged):
    """See ``Dataset.repeat``. ``count=None`` repeats forever."""

    input: Node
    count: int | None
    op_name: ClassVar[str] = "repeat"

    def cardinality(self) -> int:
        n = self.input.cardinality()
        if self.count is None:
            return 0 if n == 0 else INFINITE
        if self.count == 0:
            return 0
        if n in (INFINITE, UNKNOWN):
            return n
        return self.count * n

    def random_access(self) -> bool:
        return self.count is not None and self.input.random_access()

    def __str__(self):
        return "Repeat(forever)" if self.count is None else f"Repeat(count={self.count})"


@dataclasses.dataclass(frozen=True, eq=False)
class RepeatByIndexNode(Unchanged):
    """A forever ``repeat`` of a random-access input read by index, as one stream of
    passes (the optimizer's ``repeat_by_index``), instead of building the input's
    iterator again each pass."""

    input: Node
    count: ClassVar[None] = None  # forever, as the RepeatNode it replaces
    op_name: ClassVar[str] = "repeat"
    keeps_access: ClassVar[bool] = True

    def cardinality(self) -> int:
        return 0 if self.input.cardinality() == 0 else INFINITE

    def __str__(self):
        return "Repeat(forever, by index)"


# Read by index, a forever repeat ends after this many elements (centuries at 10M/s).
_FOREVER_ELEMENTS = 2 ** 62


class _RepeatReader:
    """Element ``i`` is element ``i % n`` of pass ``i // n``, each pass its own epoch."""

    def __init__(self, node: RepeatNode, ctx, epoch: int):
        self._node, self._ctx, self._epoch = node, ctx, epoch
        self._pass = 0
        self._reader = self._pass_reader(0)
        self._n = len(self._reader)
        self.prefers_blocks = getattr(self._reader, "prefers_blocks", False)
        passes = node.count
        if passes is None:  # forever: more elements than any job reads
            passes = _FOREVER_ELEMENTS // self._n if self._n else 0
        self._len = passes * self._n

    def _pass_reader(self, repetition: int):
        epoch = _random.repeat_epoch(self._epoch, repetition)
        return _planner.make_reader(self._node.input, self._ctx, epoch)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        repetition, offset = divmod(index, self._n)
        return self._reader_of(repetition)[offset]

    def _reader_of(self, repetition: int):
        if repetition != self._pass:  # reads mostly stay in one pass: keep its reader
            self._reader = self._pass_reader(repetition)
            self._pass = repetition
        return self._reader

    def read_block(self, lo: int, hi: int):
        """One block read of the input per pass the block spans (a tight loop, not an
        index per element)."""
        elements, error = [], None
        while lo < hi and error is None:
            repetition, offset = divmod(lo, self._n)
            end = min(hi, (repetition + 1) * self._n)
            block, error = iterator.read_block(self._reader_of(repetition), offset,
                                               offset + end - lo)
            elements = block if not elements else [*elements, *block]
            lo = end
        return elements, error


class _RepeatIterator(Iterator):
    """Builds a new input iterator for each pass.

    ``yielded`` records whether the current pass has produced an element: a
    pass that ends without one ends an infinite repeat (tf.data's rule, which
    makes ``repeat()`` of an empty dataset empty instead of an endless loop).
    """

    def __init__(self, node: RepeatNode, ctx, epoch: int):
        self._node, self._ctx, self._epoch = node, ctx, epoch
        self._count = node.count
        if node.input.cardinality() == 0:
            self._count = 0  # known to be empty: no need to run empty passes
        self._repetition = 0
        self._yielded = False
        self._input = self._pass_iterator(0)

    def _pass_iterator(self, repetition: int) -> Iterator:
        epoch = _random.repeat_epoch(self._epoch, repetition)
        return _planner.make_iterator(self._node.input, self._ctx, epoch)

    def __next__(self):
        while self._count is None or self._repetition < self._count:
            try:
                element = next(self._input)
            except StopIteration:
                if self._count is None and not self._yielded:
                    raise
                self._next_pass()
                continue
            self._yielded = True
            return element
        raise StopIteration

    def _next_pass(self) -> None:
        self._repetition += 1
        self._yielded = False
        if self._count is None or self._repetition < self._count:
            self._input.close()
            self._input = self._pass_iterator(self._repetition)

    def snapshot(self):
        return {"repetition": self._repetition, "yielded": self._yielded,
                "input": self._input.snapshot()}

    def set_state(self, state):
        fields = states.Fields(state, "repeat", ("repetition", "yielded", "input"))
        last = states.MAX_EPOCH if self._count is None else self._count
        repetition, yielded = fields.int("repetition", 0, last), fields.bool("yielded")
        if repetition != self._repetition:
            self._input.close()
            self._input = self._pass_iterator(repetition)
            self._repetition = repetition
        self._yielded = yielded
        self._input.set_state(state["input"])

    def close(self):
        self._input.close()


_planner.register(RepeatNode, iterator=_RepeatIterator, reader=_RepeatReader)
_planner.register(RepeatByIndexNode, reader=_RepeatReader)
