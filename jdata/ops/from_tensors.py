"""from_tensors: a dataset of one element. See ``jdata.from_tensors``."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from jdata import _planner, _spec
from jdata._plan import Node
from jdata.runtime.values import frozen


@dataclasses.dataclass(frozen=True, eq=False)
class FromTensorsNode(Node):
    """See ``jdata.from_tensors``."""

    element: Any
    op_name: ClassVar[str] = "from_tensors"

    def cardinality(self) -> int:
        return 1

    def random_access(self) -> bool:
        return True

    def compute_spec(self):
        return _spec.spec_of(self.element)


class _FromTensorsReader:
    """The element in new containers; its arrays are read-only (``jdata.from_tensors``)."""

    def __init__(self, node: FromTensorsNode, ctx, epoch: int):
        self._element = node.element

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int):
        if index != 0:
            raise IndexError(index)
        return frozen(self._element)


_planner.register(FromTensorsNode, reader=_FromTensorsReader)
