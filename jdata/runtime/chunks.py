"""Elements handed between threads in lists: one handoff per chunk, not per element.

``Chunks`` (on a producer thread) pulls up to ``size`` elements at a time
from its input; ``Unchunk`` (on the consumer's thread) hands them out one by
one. A prefetch thread between them then takes its locks once per chunk.
Both keep exact state: ``Chunks`` as the input's state at the start of a
chunk plus the elements pulled since, ``Unchunk`` as the state before its
current chunk plus its offset in it; a restore pulls and drops that many
elements again.
"""

from __future__ import annotations

from jdata.runtime import states
from jdata.runtime.iterator import Iterator


class Chunks(Iterator):
    """Lists of up to ``size`` elements of ``inner``.

    An element that raises ends its chunk: the elements before it are
    returned and the error is raised by the next call, so errors arrive in
    order and the elements after it still come.
    """

    def __init__(self, inner: Iterator, size: int, op: str = "interleave"):
        self._inner, self._size, self._op = inner, size, op
        self._base = None  # the inner's state where skipping starts (None: its current state)
        self._skip = 0  # inner elements pulled since ``_base``, up to the current point
        self._error: BaseException | None = None

    def __next__(self) -> list:
        if self._error is not None:
            error, self._error = self._error, None
            self._skip += 1  # the inner is past the failing element already
            raise error
        self._base, self._skip = self._inner.snapshot(), 0
        items: list = []
        try:
            while len(items) < self._size:
                items.append(next(self._inner))
        except StopIteration:
            if not items:
                raise
        except Exception as e:
            if not items:
                self._skip = 1
                raise
            self._error = e
        self._skip = len(items)
        return items

    def snapshot(self):
        base = self._inner.snapshot() if self._base is None else self._base
        return {"base": base, "skip": self._skip}

    def set_state(self, state):
        # At most a chunk and the error that ended it were pulled since the base.
        skip = states.Fields(state, self._op, ("base", "skip")).int("skip", 0, self._size + 1)
        self._inner.set_state(state["base"])
        self._base, self._skip, self._error = state["base"], skip, None
        for _ in range(self._skip):
            try:
                next(self._inner)
            except StopIteration:
                break
            except Exception:  # it failed here before too, and was counted
                pass

    def close(self):
        self._inner.close()


class Unchunk(Iterator):
    """The elements of the lists ``chunks`` yields, one at a time."""

    def __init__(self, chunks: Iterator, op: str = "interleave"):
        self._chunks, self._op = chunks, op
        self._items: list = []
        self._offset = 0
        self._before = None  # the chunks' state before ``_items``

    def __next__(self):
        offset = self._offset
        if offset < len(self._items):
            self._offset = offset + 1
            return self._items[offset]
        self._items, self._offset = [], 0
        before = self._chunks.snapshot()
        items = next(self._chunks)
        self._before, self._items, self._offset = before, items, 1
        return items[0]

    def snapshot(self):
        if self._offset < len(self._items):
            return {"chunks": self._before, "offset": self._offset}
        return {"chunks": self._chunks.snapshot(), "offset": 0}

    def set_state(self, state):
        offset = states.Fields(state, self._op, ("chunks", "offset")).int("offset")
        self._chunks.set_state(state["chunks"])
        self._items, self._offset = [], 0
        if offset:
            before = self._chunks.snapshot()
            items = next(self._chunks, [])
            if offset >= len(items):  # a state inside a chunk points before its end
                raise states.invalid(self._op, "offset",
                                     f"{offset} is past the chunk's {len(items)} elements")
            self._before, self._items, self._offset = before, items, offset

    def close(self):
        self._chunks.close()
