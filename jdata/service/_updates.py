"""The dispatcher's updates: the only way its state changes, and its journal's records.

Each update is a frozen dataclass that validates its own fields, so a bad one
fails where it is made, not when a restarted dispatcher replays it.
``encode`` gives a JSON-encodable dict tagged with the update's type;
``decode`` reads one back from disk, where a record may be damaged or written
by something else: it checks the tag, the exact set of fields and every
field's type, and raises ``ValueError`` naming the field. It never evaluates,
imports or unpickles anything.

>>> from jdata.service.state import LeasesGranted, decode, encode
>>> update = LeasesGranted(job_id="j", client_id="c", leases=((0, "w0"), (1, "w1")))
>>> encode(update)["leases"]
[[0, 'w0'], [1, 'w1']]
>>> decode(encode(update)) == update
True
"""

from __future__ import annotations

import dataclasses
import math

from jdata.service._messages import Mode, Position

# Unit numbers and offsets stay below this (an unbounded job's units are counted too).
MAX_UNIT = 1 << 62


def _fail(owner, name: str, value, what: str, error=TypeError):
    raise error(f"{type(owner).__name__}: {name}={value!r} must be {what}")


_FIELD = object()  # "the field's own value" (a part of a field is passed explicitly)


def _id(owner, name: str, value=_FIELD) -> None:
    value = getattr(owner, name) if value is _FIELD else value
    if not isinstance(value, str) or not value:
        _fail(owner, name, value, "a non-empty str")


def _count(owner, name: str, value=_FIELD) -> None:
    value = getattr(owner, name) if value is _FIELD else value
    if type(value) is not int:
        _fail(owner, name, value, "an int >= 0")
    if not 0 <= value < MAX_UNIT:
        _fail(owner, name, value, f"an int in [0, {MAX_UNIT})", ValueError)


def _time(owner) -> None:
    value = owner.time
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(owner, "time", value, "a finite float")
    object.__setattr__(owner, "time", float(value))  # JSON may hand back an int


def _units(owner, name: str, units) -> None:
    """Unit numbers, each at most once (a unit is leased, done or returned once)."""
    if not isinstance(units, tuple):
        _fail(owner, name, units, "a tuple")
    # The hot path of granting and replaying: one cheap pass when all is well.
    if not all(type(u) is int for u in units) or (units and not 0 <= min(units) <= max(units)
                                                  < MAX_UNIT):
        for unit in units:
            _count(owner, name, unit)
    if len(set(units)) != len(units):
        _fail(owner, name, units, "a tuple that gives each unit once", ValueError)


def _pairs(owner, name: str, second: str, pairs=None) -> tuple:
    """A tuple of ``(unit, x)`` pairs, each unit once; ``second`` is "worker" or "count"."""
    pairs = getattr(owner, name) if pairs is None else pairs
    if not isinstance(pairs, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 for p in pairs):
        _fail(owner, name, pairs, f"a tuple of (unit, {second}) tuples")
    _units(owner, f"{name} units", tuple(p[0] for p in pairs))
    for _, value in pairs:
        if second == "worker":
            _id(owner, f"{name} worker_id", value)
        else:
            _count(owner, f"{name} {second}", value)
    return pairs


def _triples(owner, name: str, triples) -> None:
    """``(unit, start, stop)`` parts, each unit once, ``start <= stop``."""
    if not isinstance(triples, tuple) or not all(
            isinstance(t, tuple) and len(t) == 3 for t in triples):
        _fail(owner, name, triples, "a tuple of (unit, start, stop) tuples")
    _units(owner, f"{name} units", tuple(t[0] for t in triples))
    for _, start, stop in triples:
        _count(owner, name, start)
        _count(owner, name, stop)
        if start > stop:
            _fail(owner, name, (start, stop), "a part with start <= stop", ValueError)


def _position(owner, name: str, optional: bool = False) -> None:
    """A ``Position`` (a dict of its fields, from JSON, becomes one)."""
    value = getattr(owner, name)
    if value is None and optional:
        return
    if isinstance(value, dict):
        if set(value) != {"done", "done_from", "partial"}:
            _fail(owner, name, value, "a position's fields: done, done_from, partial",
                  ValueError)
        value = Position(*(_tuples(value[k]) for k in ("done", "done_from", "partial")))
        object.__setattr__(owner, name, value)
    if not isinstance(value, Position):
        _fail(owner, name, value, "a Position")
    _ranges(owner, f"{name}.done", value.done)
    _pairs(owner, f"{name}.done_from", "start", value.done_from)
    _triples(owner, f"{name}.partial", value.partial)


