"""Threads or processes: where a parallel op's UDF calls run, and the measurement
that decides it for ``Options(engine="auto")``.

A job that releases the GIL (NumPy, PIL, I/O) runs in parallel on threads;
one that holds it needs worker processes. ``EngineChooser`` tells them
apart from the first chunks computed on threads; its decisions are kept per
pipeline code (``jdata._placement.engine_key``) for later iterators. Which ops
measure at all, and what ``explain()`` says of them, is the plan's side
(``jdata._placement``).
"""

from __future__ import annotations

import threading
from typing import Callable

# The engine choice: chunks ignored, then measured, and the least time measured.
_WARMUP_CHUNKS = 1
_DECIDE_CHUNKS = 4
_DECIDE_SEC = 0.01
# Processes may win if fewer than this fraction of the threads ran at once: they run
# all at once but pay for pickling and copies (about 80% efficient), and a switch
# needs a clear gain (1.45x) to be worth it: 0.8 / 1.45.
_PROCESS_EFFICIENCY = 0.8
_SWITCH_GAIN = 1.45
_PROCESS_ADVANTAGE = _PROCESS_EFFICIENCY / _SWITCH_GAIN
# Below this many threads on CPU at once, the UDF mostly waits (I/O, sleeps).
_MOSTLY_WAITING = 0.3
# The UDF is a bottleneck worth processes if the consumer waited this much of the window.
_BOTTLENECK_WAIT = 0.2
# What processes pay per byte of output that threads do not: the worker's write into shared
# memory and the consumer's copy out, fresh pages faulted in on both sides (about 1 GB/s on
# the 2-core machines measured: SimCLR's 600 KB float32 views, 2.5 ms of UDF each, ran at
# 0.8x their thread speed in processes).
_TRANSFER_SEC_PER_BYTE = 1e-9


def initial_engine(engine: str, cpu_budget: int, parallelism: int,
                   decision_key: Callable[[], str] | None
                   ) -> tuple[str, str, EngineChooser | None, str | None]:
    """``(engine to start on, why, chooser, key)``: ``"auto"`` starts on threads and
    measures, unless one core makes it moot or an earlier iterator decided.

    ``key`` is ``decision_key()``, computed for ``"auto"`` only (else None).
    """
    if engine != "auto":
        reason = ("a fixed num_parallel_calls, Options(engine='threads'), or JAX code in "
                  "the work (XLA releases the GIL)"
                  if engine == "threads" else f"Options(engine={engine!r})")
        return engine, reason, None, None
    if cpu_budget < 2 or parallelism < 2:
        return "threads", "one core or one worker: processes cannot run more at once", None, None
    key = decision_key() if decision_key is not None else None
    earlier = _decision(key)
    if earlier is not None:
        return earlier[0], f"{earlier[1]} (measured by an earlier iterator)", None, key
    return ("threads", "chosen by measurement after the first chunks",
            EngineChooser(cpu_budget, key), key)


# Engine decisions by the UDFs they measured (see ``engine_key``), for later
# iterators of the same pipeline; bounded, as pipelines may be built anew.
# Iterators on several threads read and write them: under _DECISIONS_LOCK.
_DECISIONS: dict[str, tuple[str, str]] = {}
_DECISIONS_LOCK = threading.Lock()
_MAX_DECISIONS = 1024


def _decision(key: str | None) -> tuple[str, str] | None:
    if key is None:
        return None
    with _DECISIONS_LOCK:
        return _DECISIONS.get(key)


def remember(key: str | None, decision: tuple[str, str]) -> None:
    """Keeps ``(engine, reason)`` for later iterators of the pipeline ``key`` names."""
    if key is None:
        return
    with _DECISIONS_LOCK:
        if len(_DECISIONS) >= _MAX_DECISIONS:
            _DECISIONS.clear()
        _DECISIONS[key] = decision


