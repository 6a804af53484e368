"""The autoscaler role: how many workers a job needs, as a pure state machine (Cachew's policy).

A caller feeds it one ``Sample`` per interval, taken while the worker count was
steady (``measure`` builds it from the clients' and workers' counters), and
applies the ``Decision`` it returns: the dispatcher does, every few seconds, for
``service.start(num_workers=jdata.AUTOTUNE)``. The policy:

1. **Estimate** (Cedar's demand-driven sizing, tf.data's exported estimate): the
   workers the consumers' demand needs, ``ceil(demand / capacity per worker)``,
   where the demand is the elements per second the consumers would take if they
   never waited, and a worker's capacity the elements it makes per busy second.
2. **Climb up** (Cachew): one more worker while that shortens the batch time (the
   consumers' seconds per element, waits included) by more than ``UP_GAIN``.
3. **Climb down**: one fewer while that lengthens it by less than ``DOWN_LOSS``;
   the last step that cost more is undone.
4. **Converged**: the batch time and the consumers' queue fill are kept; when either
   grows ``RETRIGGER`` times over them (demand changed, workers slowed), back to 1.

Every change is at most ``max_step`` workers and stays within ``[min_workers,
max_workers]``. Each decision says why, for ``svc.status()``. Nothing here
imports Ray.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math

# The driver's interval: a sample is this long, once the worker count has been steady
# (all workers joined, none draining) for the settle time.
SAMPLE_SEC = 4.0
SETTLE_SEC = 1.0
UP_GAIN = 0.07
DOWN_LOSS = 0.03
RETRIGGER = 1.5
# A queue fill below this is noise: its growth does not re-trigger.
_MIN_QUEUE_FILL = 0.05


@dataclasses.dataclass(frozen=True)
class Sample:
    """One interval at ``workers`` workers, from the clients' and workers' reports."""

    workers: int
    batch_sec: float  # the consumers' mean seconds per element, waits included
    demand: float  # elements/s the consumers would take without waiting
    capacity: float  # elements a worker makes per busy second (mean over workers)
    queue_fill: float = 0.0  # the consumers' buffered elements over their capacity, 0..1


class Phase(enum.StrEnum):
    """Where the policy is (equal to its name: ``Phase.UP == "up"``)."""

    ESTIMATE = "estimate"
    UP = "up"
    DOWN = "down"
    CONVERGING = "converging"
    CONVERGED = "converged"


@dataclasses.dataclass(frozen=True)
class Decision:
    workers: int
    phase: Phase
    reason: str


class Policy:
    """Cachew's autoscaling policy for one service (see the module docstring)."""

    def __init__(self, min_workers: int = 1, max_workers: int = 64, max_step: int = 8):
        if not 1 <= min_workers <= max_workers:
            raise ValueError(f"autoscaler: need 1 <= min_workers ({min_workers}) <= "
                             f"max_workers ({max_workers})")
        if max_step < 1:
            raise ValueError(f"autoscaler: max_step={max_step} must be >= 1")
        self.min_workers, self.max_workers, self.max_step = min_workers, max_workers, max_step
        self.phase = Phase.ESTIMATE
        self._base: Sample | None = None  # the sample the current probe is compared with
        self._asked = 0  # the count the last decision asked for
        self._steady: Sample | None = None  # the converged state

    def observe(self, sample: Sample) -> Decision:
        """The worker count for the next interval, given the last one's ``sample``."""
        if sample.workers < 1 or not sample.batch_sec > 0:
            return Decision(max(sample.workers, self.min_workers), self.phase,
                            "no measurement yet (no worker, or nothing consumed)")
        return getattr(self, f"_{self.phase.value}")(sample)

    # ------------------------------------------------------------ phases

    def _estimate(self, s: Sample) -> Decision:
        if s.capacity > 0 and s.demand > 0:
            need = math.ceil(s.demand / s.capacity - 1e-9)
            why = (f"estimate: demand {s.demand:,.0f} elements/s over {s.capacity:,.0f} per "
                   f"worker needs {need}")
        else:
            need, why = s.workers, "estimate: no rates yet; probing from here"
        self.phase, self._base = Phase.UP, None
        return self._to(s.workers, need, why)

    def _up(self, s: Sample) -> Decision:
        if self._asked > s.workers and self._base is not None and \
                s.workers == self._base.workers:
            # The probe's worker never started: the cluster has no room for it.
            return self._start_down(s, f"no room in the cluster for worker {s.workers + 1}")
        if self._base is None or s.workers != self._base.workers + 1:
            self._base = s
            if s.workers >= self.max_workers:
                return self._start_down(s, f"at max_workers={self.max_workers}")
            return self._to(s.workers, s.workers + 1, f"probing up from {s.workers}")
        gain = (self._base.batch_sec - s.batch_sec) / self._base.batch_sec
        if gain > UP_GAIN:
            self._base = s
            if s.workers >= self.max_workers:
                return self._start_down(s, f"at max_workers={self.max_workers}")
            return self._to(s.workers, s.workers + 1,
                            f"{s.workers} workers cut the batch time {gain:.0%} "
                            f"(> {UP_GAIN:.0%}): one more")
        back = self._base
        self.phase, self._base = Phase.DOWN, None
        return self._to(s.workers, back.workers,
                        f"{s.workers} workers cut the batch time only {gain:.0%} "
                        f"(<= {UP_GAIN:.0%}): back to {back.workers}, then down")

    def _start_down(self, s: Sample, why: str) -> Decision:
        self.phase, self._base = Phase.DOWN, None
        return self._down(s, why)

    def _down(self, s: Sample, why: str = "") -> Decision:
        if self._base is None or s.workers != self._base.workers - 1:
            self._base = s
            if s.workers <= self.min_workers:
                return self._converge(s, f"{why + '; ' if why else ''}at min_workers="
                                         f"{self.min_workers}")
            return self._to(s.workers, s.workers - 1,
                            f"{why + '; ' if why else ''}probing down from {s.workers}")
        loss = (s.batch_sec - self._base.batch_sec) / self._base.batch_sec
        if loss < DOWN_LOSS:
            self._base = s
            if s.workers <= self.min_workers:
                return self._converge(s, f"at min_workers={self.min_workers}")
            return self._to(s.workers, s.workers - 1,
                            f"{s.workers} workers cost {max(loss, 0):.0%} (< {DOWN_LOSS:.0%}): "
                            "one fewer")
        back = self._base
        self.phase, self._base = Phase.CONVERGING, back
        return self._to(s.workers, back.workers,
                        f"{s.workers} workers cost {loss:.0%} (>= {DOWN_LOSS:.0%}): back to "
                        f"{back.workers}")

    def _converging(self, s: Sample) -> Decision:
        if s.workers != self._base.workers:  # the step back is not in effect yet
            return self._to(s.workers, self._base.workers, "returning to the converged count")
        return self._converge(s, "converged")

    def _converge(self, s: Sample, why: str) -> Decision:
        self.phase, self._steady, self._base = Phase.CONVERGED, s, None
        return Decision(s.workers, Phase.CONVERGED, f"{why}: {s.workers} workers, batch time "
                                                f"{s.batch_sec * 1e3:.2f} ms")

    def _converged(self, s: Sample) -> Decision:
        why = self._retrigger(s)
        if why is None:
            return Decision(s.workers, Phase.CONVERGED, "steady")
        self.phase = Phase.ESTIMATE
        decision = self._estimate(s)
        return dataclasses.replace(decision, reason=f"re-triggered: {why}; {decision.reason}")

    def _retrigger(self, s: Sample) -> str | None:
        c = self._steady
        if s.batch_sec > RETRIGGER * c.batch_sec:
            return (f"batch time {s.batch_sec * 1e3:.2f} ms is over {RETRIGGER}x the converged "
                    f"{c.batch_sec * 1e3:.2f} ms")
        if c.queue_fill >= _MIN_QUEUE_FILL and s.queue_fill > RETRIGGER * c.queue_fill:
            return f"queue fill {s.queue_fill:.0%} is over {RETRIGGER}x the converged " \
                   f"{c.queue_fill:.0%}"
        return None

    # ------------------------------------------------------------ helpers

    def _to(self, current: int, wanted: int, why: str) -> Decision:
        bounded = max(self.min_workers, min(self.max_workers, wanted))
        step = max(-self.max_step, min(self.max_step, bounded - current))
        if current + step != wanted:
            why += f" (a step of at most {self.max_step}, within [{self.min_workers}, " \
                   f"{self.max_workers}])"
        self._asked = current + step
        return Decision(current + step, self.phase, why)



