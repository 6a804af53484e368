"""The physical iterator and reader protocols.

Every logical node is executed by an ``Iterator`` (sequential access with
``snapshot``/``get_state``/``set_state``). Nodes over random-access inputs can also be
served by a ``Reader`` (element ``i`` on demand); iterating a reader is an
``IndexIterator`` whose whole state is one index.

Invariants every iterator keeps, so that parallel variants can slot in and
``ignore_errors`` works:

- ``get_state()`` returns JSON-able data whose shape never changes;
  ``set_state(s)`` on any iterator of the same node resumes exactly, and
  raises ``ValueError`` naming the op and field for any state this node's
  iterators cannot have returned (``jdata.runtime.states.Fields``).
- ``snapshot()`` is ``get_state()`` made cheap for the hot path: asynchronous
  stages take one per element, and only the ones ``get_state()`` asks for
  are resolved into JSON-able data (``jdata.runtime.states.resolve``).
- An iterator is created for one ``epoch`` (see ``jdata._random``): random
  choices depend only on (key, op, epoch, position).
- When a UDF raises, the iterator has already moved past the element, so the
  next call continues with the following one.

Per-element Python calls dominate the cost of cheap pipelines, so both
protocols have an optional block form: ``Reader.read_block(lo, hi)`` (through
``read_block``) and ``Iterator.next_many(n)``, each one tight loop per block
with the same elements, errors and states as the element-by-element calls.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Protocol

from jdata.runtime import states
from jdata.runtime.stats import OpStats, element_bytes


class Iterator:
    """Base class of physical iterators."""

    def __iter__(self):
        return self

    def __next__(self):
        raise NotImplementedError

    def next_many(self, n: int) -> list:
        """Up to ``n`` next elements as a new list; ``[]`` only at the end.

        A shorter list does not mean the end. If an element fails, its error
        may be raised at once, the elements pulled before it in this call
        lost, as for a caller of ``next`` that drops what it pulled (``batch``
        does); the iterator is then past the failing element, as ``next``
        leaves it. Consumers that must not lose elements call ``next``.
        """
        return list(islice(self, n))

    def snapshot(self) -> dict[str, Any]:
        """The position, cheap to take: plain data, with ``Deferred`` parts for big states.

        It must not change when the iterator moves on (build new containers,
        capture buffers through a ``states.Journal``).
        """
        raise NotImplementedError

    def get_state(self) -> dict[str, Any]:
        """The position as JSON-able data."""
        return states.resolve(self.snapshot())

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to a position ``get_state`` returned; checks it first (untrusted input)."""
        raise NotImplementedError

    def close(self) -> None:
        """Releases resources held by this iterator and its children."""


class Tunable(Iterator):
    """An asynchronous iterator with statistics and knobs the autotuner may turn."""

    stats: OpStats

    def set_parallelism(self, parallelism: int) -> None:
        """Changes how many workers compute at once (no-op where fixed)."""

    def set_buffer_size(self, buffer_size: int) -> None:
        """Changes how many elements are prepared ahead (no-op where fixed)."""


class Reader(Protocol):
    """Random access to a node's elements in one epoch.

    A reader may also define ``read_block(lo, hi)``, a faster form of
    ``read_block(reader, lo, hi)`` below with the same result.
    """

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


def read_block(reader: Reader, lo: int, hi: int) -> tuple[list, Exception | None]:
    """Elements ``lo .. hi-1`` of ``reader``, up to the first that raises, and that error.

    Returns ``(elements, None)`` when all of them were read, else the
    elements before the failing one (index ``lo + len(elements)``) and its
    exception, which the caller raises when it reaches that index.
    """
    method = getattr(reader, "read_block", None)
    return read_each(reader, lo, hi) if method is None else method(lo, hi)


def read_each(reader: Reader, lo: int, hi: int) -> tuple[list, Exception | None]:
    """``read_block`` by ``reader[i]`` for each index."""
    elements: list = []
    try:
        elements.extend(map(reader.__getitem__, range(lo, hi)))  # keeps what it read on error
        for i in range(lo + len(elements), hi):  # map() ends quietly at a StopIteration
            elements.append(reader[i])
    except Exception as e:
        return elements, e
    return elements, None


# Elements an IndexIterator reads ahead through its reader's read_block: the first
# block, the largest, and the bytes a block may hold before it stops growing.
_MIN_BLOCK = 8
_MAX_BLOCK = 1024
_MAX_BLOCK_BYTES = 8 << 20


