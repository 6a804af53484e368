"""The dispatcher's worker count: fixed (``svc.scale(n)``) or Cachew's autoscaler's
(``jdata.AUTOTUNE``), and the workers it drains before removing them.

A worker the autoscaler removes drains first: it gets no new unit, finishes the
units it holds, and goes (after ``DRAIN_TIMEOUT_SEC`` it goes anyway, and its
units are read elsewhere past what their clients received). Ray starts the
workers and adds nodes for them; this decides how many.
"""

from __future__ import annotations

import threading
import time

from jdata._constants import AUTOTUNE
from jdata.service import autoscaler
from jdata.service._status import AutoscalerStatus, ScalingDecision

# A draining worker still holding units after this long is removed anyway.
DRAIN_TIMEOUT_SEC = 30.0
# Workers still starting after this long wait for room that is not coming soon (Ray's
# autoscaler adds a node within a minute or two): the autoscaler then samples the workers
# that run, and a probe whose worker never started turns down (``Policy``).
_ROOM_WAIT_SEC = 120.0


class Scaling:
    """``members``: the ``_membership.Members``; ``alive()`` and ``loads()``: the ledger's
    alive workers and their units held (across jobs)."""

    def __init__(self, members, alive, loads, num_workers: int, worker_cpus: float,
                 max_workers: int | None):
        self._members, self._alive, self._loads = members, alive, loads
        self._worker_cpus, self._max_workers = worker_cpus, max_workers
        self._lock = threading.Lock()  # guards _target, _draining, _scaler (a leaf lock)
        self._filling = threading.Lock()  # one fill at a time: two would both start workers
        self._target = num_workers
        self._draining: dict[str, float] = {}  # worker id -> when its draining began
        self._scaler: autoscaler.Driver | None = None
        self._started = time.monotonic()  # the autoscaler's decisions are timed from here
        if num_workers == AUTOTUNE:
            self.autotune(len(alive()))

    def draining(self) -> frozenset:
        with self._lock:
            return frozenset(self._draining)

    def serving(self) -> list[str]:
        """The alive workers that take new units (not draining)."""
        draining = self.draining()
        return [w for w in self._alive() if w not in draining]

    def autotune(self, current: int) -> None:
        """Hands the worker count to a new autoscaler, from ``current`` workers (at least 1)."""
        import ray

        cap = self._max_workers
        if cap is None:  # what the cluster has room for now
            cpus = ray.cluster_resources().get("CPU", 1.0)
            cap = int(cpus / self._worker_cpus) if self._worker_cpus > 0 else 64
        policy = autoscaler.Policy(1, max(1, cap))
        with self._lock:
            self._scaler = autoscaler.Driver(policy, origin=self._started)
            self._target = min(max(current, 1), policy.max_workers)

    def scale(self, num_workers: int) -> None:
        """A fixed count (the autoscaler stops): starting workers go first, then the newest
        (their leases are re-issued); ``AUTOTUNE`` hands it back to the autoscaler."""
        if num_workers == AUTOTUNE:
            self.autotune(len(self.serving()))
            return
        with self._lock:
            self._scaler = None
            self._draining.clear()
            self._target = num_workers
        alive = list(self._alive())
        self._members.cancel_starting(len(alive) + len(self._members.starting()) - num_workers,
                                      newest_first=False)
        for worker_id in alive[num_workers:]:
            self._members.lose(worker_id)
        self.fill()

    def fill(self) -> None:
        """Starts workers up to the target (draining ones are counted out)."""
        with self._filling:
            with self._lock:
                target, draining = self._target, len(self._draining)
            missing = target - len(self._alive()) + draining - len(self._members.starting())
            for _ in range(max(missing, 0)):
                self._members.add()

    def tick(self, clients: dict, producers: dict) -> None:
        """One tick of the autoscaler: the latest reports, whether the worker count is
        steady, and the decision applied when it changes the count."""
        with self._lock:
            scaler, target, draining = self._scaler, self._target, bool(self._draining)
        if scaler is None:
            return
        serving = self.serving()
        now = time.monotonic()
        starting = self._members.starting()
        waiting = all(now - since > _ROOM_WAIT_SEC for since in starting.values())
        steady = waiting and not draining and len(serving) + len(starting) == target
        decision = scaler.tick(now, len(serving), steady, clients,
                               {w: producers[w] for w in serving if w in producers})
        if decision is not None and decision.workers != len(serving):
            self._resize(decision.workers)

    def _resize(self, num_workers: int) -> None:
        """The autoscaler's change: new workers start; removed ones are those still starting
        first, then the newest, which drain."""
        serving = self.serving()
        excess = len(serving) + len(self._members.starting()) - num_workers
        cancelled = min(max(excess, 0), len(self._members.starting()))
        self._members.cancel_starting(cancelled)
        now = time.monotonic()
        with self._lock:
            self._target = num_workers
            for worker_id in serving[len(serving) - max(excess - cancelled, 0):]:
                self._draining[worker_id] = now
        self.fill()

    def drain(self) -> None:
        """Removes the draining workers that hold no unit any more (or drained too long)."""
        loads, now = self._loads(), time.monotonic()
        with self._lock:
            done = [w for w, since in self._draining.items()
                    if now - since > DRAIN_TIMEOUT_SEC or not loads.get(w)]
        for worker_id in done:
            with self._lock:
                self._draining.pop(worker_id, None)
            self._members.lose(worker_id)

    def forget(self, worker_id: str) -> None:
        with self._lock:
            self._draining.pop(worker_id, None)

    def status(self) -> AutoscalerStatus | None:
        with self._lock:
            scaler = self._scaler
            if scaler is None:
                return None
            policy = scaler.policy
            return AutoscalerStatus(self._target, policy.min_workers, policy.max_workers,
                                    policy.phase, list(self._draining),
                                    [ScalingDecision(**d) for d in scaler.history])

