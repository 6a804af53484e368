"""The dispatcher's policies: which leases to grant, what to give back, whom to drop.

They read a ``DispatcherState`` through its queries and return updates
without applying them: the dispatcher journals and applies what they return,
and a test can check them on any state without Ray. They are deterministic
(ties go by unit number, then join order), so two dispatchers in the same
state decide the same.
"""

from __future__ import annotations

import heapq
import math

from jdata.service._messages import Mode
from jdata.service._updates import (ClientExpired, JobRemoved, LeasesGranted, NameEpoch,
                                    SlotsPlaced)


def _positive(what: str, name: str, value, kind=int) -> None:
    types = (int, float) if kind is float else int
    if isinstance(value, bool) or not isinstance(value, types) or not (
            value > 0 and math.isfinite(value)):
        raise ValueError(f"{what}: {name}={value!r} must be a positive {kind.__name__}")


def grant(state, job_id: str, client_id: str, count: int, max_held: int,
          exclude: frozenset = frozenset(), spread=None) -> LeasesGranted | None:
    """Up to ``count`` leases for a client of a job, or ``None`` when there is none to give.

    First the client's orphaned units (their worker was lost: it may hold them
    already, so they go back to it, lowest first), then the lowest free units
    while the client holds fewer than ``max_held``. ``off`` jobs hold at most
    their share of slots (slots over live clients, rounded up), so a client that
    comes later gets some. ``static`` gives split ``s`` to ``alive[s % W]``;
    the others each unit to the alive worker with the fewest leases across jobs
    (ties: the fewest units granted so far by ``spread``, the dispatcher's count
    per worker, a hint it keeps in memory; then join order), so small jobs spread
    over the workers. Workers in ``exclude`` (draining before they are removed)
    get no new unit; an orphan goes to another worker.
    """
    _positive("grant", "count", count)
    _positive("grant", "max_held", max_held)
    job = state.ledger(job_id)
    mode = job.created.mode
    job.check_client(client_id)
    alive = [w for w in state.alive_workers() if w not in exclude]
    if not mode.leases or not alive:
        return None
    if mode is Mode.OFF:
        max_held = min(max_held, _share(job))
    held = state.leases_of(job_id, client_id)
    units = [unit for unit, worker_id in held if worker_id is None][:count]
    room = min(count - len(units), max_held - len(held))
    if room > 0:
        units += state.free_units(job_id, room)
    if not units:
        return None
    if mode is Mode.STATIC:
        workers = [alive[unit % len(alive)] for unit in units]
    else:
        workers = _least_loaded(state, alive, len(units), spread)
    return LeasesGranted(job_id=job_id, client_id=client_id, leases=tuple(zip(units, workers)))


def _share(job) -> int:
    """An ``off`` job's slots per live client, rounded up."""
    return -(-job.created.num_units // max(1, len(job.clients)))


def _least_loaded(state, alive: list[str], count: int, spread=None) -> list[str]:
    """``count`` picks, each of the worker with the fewest leases so far across jobs."""
    loads, spread = state.worker_loads(), spread or {}
    heap = [(loads[w], spread.get(w, 0), order, w) for order, w in enumerate(alive)]
    heapq.heapify(heap)
    picks = []
    for _ in range(count):
        load, granted, order, worker_id = heap[0]
        picks.append(worker_id)
        heapq.heapreplace(heap, (load + 1, granted + 1, order, worker_id))
    return picks


def rebalance(state, job_id: str, client_id: str) -> tuple[int, ...]:
    """The slots an ``off`` job's client should give back: those above its share when no
    slot is free (then another live client holds fewer than its share), highest first."""
    job = state.ledger(job_id)
    if job.created.mode is not Mode.OFF or client_id not in job.clients:
        return ()
    share = _share(job)
    held = sorted(job.by_client.get(client_id, ()))
    if len(held) <= share or state.free_units(job_id, 1):
        return ()
    return tuple(held[share:][::-1])


def place(state, job_id: str, exclude: frozenset = frozenset(),
          spread=None) -> SlotsPlaced | None:
    """Places a shared or coordinated job's unplaced slots on the least-loaded workers."""
    job = state.ledger(job_id)
    alive = [w for w in state.alive_workers() if w not in exclude]
    unplaced = [slot for slot in range(job.created.num_units or 0)
                if slot not in job.placements]
    if job.created.mode.leases or not alive or not unplaced:
        return None
    return SlotsPlaced(job_id=job_id, placements=tuple(
        zip(unplaced, _least_loaded(state, alive, len(unplaced), spread))))


def expire(state, now: float, client_timeout: float, job_timeout: float) -> list:
    """The updates that drop silent clients and forgotten jobs, as of ``now``.

    A client not seen for more than ``client_timeout`` seconds is gone
    (``ClientExpired``: what it touched since its last commit goes back). A job
    with no client left is removed at once if it is anonymous (its only client
    is gone), and after ``job_timeout`` seconds without a client if it is named:
    until then a restore of its clients finds it as they left it.
    """
    _positive("expire", "client_timeout", client_timeout, float)
    _positive("expire", "job_timeout", job_timeout, float)
    updates: list = []
    for job_id in state.jobs:
        job = state.ledger(job_id)
        silent = [c for c, client in job.clients.items() if now - client.seen > client_timeout]
        updates += [ClientExpired(job_id=job_id, client_id=c) for c in silent]
        if len(silent) < len(job.clients):
            continue
        left_at = job.last_seen if job.clients else job.left_at
        if job.created.name is None or left_at is None or now - left_at > job_timeout:
            updates += removal(job.created)
    return updates


def removal(created) -> list:
    """The updates that remove a job: a named one's epoch stays known (``NameEpoch``)."""
    updates = [] if created.name is None else [NameEpoch(name=created.name,
                                                         epoch=created.epoch)]
    return updates + [JobRemoved(job_id=created.job_id)]


def job_summary(info) -> dict:
    """A ``JobInfo`` in brief, JSON-encodable: for status pages and logs."""
    return {"job_id": info.job_id, "name": info.name, "epoch": info.epoch, "mode": info.mode,
            "num_splits": info.num_units, "done": info.done,
            "leased": sum(map(len, info.leased.values())),
            "orphaned": sum(map(len, info.orphaned.values())), "clients": len(info.clients)}
