"""concatenate: one dataset's elements, then another's. See ``Dataset.concatenate``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner, _spec
from jdata._plan import Node, add_cardinalities
from jdata.runtime import states
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class ConcatenateNode(Node):
    """See ``Dataset.concatenate``."""

    first: Node
    second: Node
    op_name: ClassVar[str] = "concatenate"

    def cardinality(self) -> int:
        return add_cardinalities([self.first.cardinality(), self.second.cardinality()])

    def random_access(self) -> bool:
        return self.first.random_access() and self.second.random_access()

    def compute_spec(self):
        return _spec.merge_compatible([self.first.element_spec(), self.second.element_spec()],
                                      ["this dataset", "other"], "concatenate")


class _ConcatenateReader:
    def __init__(self, node: ConcatenateNode, ctx, epoch: int):
        self._first = _planner.make_reader(node.first, ctx, epoch)
        self._second = _planner.make_reader(node.second, ctx, epoch)
        self._split = len(self._first)
        self._len = self._split + len(self._second)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        if index < self._split:
            return self._first[index]
        return self._second[index - self._split]


class _ConcatenateIterator(Iterator):
    """Both inputs' iterators exist from the start, so the state keeps one shape."""

    def __init__(self, node: ConcatenateNode, ctx, epoch: int):
        self._parts = (_planner.make_iterator(node.first, ctx, epoch),
                       _planner.make_iterator(node.second, ctx, epoch))
        self._part = 0

    def __next__(self):
        if self._part == 0:
            try:
                return next(self._parts[0])
            except StopIteration:
                self._part = 1
        return next(self._parts[1])

    def snapshot(self):
        return {"part": self._part, "first": self._parts[0].snapshot(),
                "second": self._parts[1].snapshot()}

    def set_state(self, state):
        part = states.Fields(state, "concatenate", ("part", "first", "second")).int("part", 0, 1)
        self._part = part
        self._parts[0].set_state(state["first"])
        self._parts[1].set_state(state["second"])

    def close(self):
        for part in self._parts:
            part.close()


_planner.register(ConcatenateNode, iterator=_ConcatenateIterator, reader=_ConcatenateReader)
