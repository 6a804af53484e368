"""The dispatcher's state as one JSON record, and back: the journal's snapshot.

A journal that only appended would grow with every lease a service ever
granted, and a restart would replay all of it. ``journal.Journal.compact``
writes ``encode(state)`` instead of the records it covers, so the journal
holds the live state plus a short tail, whatever the service's age.

``decode`` reads a record from disk as strictly as ``_updates.decode`` reads
an update: the exact fields and types, every cross-reference (a lease's
client is a client of its job, its worker alive, a lineage index known...),
and nothing evaluated or unpickled; a record that ``encode`` of the result
would not give back is refused too. What replay derives (leases by client,
by worker, orphans; done counts; the free-unit frontier) is derived again,
not stored. A restore's reply (``Job.restored``) lives for one request and is
not kept.

>>> from jdata.service import state as st
>>> s = st.DispatcherState()
>>> for u in (st.WorkerJoined("w0"), st.JobCreated("j", "n", "fp", 0, "dynamic", 4, None),
...           st.ClientJoined("j", "c", lineage="l", time=1.0)):
...     s.apply(u)
>>> s.apply(st.grant(s, "j", "c", count=2, max_held=8))
>>> decode(encode(s)).leases_of("j", "c")
((0, 'w0'), (1, 'w0'))
"""

from __future__ import annotations

import base64
import math
import zlib

import numpy as np

from jdata.service import _units
from jdata.service._fields import MAX_UNIT
from jdata.service._job import Client, Job, Lease
from jdata.service._updates import JobCreated
from jdata.service._updates import decode as decode_update
from jdata.service._updates import encode as encode_update

_GONE = ("expired", "released", "superseded")


def encode(state) -> dict:
    """``state`` (a ``DispatcherState``) as a JSON-encodable dict."""
    return {"alive": list(state._alive), "latest": dict(state._latest),
            "jobs": [_encode_job(job) for job in state._jobs.values()]}


def decode(record):
    """The ``DispatcherState`` that ``encode`` made ``record`` from; ``ValueError`` naming
    what is wrong."""
    from jdata.service.state import DispatcherState

    _fields(record, "snapshot", {"alive", "latest", "jobs"})
    state = DispatcherState()
    for worker_id in _list(record["alive"], "alive"):
        _ident(worker_id, "alive")
        if worker_id in state._alive:
            raise ValueError(f"snapshot: worker {worker_id!r} is alive twice")
        state._alive[worker_id] = None
    latest = _dict(record["latest"], "latest")
    for name, epoch in latest.items():
        _ident(name, "latest")
        _count(epoch, f"latest[{name!r}]")
    state._latest = dict(latest)
    for job_record in _list(record["jobs"], "jobs"):
        job = _decode_job(job_record, state._alive)
        created = job.created
        if created.job_id in state._jobs:
            raise ValueError(f"snapshot: job {created.job_id!r} is there twice")
        if created.name is not None:
            if (created.name, created.epoch) in state._names:
                raise ValueError(f"snapshot: job name {created.name!r} epoch "
                                 f"{created.epoch} is there twice")
            state._names[created.name, created.epoch] = created.job_id
            if state._latest.get(created.name, -1) < created.epoch:
                raise ValueError(f"snapshot: job name {created.name!r} ran epoch "
                                 f"{created.epoch}, past its latest")
        state._jobs[created.job_id] = job
    if _canonical(encode(state)) != _canonical(record):
        raise ValueError("snapshot: the record is not one this jdata writes (it does not "
                         "encode back to itself)")
    return state


def _canonical(record: dict) -> dict:
    """``record`` with its packed arrays unpacked (zlib builds may pack them otherwise)."""
    jobs = [dict(job, status=_unpack(job["status"], "status"),
                 done_by=_unpack(job["done_by"], "done_by")) for job in record["jobs"]]
    return dict(record, jobs=jobs)


# ------------------------------------------------------------ a job


def _encode_job(job: Job) -> dict:
    units = job.units
    return {
        "created": encode_update(job.created),
        "status": _pack(bytes(units.status)),
        "done_by": _pack(units.done_by.astype("<i4").tobytes()),
        "segments": [[unit, parts] for unit, parts in units.segments.items()],
        "leases": [[unit, *lease] for unit, lease in job.leases.items()],
        "clients": [[cid, c.lineage, c.seen, [[u, o] for u, o in c.touched.items()],
                     c.pending] for cid, c in job.clients.items()],
        "lineages": list(job.lineages),
        "gone": dict(job.gone),
        "last_seen": job.last_seen, "left_at": job.left_at,
        "placements": [[slot, worker] for slot, worker in job.placements.items()],
        "schedule": [[first, [list(p) for p in placed]] for first, placed in job.schedule],
    }


