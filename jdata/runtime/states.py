"""Iterator states: taken cheaply on the hot path, checked strictly on restore.

Taking. Asynchronous stages (prefetch, parallel maps) record their input's
position before every element, so that a state leaves nothing in flight
behind. That record is ``Iterator.snapshot()``: plain data for small
states, and ``Deferred`` parts for big ones (a shuffle buffer, the keys
``unique`` has seen), which capture the position in O(1) and are built into
JSON-able data only when ``get_state()`` asks (``resolve``). A ``Journal``
gives a mutable buffer that O(1) capture: a copy taken now and then plus the
operations since, replayed on demand.

Checking. A state comes back from disk: it is untrusted. ``Fields`` reads a
state dict whose keys, types and ranges an iterator names, and raises
``ValueError`` naming the op and the field for anything else, so a crafted
or foreign state never reaches an index, a loop bound or an allocation.
"""

from __future__ import annotations

from typing import Any, Callable


class Deferred:
    """A part of a snapshot built on demand: ``fn(*args)``, JSON-able data."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable, *args):
        self.fn, self.args = fn, args


def resolve(snapshot):
    """The JSON-able state of a snapshot: its ``Deferred`` parts built, the rest copied."""
    if isinstance(snapshot, dict):
        return {k: resolve(v) for k, v in snapshot.items()}
    if isinstance(snapshot, (list, tuple)):
        return [resolve(v) for v in snapshot]
    if isinstance(snapshot, Deferred):
        return resolve(snapshot.fn(*snapshot.args))
    return snapshot


# Positions and counters never reach this (a forever repeat read by index ends at
# 2**62 elements), and arithmetic on them stays within int64.
MAX_COUNT = 1 << 62
# Epochs are repetition numbers or 32-bit mixes (``jdata._random``).
MAX_EPOCH = MAX_COUNT
# The values an int64 holds (group keys; counters whose outputs are int64).
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# A journal keeps at most this many operations per item of the structure (plus
# _MIN_LOG) before it copies the structure again: O(1) amortized per operation.
_LOG_PER_ITEM = 2
_MIN_LOG = 64


class Journal:
    """Past versions of a mutable structure, each captured in O(1).

    The owner mutates ``current`` and records each change with ``log(op)``;
    ``apply(structure, op)`` must redo it on a copy. ``capture(finish)`` is a
    ``Deferred`` of ``finish(structure as it is now)``: a copy taken at the
    last rebase with the operations logged since replayed. Operations are
    never changed once logged, and a rebase starts a new log, so captures
    stay valid however far the owner moves on.
    """

    __slots__ = ("current", "_copy", "_apply", "_size", "_base", "_log")

    def __init__(self, current, copy: Callable, apply: Callable, size: Callable[[Any], int]):
        self._copy, self._apply, self._size = copy, apply, size
        self.reset(current)

    def reset(self, current) -> None:
        """Starts over from ``current`` (a restore)."""
        self.current = current
        self._base = self._copy(current)
        self._log: list = []

    def log(self, op) -> None:
        log = self._log
        log.append(op)
        if len(log) > _MIN_LOG + _LOG_PER_ITEM * self._size(self.current):
            self._base = self._copy(self.current)
            self._log = []

    def capture(self, finish: Callable) -> Deferred:
        return Deferred(_replay, self._copy, self._apply, self._base, self._log,
                        len(self._log), finish)


def _replay(copy, apply, base, log, n, finish):
    structure = copy(base)
    for i in range(n):
        apply(structure, log[i])
    return finish(structure)


class Fields:
    """Checked access to one iterator's state dict.

    ``Fields(state, op, ("input", "position"), optional=("done",))`` checks
    that ``state`` is a dict with exactly those keys (the optional ones may
    be absent); each accessor checks one field's type and range. Every
    failure is a ``ValueError`` that names ``op`` and the field.
    """

    __slots__ = ("state", "op")

    def __init__(self, state, op: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()):
        self.op = op
        if not isinstance(state, dict):
            raise invalid(op, "", f"the state is a {type(state).__name__}, not a dict")
        missing = [k for k in keys if k not in state]
        unknown = [k for k in state if k not in keys and k not in optional]
        if missing or unknown:
            found = ", ".join(map(repr, state)) or "none"
            raise invalid(op, (missing or unknown)[0],
                          f"the state has fields {found}; this op's state has "
                          f"{', '.join(map(repr, keys))}")
        self.state = state

    def __contains__(self, name: str) -> bool:
        return name in self.state

    def int(self, name: str, lo: int = 0, hi: int = MAX_COUNT) -> int:
        """An integer field in ``[lo, hi]``."""
        return check_int(self.state[name], self.op, name, lo, hi)

    def bool(self, name: str) -> bool:
        value = self.state[name]
        if not isinstance(value, bool):
            raise invalid(self.op, name, f"{_short(value)} is not true or false")
        return value

    def list(self, name: str, length: int | None = None, max_length: int | None = None) -> list:
        """A list field, of ``length`` items exactly or at most ``max_length``."""
        return check_list(self.state[name], self.op, name, length, max_length)

    def ints(self, name: str, lo: int = 0, hi: int = MAX_COUNT,
             max_length: int | None = None, distinct: bool = False) -> list[int]:
        """A list of integers, each in ``[lo, hi]``."""
        return check_ints(self.state[name], self.op, name, lo, hi, max_length, distinct)


def check_int(value, op: str, name: str, lo: int = 0, hi: int = MAX_COUNT) -> int:
    """``value`` if it is an int (not a bool) in ``[lo, hi]``, else a ``ValueError``."""
    if type(value) is not int:
        raise invalid(op, name, f"{_short(value)} is not an integer")
    if not lo <= value <= hi:
        raise invalid(op, name, f"{value} is out of range (valid: [{lo}, {hi}])")
    return value


def check_ints(value, op: str, name: str, lo: int = 0, hi: int = MAX_COUNT,
               max_length: int | None = None, distinct: bool = False) -> list[int]:
    """``value`` if it is a list of ints in ``[lo, hi]`` (each once, with ``distinct``)."""
    out = [check_int(v, op, name, lo, hi) for v in check_list(value, op, name,
                                                               max_length=max_length)]
    if distinct and len(set(out)) != len(out):
        raise invalid(op, name, "holds an index twice")
    return out


def check_list(value, op: str, name: str, length: int | None = None,
               max_length: int | None = None) -> list:
    if not isinstance(value, list):
        raise invalid(op, name, f"{_short(value)} is not a list")
    if length is not None and len(value) != length:
        raise invalid(op, name, f"has {len(value)} items; this pipeline's has {length}")
    if max_length is not None and len(value) > max_length:
        raise invalid(op, name, f"has {len(value)} items, more than the {max_length} possible")
    return value


def invalid(op: str, name: str, problem: str) -> ValueError:
    """The error for a state that this pipeline's iterator cannot have produced."""
    where = f"state field {name!r}" if name else "state"
    return ValueError(f"{op}: invalid iterator state: {where}: {problem}; restore a state "
                      "that DatasetIterator.get_state() returned for this same pipeline")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