class IndexIterator(Iterator):
    """Iterates a reader in index order; its state is the next index.

    A reader whose ``prefers_blocks`` is true (a file source, and maps, takes
    and skips over one) is read a block at a time through ``read_block`` (8
    elements, then twice as many each time up to 1024 or 8 MB), so a file's
    batched reads serve plain iteration too; UDFs above it then run up to a
    block ahead of the consumer. Other readers are read an element at a
    time. The buffer is keyed by index: moving ``index`` (a restore) needs no
    flush.
    """

    def __init__(self, reader: Reader, op: str = "source"):
        self.reader = reader
        self.op = op  # the node the reader serves, for errors in restored states
        self.index = 0
        self._len = len(reader)
        self._read_block = (getattr(reader, "read_block", None)
                            if getattr(reader, "prefers_blocks", False) else None)
        self._start, self._buffer = 0, []
        self._error_at, self._error = -1, None  # the failing index after the buffer
        self._block = _MIN_BLOCK

    def __next__(self):
        i = self.index
        if i >= self._len:
            raise StopIteration
        self.index = i + 1  # before reading, so a failing element is skipped on retry
        offset = i - self._start
        if 0 <= offset < len(self._buffer):
            return self._buffer[offset]
        try:
            return self._read(i)
        except OSError:
            # The environment's fault (a file gone, a network error), not the
            # element's: nothing is consumed, so a retry or a restore reads it again.
            self.index = i
            raise

    def next_many(self, n: int) -> list:
        """Up to ``n`` elements through the reader's ``read_block`` (one tight loop).

        Loses nothing: the elements before a failing one are returned, and the
        next call raises its error (as ``next`` would, past it; an ``OSError``
        leaves the index on it, as ``next`` does).
        """
        i = self.index
        if i >= self._len or n <= 0:
            return []
        offset = i - self._start
        if 0 <= offset < len(self._buffer):
            out = self._buffer[offset:offset + n]
            self.index = i + len(out)
            return out
        if self._read_block is not None or i == self._error_at:
            return [next(self)]  # the block reader's buffer, or its stored error
        elements, error = read_block(self.reader, i, min(self._len, i + n))
        if not elements and error is not None:
            if not isinstance(error, OSError):
                self.index = i + 1
            raise error
        self.index = i + len(elements)
        return elements

    def _read(self, i: int):
        if self._read_block is None:
            return self.reader[i]
        if i != self._error_at:
            self._fill(i)
            if self._buffer:
                return self._buffer[0]
            if i != self._error_at:  # a reader that read nothing and said nothing
                return self.reader[i]
        error, self._error_at, self._error = self._error, -1, None
        raise error

    def _fill(self, lo: int) -> None:
        hi = min(self._len, lo + self._block)
        elements, error = self._read_block(lo, hi)
        self._start, self._buffer = lo, elements
        self._error_at, self._error = (lo + len(elements), error) if error else (-1, None)
        if elements and self._block < _MAX_BLOCK and (
                element_bytes(elements[0]) * self._block < _MAX_BLOCK_BYTES):
            self._block *= 2

    def snapshot(self):
        return {"index": self.index}

    def set_state(self, state):
        self.index = states.Fields(state, self.op, ("index",)).int("index", 0, self._len)

    def close(self):
        # Readers of file sources hold open files, closed when the last reader of the
        # source is released (jdata.io._open_files): this one lets go of its reader.
        self.reader = self._read_block = None
        self._len, self._buffer = 0, []


class UnaryIterator(Iterator):
    """An iterator over one input whose state is the input's plus integer counters.

    Most ops over one input (map, filter, take, shard...) keep nothing else.
    Subclasses name their counters in ``COUNTERS``; each is the attribute
    ``_<name>`` (starting at 0, never negative) and the state key ``<name>``.
    ``OP`` names the op in errors.
    """

    COUNTERS: tuple[str, ...] = ()
    OP = "op"

    def __init__(self, input_iterator: Iterator):
        self._input = input_iterator
        for name in self.COUNTERS:
            setattr(self, f"_{name}", 0)

    def snapshot(self):
        state = {"input": self._input.snapshot()}
        for name in self.COUNTERS:
            state[name] = getattr(self, f"_{name}")
        return state

    def set_state(self, state):
        fields = states.Fields(state, self.OP, ("input", *self.COUNTERS))
        # All checked before any is set.
        counters = [fields.int(name, 0, self._counter_limit(name)) for name in self.COUNTERS]
        self._input.set_state(state["input"])
        for name, value in zip(self.COUNTERS, counters):
            setattr(self, f"_{name}", value)

    def _counter_limit(self, name: str) -> int:
        """The largest value of a counter in a valid state."""
        return states.MAX_COUNT

    def close(self):
        self._input.close()