_JOB_FIELDS = {"created", "status", "done_by", "segments", "leases", "clients", "lineages",
               "gone", "last_seen", "left_at", "placements", "schedule"}


def _decode_job(record, alive) -> Job:
    _fields(record, "job", _JOB_FIELDS)
    created = decode_update(record["created"])
    if type(created) is not JobCreated:
        raise ValueError(f"snapshot: a job's 'created' is a {type(created).__name__}")
    job = Job(created)
    where = f"snapshot: job {created.job_id!r}"
    for index, lineage in enumerate(_list(record["lineages"], f"{where} lineages")):
        _ident(lineage, f"{where} lineages")
        job.lineages.setdefault(lineage, index)
    if len(job.lineages) != len(record["lineages"]):
        raise ValueError(f"{where}: a lineage is there twice")
    _decode_units(job.units, record, len(job.lineages), where)
    _decode_clients(job, record["clients"], where)
    _decode_leases(job, record["leases"], alive, where)
    gone = _dict(record["gone"], f"{where} gone")
    for client_id, how in gone.items():
        if how not in _GONE or client_id in job.clients:
            raise ValueError(f"{where}: gone client {client_id!r} ({how!r})")
    job.gone = dict(gone)
    job.last_seen = _time(record["last_seen"], f"{where} last_seen", optional=True)
    job.left_at = _time(record["left_at"], f"{where} left_at", optional=True)
    for slot, worker_id in _pairs(record["placements"], f"{where} placements"):
        _placed(slot, worker_id, alive, created, where)
        job.placements[slot] = worker_id
    for entry in _list(record["schedule"], f"{where} schedule"):
        first, placed = _pair(entry, f"{where} schedule")
        _count(first, f"{where} schedule round")
        for slot, worker_id in _pairs(placed, f"{where} schedule"):
            _count(slot, f"{where} schedule slot")
            _ident(worker_id, f"{where} schedule worker")
        job.schedule.append((first, tuple(tuple(p) for p in placed)))
    return job


def _decode_units(units: _units.Units, record, lineages: int, where: str) -> None:
    status = bytearray(_unpack(record["status"], f"{where} status"))
    done_by = np.frombuffer(_unpack(record["done_by"], f"{where} done_by"), "<i4")
    size = units.count if units.count is not None else None
    if len(done_by) != len(status) or (size is not None and len(status) != size) or (
            size is None and len(status) < _units._GROW):
        raise ValueError(f"{where}: its unit arrays have {len(status)} and {len(done_by)} "
                         "units")
    if status.translate(None, bytes((_units.FREE, _units.LEASED, _units.DONE))):
        raise ValueError(f"{where}: a unit's status is not free, leased or done")
    done = np.frombuffer(bytes(status), np.uint8) == _units.DONE
    if np.any(done_by[done] < 0) or np.any(done_by[done] >= lineages) or np.any(
            done_by[~done] != _units.NOBODY):
        raise ValueError(f"{where}: done units and the lineages that did them disagree")
    units.status, units.done_by = status, done_by.astype(np.int32)
    units.done = int(done.sum())
    found = status.find(_units.FREE)
    units._frontier = len(status) if found < 0 else found  # every unit below is taken
    for entry in _list(record["segments"], f"{where} segments"):
        unit, parts = _pair(entry, f"{where} segments")
        _unit(unit, len(status), where)
        parts = _list(parts, f"{where} segments of unit {unit}")
        if not parts:
            raise ValueError(f"{where}: unit {unit} has an empty list of segments")
        for part in parts:
            if not (isinstance(part, list) and len(part) == 3 and
                    all(type(v) is int for v in part) and
                    _units.NOBODY <= part[0] < lineages and 0 <= part[1] <= part[2]):
                raise ValueError(f"{where}: unit {unit} has a segment {part!r}")
        units.segments[unit] = [list(part) for part in parts]