def measure(workers: int, clients: list, producers: list) -> Sample:
    """The ``Sample`` of an interval from counters at its start and its end.

    ``clients``: ``(before, after)`` report pairs of each client that reported at
    both ends: its clock (``time``), the elements it yielded, the seconds its
    consumer waited (``consumer_wait_sec``) and its queue's ``buffered`` and
    ``capacity`` (elements). ``producers``: ``(before, after)`` pairs of each worker's
    totals: ``elements``, and ``active_sec``, the wall time it had a read running
    (``busy_sec``, its time producing summed over reads, where it has none).

    A consumer that yielded ``e`` elements in ``t`` seconds, ``w`` of them waiting,
    has a batch time of ``t / e`` and would take ``e / (t - w)`` elements per second
    if it never waited: its demand.
    """
    batch, demand, fill = [], 0.0, []
    for before, after in clients:
        elements = after.get("elements", 0) - before.get("elements", 0)
        seconds = after.get("time", 0.0) - before.get("time", 0.0)
        if elements <= 0 or seconds <= 0:
            continue
        waited = after.get("consumer_wait_sec", 0.0) - before.get("consumer_wait_sec", 0.0)
        batch.append(seconds / elements)
        demand += elements / max(seconds - waited, seconds * 1e-3)
        fill.append(min(1.0, after.get("buffered", 0) / max(after.get("capacity", 1), 1)))
    made = sum(a.get("elements", 0) - b.get("elements", 0) for b, a in producers)
    busy = sum(a.get("active_sec", 0.0) - b.get("active_sec", 0.0) for b, a in producers)
    if busy <= 0:  # shared and coordinated jobs' buffers produce outside reads
        busy = sum(a.get("busy_sec", 0.0) - b.get("busy_sec", 0.0) for b, a in producers)
    return Sample(workers=workers, batch_sec=sum(batch) / len(batch) if batch else 0.0,
                  demand=demand, capacity=made / busy if busy > 0 and made > 0 else 0.0,
                  queue_fill=sum(fill) / len(fill) if fill else 0.0)