def _tuples(value):
    if not isinstance(value, list):
        return value
    return tuple(tuple(item) if isinstance(item, list) else item for item in value)


def _ranges(owner, name: str, pairs) -> None:
    """Sorted, disjoint ``[start, stop)`` ranges."""
    if not isinstance(pairs, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 for p in pairs):
        _fail(owner, name, pairs, "a tuple of (start, stop) tuples")
    last = -1
    for start, stop in pairs:
        _count(owner, name, start)
        _count(owner, name, stop)
        if not last <= start < stop:
            _fail(owner, name, pairs, "sorted, disjoint, non-empty [start, stop) ranges",
                  ValueError)
        last = stop


@dataclasses.dataclass(frozen=True)
class _OfClient:
    """An update about one client of one job."""

    job_id: str
    client_id: str

    def __post_init__(self):
        _id(self, "job_id")
        _id(self, "client_id")


@dataclasses.dataclass(frozen=True)
class _Offsets(_OfClient):
    """Units a client gives back, each past its offset: ``((unit, offset)...)``."""

    offsets: tuple[tuple[int, int], ...]

    def __post_init__(self):
        super().__post_init__()
        _pairs(self, "offsets", "offset")


@dataclasses.dataclass(frozen=True)
class JobCreated:
    """A job: one epoch of one pipeline. Leasing modes cut it in ``num_units`` units
    (``None``: unbounded); shared and coordinated jobs place ``num_units`` slots."""

    job_id: str
    name: str | None
    fingerprint: str
    epoch: int
    mode: str
    num_units: int | None
    split_elements: int | None

    def __post_init__(self):
        _id(self, "job_id")
        if self.name is not None:
            _id(self, "name")
        if not isinstance(self.fingerprint, str):
            _fail(self, "fingerprint", self.fingerprint, "a str")
        _count(self, "epoch")
        if self.mode not in tuple(Mode):
            _fail(self, "mode", self.mode, f"one of {[m.value for m in Mode]}", ValueError)
        object.__setattr__(self, "mode", Mode(self.mode))
        for name in ("num_units", "split_elements"):
            if getattr(self, name) is not None:
                _count(self, name)


@dataclasses.dataclass(frozen=True)
class WorkerJoined:
    """A worker is alive; it goes last in the join order."""

    worker_id: str

    def __post_init__(self):
        _id(self, "worker_id")


@dataclasses.dataclass(frozen=True)
class WorkerLost:
    """A worker is gone: its leases await re-issue to the same clients, its slots a place."""

    worker_id: str

    def __post_init__(self):
        _id(self, "worker_id")


@dataclasses.dataclass(frozen=True)
class ClientJoined(_OfClient):
    """A new consumer (``lineage``) joins a job as ``client_id`` at ``time``."""

    lineage: str
    time: float

    def __post_init__(self):
        super().__post_init__()
        _id(self, "lineage")
        _time(self)


@dataclasses.dataclass(frozen=True)
class ClientRestored(_OfClient):
    """``lineage`` comes back as ``client_id`` at ``position``: its earlier incarnation
    leaves as if expired, and what it keeps of each unit becomes what the position says
    where the others allow (``Job.restore``). ``committed``: where a paused client that
    resumes had committed last (its death rolls back there); None for a restore, whose
    position is what its checkpoint holds."""

    lineage: str
    time: float
    position: Position
    committed: Position | None = None

    def __post_init__(self):
        super().__post_init__()
        _id(self, "lineage")
        _time(self)
        _position(self, "position")
        _position(self, "committed", optional=True)


@dataclasses.dataclass(frozen=True)
class ClientSeen(_OfClient):
    """A client was heard from at ``time`` (``time.time()``)."""

    time: float

    def __post_init__(self):
        super().__post_init__()
        _time(self)


@dataclasses.dataclass(frozen=True)
class LeasesGranted(_OfClient):
    """``client_id`` reads each ``(unit, worker_id)`` of ``leases`` from that worker."""

    leases: tuple[tuple[int, str], ...]

    def __post_init__(self):
        super().__post_init__()
        _pairs(self, "leases", "worker")


@dataclasses.dataclass(frozen=True)
class UnitsDone(_OfClient):
    """``client_id`` yielded each of ``units`` whole: never leased again (but a restore of
    its lineage from an earlier state, or its death before it commits, reopens them)."""

    units: tuple[int, ...]

    def __post_init__(self):
        super().__post_init__()
        _units(self, "units", self.units)


@dataclasses.dataclass(frozen=True)
class Committed(_OfClient):
    """``client_id``'s state holds ``position``: should it die, the units it touched go
    back from there."""

    position: Position

    def __post_init__(self):
        super().__post_init__()
        _position(self, "position")


