"""The dispatcher role: a named, detached Ray actor (``max_restarts=-1``, pinned to the
head node) that keeps the service's books and wires them to Ray.

- **Ledger**: ``state.DispatcherState`` (jobs, units, leases, clients, workers), a
  pure state machine changed only by updates, each journaled (``journal.Journal``,
  SQLite WAL in ``work_dir``) as it is applied, so a restarted dispatcher replays the
  journal and carries on. Client requests are decided by ``_requests`` over it,
  one journal transaction per request. ``ClientSeen`` is applied but never
  journaled: a restarted dispatcher counts every client it knows as seen at its start.
- **Membership** (``_membership``): workers started, joined, pinged, lost.
- **Coordination** (``_coordination``): coordinated jobs' schedules and agreements.
- **Scaling** (``_scaling``): the worker count, Cachew's autoscaler, draining.

The journal is compacted (a snapshot of the state in place of the records before it)
whenever the records since the last snapshot outweigh it, so a restart replays little
at any age. When it cannot be written (its disk full or failing), the state goes back
to what the journal holds, and the dispatcher refuses what would change its books
(``ServiceUnavailableError``), reads aside, until a snapshot writes again, tried
every monitor tick; ``status().journal`` says so. ``work_dir`` is locked
(``_work_dir``): one dispatcher journals into it.

Locks: ``_ledger_lock`` guards the state and the journal, and is the only one held
while another is taken (each module's own lock is a leaf: held for its own tables,
never across a call out). A monitor thread pings the workers twice a second, joins
started ones, replaces lost ones, drives the autoscaler and expires silent clients; a step
that fails is reported (``status().monitor_errors``) and the next tick goes on.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
import traceback

from jdata._errors import ServiceUnavailableError
from jdata.service import (
    _autocache_plans,
    _coordination,
    _dispatcher_stats,
    _policies,
    _requests,
    _work_dir,
)
from jdata.service import journal as journal_module
from jdata.service import state as st
from jdata.service._coordination import ROUND_LEAD as ROUND_LEAD
from jdata.service._coordination import ROUNDS_PER_READ as ROUNDS_PER_READ
from jdata.service._coordination import Coordination
from jdata.service._membership import WORKER_PREFIX as WORKER_PREFIX
from jdata.service._membership import Members
from jdata.service._scaling import Scaling
from jdata.service._status import (
    AutocacheStatus,
    JournalStatus,
    ProcessInfo,
    ServiceStatus,
    memory_bytes,
)

NAME = "jdata-dispatcher"
_PING_SEC = 0.5
# A named job with no client is kept this long by default, for its clients' restores.
JOB_TIMEOUT_SEC = 3600.0
# The journal is compacted once the records since its snapshot weigh more than the
# snapshot and this: each byte of state is rewritten at most about once per byte appended.
COMPACT_MIN_BYTES = 128 * 1024


class Dispatcher:
    """The actor class (wrapped with ``ray.remote`` by ``jdata.service``)."""

    def __init__(self, work_dir: str, namespace: str, num_workers: int, worker_cpus: float,
                 client_timeout: float, window_bytes: int | None = None,
                 max_workers: int | None = None, cache_dir: str | None = None,
                 job_timeout: float | None = None, split_elements: int | None = None):
        os.makedirs(work_dir, exist_ok=True)
        self._work_dir_lock = _work_dir.take(work_dir, namespace)  # held while this lives
        self._path = path = os.path.join(work_dir, "journal.sqlite")
        self._ledger_lock = threading.RLock()  # guards _state, _journal and _fault
        self._state = journal_module.restore(path) if os.path.exists(path) else \
            st.DispatcherState()
        self._journal = journal_module.Journal(path)
        self._fault: tuple[str, float] | None = None  # (why it cannot journal, since)
        self._compactions = 0
        self._monitor_errors: collections.Counter = collections.Counter()
        self._client_timeout = client_timeout
        self._job_timeout = job_timeout or JOB_TIMEOUT_SEC
        self._split_elements = split_elements
        self._stats = _dispatcher_stats.Stats()
        self._conflicts: dict[str, collections.Counter] = {}  # by job: restores' conflicts
        # Clients waiting for units (a lease granted nothing while they had nothing to
        # yield): (job, client) -> since when. Guarded by _ledger_lock.
        self._waiting: dict[tuple[str, str], float] = {}
        # Units granted (and slots placed) per worker since the workers last changed: the
        # grant policy's tie-break, so small jobs spread over the workers (a hint: it starts
        # again after a restart).
        self._spread: collections.Counter = collections.Counter()
        self._members = Members(namespace, worker_cpus, window_bytes, client_timeout,
                                self._commit, self._alive)
        self._scaling = Scaling(self._members, self._alive, self._loads, num_workers,
                                worker_cpus, max_workers)
        self._coordination = Coordination()
        self._caches_lock = threading.Lock()  # guards _caches
        # Autocache: per pipeline (its fingerprint), the profile, decision and its caches.
        self._caches = _autocache_plans.Plans(cache_dir or os.path.join(work_dir, "autocache"),
                                              self._start_profile, self._poll_profile)
        self._stop = threading.Event()
        self._members.recover()
        self._grace()
        self._scaling.fill()
        threading.Thread(target=self._monitor, name="jdata-dispatcher-monitor",
                         daemon=True).start()

    # ------------------------------------------------------------ the ledger

    def _alive(self) -> tuple:
        with self._ledger_lock:
            return self._state.alive_workers()

    def _loads(self) -> dict:
        with self._ledger_lock:
            return self._state.worker_loads()

    def _commit(self, updates: list) -> None:
        """Applies ``updates`` and journals them in one transaction."""
        self._decide(lambda apply: [apply(u) for u in updates])

    def _decide(self, handler):
        """``handler(apply)`` under the ledger lock: each update it applies is journaled
        (in one transaction, when it returns or raises); a removed job stops on the
        workers. What is journaled is exactly what was applied (``ClientSeen`` aside)."""
        applied: list = []

        def apply(update) -> None:
            if self._fault is not None and type(update) is not st.ClientSeen:
                raise self._unavailable()
            self._state.apply(update)  # raises, changing nothing, if it does not fit
            applied.append(update)

        with self._ledger_lock:
            try:
                return handler(apply)
            finally:
                journaled = [u for u in applied if type(u) is not st.ClientSeen]
                if journaled:
                    self._append(journaled)
                removed = [u.job_id for u in applied if type(u) is st.JobRemoved]
                if removed:
                    self._removed(removed)
                if any(type(u) in (st.WorkerJoined, st.WorkerLost) for u in applied):
                    self._spread.clear()  # grants since the workers changed: all start even

    def _append(self, updates: list) -> None:
        """Journals applied ``updates``; if the journal cannot take them, the state goes
        back to what it holds (the caller's request failed: nobody was told of them)."""
        try:
            self._journal.append(updates)
        except journal_module.JournalError as error:
            self._fail(error)
            try:
                self._state = journal_module.restore(self._path)
                self._state.grace(time.time())
            except (journal_module.JournalError, OSError):
                # Unreadable too: the state stays ahead of the journal until a snapshot
                # writes it. Safe: a lease its client never heard of comes with its next
                # lease reply, and a client that never heard its id expires.
                pass
            raise self._unavailable() from error
        if self._journal.tail_bytes > max(COMPACT_MIN_BYTES, self._journal.snapshot_bytes):
            try:
                self._compact()
            except journal_module.JournalError as error:  # the records are in: only say so
                self._fail(error)

    def _compact(self) -> None:
        self._journal.compact(self._state)
        self._compactions += 1
        self._fault = None

    def _fail(self, error: Exception) -> None:
        if self._fault is None:
            self._fault = (str(error), time.time())
            print(f"jdata dispatcher: cannot write the journal: {error}; refusing new jobs, "
                  "clients and leases until it can", file=sys.stderr, flush=True)

    def _unavailable(self) -> ServiceUnavailableError:
        why, since = self._fault
        return ServiceUnavailableError(
            f"the jdata dispatcher cannot write its journal {self._path} since "
            f"{time.strftime('%H:%M:%S', time.localtime(since))} ({why}), so it takes no "
            "new jobs, clients or leases; reads of what was granted go on. Free space on "
            "that disk: it recovers by itself within a second of being able to write")

    def _retry_journal(self) -> None:
        """While the journal cannot be written: a snapshot of the state (what the journal
        holds: nothing changed since) is tried; once written, requests are taken again."""
        if self._fault is None:  # the usual tick: no lock taken
            return
        with self._ledger_lock:
            try:
                self._compact()
            except journal_module.JournalError:
                return
        print("jdata dispatcher: the journal can be written again", file=sys.stderr,
              flush=True)

    def _removed(self, job_ids: list) -> None:
        for job_id in job_ids:
            self._members.tell_all("stop_job", job_id)
            self._conflicts.pop(job_id, None)
        jobs = set(self._state.jobs)
        self._waiting = {key: t for key, t in self._waiting.items() if key[0] in jobs}
        self._coordination.keep(jobs)
        self._stats.clients.keep(lambda key: key[0] in jobs)

    def _grace(self) -> None:
        """After a restart, clients count as seen now: the dispatcher's downtime is not
        their silence."""
        with self._ledger_lock:
            self._state.grace(time.time())

    # ------------------------------------------------------------ workers

    def _lose(self, worker_id: str) -> None:
        if self._members.lose(worker_id):
            self._scaling.forget(worker_id)

    def _monitor(self) -> None:
        steps = (self._retry_journal, self._ping_workers,
                 lambda: self._members.join_started(self._stats.worker_seen),
                 self._scaling.fill, self._scaling.drain,
                 lambda: self._scaling.tick(self._client_reports(), self._worker_reports()),
                 self._expire)
        while not self._stop.wait(_PING_SEC):
            for step in steps:  # each on its own: one failing stops none of the others
                try:
                    step()
                except ServiceUnavailableError:  # the journal: retried first, each tick
                    pass
                except Exception as error:  # a bug or Ray's: said, counted, tried again
                    self._monitor_errors[f"{type(error).__name__}: {error}"[:200]] += 1
                    traceback.print_exc(file=sys.stderr)

    def _ping_workers(self) -> None:
        for worker_id, info in self._members.ping().items():
            if info is None:
                self._lose(worker_id)
            else:
                self._stats.worker_seen(worker_id, info)

    def _expire(self) -> None:
        self._decide(lambda apply: [apply(u) for u in _policies.expire(
            self._state, time.time(), self._client_timeout, self._job_timeout)])

    def _client_reports(self) -> dict:
        with self._ledger_lock:
            keys = [(j, c) for j in self._state.jobs for c in self._state.clients(j)]
        reports = {key: self._stats.clients.latest(key) for key in keys}
        return {key: report for key, report in reports.items() if "time" in report}

    def _worker_reports(self) -> dict:
        return {w: self._stats.workers.latest(w) for w in self._alive()}

    # ------------------------------------------------------------ the clients' calls

    def register(self, request):
        """``_requests.register``: a ``Register`` in, a ``Registered`` out."""
        reply = self._decide(lambda apply: _requests.register(
            self._state, request, apply, now=time.time(), job_id=f"job-{os.urandom(6).hex()}",
            client_id=f"client-{os.urandom(6).hex()}", client_timeout=self._client_timeout))
        if reply.conflicts and reply.job_id is not None:
            counts = self._conflicts.setdefault(reply.job_id, collections.Counter())
            counts.update(c.where for c in reply.conflicts)
        return reply

    def lease(self, request):
        """``_requests.lease``: a ``LeaseRequest`` in, a ``LeaseReply`` out."""
        def handler(apply):
            reply = _requests.lease(self._state, request, apply, now=time.time(),
                                    exclude=self._scaling.draining(), spread=self._spread)
            self._spread.update(grant.worker_id for grant in reply.grants)
            key = (request.job_id, request.client_id)
            if request.waiting and not reply.grants and reply.waiting_on:
                self._waiting.setdefault(key, time.monotonic())
            else:
                self._waiting.pop(key, None)
            return reply
        return self._decide(handler)

    def return_units(self, request):
        """``_requests.return_units``: an idle client hands its units off."""
        return self._decide(lambda apply: _requests.return_units(self._state, request, apply))

    def commit(self, request):
        """``_requests.commit``: a consumer's state was taken (named jobs)."""
        return self._decide(lambda apply: _requests.commit(self._state, request, apply,
                                                           now=time.time()))

    def release(self, request):
        """``_requests.release``: a consumer closed its iterator or ended its epoch. After
        ``stop``, as a trainer closes its iterators once the service is gone: nothing."""
        if self._stop.is_set():
            return None
        return self._decide(lambda apply: _requests.release(self._state, request, apply))

    def heartbeat(self, job_id: str, client_id: str, report=None):
        """A client lives; ``report``: its totals (``_session.ClientReport``). The reply
        (``HeartbeatReply``) tells an idle client to hand its units to a waiting peer."""
        idle = report.idle_sec if report is not None else 0.0

        def handler(apply):
            now = time.monotonic()
            live = set(self._state.clients(job_id)) if job_id in self._state.jobs else set()
            peers = any(now - since >= _requests.HANDOFF_IDLE_SEC / 3 for (j, c), since
                        in self._waiting.items() if j == job_id and c != client_id and c in live)
            return _requests.heartbeat(self._state, job_id, client_id, apply,
                                       now=time.time(), idle_sec=idle, peers_waiting=peers)
        reply = self._decide(handler)
        if report is not None and reply.standing is _requests.Standing.OK:
            self._stats.client_seen(job_id, client_id, report)
        return reply

    def report_lost(self, worker_id: str) -> None:
        """A client saw a read fail: check the worker now rather than at the next ping."""
        if self._members.ping([worker_id]).get(worker_id, 0) is None:
            self._lose(worker_id)
            self._scaling.fill()

    def workers(self) -> list:
        return list(self._alive())

    def split_elements(self) -> int | None:
        """Elements per split of jobs whose clients give none (``service.start``'s)."""
        return self._split_elements

    def slots(self, job_id: str, client_id: str) -> dict | None:
        """A shared job's slot placements (``slot -> worker``), unplaced ones placed now;
        ``None`` for a client the job no longer has (expired: it registers again)."""
        def handler(apply):
            if _requests.standing(self._state, job_id, client_id) is not \
                    _requests.Standing.OK:
                return None
            placed = _policies.place(self._state, job_id, self._scaling.draining(),
                                     self._spread)
            if placed is not None:
                apply(placed)
                self._spread.update(worker_id for _, worker_id in placed.placements)
            return dict(self._state.ledger(job_id).placements)
        return self._decide(handler)

    def schedule(self, job_id: str, client_id: str, round_index: int | None) -> tuple:
        """A coordinated job's schedule (see ``_coordination``), entries added for the
        workers serving now, and the furthest round its consumers reported; ``None``
        for a job the service no longer has."""
        furthest = self._coordination.furthest(job_id, client_id, round_index)
        serving = self._scaling.serving()

        def handler(apply):
            if job_id not in self._state.jobs:
                return None
            alive = set(self._state.alive_workers())
            placing = self._coordination.placing_round(job_id, self._state.clients(job_id))
            entry = _coordination.next_entry(
                job_id, self._state.ledger(job_id).schedule, placing,
                [worker_id for worker_id in serving if worker_id in alive])
            if entry is not None:
                apply(entry)
            return list(self._state.ledger(job_id).schedule), furthest or 0
        return self._decide(handler)

    def run_outcome(self, job_id: str, client_id: str, start: int, received: bool,
                    wait_sec: float = 0.0) -> str:
        """A coordinated consumer's report on a run (``Coordination.run_outcome``)."""
        with self._ledger_lock:
            live = set(self._state.clients(job_id)) if job_id in self._state.jobs else set()
        return self._coordination.run_outcome(job_id, client_id, start, received, wait_sec,
                                              live)

    # ------------------------------------------------------------ autocache

    def autocache(self, job_fp: str, keys: dict, allowed: dict, forced: str | None,
                  plan_ref: list, epoch: int) -> dict:
        """How an epoch of a pipeline with an ``autocache()`` marker runs
        (``_autocache_plans.Plans.answer``), and the store: ``{"action": "compute" | "put"
        | "get", "point", "reason", "store"}``."""
        with self._caches_lock:
            answer = self._caches.answer(job_fp, keys, allowed, forced, plan_ref, epoch)
        return dict(answer, store=self._caches.store)

    def _start_profile(self, job_fp: str, plan_ref: list):
        """Autocache's profile of a pipeline, measured on a worker during its epoch 1."""
        serving = self._scaling.serving()
        handle = self._members.handle(serving[0]) if serving else None
        if handle is None:
            raise RuntimeError("no worker to profile on")
        return handle.profile.remote(job_fp, plan_ref, self._caches.store)

    @staticmethod
    def _poll_profile(ref) -> dict | None:
        import ray

        if not ray.wait([ref], timeout=0)[0]:
            return None
        return ray.get(ref)

    def autocache_failed(self, job_fp: str, why: str) -> None:
        """A client could not write the cache: the pipeline computes from now on."""
        with self._caches_lock:
            self._caches.failed(job_fp, why)

    def autocache_written(self, job_fp: str, point: str, summary: dict) -> None:
        """A client wrote a cache (its parts and manifest): for ``status()``."""
        with self._caches_lock:
            self._caches.written(job_fp, point, summary)

    # ------------------------------------------------------------ operations

    def version(self) -> dict:
        """``{"jdata", "protocol"}`` (``_version``: joining clients compare it), and
        ``"stopping"``: whether ``stop`` ran (clients then tell a stop from a failure)."""
        from jdata.service import _version

        return {**_version.reported(), "stopping": self._stop.is_set()}

    def scale(self, num_workers: int) -> None:
        """Sets a fixed worker count (``Scaling.scale``; ``AUTOTUNE``: the autoscaler's)."""
        self._scaling.scale(num_workers)

    def status(self) -> ServiceStatus:
        import ray

        draining = self._scaling.draining()
        workers = []
        for worker_id, info in self._members.ping().items():
            if info is not None:
                self._stats.worker_seen(worker_id, info)
            workers.append(self._stats.worker_status(worker_id, "unreachable" if info is None
                                                     else "draining" if worker_id in draining
                                                     else "running"))
        workers += [self._stats.worker_status(w, "starting") for w in self._members.starting()]
        alive = self._alive()
        self._stats.workers.keep(lambda key: key in alive)
        with self._ledger_lock:
            infos = [self._state.job(job_id) for job_id in self._state.jobs]
        jobs = [self._stats.job_status(info, alive, self._conflicts.get(info.job_id, {}))
                for info in infos]
        with self._caches_lock:
            caches = [AutocacheStatus(**entry) for entry in self._caches.status()]
        return ServiceStatus(ProcessInfo(os.getpid(), ray.get_runtime_context().get_node_id(),
                                         memory_bytes()),
                             workers, jobs, self._scaling.status(), caches,
                             self._journal_status(), dict(self._monitor_errors))

    def _journal_status(self) -> JournalStatus:
        size = sum(os.path.getsize(p) for p in (self._path, self._path + "-wal")
                   if os.path.exists(p))
        with self._ledger_lock:
            why, since = self._fault or (None, None)
            return JournalStatus(self._path, size, self._journal.snapshot_bytes,
                                 self._journal.tail_bytes, self._compactions,
                                 self._fault is None, why, since)

    def stop(self) -> None:
        """Stops the monitor and every worker (the actor itself is killed by the caller)."""
        self._stop.set()
        self._members.stop()
        with self._ledger_lock:
            self._journal.close()