def _decode_clients(job: Job, records, where: str) -> None:
    for entry in _list(records, f"{where} clients"):
        if not (isinstance(entry, list) and len(entry) == 5):
            raise ValueError(f"{where}: a client is {entry!r}")
        client_id, lineage, seen, touched, pending = entry
        _ident(client_id, f"{where} client")
        if lineage not in job.lineages or job.live.get(lineage) is not None:
            raise ValueError(f"{where}: client {client_id!r} has lineage {lineage!r}")
        if client_id in job.clients:
            raise ValueError(f"{where}: client {client_id!r} is there twice")
        client = Client(lineage, _time(seen, f"{where} client seen"))
        for unit, offset in _pairs(touched, f"{where} client {client_id!r} touched"):
            _unit(unit, len(job.units.status), where)
            _count(offset, f"{where} touched offset")
            client.touched[unit] = offset
        _count(pending, f"{where} client pending")
        client.pending = pending
        job.clients[client_id] = client
        job.live[lineage] = client_id


def _decode_leases(job: Job, records, alive, where: str) -> None:
    for entry in _list(records, f"{where} leases"):
        if not (isinstance(entry, list) and len(entry) == 4):
            raise ValueError(f"{where}: a lease is {entry!r}")
        unit, client_id, worker_id, offset = entry
        _unit(unit, len(job.units.status), where)
        if job.units.status[unit] != _units.LEASED or unit in job.leases:
            raise ValueError(f"{where}: unit {unit} is leased, but its status says not")
        if client_id not in job.clients or (worker_id is not None and worker_id not in alive):
            raise ValueError(f"{where}: unit {unit}'s lease to {client_id!r} on "
                             f"{worker_id!r}")
        _count(offset, f"{where} lease offset")
        job.leases[unit] = Lease(client_id, worker_id, offset)
        job.by_client.setdefault(client_id, set()).add(unit)
        if worker_id is None:
            job.orphans.setdefault(client_id, set()).add(unit)
        else:
            job.by_worker.setdefault(worker_id, set()).add(unit)
    if len(job.leases) != job.units.status.count(_units.LEASED):
        raise ValueError(f"{where}: a unit's status says leased, but no lease has it")


def _placed(slot, worker_id, alive, created, where: str) -> None:
    _count(slot, f"{where} placement slot")
    if created.num_units is not None and slot >= created.num_units:
        raise ValueError(f"{where}: slot {slot} is out of range")
    if worker_id not in alive:
        raise ValueError(f"{where}: slot {slot} is placed on {worker_id!r}, not alive")


# ------------------------------------------------------------ checks


def _fields(record, what: str, names: set) -> None:
    if not isinstance(record, dict) or set(record) != names:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise ValueError(f"snapshot: a {what} record has fields {keys}, not {sorted(names)}")


def _list(value, what: str) -> list:
    if not isinstance(value, list):
        raise ValueError(f"{what}: {type(value).__name__}, not a list")
    return value


def _dict(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{what}: {type(value).__name__}, not a dict")
    return value


def _pair(value, what: str) -> list:
    if not (isinstance(value, list) and len(value) == 2):
        raise ValueError(f"{what}: {value!r} is not a pair")
    return value


def _pairs(value, what: str) -> list:
    return [_pair(item, what) for item in _list(value, what)]


def _ident(value, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what}: {value!r} is not a non-empty str")


def _count(value, what: str) -> None:
    if type(value) is not int or not 0 <= value < MAX_UNIT:
        raise ValueError(f"{what}: {value!r} is not an int >= 0")


def _unit(unit, size: int, where: str) -> None:
    if type(unit) is not int or not 0 <= unit < size:
        raise ValueError(f"{where}: unit {unit!r} is out of range")


def _time(value, what: str, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value):
        raise ValueError(f"{what}: {value!r} is not a finite time")
    return float(value)


def _pack(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 1)).decode("ascii")


# Units arrays are at most a few MB each (10^6 units): a record claiming more is refused
# before it is inflated.
_MAX_UNPACKED = 1 << 30


def _unpack(text, what: str) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"{what}: {type(text).__name__}, not a str")
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(base64.b64decode(text, validate=True), _MAX_UNPACKED)
    except (ValueError, zlib.error) as error:
        raise ValueError(f"{what}: not packed bytes ({error})") from error
    if inflater.unconsumed_tail or not inflater.eof:
        raise ValueError(f"{what}: more than {_MAX_UNPACKED} bytes, or cut short")
    return data
