"""The dispatcher's state: a pure state machine of jobs, units, leases, clients and workers.

Every change is an update (``JobCreated``, ``WorkerJoined``, ``LeasesGranted``...)
passed to ``DispatcherState.apply``, which is deterministic and touches
nothing outside the state, so a restarted dispatcher that replays its journal
(``jdata.service.journal``) rebuilds exactly the state it had: tf.data
service's ``DispatcherState::Apply(Update)`` beside a separate journal writer.
An update that does not fit the state raises ``ValueError`` and changes
nothing. The policies (``grant``, ``expire``, ``admit``...) read the state and
return updates without applying them; Ray only carries the calls.

>>> from jdata.service import state as st
>>> s = st.DispatcherState()
>>> for update in (st.WorkerJoined("w0"), st.WorkerJoined("w1"),
...                st.JobCreated("j", None, "fp", 0, "dynamic", 3, None),
...                st.ClientJoined("j", "c", lineage="l", time=0.0)):
...     s.apply(update)
>>> granted = st.grant(s, "j", "c", count=2, max_held=8)
>>> granted.leases
((0, 'w0'), (1, 'w1'))
>>> s.apply(granted)
>>> s.apply(st.WorkerLost("w1"))  # unit 1 waits for re-issue to client "c"
>>> st.grant(s, "j", "c", count=2, max_held=8).leases
((1, 'w0'), (2, 'w0'))
"""

from __future__ import annotations

from jdata.service._job import Job, JobInfo
from jdata.service._messages import Mode
from jdata.service._admission import admit as admit
from jdata.service._policies import expire as expire
from jdata.service._policies import grant as grant
from jdata.service._policies import job_summary as job_summary
from jdata.service._policies import place as place
from jdata.service._policies import rebalance as rebalance
from jdata.service._updates import ClientExpired as ClientExpired
from jdata.service._updates import ClientJoined as ClientJoined
from jdata.service._updates import ClientReleased as ClientReleased
from jdata.service._updates import ClientRestored as ClientRestored
from jdata.service._updates import ClientSeen as ClientSeen
from jdata.service._updates import Committed as Committed
from jdata.service._updates import JobCreated as JobCreated
from jdata.service._updates import JobRemoved as JobRemoved
from jdata.service._updates import LeasesGranted as LeasesGranted
from jdata.service._updates import LeasesReturned as LeasesReturned
from jdata.service._updates import NameEpoch as NameEpoch
from jdata.service._updates import RoundsScheduled as RoundsScheduled
from jdata.service._updates import SlotsPlaced as SlotsPlaced
from jdata.service._updates import UnitsDone as UnitsDone
from jdata.service._updates import WorkerJoined as WorkerJoined
from jdata.service._updates import WorkerLost as WorkerLost
from jdata.service._updates import decode as decode
from jdata.service._updates import encode as encode

__all__ = ["ClientExpired", "ClientJoined", "ClientReleased", "ClientRestored", "ClientSeen",
           "Committed", "DispatcherState", "JobCreated", "JobInfo", "JobRemoved",
           "LeasesGranted", "LeasesReturned", "NameEpoch", "RoundsScheduled", "SlotsPlaced",
           "UnitsDone", "WorkerJoined", "WorkerLost", "admit", "decode", "encode", "expire", "grant", "job_summary",
           "place", "rebalance"]


