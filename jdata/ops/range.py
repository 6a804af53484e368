"""range: integers like Python's range. See ``jdata.range``."""

from __future__ import annotations

import builtins
import dataclasses
from typing import ClassVar

import numpy as np

from jdata import _planner, _tree
from jdata._plan import Node
from jdata._spec import TensorSpec
from jdata.runtime import iterator


@dataclasses.dataclass(frozen=True, eq=False)
class RangeNode(Node):
    """See ``jdata.range``."""

    start: int
    stop: int
    step: int
    op_name: ClassVar[str] = "range"

    def cardinality(self) -> int:
        return len(builtins.range(self.start, self.stop, self.step))

    def random_access(self) -> bool:
        return True

    def compute_spec(self):
        return TensorSpec((), np.dtype(np.int64))


class _RangeReader:
    def __init__(self, node: RangeNode, ctx, epoch: int):
        self._range = builtins.range(node.start, node.stop, node.step)

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, index: int):
        return np.int64(self._range[index])

    def read_block(self, lo: int, hi: int):
        values = self._range[lo:hi]
        try:
            elements = np.arange(values.start, values.stop, values.step, dtype=np.int64)
            return _tree.Leaves(elements), None
        except OverflowError:  # beyond int64: let each element report its own error
            return iterator.read_each(self, lo, hi)


_planner.register(RangeNode, reader=_RangeReader)
