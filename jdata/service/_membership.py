"""The dispatcher's workers: started, joined (they answered a first ping), pinged, lost.

A new worker joins (gets units) once it has answered a first ping: until then it
is only starting, maybe waiting for a node with room, and a unit leased to it
would wait as long. A worker that answers no ping for ``PING_TIMEOUT_SEC`` (its
actor died, or its node went away) is lost: the ledger orphans its leases and
unplaces its slots, and a replacement keeps the worker count. Ray does the
starting, placing and killing; this only keeps the books.
"""

from __future__ import annotations

import os
import threading
import time

from jdata.service import _updates
from jdata.service import worker as worker_module

WORKER_PREFIX = "jdata-worker-"
# A worker that answers no ping for this long is lost (Ray reports a dead actor at
# once; this bounds a hung or unreachable one, as on a node that went away). A busy
# worker answers within milliseconds: its actor has threads to spare.
PING_TIMEOUT_SEC = 4.0


class Members:
    """``commit(updates)`` journals and applies ledger updates (the dispatcher's)."""

    def __init__(self, namespace: str, worker_cpus: float, window_bytes: int | None,
                 client_timeout: float, commit, alive):
        self._namespace, self._worker_cpus = namespace, worker_cpus
        self._window_bytes, self._client_timeout = window_bytes, client_timeout
        self._commit, self._alive = commit, alive
        self._lock = threading.Lock()  # guards _handles and _starting (a leaf lock)
        self._handles: dict = {}  # joined workers
        self._starting: dict = {}  # worker id -> (handle, its first ping, when it started)

    def handles(self) -> dict:
        with self._lock:
            return dict(self._handles)

    def handle(self, worker_id: str):
        with self._lock:
            return self._handles.get(worker_id)

    def starting(self) -> dict:
        """Starting workers: id -> when each started (monotonic)."""
        with self._lock:
            return {w: since for w, (_, _, since) in self._starting.items()}

    def recover(self) -> None:
        """After a restart: the joined workers' handles; workers that were starting (not
        in the journal) are stopped rather than left running (``fill`` replaces them)."""
        import ray

        for worker_id in self._alive():
            try:
                handle = ray.get_actor(worker_id, namespace=self._namespace)
                with self._lock:
                    self._handles[worker_id] = handle
            except ValueError:  # gone while the dispatcher was down
                self._commit([_updates.WorkerLost(worker_id=worker_id)])
        known = self.handles()
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name = entry["name"]
            if (entry.get("namespace") == self._namespace and name.startswith(WORKER_PREFIX)
                    and name not in known):
                _kill(_get_actor(name, self._namespace))

    def add(self) -> None:
        import ray

        worker_id = f"{WORKER_PREFIX}{os.urandom(4).hex()}"
        actor = ray.remote(worker_module.Worker).options(
            name=worker_id, namespace=self._namespace, lifetime="detached",
            num_cpus=self._worker_cpus, max_concurrency=worker_module.MAX_READS,
            max_restarts=0)
        # A shared job's window lives as long as a client could still come back to it.
        handle = actor.remote(worker_id, self._window_bytes, self._client_timeout)
        with self._lock:
            self._starting[worker_id] = (handle, handle.info.remote(), time.monotonic())

    def cancel_starting(self, count: int, newest_first: bool = True) -> None:
        with self._lock:
            order = list(self._starting)[::-1] if newest_first else list(self._starting)
            handles = [self._starting.pop(w)[0] for w in order[:max(count, 0)]]
            for handle in handles:  # one joining right now is lost by join_started
                for worker_id, joined in list(self._handles.items()):
                    if joined is handle:
                        del self._handles[worker_id]
        for handle in handles:
            _kill(handle)

    def join_started(self, seen) -> None:
        """Starting workers that answered their first ping join; one whose start failed is
        dropped (``fill`` starts another). ``seen(worker_id, info)`` takes their figures."""
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
                entry = self._starting.get(worker_id)
                if entry is not None:
                    self._handles[worker_id] = entry[0]
            if entry is None:  # scaled away meanwhile
                continue
            # Joined before it stops counting as starting: a fill in between would
            # otherwise count it nowhere and start one too many.
            self._commit([_updates.WorkerJoined(worker_id=worker_id)])
            with self._lock:
                cancelled = self._starting.pop(worker_id, None) is None
            if cancelled:
                self.lose(worker_id)
            else:
                seen(worker_id, info)

    def lose(self, worker_id: str) -> bool:
        """The worker is gone (or removed): the ledger knows, its actor is killed."""
        if worker_id not in self._alive():
            return False
        self._commit([_updates.WorkerLost(worker_id=worker_id)])
        with self._lock:
            handle = self._handles.pop(worker_id, None)
        _kill(handle)
        return True

    def ping(self, worker_ids=None) -> dict:
        """``info()`` of the joined workers (or those named), all at once, within
        ``PING_TIMEOUT_SEC``; None for one that did not answer."""
        import ray

        handles = self.handles()
        if worker_ids is not None:
            handles = {w: h for w, h in handles.items() if w in worker_ids}
        refs = {worker_id: h.info.remote() for worker_id, h in handles.items()}
        if refs:
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=PING_TIMEOUT_SEC)
        infos = {}
        for worker_id, ref in refs.items():
            try:
                infos[worker_id] = ray.get(ref, timeout=0)
            except Exception:  # RayActorError, GetTimeoutError, a lost node
                infos[worker_id] = None
        return infos

    def tell_all(self, method: str, *args) -> None:
        """A call on every joined worker, not waited for."""
        for handle in self.handles().values():
            try:
                getattr(handle, method).remote(*args)
            except Exception:  # gone: the next ping finds it
                pass

    def stop(self) -> None:
        with self._lock:
            handles = list(self._handles.values()) + [e[0] for e in self._starting.values()]
            self._handles, self._starting = {}, {}
        for handle in handles:
            _kill(handle)


def _get_actor(name: str, namespace: str):
    import ray

    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:  # gone meanwhile
        return None


def _kill(handle) -> None:
    if handle is None:
        return
    import ray

    try:
        ray.kill(handle)
    except Exception:  # already dead
        pass
