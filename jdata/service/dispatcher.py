"""The dispatcher role: jobs, splits, leases and worker membership, journaled.

The dispatcher is a named, detached Ray actor (``max_restarts=-1``, pinned
to the head node). Its state is ``state.DispatcherState``, a pure state
machine; this actor only wires it to Ray: every change is an update that is
journaled (``journal.Journal``, SQLite WAL in ``work_dir``) and then applied,
so a restarted dispatcher replays the journal and carries on. Leases are
granted in batches, one journal transaction per client request.

A monitor thread pings the workers: a worker that does not answer (its
actor died, or its node went away) is lost within ``_PING_TIMEOUT_SEC``, its
unfinished leases go back to the pool, and a replacement keeps the worker
count. A new worker joins (gets leases) once it has answered a first ping:
until then it is only starting, maybe waiting for a node with room, and a
split leased to it would wait as long. Clients that stopped heartbeating lose their leases
after ``client_timeout`` and jobs without clients are removed.
"""

from __future__ import annotations

import collections
import os
import threading
import time

from jdata._constants import AUTOTUNE
from jdata.service import _autocache_plans, _rounds, _run_outcomes, autoscaler
from jdata.service import journal as journal_module
from jdata.service import state as st
from jdata.service import worker as worker_module

NAME = "jdata-dispatcher"
WORKER_PREFIX = "jdata-worker-"
_PING_SEC = 0.5
# A worker that answers no ping for this long is lost (Ray reports a dead actor
# at once; this bounds a hung or unreachable one, as on a node that went away).
# A busy worker answers within milliseconds: its actor has threads to spare.
_PING_TIMEOUT_SEC = 4.0
# A coordinated job's rounds go to workers in runs of this many (one request of a client
# reads a run); a new schedule entry starts this many rounds past its furthest client.
ROUNDS_PER_READ = 8
ROUND_LEAD = 64
# Rates in status() are over the samples of the last this many seconds.
_RATE_WINDOW_SEC = 10.0
# A draining worker still holding splits after this long is removed anyway (its splits
# are read elsewhere, past what their clients received).
_DRAIN_TIMEOUT_SEC = 30.0
# Workers still starting after this long wait for room that is not coming soon (Ray's
# autoscaler adds a node within a minute or two): the autoscaler then samples the workers
# that run, and a probe whose worker never started turns down (``Policy``).
_ROOM_WAIT_SEC = 120.0


class _Recent:
    """Recent samples of cumulative counters per key (a worker, a client): rates over
    the last ``_RATE_WINDOW_SEC``. Not journaled: statistics start again after a
    restart."""

    def __init__(self):
        self._samples: dict = {}

    def add(self, key, counters: dict) -> None:
        now = time.monotonic()
        samples = self._samples.setdefault(key, collections.deque())
        samples.append((now, counters))
        while len(samples) > 2 and now - samples[1][0] >= _RATE_WINDOW_SEC:
            samples.popleft()

    def latest(self, key) -> dict:
        samples = self._samples.get(key)
        return samples[-1][1] if samples else {}

    def rate(self, key, name: str) -> float:
        samples = self._samples.get(key)
        if not samples or len(samples) < 2:
            return 0.0
        (t0, first), (t1, last) = samples[0], samples[-1]
        return max(0.0, (last.get(name, 0) - first.get(name, 0)) / max(t1 - t0, 1e-9))

    def keep(self, keys) -> None:
        for key in set(self._samples) - set(keys):
            del self._samples[key]


