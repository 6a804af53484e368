"""A cache read by index: what Cedar's planner (``jdata._autoplan``) puts under the ops that
read by index (a full ``shuffle(key)``, a by-index stage), where ``cache()``, which reads its
input in order, would take their random access away.

Each element is kept by its position as it is read, in any order (a full shuffle's), and
read back from then on; once every position is in, the input is not read again. Only
deterministic inputs go under it (no random op below: the planner's rule), so an element is
the same in every epoch. The store lives beside the plan, in the process that placed the
cache (``keep``): readers elsewhere (worker processes, the service's workers, an unpickled
plan) read their input through, so no process holds a partial copy it would never complete.
Worker threads of this process share the store (under a lock).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from typing import Any, ClassVar

from jdata import _planner
from jdata._plan import Node, Unchanged
from jdata.runtime.values import frozen

_STORES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True, eq=False)
class IndexCacheNode(Unchanged):
    """A cache whose elements are read by index; see the module's text."""

    input: Node
    op_name: ClassVar[str] = "cache"
    keeps_count: ClassVar[bool] = True
    keeps_access: ClassVar[bool] = True
    keeps_positions: ClassVar[bool] = True

    def __str__(self) -> str:
        return "Cache(by index)"


class _Store:
    def __init__(self, size: int) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.size = size
        self.elements: dict[int, Any] = {}
        self.full: list | None = None  # every position, once all are in


def keep(node: IndexCacheNode) -> None:
    """Makes this process the one whose readers of ``node`` fill and read its store."""
    _STORES.setdefault(node, _Store(node.cardinality()))


def filled(node: IndexCacheNode) -> int:
    """The positions ``node``'s store holds in this process (0 where it has none)."""
    store = _STORES.get(node)
    return 0 if store is None else len(store.elements) if store.full is None else store.size


class _IndexCacheReader:
    def __init__(self, node: IndexCacheNode, ctx, epoch: int) -> None:
        self._node, self._ctx, self._epoch = node, ctx, epoch
        store = _STORES.get(node)
        self._store = store if store is not None and store.pid == os.getpid() else None
        self._input = None  # made at the first position not in the store
        self._size = node.cardinality()

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index: int):
        store = self._store
        if store is not None:
            full = store.full
            if full is not None:
                return frozen(full[index])
            kept = store.elements.get(index)
            if kept is not None:
                return frozen(kept)
        if self._input is None:
            self._input = _planner.make_reader(self._node.input, self._ctx, self._epoch)
        element = self._input[index]
        if store is None:
            return element
        element = frozen(element)
        with store.lock:
            store.elements[index] = element
            if len(store.elements) == store.size:
                store.full = [store.elements[i] for i in range(store.size)]
                store.elements = {}
        return frozen(element)


_planner.register(IndexCacheNode, reader=_IndexCacheReader)
