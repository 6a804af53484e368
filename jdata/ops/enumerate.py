"""enumerate: pairs each element with its position. See ``Dataset.enumerate``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from jdata import _planner
from jdata._plan import Node
from jdata._spec import TensorSpec
from jdata.runtime import states
from jdata.runtime.iterator import UnaryIterator


@dataclasses.dataclass(frozen=True, eq=False)
class EnumerateNode(Node):
    """See ``Dataset.enumerate``."""

    input: Node
    start: int = 0
    op_name: ClassVar[str] = "enumerate"

    def cardinality(self) -> int:
        return self.input.cardinality()

    def random_access(self) -> bool:
        return self.input.random_access()

    def compute_spec(self):
        return (TensorSpec((), np.int64), self.input.element_spec())


class _EnumerateReader:
    def __init__(self, node: EnumerateNode, ctx, epoch: int):
        self._input = _planner.make_reader(node.input, ctx, epoch)
        self._start = node.start

    def __len__(self) -> int:
        return len(self._input)

    def __getitem__(self, index: int):
        return np.int64(self._start + index), self._input[index]


class _EnumerateIterator(UnaryIterator):
    """As tf.data's ``zip((counter(start), input))``: a failed element uses up its number."""

    OP = "enumerate"
    COUNTERS = ("position",)

    def __init__(self, node: EnumerateNode, ctx, epoch: int):
        super().__init__(_planner.make_iterator(node.input, ctx, epoch))
        self._start = node.start

    def __next__(self):
        position = self._position
        self._position = position + 1
        try:
            element = next(self._input)
        except StopIteration:
            self._position = position
            raise
        return np.int64(self._start + position), element

    def _counter_limit(self, name: str) -> int:
        return min(states.MAX_COUNT, states.INT64_MAX - max(self._start, 0))


_planner.register(EnumerateNode, iterator=_EnumerateIterator, reader=_EnumerateReader)
