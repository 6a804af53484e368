"""The dispatcher's statistics: recent samples of the clients' and workers' counters,
and each job's summary for ``svc.status()``. Not journaled: they start again after a
restart.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time

from jdata.service import _policies
from jdata.service._status import JobStatus, WorkerStatus

# Rates in status() are over the samples of the last this many seconds.
RATE_WINDOW_SEC = 10.0


class Recent:
    """Recent samples of cumulative counters (dicts) per key (a worker, a client): rates
    over the last ``RATE_WINDOW_SEC``. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()  # guards _samples (a leaf lock)
        self._samples: dict = {}

    def add(self, key, counters: dict) -> None:
        now = time.monotonic()
        with self._lock:
            samples = self._samples.setdefault(key, collections.deque())
            samples.append((now, counters))
            while len(samples) > 2 and now - samples[1][0] >= RATE_WINDOW_SEC:
                samples.popleft()

    def latest(self, key) -> dict:
        with self._lock:
            samples = self._samples.get(key)
            return samples[-1][1] if samples else {}

    def rate(self, key, name: str, clock: str | None = None) -> float:
        """``name``'s change per second over the window; ``clock``: the counters' own
        clock to divide by (the time between their readings, not their arrivals here)."""
        with self._lock:
            samples = self._samples.get(key)
            if not samples or len(samples) < 2:
                return 0.0
            (t0, first), (t1, last) = samples[0], samples[-1]
        if clock is not None and clock in first and clock in last:
            t0, t1 = first[clock], last[clock]
        return max(0.0, (last.get(name, 0) - first.get(name, 0)) / max(t1 - t0, 1e-9))

    def keys(self) -> list:
        with self._lock:
            return list(self._samples)

    def keep(self, keep) -> None:
        """Forgets the keys for which ``keep(key)`` is false."""
        with self._lock:
            for key in [k for k in self._samples if not keep(k)]:
                del self._samples[key]


class Stats:
    def __init__(self):
        self.workers, self.clients = Recent(), Recent()

    def worker_seen(self, worker_id: str, info) -> None:
        self.workers.add(worker_id, {**info.counters, "windows": info.windows,
                                     "pid": info.pid, "node_id": info.node_id})

    def client_seen(self, job_id: str, client_id: str, report) -> None:
        self.clients.add((job_id, client_id), dataclasses.asdict(report))

    def worker_status(self, worker_id: str, state: str) -> WorkerStatus:
        if state in ("starting", "unreachable"):
            return WorkerStatus(worker_id, None, None, state)
        latest = self.workers.latest(worker_id)
        return WorkerStatus(worker_id, latest.get("pid"), latest.get("node_id"), state,
                            *(latest.get(k, 0) for k in ("tasks", "active", "elements",
                                                         "bytes")),
                            self.workers.rate(worker_id, "elements"),
                            self.workers.rate(worker_id, "bytes"),
                            self.workers.rate(worker_id, "producing_sec", clock="clock"),
                            latest.get("memory_bytes", 0), latest.get("plans", 0),
                            self.workers.rate(worker_id, "load_sec", clock="clock"))

    def job_status(self, info, workers, conflicts: dict) -> JobStatus:
        """A job's summary, with its clients' recent rates (their heartbeats' reports)
        and, for a shared or coordinated job, its buffers on the workers. Losses and
        duplicates count every client the job had (and ``conflicts`` its restores')."""
        recent = self.clients
        keys = [(info.job_id, client_id) for client_id in info.clients]
        latest = [recent.latest(key) for key in keys]
        every = [recent.latest(key) for key in recent.keys() if key[0] == info.job_id]

        def total(name, reports=latest):
            return sum(r.get(name, 0) for r in reports)

        buffers = [self.workers.latest(w).get("windows", {}).get(info.job_id) for w in workers]
        windows = [w for w in buffers if w and "window_bytes" in w]
        reads, rounds = total("reads"), total("rounds")
        return JobStatus(**{**_policies.job_summary(info),
                "elements": total("elements"), "buffered": total("buffered"),
                "elements_per_sec": sum(recent.rate(key, "elements") for key in keys),
                "bytes_per_sec": sum(recent.rate(key, "bytes") for key in keys),
                "wait_fraction": (sum(recent.rate(key, "wait_sec", clock="time")
                                      for key in keys)
                                  / len(keys)) if keys else 0.0,
                "shared": info.mode == "shared",
                "shared_hit_rate": total("hits") / reads if reads else 0.0,
                "skipped": total("skipped", every),
                "lost": total("lost", every) + conflicts.get("lost", 0),
                "duplicated": total("duplicated", every) + conflicts.get("duplicated", 0),
                "window_bytes": sum(w["window_bytes"] for w in windows),
                "computed": sum(w["produced"] for w in windows),
                "coordinated": info.mode == "coordinated",
                "rounds": rounds, "skipped_rounds": total("skipped_rounds"),
                "round_wait_sec": total("round_wait_sec") / max(1, rounds)})
