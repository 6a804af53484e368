"""take_while: elements up to the first the predicate rejects. See ``Dataset.take_while``."""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

from jdata import _planner
from jdata._constants import UNKNOWN
from jdata._plan import Node, Unchanged
from jdata.ops.filter import predicate_result
from jdata.runtime import states, udf
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class TakeWhileNode(Unchanged):
    """See ``Dataset.take_while``."""

    input: Node
    predicate: Callable
    op_name: ClassVar[str] = "take_while"

    def cardinality(self) -> int:
        return 0 if self.input.cardinality() == 0 else UNKNOWN


class _TakeWhileIterator(Iterator):
    """Once the predicate is false the iterator has stopped for good.

    ``stopped`` is part of the state: the input itself may well have more
    elements, so a restore could not tell otherwise.
    """

    def __init__(self, node: TakeWhileNode, ctx, epoch: int):
        self._input = _planner.make_iterator(node.input, ctx, epoch)
        self._predicate = node.predicate
        self._position = 0
        self._stopped = False

    def __next__(self):
        if self._stopped:
            raise StopIteration
        element = next(self._input)
        position = self._position
        self._position = position + 1
        keep = udf.call(self._predicate, element, "take_while", position)
        if predicate_result(keep, "take_while", position):
            return element
        self._stopped = True
        raise StopIteration

    def snapshot(self):
        return {"input": self._input.snapshot(), "position": self._position,
                "stopped": self._stopped}

    def set_state(self, state):
        fields = states.Fields(state, "take_while", ("input", "position", "stopped"))
        position, stopped = fields.int("position"), fields.bool("stopped")
        self._input.set_state(state["input"])
        self._position, self._stopped = position, stopped

    def close(self):
        self._input.close()


_planner.register(TakeWhileNode, iterator=_TakeWhileIterator)
