"""One job's splits, leases and clients: the bookkeeping behind ``DispatcherState``.

A split is free, leased or done. Jobs reach 10^6 splits and the dispatcher
10^5 leases/s, so nothing here is O(num_splits) per update: a ``bytearray``
holds each split's status (1 byte a split, written once at creation), dicts and
sets hold the leases, and the lowest free splits come from a frontier plus a
short sorted pool. The frontier only moves forward: every split below it is
leased, done or in the pool (released after a lease), so ``bytearray.find``
from the frontier finds the next never-leased split in amortized O(1).

A lease whose worker was lost stays its client's, *orphaned* (worker
``None``), until it is re-issued to that same client on a live worker: the
client may already hold the split entirely and only be late reporting it
done (done reports are batched), and giving the split to another client then
would deliver it twice. Only a client that is gone releases its leases to the
pool, and a gone client cannot come back under the same id.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

_FREE, _LEASED, _DONE = 0, 1, 2


class JobInfo(NamedTuple):
    """A snapshot of one job (copies: changing it changes nothing in the state)."""

    job_id: str
    name: str | None
    fingerprint: str
    epoch: int
    num_splits: int
    mode: str
    done: int  # splits done
    leased: dict  # worker_id -> splits leased on it (sorted tuple)
    orphaned: dict  # client_id -> splits whose worker was lost, awaiting re-issue to it
    clients: dict  # client_id -> when it was last seen
    last_seen: float | None  # latest time any client was seen; None: never had one


class Job:
    """See the module docstring. ``check_*`` raise ``ValueError``; the others assume it passed."""

    def __init__(self, created):
        self.created = created
        n = created.num_splits
        self.status = bytearray(n)
        self.done = 0
        self._frontier = 0
        self._pool: list[int] = []  # free splits below the frontier, sorted
        self.leases: dict[int, tuple[str, str | None]] = {}  # split -> (client, worker)
        self.by_client: dict[str, set[int]] = {}  # unfinished leases, orphaned ones too
        self.by_worker: dict[str, set[int]] = {}
        self.orphans: dict[str, set[int]] = {}
        self.clients: dict[str, float] = {}
        self.gone: set[str] = set()
        self.last_seen: float | None = None

    def _where(self) -> str:
        return f"job {self.created.job_id!r}"

    def _check_split(self, split: int) -> None:
        if split >= self.created.num_splits:
            raise ValueError(f"{self._where()} has {self.created.num_splits} splits; split "
                             f"{split} is out of range")

    def check_client(self, client_id: str) -> None:
        if client_id in self.clients:
            return
        if client_id in self.gone:
            raise ValueError(f"client {client_id!r} of {self._where()} is gone (it timed out "
                             "or left); a client that comes back joins under a new id")
        raise ValueError(f"client {client_id!r} is not a client of {self._where()}; "
                         "apply ClientSeen for it first")

    def check_grant(self, client_id: str, leases, alive) -> None:
        self.check_client(client_id)
        for split, worker_id in leases:
            self._check_split(split)
            if worker_id not in alive:
                raise ValueError(f"{self._where()}: split {split} cannot go to worker "
                                 f"{worker_id!r}, which is not alive")
            if self.status[split] == _DONE:
                raise ValueError(f"{self._where()}: split {split} is done; it is never "
                                 "leased again")
            if self.status[split] == _LEASED and self.leases[split] != (client_id, None):
                owner, on = self.leases[split]
                raise ValueError(f"{self._where()}: split {split} is leased to client "
                                 f"{owner!r} on worker {on!r}")

    def grant(self, client_id: str, leases) -> None:
        from_pool = []
        for split, worker_id in leases:
            if self.status[split] == _LEASED:  # an orphan of this client, re-issued
                self.orphans[client_id].discard(split)
            else:
                self.status[split] = _LEASED
                self.by_client.setdefault(client_id, set()).add(split)
                if split < self._frontier:
                    from_pool.append(split)
            self.leases[split] = (client_id, worker_id)
            self.by_worker.setdefault(worker_id, set()).add(split)
        self._take_from_pool(sorted(from_pool))
        found = self.status.find(_FREE, self._frontier)
        self._frontier = self.created.num_splits if found < 0 else found

    def _take_from_pool(self, splits: list[int]) -> None:
        if self._pool[:len(splits)] == splits:  # the policy always takes the lowest
            del self._pool[:len(splits)]
            return
        for split in splits:
            del self._pool[bisect.bisect_left(self._pool, split)]

    def check_done(self, client_id: str, splits) -> None:
        self.check_client(client_id)
        for split in splits:
            self._check_split(split)
            if self.status[split] == _DONE:
                raise ValueError(f"{self._where()}: split {split} is already done")
            if self.status[split] == _FREE:
                raise ValueError(f"{self._where()}: split {split} is not leased (its lease "
                                 "was released); lease it before reporting it done")
            if self.leases[split][0] != client_id:
                raise ValueError(f"{self._where()}: split {split} is leased to client "
                                 f"{self.leases[split][0]!r}, not {client_id!r}")

    def mark_done(self, client_id: str, splits) -> None:
        for split in splits:
            _, worker_id = self.leases.pop(split)
            self.by_client[client_id].remove(split)
            if worker_id is None:
                self.orphans[client_id].remove(split)
            else:
                self.by_worker[worker_id].remove(split)
            self.status[split] = _DONE
        self.done += len(splits)

    def lose_worker(self, worker_id: str) -> None:
        for split in self.by_worker.pop(worker_id, ()):
            client_id = self.leases[split][0]
            self.leases[split] = (client_id, None)
            self.orphans.setdefault(client_id, set()).add(split)

    def see(self, client_id: str, time: float) -> None:
        """A new client, or a heartbeat; times only move forward (clocks may step back)."""
        self.clients[client_id] = max(self.clients.get(client_id, time), time)
        self.last_seen = time if self.last_seen is None else max(self.last_seen, time)

    def release_client(self, client_id: str) -> None:
        released = []
        for split in self.by_client.pop(client_id, ()):
            _, worker_id = self.leases.pop(split)
            if worker_id is not None:
                self.by_worker[worker_id].remove(split)
            self.status[split] = _FREE
            if split < self._frontier:  # at or above it, the frontier's scan finds it
                released.append(split)
        self._pool = sorted(self._pool + released)  # two sorted runs: a linear merge
        self.orphans.pop(client_id, None)
        del self.clients[client_id]
        self.gone.add(client_id)

    def lowest_free(self, count: int) -> list[int]:
        splits = self._pool[:count]  # all below the frontier, so below every fresh split
        start = self._frontier
        while len(splits) < count:
            found = self.status.find(_FREE, start)
            if found < 0:
                break
            splits.append(found)
            start = found + 1
        return splits

    def info(self) -> JobInfo:
        c = self.created
        return JobInfo(c.job_id, c.name, c.fingerprint, c.epoch, c.num_splits, c.mode,
                       self.done, _sorted(self.by_worker), _sorted(self.orphans),
                       dict(self.clients), self.last_seen)


def _sorted(sets: dict) -> dict:
    return {key: tuple(sorted(splits)) for key, splits in sets.items() if splits}
