"""One job's ledger: its units, leases, clients and lineages (behind ``DispatcherState``).

The promise it keeps is *exactly once per epoch over what consumers keep*. A
consumer keeps what it yielded, except that one killed (or silent past its
timeout) keeps only what its last commit (its last ``get_state()``, which a
checkpoint saves) holds: the rest died with it. So each client records, per
unit it touched since its last commit, the offset a read of that unit would
restart from (``Client.touched``). When it dies those units go back from there,
done ones too; when it leaves alive (``release``) it keeps everything; when
its lineage is restored from a state (``restore``) the units its lineage did
past that state go back, and the state's units are its.

A lease whose worker was lost stays its client's, *orphaned* (worker
``None``), until it is re-issued to that same client on a live worker: the
client may already hold the unit whole and only be late reporting it done.
Only a client that leaves or dies returns its leases; a gone client id never
comes back (its lineage does, under a new id, through a restore).

``check_*`` raise ``ValueError`` and change nothing; the others assume the check passed.
"""

from __future__ import annotations

from typing import NamedTuple

from jdata.service import _units
from jdata.service._units import DONE, FREE, LEASED


class Lease(NamedTuple):
    client_id: str
    worker_id: str | None  # None: orphaned, its worker lost
    offset: int  # where the read of the unit started


class Client:
    __slots__ = ("lineage", "seen", "touched", "pending")

    def __init__(self, lineage: str, seen: float):
        self.lineage, self.seen = lineage, seen
        self.touched: dict[int, int] = {}  # unit -> offset a read restarts from if it dies
        self.pending = 0  # touched units it did: they reopen should it die


class JobInfo(NamedTuple):
    """A snapshot of one job (copies: changing it changes nothing in the state)."""

    job_id: str
    name: str | None
    fingerprint: str
    epoch: int
    mode: str
    num_units: int | None
    split_elements: int | None
    done: int  # units done
    leased: dict  # worker_id -> units leased on it (sorted tuple)
    orphaned: dict  # client_id -> units whose worker was lost, awaiting re-issue to it
    clients: dict  # client_id -> when it was last seen
    last_seen: float | None  # latest time any client was seen; None: never had one
    placements: dict  # slot -> worker (shared jobs)
    schedule: tuple  # (first round, ((slot, worker)...)) entries (coordinated jobs)


