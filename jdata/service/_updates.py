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

MODES = ("off", "dynamic", "static")


def _id(owner, name: str) -> None:
    value = getattr(owner, name)
    if not isinstance(value, str) or not value:
        raise TypeError(f"{type(owner).__name__}: {name}={value!r} must be a non-empty str")


def _count(owner, name: str, value=None) -> None:
    value = getattr(owner, name) if value is None else value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{type(owner).__name__}: {name}={value!r} must be an int >= 0")
    if value < 0:
        raise ValueError(f"{type(owner).__name__}: {name}={value!r} must be >= 0")


def _splits(owner, name: str, splits) -> None:
    """Split numbers: ints >= 0, each at most once (a split is leased or done once)."""
    if not isinstance(splits, tuple):
        raise TypeError(f"{type(owner).__name__}: {name}={splits!r} must be a tuple")
    # The hot path of granting and replaying: one cheap pass when all is well.
    if not all(type(split) is int for split in splits) or (splits and min(splits) < 0):
        for split in splits:
            _count(owner, name, split)
    if len(set(splits)) != len(splits):
        raise ValueError(f"{type(owner).__name__}: {name}={splits!r} repeats a split; "
                         "give each split once")


@dataclasses.dataclass(frozen=True)
class JobCreated:
    """A job: one epoch of one pipeline, split ``num_splits`` ways (0 when ``mode="off"``)."""

    job_id: str
    name: str | None
    fingerprint: str
    epoch: int
    num_splits: int
    mode: str

    def __post_init__(self):
        _id(self, "job_id")
        if self.name is not None:
            _id(self, "name")
        if not isinstance(self.fingerprint, str):
            raise TypeError(f"JobCreated: fingerprint={self.fingerprint!r} must be a str")
        _count(self, "epoch")
        _count(self, "num_splits")
        if self.mode not in MODES:
            raise ValueError(f"JobCreated: mode={self.mode!r} must be one of {MODES}")
        if self.mode == "off" and self.num_splits:
            raise ValueError(f"JobCreated: mode='off' leases no splits, so num_splits="
                             f"{self.num_splits} must be 0")


@dataclasses.dataclass(frozen=True)
class WorkerJoined:
    """A worker is alive; it goes last in the join order (also when it comes back)."""

    worker_id: str

    def __post_init__(self):
        _id(self, "worker_id")


@dataclasses.dataclass(frozen=True)
class WorkerLost:
    """A worker is gone: its unfinished leases await re-issue to the same clients."""

    worker_id: str

    def __post_init__(self):
        _id(self, "worker_id")


@dataclasses.dataclass(frozen=True)
class LeasesGranted:
    """``client_id`` reads each ``(split, worker_id)`` of ``leases`` from that worker."""

    job_id: str
    client_id: str
    leases: tuple[tuple[int, str], ...]

    def __post_init__(self):
        _id(self, "job_id")
        _id(self, "client_id")
        if not isinstance(self.leases, tuple) or not all(
                isinstance(lease, tuple) and len(lease) == 2 for lease in self.leases):
            raise TypeError(f"LeasesGranted: leases={self.leases!r} must be a tuple of "
                            "(split, worker_id) tuples")
        _splits(self, "leases splits", tuple(split for split, _ in self.leases))
        for _, worker_id in self.leases:
            if not isinstance(worker_id, str) or not worker_id:
                raise TypeError(f"LeasesGranted: leases worker_id={worker_id!r} must be a "
                                "non-empty str")


@dataclasses.dataclass(frozen=True)
class SplitsDone:
    """``client_id`` received each of ``splits`` entirely: they are never leased again."""

    job_id: str
    client_id: str
    splits: tuple[int, ...]

    def __post_init__(self):
        _id(self, "job_id")
        _id(self, "client_id")
        _splits(self, "splits", self.splits)


@dataclasses.dataclass(frozen=True)
class ClientSeen:
    """A client of a job (new, or heartbeating) was heard from at ``time`` (``time.time()``)."""

    job_id: str
    client_id: str
    time: float

    def __post_init__(self):
        _id(self, "job_id")
        _id(self, "client_id")
        if (isinstance(self.time, bool) or not isinstance(self.time, (int, float))
                or not math.isfinite(self.time)):
            raise TypeError(f"ClientSeen: time={self.time!r} must be a finite float")
        object.__setattr__(self, "time", float(self.time))  # JSON may hand back an int


@dataclasses.dataclass(frozen=True)
class ClientGone:
    """A client left or timed out: its unfinished leases go back to the job's pool."""

    job_id: str
    client_id: str

    def __post_init__(self):
        _id(self, "job_id")
        _id(self, "client_id")


@dataclasses.dataclass(frozen=True)
class JobRemoved:
    """A job is forgotten (finished, or without clients for the timeout)."""

    job_id: str

    def __post_init__(self):
        _id(self, "job_id")


UPDATES = (JobCreated, WorkerJoined, WorkerLost, LeasesGranted, SplitsDone, ClientSeen,
           ClientGone, JobRemoved)
_BY_NAME = {cls.__name__: cls for cls in UPDATES}


def encode(update) -> dict:
    """``update`` as a JSON-encodable dict: its fields plus ``"type"``, its class name."""
    if type(update) not in UPDATES:
        raise TypeError(f"encode: {update!r} is not a dispatcher update; use one of "
                        f"{sorted(_BY_NAME)}")
    record = {"type": type(update).__name__}
    for field in dataclasses.fields(update):
        value = getattr(update, field.name)
        if field.name == "leases":
            value = [[split, worker_id] for split, worker_id in value]
        elif isinstance(value, tuple):
            value = list(value)
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
    fields = {name: record[name] for name in names}
    if cls is LeasesGranted and isinstance(fields["leases"], list):
        fields["leases"] = tuple(tuple(lease) if isinstance(lease, list) else lease
                                 for lease in fields["leases"])
    elif cls is SplitsDone and isinstance(fields["splits"], list):
        fields["splits"] = tuple(fields["splits"])
    try:
        return cls(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"decode: {error}") from error