class Dispatcher:
    """The actor class (wrapped with ``ray.remote`` by ``jdata.service``)."""

    def __init__(self, work_dir: str, namespace: str, num_workers: int, worker_cpus: float,
                 client_timeout: float, window_bytes: int | None = None,
                 max_workers: int | None = None, cache_dir: str | None = None):
        os.makedirs(work_dir, exist_ok=True)
        path = os.path.join(work_dir, "journal.sqlite")
        self._state = journal_module.restore(path) if os.path.exists(path) else \
            st.DispatcherState()
        self._journal = journal_module.Journal(path)
        self._namespace = namespace
        self._max_workers = max_workers
        # Autocache: per pipeline (its fingerprint), the profile, decision and its caches.
        self._caches = _autocache_plans.Plans(cache_dir or os.path.join(work_dir, "autocache"),
                                              self._start_profile, self._poll_profile)
        self._scaler: autoscaler.Driver | None = None
        self._draining: dict[str, float] = {}  # worker id -> when its draining began
        self._target = num_workers
        self._worker_cpus = worker_cpus
        self._client_timeout = client_timeout
        self._window_bytes = window_bytes
        self._lock = threading.RLock()
        self._runs_changed = threading.Condition(self._lock)  # coordinated runs' reports
        self._handles: dict = {}  # joined workers
        self._starting: dict = {}  # worker id -> (handle, its first ping, when it started)
        self._workers_recent, self._clients_recent = _Recent(), _Recent()
        # Coordinated jobs: (first round, workers) entries, and each client's round.
        self._schedules: dict[str, list] = {}
        self._rounds_seen: dict[str, dict] = {}
        self._outcomes: dict[str, _run_outcomes.Outcomes] = {}  # runs used or skipped
        self._stop = threading.Event()
        if num_workers == AUTOTUNE:
            self._autotune(len(self._state.alive_workers()))
        self._recover_workers()
        self._grace()
        self._fill()
        threading.Thread(target=self._monitor, name="jdata-dispatcher-monitor",
                         daemon=True).start()

    # ------------------------------------------------------------ journaled changes

    def _commit(self, updates: list) -> None:
        """Applies ``updates`` and journals them in one transaction."""
        with self._lock:
            applied: list = []
            try:
                self._apply(updates, applied)
            finally:
                self._journal_append(applied)

    def _apply(self, updates: list, applied: list) -> None:
        """Applies each update, recording it in ``applied``. An update that does not fit
        the state raises (``DispatcherState.apply`` changes nothing then), so what
        is journaled is exactly what was applied: a restart replays this process."""
        for update in updates:
            if update is not None:
                self._state.apply(update)
                applied.append(update)

    def _journal_append(self, applied: list) -> None:
        if applied:
            self._journal.append(applied)

    # ------------------------------------------------------------ workers

    def _recover_workers(self) -> None:
        """After a restart: the joined workers' handles; workers that were starting (not in
        the journal) are stopped rather than left running (``_fill`` replaces them)."""
        import ray

        for worker_id in self._state.alive_workers():
            try:
                self._handles[worker_id] = ray.get_actor(worker_id, namespace=self._namespace)
            except ValueError:  # gone while the dispatcher was down
                self._commit([st.WorkerLost(worker_id=worker_id)])
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name = entry["name"]
            if (entry.get("namespace") == self._namespace and name.startswith(WORKER_PREFIX)
                    and name not in self._handles):
                try:
                    ray.kill(ray.get_actor(name, namespace=self._namespace))
                except Exception:  # gone meanwhile
                    pass

    def _grace(self) -> None:
        """After a restart, clients count as seen now: the dispatcher's downtime is not
        their silence."""
        now = time.time()
        self._commit([st.ClientSeen(job_id=job_id, client_id=client_id, time=now)
                      for job_id in self._state.jobs for client_id in self._state.clients(job_id)])

    def _fill(self) -> None:
        with self._lock:
            missing = (self._target - len(self._state.alive_workers()) + len(self._draining)
                       - len(self._starting))
            for _ in range(max(missing, 0)):
                self._add_worker()

    def _add_worker(self) -> None:
        import ray

        worker_id = f"{WORKER_PREFIX}{os.urandom(4).hex()}"
        actor = ray.remote(worker_module.Worker).options(
            name=worker_id, namespace=self._namespace, lifetime="detached",
            num_cpus=self._worker_cpus, max_concurrency=worker_module.MAX_READS,
            max_restarts=0)
        # A shared job's window lives as long as a client could still come back to it.
        handle = actor.remote(worker_id, self._window_bytes, self._client_timeout)
        self._starting[worker_id] = (handle, handle.info.remote(), time.monotonic())

    def _join_started(self) -> None:
        """Starting workers that answered their first ping join; one whose start failed is
        dropped (``_fill`` starts another)."""
        import ray

        with self._lock:
            pings = {ref: worker_id for worker_id, (_, ref, _) in self._starting.items()}
        if not pings:
            return
        ready, _ = ray.wait(list(pings), num_returns=len(pings), timeout=0)
        for ref in ready:
            worker_id = pings[ref]
            try:
                info = ray.get(ref)
            except Exception:  # its creation failed (or it died at once)
                with self._lock:
                    self._starting.pop(worker_id, None)
                continue
            with self._lock:
                entry = self._starting.pop(worker_id, None)
                if entry is None:  # scaled away meanwhile
                    continue
                self._handles[worker_id] = entry[0]
                self._commit([st.WorkerJoined(worker_id=worker_id)])
                self._workers_recent.add(worker_id, info)

    def _lose(self, worker_id: str) -> None:
        import ray

        with self._lock:
            if worker_id not in self._state.alive_workers():
                return
            self._commit([st.WorkerLost(worker_id=worker_id)])
            self._draining.pop(worker_id, None)
            handle = self._handles.pop(worker_id, None)
        if handle is not None:
            try:
                ray.kill(handle)
            except Exception:  # already dead
                pass

    def _ping(self, handles: dict) -> dict:
        """``info()`` of each worker, all at once, within ``_PING_TIMEOUT_SEC``; None for
        a worker that did not answer (died, hung, or its node went away)."""
        import ray

        refs = {worker_id: h.info.remote() for worker_id, h in handles.items()}
        if refs:
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=_PING_TIMEOUT_SEC)
        infos = {}
        for worker_id, ref in refs.items():
            try:
                infos[worker_id] = ray.get(ref, timeout=0)
            except Exception:  # RayActorError, GetTimeoutError, a lost node
                infos[worker_id] = None
        return infos

    def _monitor(self) -> None:
        while not self._stop.wait(_PING_SEC):
            with self._lock:
                handles = dict(self._handles)
            for worker_id, info in self._ping(handles).items():
                if info is None:
                    self._lose(worker_id)
                    continue
                with self._lock:
                    self._workers_recent.add(worker_id, info)
            self._join_started()
            self._fill()
            self._drain()
            if self._scaler is not None:
                self._autoscale()
            with self._lock:
                self._commit(st.expire(self._state, time.time(), self._client_timeout))
                for job_id in [j for j in self._schedules if j not in self._state.jobs]:
                    del self._schedules[job_id]
                    self._rounds_seen.pop(job_id, None)
                    self._outcomes.pop(job_id, None)
                self._clients_recent.keep({(job_id, client_id) for job_id in self._state.jobs
                                           for client_id in self._state.clients(job_id)})

    # ------------------------------------------------------------ the clients' calls

    def register(self, name, fingerprint: str, epoch: int, num_splits: int, mode: str,
                 client_id: str, done: list | None = None) -> tuple[str, float]:
        """The job of (name, fingerprint, epoch): a named job is shared by its clients.
        Returns its id and the client timeout (the client's heartbeats come well within).

        ``done``: splits a restored iterator has yielded already (``[start, stop)``
        ranges); a new job starts with them done, granted and finished at once.
        """
        with self._lock:
            job_id = self._state.find_job(name, fingerprint, epoch) if name else None
            if job_id is not None:
                job = self._state.job(job_id)
                if job.num_splits != num_splits or job.mode != mode:
                    raise ValueError(
                        f"job_name={name!r} is running with processing_mode={job.mode!r} "
                        f"over {job.num_splits} splits; this client asks for {mode!r} over "
                        f"{num_splits}: name another job")
                updates = []
            else:
                job_id = f"job-{os.urandom(6).hex()}"
                updates = [st.JobCreated(job_id=job_id, name=name, fingerprint=fingerprint,
                                         epoch=epoch, num_splits=num_splits, mode=mode)]
            updates.append(st.ClientSeen(job_id=job_id, client_id=client_id, time=time.time()))
            alive = self._state.alive_workers()
            restored = sorted({s for start, stop in done or () for s in range(start, stop)})
            if restored and not (job_id in self._state.jobs and self._state.job(job_id).done):
                if not alive:
                    raise RuntimeError("jdata.service: no worker is alive")
                # Granted to a worker only to be recorded done: nothing is read.
                updates += [st.LeasesGranted(job_id=job_id, client_id=client_id,
                                             leases=tuple((s, alive[0]) for s in restored)),
                            st.SplitsDone(job_id=job_id, client_id=client_id,
                                          splits=tuple(restored))]
            self._commit(updates)
        return job_id, self._client_timeout

    def lease(self, job_id: str, client_id: str, count: int, max_outstanding: int,
              done: list) -> tuple[list, bool, int]:
        """Marks ``done`` splits, then grants up to ``count`` leases.

        Returns ``([(split, worker_id)...], exhausted, workers)``: ``exhausted``
        when no split is left for this client (all done or held by clients),
        ``workers`` the number alive (clients size their reads by it). One
        journal transaction per call. Splits already done (a call retried
        after a dispatcher restart lost its reply) are passed over.
        """
        with self._lock:
            applied: list = []
            try:
                held = {split for split, _ in self._state.leases_of(job_id, client_id)}
                done = tuple(sorted(split for split in set(done) if split in held))
                self._apply([st.ClientSeen(job_id=job_id, client_id=client_id, time=time.time()),
                             st.SplitsDone(job_id=job_id, client_id=client_id, splits=done)
                             if done else None], applied)
                granted = st.grant(self._state, job_id, client_id, count, max_outstanding,
                                   frozenset(self._draining)) \
                    if count > 0 and max_outstanding > 0 else None
                self._apply([granted], applied)
            finally:
                self._journal_append(applied)
            orphaned = any(w is None for _, w in self._state.leases_of(job_id, client_id))
            exhausted = not orphaned and not self._state.free_splits(job_id, 1)
            return ((list(granted.leases) if granted is not None else []), exhausted,
                    len(self._state.alive_workers()))

    def heartbeat(self, job_id: str, client_id: str, report: dict | None = None) -> None:
        """A client lives; ``report``: its totals (elements, bytes, wait_sec, buffered).

        Not journaled: a restarted dispatcher counts every client it knows as seen at
        its start. A client it does not know (it left, or timed out and lost its
        leases) stays gone: its next lease call says so.
        """
        with self._lock:
            if job_id not in self._state.jobs or client_id not in self._state.clients(job_id):
                return
            self._state.apply(st.ClientSeen(job_id=job_id, client_id=client_id,
                                            time=time.time()))
            if report is not None:
                self._clients_recent.add((job_id, client_id), report)

    def release(self, job_id: str, client_id: str) -> None:
        """A client closed its iterator: its unfinished leases go back (after ``stop``,
        as a trainer closes its iterators once the service is gone: nothing to do)."""
        if self._stop.is_set():
            return
        with self._lock:
            if job_id in self._state.jobs and client_id in self._state.clients(job_id):
                self._commit([st.ClientGone(job_id=job_id, client_id=client_id)])

    def report_lost(self, worker_id: str) -> None:
        """A client saw a read fail: check the worker now rather than at the next ping."""
        with self._lock:
            handle = self._handles.get(worker_id)
        if handle is None:
            return
        if self._ping({worker_id: handle})[worker_id] is None:
            self._lose(worker_id)
            self._fill()

    def schedule(self, job_id: str, client_id: str, round_index: int | None) -> tuple:
        """A coordinated job's round schedule: ``([(first round, [worker ids])...], the
        furthest round a client reported)``. Round ``r`` is read from
        ``workers[r % len(workers)]`` of the last entry that starts at or before ``r``.
        When the workers change, a new entry starts ``_ROUND_LEAD`` rounds past the
        furthest client, so every client learns of it before it applies (they ask every
        ``ROUND_LEAD // 4`` rounds): they all read each round from the same worker. Entries
        start at multiples of ``ROUNDS_PER_READ``."""
        with self._lock:
            seen = self._rounds_seen.setdefault(job_id, {})
            if round_index is not None:
                seen[client_id] = max(round_index, seen.get(client_id, 0))
            furthest = max(seen.values(), default=0)
            entries = self._schedules.setdefault(job_id, [])
            alive = [w for w in self._state.alive_workers() if w not in self._draining]
            run = ROUNDS_PER_READ
            if alive and not entries:
                entries.append((furthest // run * run, alive))
            elif alive and entries[-1][1] != alive:
                start = max(furthest + ROUND_LEAD, entries[-1][0] + run)
                entries.append((-(-start // run) * run, alive))
            return list(entries), furthest

    # ------------------------------------------------------------ autocache

    def autocache(self, job_fp: str, keys: dict, allowed: dict, forced: str | None,
                  plan_ref: list, epoch: int) -> dict:
        """How an epoch of a pipeline with an ``autocache()`` marker runs
        (``_autocache_plans.Plans.answer``), and the store: ``{"action": "compute" | "put"
        | "get", "point", "reason", "store"}``."""
        with self._lock:
            answer = self._caches.answer(job_fp, keys, allowed, forced, plan_ref, epoch)
        return dict(answer, store=self._caches.store)

    def _start_profile(self, job_fp: str, plan_ref: list):
        """Autocache's profile of a pipeline, measured on a worker during its epoch 1."""
        alive = self._state.alive_workers()
        if not alive:
            raise RuntimeError("no worker to profile on")
        return self._handles[alive[0]].profile.remote(job_fp, plan_ref, self._caches.store)

    @staticmethod
    def _poll_profile(ref) -> dict | None:
        import ray

        if not ray.wait([ref], timeout=0)[0]:
            return None
        return ray.get(ref)

    def autocache_failed(self, job_fp: str, why: str) -> None:
        """A client could not write the cache: the pipeline computes from now on."""
        with self._lock:
            self._caches.failed(job_fp, why)

    def autocache_written(self, job_fp: str, point: str, summary: dict) -> None:
        """A client wrote a cache (its parts and manifest): for ``status()``."""
        with self._lock:
            self._caches.written(job_fp, point, summary)

    def run_outcome(self, job_id: str, client_id: str, start: int, received: bool,
                    wait_sec: float = 0.0) -> str:
        """A coordinated consumer received the run from round ``start`` (or lost it with
        its worker): ``"use"`` it, ``"skip"`` it, or ``"wait"`` and ask again, so that
        all consumers do the same (``_run_outcomes``). Waits up to ``wait_sec`` (at most
        1 s: a dispatcher thread is held) for the other consumers' reports."""
        deadline = time.monotonic() + min(wait_sec, 1.0)
        with self._runs_changed:
            outcomes = self._outcomes.get(job_id)
            if outcomes is None:
                outcomes = self._outcomes[job_id] = _run_outcomes.Outcomes(
                    _rounds.CONSUMER_TIMEOUT_SEC)
            self._runs_changed.notify_all()  # the waiting see this report once we wait
            while True:
                live = set(self._state.clients(job_id)) if job_id in self._state.jobs \
                    else set()
                outcome = outcomes.report(client_id, start, received, time.monotonic(), live)
                left = deadline - time.monotonic()
                if outcome != _run_outcomes.WAIT or left <= 0:
                    return outcome
                self._runs_changed.wait(left)

    def workers(self) -> list:
        with self._lock:
            return list(self._state.alive_workers())

    def scale(self, num_workers: int) -> None:
        """Sets a fixed worker count (the autoscaler stops): adds workers, or removes
        starting ones first, then the newest (their leases are re-issued).
        ``AUTOTUNE`` hands the count back to the autoscaler."""
        import ray

        if num_workers == AUTOTUNE:
            with self._lock:
                self._autotune(len(self._state.alive_workers()) - len(self._draining))
            return
        with self._lock:
            self._scaler = None
            self._draining.clear()
            self._target = num_workers
            alive = self._state.alive_workers()
            cancel = list(self._starting)[:max(0, len(alive) + len(self._starting)
                                               - num_workers)]
            handles = [self._starting.pop(worker_id)[0] for worker_id in cancel]
            extra = alive[num_workers:]
        for handle in handles:
            try:
                ray.kill(handle)
            except Exception:  # already gone
                pass
        for worker_id in extra:
            self._lose(worker_id)
        self._fill()

    # ------------------------------------------------------------ autoscaling

    def _autotune(self, current: int) -> None:
        """Hands the worker count to a new autoscaler, starting from ``current`` workers
        (at least 1)."""
        import ray

        cap = self._max_workers
        if cap is None:  # what the cluster has room for now
            cpus = ray.cluster_resources().get("CPU", 1.0)
            cap = int(cpus / self._worker_cpus) if self._worker_cpus > 0 else 64
        policy = autoscaler.Policy(1, max(1, cap))
        self._scaler = autoscaler.Driver(policy)
        self._target = min(max(current, 1), policy.max_workers)

    def _autoscale(self) -> None:
        """One tick of the autoscaler (the monitor's): the latest reports, whether the
        worker count is steady, and the decision applied when it changes the count."""
        with self._lock:
            alive = [w for w in self._state.alive_workers() if w not in self._draining]
            now = time.monotonic()
            waiting = all(now - since > _ROOM_WAIT_SEC for _, _, since in
                          self._starting.values())
            steady = waiting and not self._draining and \
                len(alive) + len(self._starting) == self._target
            clients = {key: self._clients_recent.latest(key)
                       for job_id in self._state.jobs
                       for key in ((job_id, c) for c in self._state.clients(job_id))}
            producers = {w: self._workers_recent.latest(w) for w in alive}
            scaler = self._scaler
        if scaler is None:
            return
        decision = scaler.tick(time.monotonic(), len(alive), steady,
                               {k: v for k, v in clients.items() if "time" in v}, producers)
        if decision is not None and decision.workers != len(alive):
            self._resize(decision.workers)

    def _resize(self, num_workers: int) -> None:
        """The autoscaler's change: new workers start; removed ones are those still starting
        first, then the newest, which drain."""
        import ray

        with self._lock:
            alive = [w for w in self._state.alive_workers() if w not in self._draining]
            self._target = num_workers
            excess = len(alive) + len(self._starting) - num_workers
            cancel = list(self._starting)[::-1][:max(excess, 0)]
            handles = [self._starting.pop(worker_id)[0] for worker_id in cancel]
            now = time.monotonic()
            for worker_id in alive[len(alive) - max(excess - len(cancel), 0):]:
                self._draining[worker_id] = now
        for handle in handles:
            try:
                ray.kill(handle)
            except Exception:  # already gone
                pass
        self._fill()

    def _drain(self) -> None:
        """Removes the draining workers that hold no split any more (or drained too long)."""
        with self._lock:
            now = time.monotonic()
            done = [w for w, since in self._draining.items()
                    if now - since > _DRAIN_TIMEOUT_SEC or not any(
                        self._state.worker_loads(job_id).get(w) for job_id in self._state.jobs)]
        for worker_id in done:
            self._lose(worker_id)

    def _autoscaler_status(self) -> dict | None:
        scaler = self._scaler
        if scaler is None:
            return None
        policy = scaler.policy
        return {"target": self._target, "min_workers": policy.min_workers,
                "max_workers": policy.max_workers, "phase": policy.phase,
                "draining": list(self._draining), "decisions": list(scaler.history)}

    def status(self) -> dict:
        import ray

        with self._lock:
            handles = dict(self._handles)
            starting = list(self._starting)
        infos = []
        for worker_id, info in self._ping(handles).items():
            if info is None:
                infos.append({"worker_id": worker_id, "pid": None, "node_id": None,
                              "state": "unreachable"})
                continue
            with self._lock:
                self._workers_recent.add(worker_id, info)
                recent = self._workers_recent
                infos.append({**info, "state": "draining" if worker_id in self._draining
                              else "running",
                              "elements_per_sec": recent.rate(worker_id, "elements"),
                              "bytes_per_sec": recent.rate(worker_id, "bytes"),
                              "busy": recent.rate(worker_id, "busy_sec")})
        infos += [{"worker_id": worker_id, "pid": None, "node_id": None, "state": "starting"}
                  for worker_id in starting]
        with self._lock:
            self._workers_recent.keep(handles)
            jobs = [self._job_status(job_id) for job_id in self._state.jobs]
            autoscaling = self._autoscaler_status()
            caches = self._caches.status()
        return {"dispatcher": {"pid": os.getpid(),
                               "node_id": ray.get_runtime_context().get_node_id()},
                "workers": infos, "jobs": jobs, "autoscaler": autoscaling,
                "autocache": caches}

    def _job_status(self, job_id: str) -> dict:
        """A job's summary, with its clients' recent rates (their heartbeats' reports) and,
        for a shared job, its windows on the workers."""
        recent = self._clients_recent
        keys = [(job_id, client_id) for client_id in self._state.clients(job_id)]
        latest = [recent.latest(key) for key in keys]
        reads = sum(r.get("reads", 0) for r in latest)
        buffers = [info.get("windows", {}).get(job_id)
                   for info in map(self._workers_recent.latest, self._handles)]
        windows = [w for w in buffers if w and "window_bytes" in w]
        rounds = [w for w in buffers if w and "rounds" in w]
        return {**st.job_summary(self._state.job(job_id)),
                "elements": sum(r.get("elements", 0) for r in latest),
                "buffered": sum(r.get("buffered", 0) for r in latest),
                "elements_per_sec": sum(recent.rate(key, "elements") for key in keys),
                "bytes_per_sec": sum(recent.rate(key, "bytes") for key in keys),
                "wait_fraction": (sum(recent.rate(key, "wait_sec") for key in keys)
                                  / len(keys)) if keys else 0.0,
                "shared": bool(windows) or reads > 0,
                "shared_hit_rate": sum(r.get("hits", 0) for r in latest) / reads if reads
                else 0.0,
                "skipped": sum(r.get("skipped", 0) for r in latest),
                "window_bytes": sum(w["window_bytes"] for w in windows),
                "computed": sum(w["produced"] for w in windows),
                "coordinated": bool(rounds) or job_id in self._schedules,
                "rounds": sum(r.get("rounds", 0) for r in latest),
                "skipped_rounds": sum(r.get("skipped_rounds", 0) for r in latest),
                "round_wait_sec": sum(r.get("round_wait_sec", 0.0) for r in latest)
                / max(1, sum(r.get("rounds", 0) for r in latest))}

    def stop(self) -> None:
        """Stops the monitor and every worker (the actor itself is killed by the caller)."""
        import ray

        self._stop.set()
        with self._lock:
            handles, self._handles = dict(self._handles), {}
            handles.update({w: entry[0] for w, entry in self._starting.items()})
            self._starting = {}
        for handle in handles.values():
            try:
                ray.kill(handle)
            except Exception:
                pass
        self._journal.close()