class Job:
    def __init__(self, created):
        self.created = created
        self.units = _units.Units(created.num_units)
        self.leases: dict[int, Lease] = {}
        self.by_client: dict[str, set[int]] = {}
        self.by_worker: dict[str, set[int]] = {}
        self.orphans: dict[str, set[int]] = {}
        self.clients: dict[str, Client] = {}
        self.lineages: dict[str, int] = {}  # lineage -> its index (done_by)
        self.live: dict[str, str] = {}  # lineage -> its live client id
        self.gone: dict[str, str] = {}  # client id -> "expired" | "released" | "superseded"
        self.last_seen: float | None = None
        self.left_at: float | None = None  # when the last client left (None: one is here)
        self.placements: dict[int, str] = {}
        # A coordinated job's entries (first round, ((slot, worker)...)), in order.
        self.schedule: list[tuple[int, tuple]] = []
        # A restore's (conflicts, leased), by client id, for the dispatcher's reply.
        self.restored: dict[str, tuple[list, list]] = {}

    def where(self) -> str:
        return f"job {self.created.job_id!r}"

    # ------------------------------------------------------------ checks

    def check_client(self, client_id: str) -> None:
        if client_id in self.clients:
            return
        if client_id in self.gone:
            raise ValueError(f"client {client_id!r} of {self.where()} is gone "
                             f"({self.gone[client_id]}); its lineage comes back through a "
                             "restore, under a new id")
        raise ValueError(f"client {client_id!r} is not a client of {self.where()}; "
                         "apply ClientJoined for it first")

    def check_new_client(self, client_id: str, lineage: str, restore: bool) -> None:
        if client_id in self.clients or client_id in self.gone:
            raise ValueError(f"client {client_id!r} of {self.where()} exists already; give "
                             "a new client a new id")
        if not restore and lineage in self.lineages:
            raise ValueError(f"lineage {lineage!r} is known to {self.where()}; a consumer "
                             "comes back through ClientRestored")

    def check_units(self, units, what: str) -> None:
        for unit in units:
            self.units.check(unit, f"{self.where()}: {what}")

    def check_grant(self, client_id: str, leases, alive) -> None:
        self.check_client(client_id)
        for unit, worker_id in leases:
            self.units.check(unit, self.where())
            if worker_id not in alive:
                raise ValueError(f"{self.where()}: unit {unit} cannot go to worker "
                                 f"{worker_id!r}, which is not alive")
            status = self.units.state(unit)
            if status == DONE:
                raise ValueError(f"{self.where()}: unit {unit} is done; it is not leased "
                                 "again unless a restore or a death reopens it")
            if status == LEASED and self.leases[unit][:2] != (client_id, None):
                owner, on, _ = self.leases[unit]
                raise ValueError(f"{self.where()}: unit {unit} is leased to client "
                                 f"{owner!r} on worker {on!r}")

    def check_held(self, client_id: str, units, what: str) -> None:
        self.check_client(client_id)
        for unit in units:
            self.units.check(unit, self.where())
            status = self.units.state(unit)
            if status != LEASED:
                state = "done" if status == DONE else "not leased"
                raise ValueError(f"{self.where()}: {what} unit {unit}, which is {state}")
            if self.leases[unit].client_id != client_id:
                raise ValueError(f"{self.where()}: unit {unit} is leased to client "
                                 f"{self.leases[unit].client_id!r}, not {client_id!r}")

    # ------------------------------------------------------------ changes

    def join(self, client_id: str, lineage: str, time: float) -> Client:
        client = self.clients[client_id] = Client(lineage, time)
        self.lineages.setdefault(lineage, len(self.lineages))
        self.live[lineage] = client_id
        self.left_at = None
        self.see(client_id, time)
        return client

    def see(self, client_id: str, time: float) -> None:
        """A heartbeat; times only move forward (clocks may step back)."""
        client = self.clients[client_id]
        client.seen = max(client.seen, time)
        self.last_seen = time if self.last_seen is None else max(self.last_seen, time)

    def grant(self, client_id: str, leases) -> None:
        touched = self.clients[client_id].touched
        for unit, worker_id in leases:
            if self.units.state(unit) == LEASED:  # an orphan of this client, re-issued
                self.orphans[client_id].discard(unit)
                offset = self.leases[unit].offset
            else:
                offset = self.units.take(unit)
                self.by_client.setdefault(client_id, set()).add(unit)
                touched.setdefault(unit, offset)
            self.leases[unit] = Lease(client_id, worker_id, offset)
            self.by_worker.setdefault(worker_id, set()).add(unit)

    def _unlease(self, unit: int) -> Lease:
        lease = self.leases.pop(unit)
        self.by_client[lease.client_id].discard(unit)
        if lease.worker_id is None:
            self.orphans[lease.client_id].discard(unit)
        else:
            self.by_worker[lease.worker_id].discard(unit)
        return lease

    def mark_done(self, client_id: str, units) -> None:
        client = self.clients[client_id]
        index = self.lineages[client.lineage]
        for unit in units:
            self._unlease(unit)
            self.units.mark_done(unit, index)
            client.pending += unit in client.touched

    def finished_for(self, client_id: str | None = None) -> bool:
        """Whether the epoch is over for a client: every unit is done, and no other client
        did units it could still roll back (should it die before it commits or leaves, they
        reopen: someone must still be there to read them)."""
        return self.units.finished() and not any(
            c.pending for cid, c in self.clients.items() if cid != client_id)

    def _recount(self, client) -> None:
        client.pending = sum(self.units.state(u) == DONE for u in client.touched)

    def commit(self, client_id: str, position) -> None:
        """From now on, a death of the client restarts its units from this position. A
        unit the position holds whole that is still leased to it is done (yielded whole,
        its report on the way)."""
        client = self.clients[client_id]
        done = position.done
        starts = [start for start, _ in done]
        whole = {unit for unit, _ in position.done_from}
        reached = {unit: stop for unit, _, stop in position.partial}
        held = self.by_client.get(client_id, set())
        self.mark_done(client_id, sorted(
            unit for unit in client.touched if unit in held and
            (unit in whole or _units.in_ranges(unit, done, starts))))
        client.touched = {unit: reached.get(unit, offset)
                          for unit, offset in client.touched.items()
                          if unit not in whole and not _units.in_ranges(unit, done, starts)}
        self._recount(client)

    def give_back(self, client_id: str, offsets: tuple) -> None:
        client = self.clients[client_id]
        index = self.lineages[client.lineage]
        for unit, offset in offsets:
            lease = self._unlease(unit)
            self.units.close(unit, index, max(offset, lease.offset))
            client.touched.pop(unit, None)

    def release(self, client_id: str, offsets: tuple) -> None:
        """The client leaves alive: it keeps what it yielded; its units go back past it."""
        index = self.lineages[self.clients[client_id].lineage]
        counts = dict(offsets)
        for unit in sorted(self.by_client.get(client_id, ())):
            lease = self._unlease(unit)
            self.units.close(unit, index, max(counts.get(unit, 0), lease.offset))
        self._leave(client_id, "released")

    def expire(self, client_id: str, how: str = "expired") -> None:
        """The client died (or is taken over by a restore of its lineage): what it touched
        since its last commit goes back from the commit's offsets."""
        client = self.clients[client_id]
        index = self.lineages[client.lineage]
        for unit, offset in sorted(client.touched.items()):
            status = self.units.state(unit)
            if status == LEASED and self.leases[unit].client_id == client_id:
                self._unlease(unit)
                self.units.close(unit, index, offset)
            elif status == DONE and self.units.done_by[unit] == index:
                self.units.close(unit, index, offset)
        for unit in sorted(self.by_client.get(client_id, ())):  # none, but be sure: a
            self.units.close(unit, index, self._unlease(unit).offset)  # lease never dangles
        self._leave(client_id, how)

    def _leave(self, client_id: str, how: str) -> None:
        client = self.clients.pop(client_id)
        self.by_client.pop(client_id, None)
        self.orphans.pop(client_id, None)
        self.gone[client_id] = how
        if self.live.get(client.lineage) == client_id:
            del self.live[client.lineage]
        if not self.clients:
            self.left_at = self.last_seen

    # ------------------------------------------------------------ restores

    def restore(self, client_id: str, lineage: str, time: float, wants: dict,
                committed: dict | None = None) -> tuple[list[tuple[int, str]], list[int]]:
        """``lineage`` comes back as ``client_id`` keeping what ``wants`` says (per unit,
        ``(start, stop)``; ``stop`` None: to the end), as far as the other consumers allow.

        Its live incarnation, if any, leaves first as if it died. Then, unit by unit,
        the lineage's trailing part of a unit shrinks back to what it wants (nobody
        reads past it yet), and grows to what it wants from the unit's tail (nobody
        else has it). Whatever cannot be made so is a conflict: "lost" (it kept
        elements the state does not, and nobody reads them again) or "duplicated"
        (others kept or read elements the state holds). A unit it wants part of and
        can go on reading is leased to it (orphaned: the next lease re-issues it);
        the others are *handed* (another consumer goes on with it).

        Should the client die before it commits, its units roll back to ``committed``
        (a resume's last commit; by default the restored position itself).

        Returns ``(conflicts, leased)``: the units leased to it (the rest of its position's
        partial units are handed to others).
        """
        old = self.live.get(lineage)
        if old is not None:
            self.expire(old, "superseded")
        self.join(client_id, lineage, time)
        index = self.lineages[lineage]
        units = set(wants) | set(self.units.done_by_lineage(index)) | {
            unit for unit, segments in self.units.segments.items()
            if any(owner == index for owner, _, _ in segments)}
        conflicts, handed, leased = [], [], []
        for unit in sorted(units):
            want = wants.get(unit)
            conflict = _restore_unit(self.units, unit, index, want)
            if conflict is not None:
                conflicts.append((unit, conflict))
            if want is not None and want[1] is not None:
                if self._resumable(unit, index, want):
                    self._lease_orphan(client_id, unit)
                    leased.append(unit)
                else:
                    handed.append(unit)
        if committed is not None:  # a death rolls back past what the commit holds
            touched = self.clients[client_id].touched
            for unit, want in wants.items():
                before = committed.get(unit)
                if before != want and unit not in handed:
                    touched[unit] = before[1] if before is not None else want[0]
            self._recount(self.clients[client_id])
        return conflicts, leased

    def _resumable(self, unit: int, index: int, want: tuple) -> bool:
        segments = self.units.segments.get(unit)
        last = segments[-1] if segments else None
        tail_ok = (last[0] == index and last[2] == want[1]) if last else want == (0, 0)
        return self.units.state(unit) == FREE and tail_ok

    def _lease_orphan(self, client_id: str, unit: int) -> None:
        offset = self.units.take(unit)
        self.leases[unit] = Lease(client_id, None, offset)
        self.by_client.setdefault(client_id, set()).add(unit)
        self.orphans.setdefault(client_id, set()).add(unit)
        self.clients[client_id].touched.setdefault(unit, offset)

    def lose_worker(self, worker_id: str) -> None:
        for unit in self.by_worker.pop(worker_id, ()):
            lease = self.leases[unit]
            self.leases[unit] = lease._replace(worker_id=None)
            self.orphans.setdefault(lease.client_id, set()).add(unit)
        for slot in [s for s, w in self.placements.items() if w == worker_id]:
            del self.placements[slot]

    def info(self) -> JobInfo:
        c = self.created
        return JobInfo(c.job_id, c.name, c.fingerprint, c.epoch, c.mode.value, c.num_units,
                       c.split_elements, self.units.done, _sorted(self.by_worker),
                       _sorted(self.orphans),
                       {cid: client.seen for cid, client in self.clients.items()},
                       self.last_seen, dict(self.placements), tuple(self.schedule))