class EngineChooser:
    """Decides threads or processes from the first chunks computed on threads.

    Over a window of chunks, the worker threads' CPU time divided by the
    window's wall time is how many of them ran at once. A job that releases
    the GIL (NumPy, PIL, I/O) runs them in parallel; one that holds it runs
    one at a time, whatever the thread count (Cedar's test: wall versus CPU
    time under threads); one that waits on I/O keeps few of them on CPU at
    all, and threads overlap its waits. That matters only if the consumer
    waited for the pool: otherwise the UDF is not the bottleneck.

    Few threads at once is not enough for processes: they can only use cores
    this process leaves idle (its other stages and the consumer count: on a
    busy machine few threads at once is contention, not the GIL), and each
    output crosses between processes (``_TRANSFER_SEC_PER_BYTE``). Processes
    are chosen where, with both counted, they would run the UDF at least
    ``_SWITCH_GAIN`` times as fast.
    """

    def __init__(self, cpu_budget: int, decision_key: str | None = None):
        self._cpu_budget = cpu_budget
        self._key = decision_key
        self._chunks = 0
        self._first_start: float | None = None
        self._first_clock: tuple[float, float] | None = None
        self._last_end = 0.0
        self._cpu = self._waited = 0.0
        self._elements = 0

    def record(self, timing: tuple[float, float, float], waited: float, threads: int,
               elements: int, bytes_per_element: float,
               clock: tuple[float, float]) -> tuple[str, str] | None:
        """Adds a chunk's ``(start, end, CPU)`` and its ``elements`` (whose outputs weigh
        ``bytes_per_element``), taken at ``clock``: ``(wall time, this process's CPU time)``
        (all its threads); ``(engine, reason)`` once decided.

        The decision is remembered under ``decision_key`` (the op's code):
        later iterators (the next epoch, the next ``iter(ds)``, the same
        pipeline built again) start with it instead of measuring again.
        """
        decision = self._decide(timing, waited, threads, elements, bytes_per_element, clock)
        if decision is not None:
            remember(self._key, decision)
        return decision

    def _decide(self, timing, waited: float, threads: int, elements: int,
                bytes_per_element: float, clock: tuple[float, float]
                ) -> tuple[str, str] | None:
        self._chunks += 1
        if self._chunks <= _WARMUP_CHUNKS:
            return None  # first calls pay imports and caches
        start, end, cpu = timing
        if self._first_start is None:
            self._first_start, self._first_clock = start, clock
        self._last_end = max(self._last_end, end)
        self._cpu += cpu
        self._waited += waited
        self._elements += elements
        window = self._last_end - self._first_start
        if self._chunks < _WARMUP_CHUNKS + _DECIDE_CHUNKS or window < _DECIDE_SEC:
            return None
        running = self._cpu / window
        measured = (f"{running:.2f} of {threads} worker threads ran at once over "
                    f"{self._chunks - _WARMUP_CHUNKS} chunks")
        if self._waited < _BOTTLENECK_WAIT * window:
            return "threads", (f"the consumer waited for the UDF only {self._waited / window:.0%}"
                               f" of the time: it is not the bottleneck")
        if running < _MOSTLY_WAITING:
            return "threads", f"{measured}: the UDF mostly waits (I/O), which threads overlap"
        if running >= _PROCESS_ADVANTAGE * threads:
            return "threads", f"{measured}: the UDF releases the GIL enough for threads"
        idle = self._idle_cores(clock)
        transfer = self._transfer_share(bytes_per_element)
        gain = (min(threads, running + idle) / running * _PROCESS_EFFICIENCY
                * (1 - transfer))
        if gain >= _SWITCH_GAIN:
            return "processes", f"{measured}: the UDF holds the GIL"
        return "threads", (f"{measured}, but processes would run it only {gain:.2f}x as fast "
                           f"({idle:.2f} of {self._cpu_budget} cores idle; moving each "
                           f"{bytes_per_element:,.0f}-byte output would take {transfer:.0%} "
                           "of their time)")

    def _idle_cores(self, clock: tuple[float, float]) -> float:
        """The cores this process left idle since the window began."""
        assert self._first_clock is not None
        wall = clock[0] - self._first_clock[0]
        if wall <= 0:
            return float(self._cpu_budget)
        return max(0.0, self._cpu_budget - (clock[1] - self._first_clock[1]) / wall)

    def _transfer_share(self, bytes_per_element: float) -> float:
        """The share of a worker process's time that moving its outputs would take."""
        if not self._elements or not bytes_per_element:
            return 0.0
        transfer = bytes_per_element * _TRANSFER_SEC_PER_BYTE
        return transfer / (transfer + self._cpu / self._elements)