@dataclasses.dataclass(frozen=True)
class ClientReleased(_Offsets):
    """A client left, keeping all it yielded: each unit it holds goes back past
    ``offsets`` (its own offset if not named)."""


@dataclasses.dataclass(frozen=True)
class ClientExpired(_OfClient):
    """A client fell silent past its timeout (killed, or paused): what it touched since
    its last commit goes back from there."""


@dataclasses.dataclass(frozen=True)
class LeasesReturned(_Offsets):
    """A live client gives units back past ``offsets`` (another client has none, or it
    is idle while another waits)."""


@dataclasses.dataclass(frozen=True)
class SlotsPlaced:
    """A shared or coordinated job's slots go to these workers."""

    job_id: str
    placements: tuple[tuple[int, str], ...]

    def __post_init__(self):
        _id(self, "job_id")
        _pairs(self, "placements", "worker")


@dataclasses.dataclass(frozen=True)
class RoundsScheduled:
    """A coordinated job reads its rounds from ``first_round`` on from these (slot, worker)
    pairs in turn, a run of rounds each (``_coordination``)."""

    job_id: str
    first_round: int
    placements: tuple[tuple[int, str], ...]

    def __post_init__(self):
        _id(self, "job_id")
        _count(self, "first_round")
        _pairs(self, "placements", "worker")
        workers = [worker_id for _, worker_id in self.placements]
        if not workers or len(set(workers)) != len(workers):
            _fail(self, "placements", self.placements,
                  "a non-empty tuple that gives each worker once", ValueError)


@dataclasses.dataclass(frozen=True)
class NameEpoch:
    """The job name ran ``epoch`` (written as its job is removed): its next job runs a
    later one, also once a compacted journal holds none of that job's records."""

    name: str
    epoch: int

    def __post_init__(self):
        _id(self, "name")
        _count(self, "epoch")


@dataclasses.dataclass(frozen=True)
class JobRemoved:
    """A job is forgotten (no client left, and for a named job none came back in time)."""

    job_id: str

    def __post_init__(self):
        _id(self, "job_id")


UPDATES = (JobCreated, WorkerJoined, WorkerLost, ClientJoined, ClientRestored, ClientSeen,
           LeasesGranted, UnitsDone, Committed, ClientReleased, ClientExpired,
           LeasesReturned, SlotsPlaced, RoundsScheduled, NameEpoch, JobRemoved)
_BY_NAME = {cls.__name__: cls for cls in UPDATES}
# Fields that are tuples of pairs (JSON: lists of lists), and of ints.
_PAIRS = frozenset({"leases", "offsets", "placements"})
_POSITIONS = frozenset({"position", "committed"})
_INTS = frozenset({"units"})


def encode(update) -> dict:
    """``update`` as a JSON-encodable dict: its fields plus ``"type"``, its class name."""
    if type(update) not in UPDATES:
        raise TypeError(f"encode: {update!r} is not a dispatcher update; use one of "
                        f"{sorted(_BY_NAME)}")
    record = {"type": type(update).__name__}
    for field in dataclasses.fields(update):
        value = getattr(update, field.name)
        if field.name in _PAIRS:
            value = [list(pair) for pair in value]
        elif field.name in _POSITIONS and value is not None:
            value = {k: [list(item) for item in getattr(value, k)]
                     for k in ("done", "done_from", "partial")}
        elif field.name in _INTS:
            value = list(value)
        elif isinstance(value, Mode):
            value = value.value
        record[field.name] = value
    return record


def decode(record) -> object:
    """The update that ``encode`` made ``record`` from; ``ValueError`` naming what is wrong."""
    if not isinstance(record, dict):
        raise ValueError(f"decode: a record is a dict, not {type(record).__name__}")
    cls = _BY_NAME.get(record.get("type")) if isinstance(record.get("type"), str) else None
    if cls is None:
        raise ValueError(f"decode: field 'type'={record.get('type')!r} is not one of "
                         f"{sorted(_BY_NAME)}")
    names = {field.name for field in dataclasses.fields(cls)}
    for name in sorted(names - record.keys()):
        raise ValueError(f"decode: {cls.__name__} record lacks field {name!r}")
    for name in sorted(record.keys() - names - {"type"}):
        raise ValueError(f"decode: {cls.__name__} record has an unknown field {name!r}")
    fields = {}
    for name in names:
        value = record[name]
        if name in _PAIRS and isinstance(value, list):
            value = tuple(tuple(p) if isinstance(p, list) else p for p in value)
        elif name in _INTS and isinstance(value, list):
            value = tuple(value)
        fields[name] = value
    try:
        return cls(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"decode: {error}") from error