def _restore_unit(units, unit: int, index: int, want) -> str | None:
    """``Job.restore`` for one unit: its parts (``[lineage, from, to]``, ``to`` None for a
    done unit's last) made to give lineage ``index`` what it ``want``s where they can."""
    status = units.state(unit)
    parts = [list(segment) for segment in units.segments.get(unit, ())]
    if status == DONE:
        parts.append([int(units.done_by[unit]), units.tail(unit), None])
    reading = status == LEASED  # by another: the lineage's own incarnation left first
    while not reading and parts and parts[-1][0] == index:  # shrink its trailing part
        _, start, stop = parts[-1]
        keep = _overlap(start, stop, want)
        if keep == (start, stop) or (keep is not None and keep[0] != start):
            break
        if keep is None:
            parts.pop()
        else:
            parts[-1][2] = keep[1]
    conflict = None
    if any(owner == index and _overlap(start, stop, want) != (start, stop)
           for owner, start, stop in parts):
        conflict = "lost"  # it holds elements the state does not, below others' parts
    if want is not None:
        claimed = _claim(parts, index, want, reading)
        if not claimed:
            conflict = conflict or "duplicated"
    if not reading:
        closed = [p for p in parts if p[2] is not None]
        units.rewrite(unit, closed, parts[-1][0] if parts and parts[-1][2] is None else None)
    return conflict


def _claim(parts: list, index: int, want: tuple, reading: bool) -> bool:
    """Extends the lineage's run of parts to ``want`` from the unit's tail; False where
    others kept (or read) elements it wants."""
    start, stop = want
    reach = start
    for owner, begin, end in parts:
        if owner == index:
            if begin != reach:
                return False
            reach = end
    if reach == stop:
        return True
    tail = parts[-1][2] if parts else 0
    if reading or reach is None or tail != reach:
        return False
    if parts and parts[-1][0] == index:
        parts[-1][2] = stop
    else:
        parts.append([index, reach, stop])
    return True


def _overlap(start: int, stop: int | None, want) -> tuple | None:
    """``[start, stop)`` within ``want`` (``stop`` None: to the end), or None."""
    if want is None:
        return None
    lo = max(start, want[0])
    hi = stop if want[1] is None else want[1] if stop is None else min(stop, want[1])
    return None if hi is not None and lo >= hi else (lo, hi)


def _sorted(sets: dict) -> dict:
    return {key: tuple(sorted(units)) for key, units in sets.items() if units}


__all__ = ["Client", "FREE", "Job", "JobInfo", "Lease"]
