"""The dispatcher's state: a pure state machine of jobs, splits, leases and workers.

Every change is an update (``JobCreated``, ``WorkerJoined``, ``LeasesGranted``...)
passed to ``DispatcherState.apply``, which is deterministic and touches
nothing outside the state, so a restarted dispatcher that replays its journal
(``jdata.service.journal``) rebuilds exactly the state it had: tf.data
service's ``DispatcherState::Apply(Update)`` beside a separate journal writer.
An update that does not fit the state raises ``ValueError`` and changes
nothing. The policies (``grant``, ``expire``) read the state and return
updates without applying them; Ray only carries the calls.

>>> from jdata.service import state as st
>>> s = st.DispatcherState()
>>> for update in (st.WorkerJoined("w0"), st.WorkerJoined("w1"),
...                st.JobCreated("j", None, "fp", 0, num_splits=3, mode="dynamic"),
...                st.ClientSeen("j", "c", time=0.0)):
...     s.apply(update)
>>> granted = st.grant(s, "j", "c", count=2, max_outstanding=8)
>>> granted.leases
((0, 'w0'), (1, 'w1'))
>>> s.apply(granted)
>>> s.apply(st.WorkerLost("w1"))  # split 1 waits for re-issue to client "c"
>>> st.grant(s, "j", "c", count=2, max_outstanding=8).leases
((1, 'w0'), (2, 'w0'))
"""

from __future__ import annotations

from jdata.service._job import Job, JobInfo
from jdata.service._policies import expire as expire
from jdata.service._policies import grant as grant
from jdata.service._policies import job_summary as job_summary
from jdata.service._updates import ClientGone as ClientGone
from jdata.service._updates import ClientSeen as ClientSeen
from jdata.service._updates import JobCreated as JobCreated
from jdata.service._updates import JobRemoved as JobRemoved
from jdata.service._updates import LeasesGranted as LeasesGranted
from jdata.service._updates import SplitsDone as SplitsDone
from jdata.service._updates import WorkerJoined as WorkerJoined
from jdata.service._updates import WorkerLost as WorkerLost
from jdata.service._updates import decode as decode
from jdata.service._updates import encode as encode

__all__ = ["ClientGone", "ClientSeen", "DispatcherState", "JobCreated", "JobInfo",
           "JobRemoved", "LeasesGranted", "SplitsDone", "WorkerJoined", "WorkerLost",
           "decode", "encode", "expire", "grant", "job_summary"]


class DispatcherState:
    """Jobs (with their splits, leases and clients) and the alive workers, in join order."""

    def __init__(self):
        self._jobs: dict[str, Job] = {}
        self._names: dict[tuple[str, int], str] = {}  # (name, epoch) -> job_id
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
            self.find_job(u.name, u.fingerprint, u.epoch)  # raises for another pipeline
            if (u.name, u.epoch) in self._names:
                raise ValueError(f"JobCreated: job name={u.name!r} epoch={u.epoch} exists as "
                                 f"job {self._names[u.name, u.epoch]!r}; join that job")
            self._names[u.name, u.epoch] = u.job_id
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

    def _leases_granted(self, u: LeasesGranted) -> None:
        job = self._job(u.job_id, "LeasesGranted")
        job.check_grant(u.client_id, u.leases, self._alive)
        job.grant(u.client_id, u.leases)

    def _splits_done(self, u: SplitsDone) -> None:
        job = self._job(u.job_id, "SplitsDone")
        job.check_done(u.client_id, u.splits)
        job.mark_done(u.client_id, u.splits)

    def _client_seen(self, u: ClientSeen) -> None:
        job = self._job(u.job_id, "ClientSeen")
        if u.client_id in job.gone:
            job.check_client(u.client_id)  # raises: a gone client does not come back
        job.see(u.client_id, u.time)

    def _client_gone(self, u: ClientGone) -> None:
        job = self._job(u.job_id, "ClientGone")
        job.check_client(u.client_id)
        job.release_client(u.client_id)

    def _job_removed(self, u: JobRemoved) -> None:
        job = self._jobs.pop(self._job(u.job_id, "JobRemoved").created.job_id)
        if job.created.name is not None:
            del self._names[job.created.name, job.created.epoch]

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

    def job(self, job_id: str) -> JobInfo:
        """A snapshot of the job: its fields, done count, leases and clients."""
        return self._job(job_id, "job").info()

    def spec(self, job_id: str) -> JobCreated:
        """The update that created the job: its name, fingerprint, epoch, splits and mode."""
        return self._job(job_id, "spec").created

    def find_job(self, name: str, fingerprint: str, epoch: int) -> str | None:
        """The id of the job ``name`` runs for ``epoch``, or ``None``.

        A name is one pipeline's: a job of that name and epoch over another
        pipeline (``fingerprint``) is a ``ValueError``, as in tf.data service.
        """
        job_id = self._names.get((name, epoch))
        if job_id is None:
            return None
        if self._jobs[job_id].created.fingerprint != fingerprint:
            raise ValueError(f"job name={name!r} epoch={epoch} runs another pipeline (its "
                             f"fingerprint is {self._jobs[job_id].created.fingerprint!r}, "
                             f"not {fingerprint!r}); give this pipeline another job name")
        return job_id

    def alive_workers(self) -> tuple[str, ...]:
        """The alive workers, in join order."""
        return tuple(self._alive)

    def leases_of(self, job_id: str, client_id: str) -> tuple[tuple[int, str | None], ...]:
        """The client's unfinished leases, by split; worker ``None``: awaiting re-issue."""
        job = self._job(job_id, "leases_of")
        return tuple((split, job.leases[split][1])
                     for split in sorted(job.by_client.get(client_id, ())))

    def clients(self, job_id: str) -> dict[str, float]:
        """The job's clients and when each was last seen (a copy)."""
        return dict(self._job(job_id, "clients").clients)

    def last_seen(self, job_id: str) -> float | None:
        """When any client of the job was last seen; ``None`` if it never had one."""
        return self._job(job_id, "last_seen").last_seen

    def finished(self, job_id: str) -> bool:
        """Whether every split of the job is done (at once for ``mode="off"``: no splits)."""
        job = self._job(job_id, "finished")
        return job.done == job.created.num_splits

    def free_splits(self, job_id: str, count: int) -> list[int]:
        """The ``count`` lowest splits neither leased nor done (fewer if fewer are)."""
        return self._job(job_id, "free_splits").lowest_free(count)

    def worker_loads(self, job_id: str) -> dict[str, int]:
        """Each alive worker's unfinished leases in the job, in join order."""
        by_worker = self._job(job_id, "worker_loads").by_worker
        return {worker_id: len(by_worker.get(worker_id, ())) for worker_id in self._alive}


_HANDLERS = {JobCreated: DispatcherState._job_created, WorkerJoined: DispatcherState._worker_joined,
             WorkerLost: DispatcherState._worker_lost,
             LeasesGranted: DispatcherState._leases_granted,
             SplitsDone: DispatcherState._splits_done, ClientSeen: DispatcherState._client_seen,
             ClientGone: DispatcherState._client_gone, JobRemoved: DispatcherState._job_removed}