class Driver:
    """Feeds ``policy`` a sample every ``sample_sec`` of steady worker count and keeps
    the decisions (with their samples) for ``svc.status()`` and ``plot_scaling``.

    The dispatcher calls ``tick`` twice a second with the latest reports of the
    clients and workers (by key); a decision to change the count is returned for it to
    apply, and the next sample starts once the new count is steady.
    """

    def __init__(self, policy: Policy, sample_sec: float = SAMPLE_SEC,
                 settle_sec: float = SETTLE_SEC, history: int = 1000, origin: float = 0.0):
        self.policy = policy
        # The clock's reading when the service started: decisions are timed from there
        # (the monotonic clock alone reads the machine's uptime).
        self.origin = origin
        self.sample_sec, self.settle_sec = sample_sec, settle_sec
        self.history: collections.deque = collections.deque(maxlen=history)
        self._steady_since: float | None = None
        self._start: tuple | None = None  # (time, clients' reports, workers' reports)

    def tick(self, now: float, workers: int, steady: bool, clients: dict,
             producers: dict) -> Decision | None:
        """The decision at the end of a sample (None before it ends, or while the count
        is not steady)."""
        if not steady:
            self._steady_since = self._start = None
            return None
        if self._steady_since is None:
            self._steady_since = now
        if now - self._steady_since < self.settle_sec:
            return None
        if self._start is None or not set(clients) & set(self._start[1]):
            # No client to compare yet: the interval starts once one reports.
            self._start = (now, dict(clients), dict(producers))
            return None
        if now - self._start[0] < self.sample_sec:
            return None
        _, before, made = self._start
        sample = measure(workers, [(before[k], v) for k, v in clients.items() if k in before],
                         [(made[k], v) for k, v in producers.items() if k in made])
        self._start = (now, dict(clients), dict(producers))
        decision = self.policy.observe(sample)
        if sample.batch_sec > 0:  # an idle service's intervals say nothing
            self.history.append({"time": now - self.origin, "workers": workers,
                                 "target": decision.workers,
                                 "phase": decision.phase, "reason": decision.reason,
                                 **dataclasses.asdict(sample)})
        if decision.workers != workers:
            self._steady_since = self._start = None
        return decision
