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

from jdata.service import _fields as f
from jdata.service._fields import MAX_UNIT as MAX_UNIT
from jdata.service._messages import Mode


@dataclasses.dataclass(frozen=True)
class _OfClient:
    """An update about one client of one job."""

    job_id: str
    client_id: str

    def __post_init__(self):
        f.ident(self, "job_id")
        f.ident(self, "client_id")


@dataclasses.dataclass(frozen=True)
class _Offsets(_OfClient):
    """Units a client gives back, each past its offset: ``((unit, offset)...)``."""

    offsets: tuple[tuple[int, int], ...]

    def __post_init__(self):
        super().__post_init__()
        f.pairs(self, "offsets", "offset")


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
        f.ident(self, "job_id")
        if self.name is not None:
            f.ident(self, "name")
        if not isinstance(self.fingerprint, str):
            f.fail(self, "fingerprint", self.fingerprint, "a str")
        f.count(self, "epoch")
        if self.mode not in tuple(Mode):
            f.fail(self, "mode", self.mode, f"one of {[m.value for m in Mode]}", ValueError)
        object.__setattr__(self, "mode", Mode(self.mode))
        for name in ("num_units", "split_elements"):
            if getattr(self, name) is not None:
                f.count(self, name)


@dataclasses.dataclass(frozen=True)
class WorkerJoined:
    """A worker is alive; it goes last in the join order."""

    worker_id: str

    def __post_init__(self):
        f.ident(self, "worker_id")


@dataclasses.dataclass(frozen=True)
class WorkerLost:
    """A worker is gone: its leases await re-issue to the same clients, its slots a place."""

    worker_id: str

    def __post_init__(self):
        f.ident(self, "worker_id")


@dataclasses.dataclass(frozen=True)
class ClientJoined(_OfClient):
    """A new consumer (``lineage``) joins a job as ``client_id`` at ``time``."""

    lineage: str
    time: float

    def __post_init__(self):
        super().__post_init__()
        f.ident(self, "lineage")
        f.finite_time(self)


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
        f.ident(self, "lineage")
        f.finite_time(self)
        f.position(self, "position")
        f.position(self, "committed", optional=True)


@dataclasses.dataclass(frozen=True)
class ClientSeen(_OfClient):
    """A client was heard from at ``time`` (``time.time()``)."""

    time: float

    def __post_init__(self):
        super().__post_init__()
        f.finite_time(self)


@dataclasses.dataclass(frozen=True)
class LeasesGranted(_OfClient):
    """``client_id`` reads each ``(unit, worker_id)`` of ``leases`` from that worker."""

    leases: tuple[tuple[int, str], ...]

    def __post_init__(self):
        super().__post_init__()
        f.pairs(self, "leases", "worker")


@dataclasses.dataclass(frozen=True)
class UnitsDone(_OfClient):
    """``client_id`` yielded each of ``units`` whole: never leased again (but a restore of
    its lineage from an earlier state, or its death before it commits, reopens them)."""

    units: tuple[int, ...]

    def __post_init__(self):
        super().__post_init__()
        f.units(self, "units", self.units)


@dataclasses.dataclass(frozen=True)
class Committed(_OfClient):
    """``client_id``'s state holds ``position``: should it die, the units it touched go
    back from there."""

    position: Position

    def __post_init__(self):
        super().__post_init__()
        f.position(self, "position")


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
        f.ident(self, "job_id")
        f.pairs(self, "placements", "worker")


@dataclasses.dataclass(frozen=True)
class RoundsScheduled:
    """A coordinated job reads its rounds from ``first_round`` on from these (slot, worker)
    pairs in turn, a run of rounds each (``_coordination``)."""

    job_id: str
    first_round: int
    placements: tuple[tuple[int, str], ...]

    def __post_init__(self):
        f.ident(self, "job_id")
        f.count(self, "first_round")
        f.pairs(self, "placements", "worker")
        workers = [worker_id for _, worker_id in self.placements]
        if not workers or len(set(workers)) != len(workers):
            f.fail(self, "placements", self.placements,
                   "a non-empty tuple that gives each worker once", ValueError)


@dataclasses.dataclass(frozen=True)
class NameEpoch:
    """The job name ran ``epoch`` (written as its job is removed): its next job runs a
    later one, also once a compacted journal holds none of that job's records."""

    name: str
    epoch: int

    def __post_init__(self):
        f.ident(self, "name")
        f.count(self, "epoch")


@dataclasses.dataclass(frozen=True)
class JobRemoved:
    """A job is forgotten (no client left, and for a named job none came back in time)."""

    job_id: str

    def __post_init__(self):
        f.ident(self, "job_id")


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
