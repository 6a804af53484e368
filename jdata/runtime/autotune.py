"""The autotuner: parallelism and buffer sizes from an analytical model.

As in tf.data (section 3.3.2 of its paper), the pipeline is modelled from
the statistics its asynchronous stages keep (``jdata.runtime.stats``), and
a background thread periodically searches the knobs that users left to
``AUTOTUNE`` for the setting that minimizes the time the consumer waits:

- a stage with ``p`` workers that each take ``w`` seconds per element
  produces one every ``x = w / p`` seconds; its consumer asks for one every
  ``y`` seconds (its own time between requests, waits excluded);
- with a buffer of ``k`` elements this is an M/M/1/k queue (elements
  arrive every ``x``, leave every ``y``): the consumer finds the buffer
  empty with probability ``P0 = (1 - r) / (1 - r^(k + 1))`` for the load
  ``r = y / x`` (``1 / (k + 1)`` at ``r = 1``), and then waits about ``x``;
- the objective is the sum over stages of ``P0 * x`` per output element
  (weighted by how many of the stage's elements one output consumes).

The search is hill climbing from the smallest setting: repeatedly take the
single step (one more worker, or a doubled buffer) that lowers the
objective most, while workers stay within ``Options.cpu_budget`` and
buffered bytes within what the process's memory budget leaves them
(``jdata.runtime.memory``: ``Options.ram_budget`` shared by every live
pipeline), until no step gains 1% of the
time per output element (the waits plus the consumer's own time).
The result replaces the current setting only if the model expects it to
cut the wait by ``_MIN_CHANGE_GAIN`` of the time per output element. Rounds
start every ``_MIN_PERIOD_SEC`` and back off (doubling up to
``_MAX_PERIOD_SEC``) while nothing changes, so a steady pipeline is left
alone.
"""

from __future__ import annotations

import threading
import time
import weakref

from jdata.runtime import memory
from jdata.runtime.stats import OpStats, PipelineStats

_MIN_PERIOD_SEC = 0.05
_MAX_PERIOD_SEC = 2.0
# A search step must lower the objective by this fraction to be taken...
_MIN_GAIN = 0.01
# ...and the setting found must beat the current one by this much to replace it
# (the rates are noisy: without a margin, knobs flap between near-equal settings).
_MIN_CHANGE_GAIN = 0.1
# Rounds need this many new elements per stage to trust the rates.
_MIN_NEW_ELEMENTS = 8
_MAX_BUFFER = 1024
# Samples kept for plotting (the history of changes is kept whole).
_MAX_SAMPLES = 2000


def empty_probability(load: float, capacity: int) -> float:
    """M/M/1/k: the chance a consumer finds a ``capacity``-element buffer empty.

    ``load`` is the producer's rate over the consumer's (``y / x``).
    """
    if abs(load - 1.0) < 1e-9:
        return 1.0 / (capacity + 1)
    if load > 1e6:
        return 0.0
    return (1.0 - load) / (1.0 - load ** (capacity + 1))


class _Stage:
    """One tunable stage in a round: measured rates and its candidate knobs."""

    def __init__(self, stats: OpStats, new_elements: int, busy: float, wait: float,
                 elapsed: float, weight: float):
        self.stats = stats
        self.work = busy / new_elements  # one worker's seconds per element
        # The consumer's own time per element, its waits excluded.
        self.consumer = max(elapsed - wait, 1e-9) / new_elements
        self.weight = weight
        self.parallelism = stats.parallelism
        self.buffer = stats.buffer_size

    def capacity(self, parallelism: int, buffer: int) -> int:
        if self.stats.kind == "workers":  # chunks in flight, as elements
            return max(1, buffer * parallelism)
        return buffer  # 0: a synchronous prefetch, whose consumer always waits

    def wait(self, parallelism: int, buffer: int) -> float:
        produce = self.work / parallelism
        p0 = empty_probability(self.consumer / produce, self.capacity(parallelism, buffer))
        return self.weight * p0 * produce

    def bytes(self, parallelism: int, buffer: int) -> float:
        return self.capacity(parallelism, buffer) * self.stats.bytes_per_element


def _smallest_buffer(stage: _Stage) -> int:
    # A prefetch that has not started its thread may stay synchronous (0).
    return 0 if stage.stats.kind == "prefetch" and stage.buffer == 0 else 1


def _cost(stages: list[_Stage], setting: dict[int, tuple[int, int]]) -> float:
    """The model's expected wait per output element under ``setting``."""
    return sum(s.wait(*setting[id(s)]) for s in stages)