class DispatcherState:
    """Jobs, the epochs each job name reached, and the alive workers in join order."""

    def __init__(self):
        self._jobs: dict[str, Job] = {}
        self._names: dict[tuple[str, int], str] = {}  # (name, epoch) -> job_id
        self._latest: dict[str, int] = {}  # name -> the latest epoch it ran
        self._alive: dict[str, None] = {}  # an ordered set: the join order

    def __repr__(self) -> str:
        return f"DispatcherState(jobs={list(self._jobs)}, alive_workers={list(self._alive)})"

    def apply(self, update) -> None:
        """Applies one update; ``ValueError`` (and no change) if it does not fit the state."""
        handler = _HANDLERS.get(type(update))
        if handler is None:
            raise TypeError(f"DispatcherState.apply: {update!r} is not a dispatcher update")
        handler(self, update)

    # ------------------------------------------------------------ updates

    def _job_created(self, u: JobCreated) -> None:
        if u.job_id in self._jobs:
            raise ValueError(f"JobCreated: job_id={u.job_id!r} exists; give a new job a new id")
        if u.name is not None:
            other = self.named(u.name)
            if other and self._jobs[other[-1]].created.fingerprint != u.fingerprint:
                raise ValueError(f"JobCreated: job name={u.name!r} runs another pipeline; "
                                 "remove its jobs first")
            if (u.name, u.epoch) in self._names:
                raise ValueError(f"JobCreated: job name={u.name!r} epoch={u.epoch} exists as "
                                 f"job {self._names[u.name, u.epoch]!r}; join that job")
            self._names[u.name, u.epoch] = u.job_id
            self._latest[u.name] = max(self._latest.get(u.name, u.epoch), u.epoch)
        self._jobs[u.job_id] = Job(u)

    def _worker_joined(self, u: WorkerJoined) -> None:
        if u.worker_id in self._alive:
            raise ValueError(f"WorkerJoined: worker {u.worker_id!r} is alive already")
        self._alive[u.worker_id] = None

    def _worker_lost(self, u: WorkerLost) -> None:
        if u.worker_id not in self._alive:
            raise ValueError(f"WorkerLost: worker {u.worker_id!r} is not alive")
        del self._alive[u.worker_id]
        for job in self._jobs.values():
            job.lose_worker(u.worker_id)

    def _client_joined(self, u: ClientJoined) -> None:
        job = self._job(u.job_id, "ClientJoined")
        job.check_new_client(u.client_id, u.lineage, restore=False)
        job.join(u.client_id, u.lineage, u.time)

    def _client_restored(self, u: ClientRestored) -> None:
        job = self._job(u.job_id, "ClientRestored")
        job.check_new_client(u.client_id, u.lineage, restore=True)
        wants = u.position.wants()
        job.check_units(wants, "ClientRestored")
        committed = None if u.committed is None else u.committed.wants()
        job.restored[u.client_id] = job.restore(u.client_id, u.lineage, u.time, wants,
                                                committed)

    def _client_seen(self, u: ClientSeen) -> None:
        job = self._job(u.job_id, "ClientSeen")
        job.check_client(u.client_id)
        job.see(u.client_id, u.time)

    def _leases_granted(self, u: LeasesGranted) -> None:
        job = self._job(u.job_id, "LeasesGranted")
        if not job.created.mode.leases:
            raise ValueError(f"LeasesGranted: {job.where()} ({job.created.mode.value}) leases "
                             "nothing; its slots are placed")
        job.check_grant(u.client_id, u.leases, self._alive)
        job.grant(u.client_id, u.leases)

    def _units_done(self, u: UnitsDone) -> None:
        job = self._job(u.job_id, "UnitsDone")
        job.check_held(u.client_id, u.units, "reports done")
        job.mark_done(u.client_id, u.units)

    def _committed(self, u: Committed) -> None:
        job = self._job(u.job_id, "Committed")
        job.check_client(u.client_id)
        job.commit(u.client_id, u.position)

    def _client_released(self, u: ClientReleased) -> None:
        job = self._job(u.job_id, "ClientReleased")
        job.check_client(u.client_id)
        job.release(u.client_id, u.offsets)

    def _client_expired(self, u: ClientExpired) -> None:
        job = self._job(u.job_id, "ClientExpired")
        job.check_client(u.client_id)
        job.expire(u.client_id)

    def _leases_returned(self, u: LeasesReturned) -> None:
        job = self._job(u.job_id, "LeasesReturned")
        job.check_held(u.client_id, [unit for unit, _ in u.offsets], "returns")
        job.give_back(u.client_id, u.offsets)

    def _slots_placed(self, u: SlotsPlaced) -> None:
        job = self._job(u.job_id, "SlotsPlaced")
        if job.created.mode.leases:
            raise ValueError(f"SlotsPlaced: {job.where()} ({job.created.mode.value}) leases "
                             "its units; it places no slots")
        job.check_units([slot for slot, _ in u.placements], "SlotsPlaced")
        for _, worker_id in u.placements:
            if worker_id not in self._alive:
                raise ValueError(f"SlotsPlaced: worker {worker_id!r} is not alive")
        job.placements.update(u.placements)

    def _rounds_scheduled(self, u: RoundsScheduled) -> None:
        job = self._job(u.job_id, "RoundsScheduled")
        where = f"RoundsScheduled: {job.where()}"
        if job.created.mode is not Mode.COORDINATED:
            raise ValueError(f"{where} ({job.created.mode.value}) reads no rounds")
        if job.schedule and u.first_round <= job.schedule[-1][0]:
            raise ValueError(f"{where}: an entry from round {u.first_round} must start after "
                             f"the last one's, {job.schedule[-1][0]}")
        # A worker keeps its slot; a slot is one worker's.
        slots = {worker_id: slot for _, placed in job.schedule for slot, worker_id in placed}
        owners = {slot: worker_id for worker_id, slot in slots.items()}
        for slot, worker_id in u.placements:
            if worker_id not in self._alive:
                raise ValueError(f"{where}: worker {worker_id!r} is not alive")
            if slots.get(worker_id, slot) != slot:
                raise ValueError(f"{where}: worker {worker_id!r} has slot "
                                 f"{slots[worker_id]}, not {slot}")
            if owners.get(slot, worker_id) != worker_id:
                raise ValueError(f"{where}: slot {slot} is taken by worker {owners[slot]!r}")
        job.schedule.append((u.first_round, u.placements))

    def _name_epoch(self, u: NameEpoch) -> None:
        self._latest[u.name] = max(self._latest.get(u.name, u.epoch), u.epoch)

    def _job_removed(self, u: JobRemoved) -> None:
        job = self._jobs.pop(self._job(u.job_id, "JobRemoved").created.job_id)
        if job.created.name is not None:
            del self._names[job.created.name, job.created.epoch]

    def grace(self, now: float) -> None:
        """After a restart: every client counts as seen ``now``, and a job without clients
        as left ``now`` (the dispatcher's downtime is not their silence). Heartbeats are
        not journaled, so this is where a replayed state's clocks start."""
        for job in self._jobs.values():
            for client in job.clients.values():
                client.seen = now
            job.last_seen = now
            if not job.clients:
                job.left_at = now

    def _job(self, job_id: str, what: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise ValueError(f"{what}: unknown job_id={job_id!r} (never created, or removed); "
                             f"the jobs are {sorted(self._jobs)}")
        return job

    # ------------------------------------------------------------ queries

    @property
    def jobs(self) -> tuple[str, ...]:
        """The ids of the jobs, in creation order."""
        return tuple(self._jobs)

    def ledger(self, job_id: str) -> Job:
        """The job's ledger, to read (policies and status); change it only through updates."""
        return self._job(job_id, "ledger")

    def job(self, job_id: str) -> JobInfo:
        """A snapshot of the job: its fields, done count, leases and clients."""
        return self._job(job_id, "job").info()

    def spec(self, job_id: str) -> JobCreated:
        """The update that created the job: its name, fingerprint, epoch, plan and mode."""
        return self._job(job_id, "spec").created

    def named(self, name: str) -> list[str]:
        """The jobs that run under ``name``, oldest epoch first."""
        return [job_id for (n, _), job_id in sorted(self._names.items()) if n == name]

    def find_job(self, name: str, epoch: int) -> str | None:
        """The id of the job ``name`` runs for ``epoch``, or ``None``."""
        return self._names.get((name, epoch))

    def latest_epochs(self) -> dict[str, int]:
        """Every job name's latest epoch (a copy)."""
        return dict(self._latest)

    def latest_epoch(self, name: str) -> int | None:
        """The latest epoch a job of ``name`` ran (removed since, maybe); None: never."""
        return self._latest.get(name)

    def alive_workers(self) -> tuple[str, ...]:
        """The alive workers, in join order."""
        return tuple(self._alive)

    def leases_of(self, job_id: str, client_id: str) -> tuple[tuple[int, str | None], ...]:
        """The client's unfinished leases, by unit; worker ``None``: awaiting re-issue."""
        job = self._job(job_id, "leases_of")
        return tuple((unit, job.leases[unit].worker_id)
                     for unit in sorted(job.by_client.get(client_id, ())))

    def clients(self, job_id: str) -> dict[str, float]:
        """The job's clients and when each was last seen (a copy)."""
        job = self._job(job_id, "clients")
        return {client_id: client.seen for client_id, client in job.clients.items()}

    def standing(self, job_id: str, client_id: str) -> str | None:
        """None for a live client; else why it is gone ("expired", "released",
        "superseded"), or "unknown" (the job is gone, or never had it)."""
        job = self._jobs.get(job_id)
        if job is None:
            return "unknown"
        if client_id in job.clients:
            return None
        return job.gone.get(client_id, "unknown")

    def finished(self, job_id: str, client_id: str | None = None) -> bool:
        """Whether the epoch is over (for ``client_id``): every unit is done (never, for an
        unbounded job) and no other client could still roll back units it did."""
        return self._job(job_id, "finished").finished_for(client_id)

    def free_units(self, job_id: str, count: int) -> list[int]:
        """The ``count`` lowest free units (fewer if fewer are)."""
        return self._job(job_id, "free_units").units.lowest_free(count)

    def worker_loads(self, job_id: str | None = None) -> dict[str, int]:
        """Each alive worker's unfinished leases and placed slots (of jobs with clients: a
        dormant job's windows are gone), in the job (``None``: across jobs), in join
        order."""
        jobs = self._jobs.values() if job_id is None else [self._job(job_id, "worker_loads")]
        loads = dict.fromkeys(self._alive, 0)
        for job in jobs:
            for worker_id, units in job.by_worker.items():
                if worker_id in loads:
                    loads[worker_id] += len(units)
            if job.clients:
                for worker_id in job.placements.values():
                    loads[worker_id] += 1
        return loads


_HANDLERS = {JobCreated: DispatcherState._job_created,
             WorkerJoined: DispatcherState._worker_joined,
             WorkerLost: DispatcherState._worker_lost,
             ClientJoined: DispatcherState._client_joined,
             ClientRestored: DispatcherState._client_restored,
             ClientSeen: DispatcherState._client_seen,
             LeasesGranted: DispatcherState._leases_granted,
             UnitsDone: DispatcherState._units_done,
             Committed: DispatcherState._committed,
             ClientReleased: DispatcherState._client_released,
             ClientExpired: DispatcherState._client_expired,
             LeasesReturned: DispatcherState._leases_returned,
             SlotsPlaced: DispatcherState._slots_placed,
             RoundsScheduled: DispatcherState._rounds_scheduled,
             NameEpoch: DispatcherState._name_epoch,
             JobRemoved: DispatcherState._job_removed}
