"""random: an infinite stream of random ``int64`` in ``[0, 2**32)``. See ``jdata.random``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from jdata import _planner, _random
from jdata._constants import INFINITE
from jdata._plan import Node
from jdata._spec import TensorSpec
from jdata.runtime import states
from jdata.runtime.iterator import Iterator

_SALT = _random.salt("random")
# Values are derived this many at a time, vectorized, so none costs a Threefry call of its own.
_BLOCK = 1024


@dataclasses.dataclass(frozen=True, eq=False)
class RandomNode(Node):
    """See ``jdata.random``. Infinite, so not random access (a reader needs a length)."""

    key: np.ndarray
    rerandomize_each_iteration: bool = False
    op_name: ClassVar[str] = "random"
    random: ClassVar[bool] = True

    def cardinality(self) -> int:
        return INFINITE

    def compute_spec(self):
        return TensorSpec((), np.int64)

    def random_epoch(self, epoch: int) -> int:
        """The epoch the values use: fixed unless rerandomizing each iteration."""
        return epoch if self.rerandomize_each_iteration else 0

    def __str__(self):
        return f"Random(rerandomize_each_iteration={self.rerandomize_each_iteration})"


class _RandomIterator(Iterator):
    """Value ``t`` is the first word of position ``t``'s key (see ``jdata._random``)."""

    def __init__(self, node: RandomNode, ctx, epoch: int):
        self._epoch_key = _random.op_epoch_key(node.key, _SALT, node.random_epoch(epoch))
        self._count = 0
        self._values: list = []
        self._offset = 0

    def __next__(self):
        if self._offset == len(self._values):
            keys = _random.element_keys(self._epoch_key, self._count, _BLOCK)
            self._values = list(keys[:, 0].astype(np.int64))
            self._offset = 0
        value = self._values[self._offset]
        self._offset += 1
        self._count += 1
        return value

    def snapshot(self):
        return {"count": self._count}

    def set_state(self, state):
        self._count = states.Fields(state, "random", ("count",)).int("count")
        self._values, self._offset = [], 0


_planner.register(RandomNode, iterator=_RandomIterator)
