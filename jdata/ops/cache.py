"""cache: keeps the elements in memory after a first complete pass. See ``Dataset.cache``.

The cached elements live in a store beside the plan (keyed weakly by the
node), not in the frozen node, so nodes still pickle and fingerprint without
their data. Every iterator of the same node object shares the store.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import ClassVar, NamedTuple

from jdata import _planner
from jdata._constants import INFINITE
from jdata._errors import UDFError
from jdata._plan import Node, Unchanged
from jdata.runtime import states
from jdata.runtime.iterator import Iterator
from jdata.runtime.values import frozen


class _Cached(NamedTuple):
    elements: list
    epoch: int  # the epoch of the pass that filled the cache


_STORES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True, eq=False)
class CacheNode(Unchanged):
    """See ``Dataset.cache``."""

    input: Node
    op_name: ClassVar[str] = "cache"
    keeps_count: ClassVar[bool] = True


def filled(node: CacheNode) -> bool:
    """Whether a complete pass filled ``node``'s cache in this process."""
    return _STORES.get(node) is not None


class _CacheIterator(Iterator):
    """Reads the cache if it is filled, else reads the input and fills it.

    A pass fills the cache only if it saw the input from its first element to
    its end (tf.data discards partial caches). The state is
    ``{"from_cache", "index", "epoch", "input"}``: ``index`` counts the
    elements this pass emitted, ``epoch`` is the epoch of the input pass the
    elements come from (for the cache, the pass that filled it), and
    ``input`` is the input's state while reading the input, else ``None``.

    As in tf.data, elements whose computation failed are not cached, so a
    pass over the cache raises no errors: the first pass may differ from the
    later ones where an op between the cache and ``ignore_errors`` counts
    the failures (``enumerate``, ``shard``).

    The cache keeps its elements ``frozen`` (read-only arrays) and hands out
    each in new containers, the first pass's too: no consumer can change
    what a later pass reads.
    """

    def __init__(self, node: CacheNode, ctx, epoch: int):
        self._node, self._ctx = node, ctx
        self._index = 0
        self._input: Iterator | None = None
        self._input_epoch = epoch
        self._pending: list | None = None  # this pass's elements, while it can fill the cache
        # Whether this pass re-reads the input in place of a cache that
        # another process (or a rebuilt dataset) had filled (see ``_refill``).
        self._replaces_cache = False
        self._cached = _STORES.get(node)
        if self._cached is None:
            self._read_input_from_start(epoch)

    def _read_input_from_start(self, epoch: int) -> None:
        self._open_input(epoch)
        # A pass over an infinite input never completes: keeping its elements
        # would only grow memory without bound.
        self._pending = None if self._node.cardinality() == INFINITE else []

    def _open_input(self, epoch: int) -> None:
        if self._input is not None and self._input_epoch == epoch:
            return
        self._close_input()
        self._input = _planner.make_iterator(self._node.input, self._ctx, epoch)
        self._input_epoch = epoch

    def __next__(self):
        if self._cached is not None:
            if self._index >= len(self._cached.elements):
                raise StopIteration
            self._index += 1
            return frozen(self._cached.elements[self._index - 1])
        while True:
            try:
                element = next(self._input)
                break
            except StopIteration:
                self._publish()
                raise
            except UDFError:
                if not self._replaces_cache:
                    raise
                # The cache this pass replaces holds no failed element.
        self._index += 1
        element = frozen(element)
        if self._pending is not None:
            self._pending.append(element)
            return frozen(element)
        return element

    def _publish(self) -> None:
        if self._pending is not None and self._node not in _STORES:
            _STORES[self._node] = _Cached(self._pending, self._input_epoch)
        self._pending = None

    def snapshot(self):
        if self._cached is not None:
            return {"from_cache": True, "index": self._index, "epoch": self._cached.epoch,
                    "input": None}
        if self._replaces_cache:
            return {"from_cache": True, "index": self._index, "epoch": self._input_epoch,
                    "input": None}
        return {"from_cache": False, "index": self._index, "epoch": self._input_epoch,
                "input": self._input.snapshot()}

    def set_state(self, state):
        index, epoch = self._check(state)
        self._index = index
        cached = _STORES.get(self._node)
        if state["from_cache"] and cached is not None and cached.epoch == epoch:
            if index > len(cached.elements):
                raise states.invalid("cache", "index", f"{index} is past the cache's "
                                     f"{len(cached.elements)} elements")
            self._cached, self._pending = cached, None
            self._close_input()
            return
        self._cached = None
        self._replaces_cache = bool(state["from_cache"])
        if state["from_cache"]:
            self._refill(index, epoch)
        elif index == 0:
            # Nothing was read yet, so this pass still sees the input from its start.
            self._read_input_from_start(epoch)
            self._input.set_state(state["input"])
        elif cached is None and self._node.cardinality() != INFINITE:
            # The state was saved during the pass that was filling the cache.
            # Resuming it from the input's state would leave this process's
            # cache empty, and the next passes (of an enclosing repeat) would
            # read the input again in their own epochs: other random draws
            # than the cached elements they must repeat. Re-read the pass, then
            # set the input's state (it may be past an element that failed).
            self._refill(index, epoch)
            self._input.set_state(state["input"])
        else:
            self._open_input(epoch)
            self._input.set_state(state["input"])
            self._pending = None  # this pass missed the start: it cannot fill the cache

    def _check(self, state) -> tuple[int, int]:
        fields = states.Fields(state, "cache", ("from_cache", "index", "epoch", "input"))
        index, epoch = fields.int("index"), fields.int("epoch", 0, states.MAX_EPOCH)
        from_cache = fields.bool("from_cache")
        n = self._node.cardinality()
        if from_cache and (n == INFINITE or (n >= 0 and index > n)):
            # A pass over the cache (or re-read to fill it) ends with the input.
            raise states.invalid("cache", "index", f"{index} is past the input's end")
        if from_cache != (state["input"] is None):
            raise states.invalid("cache", "input", "must be null exactly when reading the cache")
        return index, epoch

    def _refill(self, index: int, epoch: int) -> None:
        # The state came from a pass that filled (or was filling) the cache of
        # another process, or of a dataset rebuilt since. Re-reading that pass
        # (same input, same epoch, hence same elements) up to ``index``
        # restores the position exactly, and the pass then goes on to the end
        # and fills this process's cache.
        self._close_input()
        self._read_input_from_start(epoch)
        read = []
        while len(read) < index:
            try:
                read.append(frozen(next(self._input)))
            except UDFError:
                continue  # the filling pass skipped this element too (ignore_errors)
            except StopIteration:
                raise ValueError(
                    f"cache: the state is at element {index}, but the input now has only "
                    f"{len(read)} elements; restore with the pipeline and data it "
                    "was saved from") from None
        self._pending = read

    def _close_input(self) -> None:
        if self._input is not None:
            self._input.close()
            self._input = None

    def close(self):
        self._close_input()


_planner.register(CacheNode, iterator=_CacheIterator)