class Autotuner:
    """Tunes the registered stages of one iterator on a background thread."""

    def __init__(self, enabled: bool, cpu_budget: int):
        self.enabled = enabled
        self.cpu_budget = cpu_budget
        self._stages: list[weakref.ref] = []  # iterators with a .stats OpStats
        self._last: dict[int, tuple[int, float, float, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.perf_counter()
        self.history: list[dict] = []
        self.samples: list[dict] = []
        # Counts of elements dropped by ignore_errors ops: a dict each, updated in place.
        self.dropped: list[dict] = []

    def register(self, iterator, label: str, tune_parallelism: bool, tune_buffer: bool) -> None:
        stats = iterator.stats
        if stats.label:
            return  # a pass-through op (e.g. with_options) returned its input's iterator
        stats.label = label
        stats.tune_parallelism = tune_parallelism and self.enabled
        stats.tune_buffer = tune_buffer and self.enabled
        with self._lock:
            self._stages = [r for r in self._stages if r() is not None]
            self._stages.append(weakref.ref(iterator))
        if (stats.tune_parallelism or stats.tune_buffer) and self._thread is None:
            self._thread = threading.Thread(target=self._run, args=(weakref.ref(self),),
                                            name="jdata-autotune", daemon=True)
            self._thread.start()

    def live(self) -> list:
        with self._lock:
            return [it for it in (r() for r in self._stages) if it is not None]

    def stats(self, ops: list[dict] | None = None, bottleneck: str | None = None,
              throughput: list[dict] | None = None) -> PipelineStats:
        return PipelineStats.build([it.stats for it in self.live()], self.history,
                                   self.samples, self.enabled,
                                   [dict(d) for d in self.dropped], ops, bottleneck,
                                   throughput)

    def count_dropped(self, label: str) -> dict:
        """A counter of elements an ``ignore_errors`` op dropped, shown by ``stats()``."""
        counter = {"stage": label, "udf_errors": 0, "unreadable_records": 0, "unread_bytes": 0}
        self.dropped.append(counter)
        return counter

    def stop(self) -> None:
        self._stop.set()

    @staticmethod
    def _run(tuner_ref) -> None:
        # Holds the tuner only during a round, so an abandoned pipeline's
        # tuner can be collected (its thread then ends).
        period = _MIN_PERIOD_SEC
        while True:
            tuner = tuner_ref()
            if tuner is None or tuner._stop.is_set():
                return
            stop = tuner._stop
            changed = tuner.optimize()
            del tuner
            period = _MIN_PERIOD_SEC if changed else min(2 * period, _MAX_PERIOD_SEC)
            if stop.wait(period):
                return

    def optimize(self) -> bool:
        """One round: measure, model, search, apply. True if a knob changed."""
        iterators = self.live()
        stages = self._measure(iterators)
        if not stages:
            return False
        # The budget left by what every other pipeline of the process holds now.
        ram = memory.limit() - memory.held([it.stats for it in iterators])
        best = self._search(stages, ram)
        current = {id(s): (s.parallelism, s.buffer) for s in stages}
        current_cost = _cost(stages, current)
        if current_cost - _cost(stages, best) < _MIN_CHANGE_GAIN * (current_cost
                                                                   + stages[-1].consumer):
            best = current
        changed = False
        now = time.perf_counter() - self._started
        predicted = 1e3 * _cost(stages, best)
        for it, stage in zip(iterators, stages):
            parallelism, buffer = best[id(stage)]
            for knob, old, new, apply in (
                    ("parallelism", stage.parallelism, parallelism, it.set_parallelism),
                    ("buffer_size", stage.buffer, buffer, it.set_buffer_size)):
                if new != old:
                    apply(new)
                    changed = True
                    self.history.append({"time": now, "stage": stage.stats.label, "knob": knob,
                                         "old": old, "new": new,
                                         "predicted_wait_ms": predicted})
        if len(self.samples) < _MAX_SAMPLES:
            self.samples.append({"time": now, "knobs": {
                s.stats.label: {"parallelism": s.stats.parallelism,
                                "buffer_size": s.stats.buffer_size} for s in stages}})
        return changed

    def _measure(self, iterators: list) -> list[_Stage]:
        """The stages with enough new elements since the last round, else nothing."""
        now = time.perf_counter()
        snapshots = []
        for it in iterators:
            s = it.stats
            elements, busy, wait, at = self._last.get(id(s), (0, 0.0, 0.0, s.started))
            snapshots.append((s, s.elements - elements, s.busy_sec - busy, s.wait_sec - wait,
                              now - at))
        if not snapshots or any(new < _MIN_NEW_ELEMENTS for _, new, *_ in snapshots):
            return []
        output_elements = snapshots[-1][1]  # stages register inputs first
        live = {id(it.stats) for it in iterators}
        self._last = {k: v for k, v in self._last.items() if k in live}
        stages = []
        for s, new, busy, wait, elapsed in snapshots:
            self._last[id(s)] = (s.elements, s.busy_sec, s.wait_sec, now)
            stages.append(_Stage(s, new, max(busy, 1e-9), wait, elapsed,
                                 new / max(output_elements, 1)))
        return stages

    def _search(self, stages: list[_Stage], ram_budget: float) -> dict[int, tuple[int, int]]:
        """Hill climbing over the tuned knobs from their smallest values."""
        knobs = {id(s): (1 if s.stats.tune_parallelism else s.parallelism,
                         _smallest_buffer(s) if s.stats.tune_buffer else s.buffer)
                 for s in stages}

        def resources(setting):
            cpu = sum(setting[id(s)][0] for s in stages if s.stats.kind == "workers")
            ram = sum(s.bytes(*setting[id(s)]) for s in stages)
            return cpu, ram

        current = _cost(stages, knobs)
        while True:
            candidates = []
            for s in stages:
                parallelism, buffer = knobs[id(s)]
                if s.stats.tune_parallelism:
                    candidates.append({**knobs, id(s): (parallelism + 1, buffer)})
                if s.stats.tune_buffer and buffer < _MAX_BUFFER:
                    candidates.append({**knobs, id(s): (parallelism, max(1, 2 * buffer))})
            feasible = []
            for c in candidates:
                cpu, ram = resources(c)
                if cpu <= self.cpu_budget and ram <= ram_budget:
                    feasible.append((_cost(stages, c), c))
            if not feasible:
                return knobs
            best_cost, best = min(feasible, key=lambda pair: pair[0])
            # Gains are weighed against the time per output element: shaving
            # a negligible wait is not worth another worker or buffer.
            if current - best_cost <= _MIN_GAIN * (current + stages[-1].consumer):
                return knobs
            knobs, current = best, best_cost
