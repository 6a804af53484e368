"""shard: every ``num_shards``-th element from ``index``. See ``Dataset.shard``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._constants import INFINITE, UNKNOWN
from jdata._errors import DataError, UDFError
from jdata._plan import Node, Unchanged
from jdata.runtime.iterator import UnaryIterator


@dataclasses.dataclass(frozen=True, eq=False)
class ShardNode(Unchanged):
    """See ``Dataset.shard``."""

    input: Node
    num_shards: int
    index: int
    op_name: ClassVar[str] = "shard"
    keeps_access: ClassVar[bool] = True

    def cardinality(self) -> int:
        n = self.input.cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return shard_length(n, self.num_shards, self.index)


def shard_length(n: int, num_shards: int, index: int) -> int:
    """How many of ``range(n)`` are ``index`` modulo ``num_shards``."""
    return n // num_shards + (1 if index < n % num_shards else 0)


class _ShardReader:
    """Reads only this shard's elements of the input."""

    def __init__(self, node: ShardNode, ctx, epoch: int):
        self._input = _planner.make_reader(node.input, ctx, epoch)
        self._num_shards = node.num_shards
        self._index = node.index
        self._len = shard_length(len(self._input), node.num_shards, node.index)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        return self._input[self._index + index * self._num_shards]


class _ShardIterator(UnaryIterator):
    """Pulls every input element and keeps those of this shard.

    ``position`` counts input elements pulled. An element of another shard
    whose UDF raised is dropped silently: over a random-access input it would
    never be computed, and a pipeline must not fail on another host's data.
    But an unreadable record whose damage hides the rest of its file (a
    ``DataError`` with ``unread_bytes``) loses this shard's records in it too:
    that error is this shard's as well, and is raised.
    """

    OP = "shard"
    COUNTERS = ("position",)

    def __init__(self, node: ShardNode, ctx, epoch: int):
        super().__init__(_planner.make_iterator(node.input, ctx, epoch))
        self._num_shards = node.num_shards
        self._index = node.index

    def __next__(self):
        while self._position % self._num_shards != self._index:
            self._pull_other_shard()
        self._position += 1  # before pulling, so an element that fails is passed
        try:
            return next(self._input)
        except StopIteration:
            self._position -= 1
            raise

    def _pull_other_shard(self) -> None:
        self._position += 1
        try:
            next(self._input)
        except StopIteration:
            self._position -= 1
            raise
        except DataError as e:
            if e.unread_bytes is not None:
                raise
        except UDFError:
            pass


_planner.register(ShardNode, iterator=_ShardIterator, reader=_ShardReader)
