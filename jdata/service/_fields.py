"""The checks of the dispatcher's updates' fields (``_updates``): each raises a
``TypeError`` or ``ValueError`` naming the update, the field and what it must be.

>>> import dataclasses
>>> @dataclasses.dataclass(frozen=True)
... class Grant:
...     unit: int
...     def __post_init__(self):
...         count(self, "unit")
>>> Grant(-1)
Traceback (most recent call last):
...
ValueError: Grant: unit=-1 must be an int in [0, 4611686018427387904)
"""

from __future__ import annotations

import math

from jdata.service._messages import Position

# Unit numbers and offsets stay below this (an unbounded job's units are counted too).
MAX_UNIT = 1 << 62


def fail(owner, name: str, value, what: str, error=TypeError):
    raise error(f"{type(owner).__name__}: {name}={value!r} must be {what}")


_FIELD = object()  # "the field's own value" (a part of a field is passed explicitly)


def ident(owner, name: str, value=_FIELD) -> None:
    value = getattr(owner, name) if value is _FIELD else value
    if not isinstance(value, str) or not value:
        fail(owner, name, value, "a non-empty str")


def count(owner, name: str, value=_FIELD) -> None:
    value = getattr(owner, name) if value is _FIELD else value
    if type(value) is not int:
        fail(owner, name, value, "an int >= 0")
    if not 0 <= value < MAX_UNIT:
        fail(owner, name, value, f"an int in [0, {MAX_UNIT})", ValueError)


def finite_time(owner) -> None:
    value = owner.time
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        fail(owner, "time", value, "a finite float")
    object.__setattr__(owner, "time", float(value))  # JSON may hand back an int


def units(owner, name: str, units) -> None:
    """Unit numbers, each at most once (a unit is leased, done or returned once)."""
    if not isinstance(units, tuple):
        fail(owner, name, units, "a tuple")
    # The hot path of granting and replaying: one cheap pass when all is well.
    if not all(type(u) is int for u in units) or (units and not 0 <= min(units) <= max(units)
                                                  < MAX_UNIT):
        for unit in units:
            count(owner, name, unit)
    if len(set(units)) != len(units):
        fail(owner, name, units, "a tuple that gives each unit once", ValueError)


def pairs(owner, name: str, second: str, pairs=None) -> tuple:
    """A tuple of ``(unit, x)`` pairs, each unit once; ``second`` is "worker" or "count"."""
    pairs = getattr(owner, name) if pairs is None else pairs
    if not isinstance(pairs, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 for p in pairs):
        fail(owner, name, pairs, f"a tuple of (unit, {second}) tuples")
    units(owner, f"{name} units", tuple(p[0] for p in pairs))
    for _, value in pairs:
        if second == "worker":
            ident(owner, f"{name} worker_id", value)
        else:
            count(owner, f"{name} {second}", value)
    return pairs


def triples(owner, name: str, triples) -> None:
    """``(unit, start, stop)`` parts, each unit once, ``start <= stop``."""
    if not isinstance(triples, tuple) or not all(
            isinstance(t, tuple) and len(t) == 3 for t in triples):
        fail(owner, name, triples, "a tuple of (unit, start, stop) tuples")
    units(owner, f"{name} units", tuple(t[0] for t in triples))
    for _, start, stop in triples:
        count(owner, name, start)
        count(owner, name, stop)
        if start > stop:
            fail(owner, name, (start, stop), "a part with start <= stop", ValueError)


def position(owner, name: str, optional: bool = False) -> None:
    """A ``Position`` (a dict of its fields, from JSON, becomes one)."""
    value = getattr(owner, name)
    if value is None and optional:
        return
    if isinstance(value, dict):
        if set(value) != {"done", "done_from", "partial"}:
            fail(owner, name, value, "a position's fields: done, done_from, partial",
                 ValueError)
        value = Position(*(tuples(value[k]) for k in ("done", "done_from", "partial")))
        object.__setattr__(owner, name, value)
    if not isinstance(value, Position):
        fail(owner, name, value, "a Position")
    ranges(owner, f"{name}.done", value.done)
    pairs(owner, f"{name}.done_from", "start", value.done_from)
    triples(owner, f"{name}.partial", value.partial)


def tuples(value):
    if not isinstance(value, list):
        return value
    return tuple(tuple(item) if isinstance(item, list) else item for item in value)


def ranges(owner, name: str, pairs) -> None:
    """Sorted, disjoint ``[start, stop)`` ranges."""
    if not isinstance(pairs, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 for p in pairs):
        fail(owner, name, pairs, "a tuple of (start, stop) tuples")
    last = -1
    for start, stop in pairs:
        count(owner, name, start)
        count(owner, name, stop)
        if not last <= start < stop:
            fail(owner, name, pairs, "sorted, disjoint, non-empty [start, stop) ranges",
                 ValueError)
        last = stop
