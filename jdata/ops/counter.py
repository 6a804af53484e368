"""counter: ``start, start + step, ...`` forever. See ``jdata.counter``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from jdata import _planner
from jdata._constants import INFINITE
from jdata._plan import Node
from jdata._spec import TensorSpec
from jdata.runtime import states
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class CounterNode(Node):
    """See ``jdata.counter``. Infinite, so not random access (a reader needs a length)."""

    start: int
    step: int
    op_name: ClassVar[str] = "counter"

    def cardinality(self) -> int:
        return INFINITE

    def compute_spec(self):
        return TensorSpec((), np.int64)


class _CounterIterator(Iterator):
    def __init__(self, node: CounterNode, ctx, epoch: int):
        self._start = node.start
        self._step = node.step
        self._count = 0

    def __next__(self):
        value = np.int64(self._start + self._count * self._step)
        self._count += 1
        return value

    def snapshot(self):
        return {"count": self._count}

    def set_state(self, state):
        # The values must stay int64, as counting there would.
        if self._step == 0:
            last = states.MAX_COUNT
        elif self._step > 0:
            last = (states.INT64_MAX - self._start) // self._step
        else:
            last = (self._start - states.INT64_MIN) // -self._step
        fields = states.Fields(state, "counter", ("count",))
        self._count = fields.int("count", 0, min(states.MAX_COUNT, max(last, 0)))


_planner.register(CounterNode, iterator=_CounterIterator)
