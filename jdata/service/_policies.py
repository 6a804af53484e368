"""The dispatcher's policies: which leases to grant, which clients and jobs to drop.

They read a ``DispatcherState`` through its queries and return updates
without applying them: the dispatcher journals and applies what they return,
and a test can check them on any state without Ray. They are deterministic
(ties go by split number, then join order), so two dispatchers in the same
state decide the same.
"""

from __future__ import annotations

import heapq
import math

from jdata.service._updates import ClientGone, JobRemoved, LeasesGranted


def _positive(what: str, name: str, value, kind=int) -> None:
    types = (int, float) if kind is float else int
    if isinstance(value, bool) or not isinstance(value, types) or not (
            value > 0 and math.isfinite(value)):
        raise ValueError(f"{what}: {name}={value!r} must be a positive {kind.__name__}")


def grant(state, job_id: str, client_id: str, count: int, max_outstanding: int,
          exclude: frozenset = frozenset()) -> LeasesGranted | None:
    """Up to ``count`` leases for a client of a job, or ``None`` when there is none to give.

    First the client's orphaned splits (their worker was lost: it may hold
    them already, so they go back to it, lowest first), then the lowest free
    splits while the client holds fewer than ``max_outstanding`` unfinished
    leases. ``mode="dynamic"`` gives each split to the alive worker with the
    fewest unfinished leases in the job (ties: join order); ``"static"`` gives
    split ``s`` to ``alive[s % len(alive)]``; ``"off"`` leases nothing. With no
    alive worker nothing is granted. Workers in ``exclude`` (draining before they are
    removed) get no new split; an orphan goes to another worker.
    """
    _positive("grant", "count", count)
    _positive("grant", "max_outstanding", max_outstanding)
    mode = state.spec(job_id).mode
    if client_id not in state.clients(job_id):
        raise ValueError(f"grant: client {client_id!r} is not a client of job {job_id!r}; "
                         "apply ClientSeen for it first")
    alive = [w for w in state.alive_workers() if w not in exclude]
    if mode == "off" or not alive:
        return None
    held = state.leases_of(job_id, client_id)
    splits = [split for split, worker_id in held if worker_id is None][:count]
    room = min(count - len(splits), max_outstanding - len(held))
    if room > 0:
        splits += state.free_splits(job_id, room)
    if not splits:
        return None
    if mode == "static":
        workers = [alive[split % len(alive)] for split in splits]
    else:
        loads = {w: n for w, n in state.worker_loads(job_id).items() if w not in exclude}
        workers = _least_loaded(loads, len(splits))
    return LeasesGranted(job_id=job_id, client_id=client_id, leases=tuple(zip(splits, workers)))


def _least_loaded(loads: dict[str, int], count: int) -> list[str]:
    """``count`` picks, each of the worker with the fewest leases so far (ties: join order)."""
    heap = [(load, order, worker_id) for order, (worker_id, load) in enumerate(loads.items())]
    heapq.heapify(heap)
    picks = []
    for _ in range(count):
        load, order, worker_id = heap[0]
        picks.append(worker_id)
        heapq.heapreplace(heap, (load + 1, order, worker_id))
    return picks


def expire(state, now: float, client_timeout: float,
           job_timeout: float | None = None) -> list:
    """The updates that drop silent clients and abandoned jobs, as of ``now``.

    A client not seen for more than ``client_timeout`` seconds is gone
    (``ClientGone``: its unfinished leases go back to the pool). A job that
    had clients and has none left is removed (``JobRemoved``) once it is
    finished, or once no client was seen for ``job_timeout`` seconds (default
    ``client_timeout``). A job that never had a client stays: the dispatcher
    applies ``ClientSeen`` with ``JobCreated``, as tf.data's dispatcher
    acquires a job's first client in the call that creates it.
    """
    _positive("expire", "client_timeout", client_timeout, float)
    if job_timeout is None:
        job_timeout = client_timeout
    _positive("expire", "job_timeout", job_timeout, float)
    updates = []
    for job_id in state.jobs:
        clients = state.clients(job_id)
        silent = [client_id for client_id, seen in clients.items() if now - seen > client_timeout]
        updates += [ClientGone(job_id=job_id, client_id=client_id) for client_id in silent]
        last_seen = state.last_seen(job_id)
        if last_seen is None or len(silent) < len(clients):
            continue
        if state.finished(job_id) or now - last_seen > job_timeout:
            updates.append(JobRemoved(job_id=job_id))
    return updates


def job_summary(info) -> dict:
    """A ``JobInfo`` in brief, JSON-encodable: for status pages and logs."""
    return {"job_id": info.job_id, "name": info.name, "epoch": info.epoch, "mode": info.mode,
            "num_splits": info.num_splits, "done": info.done,
            "leased": sum(map(len, info.leased.values())),
            "orphaned": sum(map(len, info.orphaned.values())), "clients": len(info.clients)}
