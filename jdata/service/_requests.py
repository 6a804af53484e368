"""What the dispatcher does with each client request, over its state, without Ray.

Each handler decides with the policies and applies its updates in order
through ``apply`` (the dispatcher's: apply to the state, then journal; a
test's: apply and keep a history), then answers with a message. A client
the ledger no longer counts (expired, released, superseded by a restore of
its lineage, or whose job is gone) gets its ``Standing`` and nothing changes.
"""

from __future__ import annotations

import dataclasses

from jdata.service import _admission, _policies
from jdata.service._messages import (Commit, Conflict, Grant, HeartbeatReply, LeaseReply,
                                     LeaseRequest, Register, Registered, Release, Standing)
from jdata.service._updates import (ClientReleased, ClientSeen, Committed, LeasesReturned,
                                    UnitsDone)

# A client whose consumer has not asked for an element this long hands the units it
# holds to a peer waiting for them (two iterators alternated on one thread, a trainer
# in a long evaluation): exactly, at what it yielded.
HANDOFF_IDLE_SEC = 3.0


def register(state, request: Register, apply, *, now: float, job_id: str, client_id: str,
             client_timeout: float) -> Registered:
    updates, reply = _admission.admit(state, request, now=now, job_id=job_id,
                                     client_id=client_id, client_timeout=client_timeout)
    for update in updates:
        apply(update)
    if request.resume is not None and reply.client_id is not None:
        conflicts, leased = state.ledger(reply.job_id).restored.pop(reply.client_id)
        reply = dataclasses.replace(reply, conflicts=tuple(
            Conflict(unit, where) for unit, where in conflicts), leased=tuple(leased))
    return reply


def standing(state, job_id: str, client_id: str) -> Standing:
    gone = state.standing(job_id, client_id)
    if gone is None:
        return Standing.OK
    return Standing(gone) if gone in ("expired", "superseded") else Standing.UNKNOWN


def lease(state, request: LeaseRequest, apply, *, now: float,
          exclude: frozenset = frozenset(), spread=None) -> LeaseReply:
    """Records the units reported done and those given back, then grants (not on the
    workers in ``exclude``: draining; ``spread``: see ``_policies.grant``)."""
    job_id, client_id = request.job_id, request.client_id
    where = standing(state, job_id, client_id)
    if where is not Standing.OK:
        return LeaseReply(where, workers=len(state.alive_workers()))
    apply(ClientSeen(job_id=job_id, client_id=client_id, time=now))
    _report_done(state, job_id, client_id, request.done, apply)
    leased = state.leases_of(job_id, client_id)
    held = {unit for unit, _ in leased}
    returned = tuple((u, n) for u, n in request.returned if u in held)
    if returned:
        apply(LeasesReturned(job_id=job_id, client_id=client_id, offsets=returned))
    granted = None
    if request.want > 0 and request.max_held > 0:
        granted = _policies.grant(state, job_id, client_id, request.want, request.max_held,
                                  exclude, spread)
    if granted is not None:
        apply(granted)
    job = state.ledger(job_id)
    leases = list(granted.leases if granted else ())
    if request.held is not None:  # leases whose reply it never got come again
        known = set(request.held) | {unit for unit, _ in returned}
        leases += [(unit, worker_id) for unit, worker_id in leased
                   if worker_id is not None and unit not in known]
    grants = tuple(Grant(unit, worker_id, job.leases[unit].offset)
                   for unit, worker_id in leases)
    others = sum(len(units) for c, units in job.by_client.items() if c != client_id)
    return LeaseReply(Standing.OK, grants, state.finished(job_id, client_id),
                      _policies.rebalance(state, job_id, client_id),
                      len(state.alive_workers()), others, job.units.finished())


def _report_done(state, job_id: str, client_id: str, units, apply) -> None:
    # Units the ledger no longer has leased to it (a call retried after a dispatcher
    # restart lost its reply) are passed over.
    held = {unit for unit, worker in state.leases_of(job_id, client_id)}
    done = tuple(sorted(unit for unit in set(units) if unit in held))
    if done:
        apply(UnitsDone(job_id=job_id, client_id=client_id, units=done))


def commit(state, request: Commit, apply, *, now: float) -> Standing:
    """A consumer's state was taken: its units restart from it should it die."""
    where = standing(state, request.job_id, request.client_id)
    if where is Standing.OK:
        apply(ClientSeen(job_id=request.job_id, client_id=request.client_id, time=now))
        _report_done(state, request.job_id, request.client_id, request.reported, apply)
        apply(Committed(job_id=request.job_id, client_id=request.client_id,
                        position=request.position))
    return where


def release(state, request: Release, apply) -> Standing:
    """A consumer leaves alive (closed, or at its epoch's end), keeping what it yielded."""
    where = standing(state, request.job_id, request.client_id)
    if where is Standing.OK:
        _report_done(state, request.job_id, request.client_id, request.reported, apply)
        apply(ClientReleased(job_id=request.job_id, client_id=request.client_id,
                             offsets=request.offsets))
    return where


def return_units(state, request: Release, apply) -> Standing:
    """A live, idle consumer commits its position (``request.position``) and gives its
    units back at what it yielded: it stays, and leases again when it reads again."""
    where = standing(state, request.job_id, request.client_id)
    if where is Standing.OK:
        _report_done(state, request.job_id, request.client_id, request.reported, apply)
        if request.position is not None:
            apply(Committed(job_id=request.job_id, client_id=request.client_id,
                            position=request.position))
        held = {unit for unit, _ in state.leases_of(request.job_id, request.client_id)}
        returned = tuple((u, n) for u, n in request.offsets if u in held)
        if returned:
            apply(LeasesReturned(job_id=request.job_id, client_id=request.client_id,
                                 offsets=returned))
    return where


def heartbeat(state, job_id: str, client_id: str, apply, *, now: float, idle_sec: float,
              peers_waiting: bool) -> HeartbeatReply:
    """A client lives. It hands its units off if it is idle past ``HANDOFF_IDLE_SEC``
    while another client of the job waits (``peers_waiting``), and gives back the ``off``
    slots above its share (an active client may not lease again for long: it hears it
    here)."""
    where = standing(state, job_id, client_id)
    if where is not Standing.OK:
        return HeartbeatReply(where)
    apply(ClientSeen(job_id=job_id, client_id=client_id, time=now))
    holds = bool(state.leases_of(job_id, client_id))
    return HeartbeatReply(where, holds and peers_waiting and idle_sec >= HANDOFF_IDLE_SEC,
                          _policies.rebalance(state, job_id, client_id))
