"""Threads or processes: where a parallel op's UDF calls run, and the measurement
that decides it for ``Options(engine="auto")``.

A job that releases the GIL (NumPy, PIL, I/O) runs in parallel on threads;
one that holds it needs worker processes. ``EngineChooser`` tells them
apart from the first chunks computed on threads, and where its model of what
processes would gain is in doubt, ``EngineTrial`` runs them for a moment and
compares the rates delivered; the decisions are kept per
pipeline code (``jdata._placement.engine_key``) for later iterators. Which ops
measure at all, and what ``explain()`` says of them, is the plan's side
(``jdata._placement``).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

# The engine choice: chunks ignored, then measured, and the least time measured.
_WARMUP_CHUNKS = 1
_DECIDE_CHUNKS = 4
_DECIDE_SEC = 0.01
# "Not the bottleneck" needs this many windows in a row: an iterator's first chunks
# often find the consumer busy elsewhere (its first batch, a first compile), and one short
# window read so kept Cedar's ASR on threads for good, at half its speed.
_IDLE_CONSUMER_WINDOWS = 3
# Processes may win if fewer than this fraction of the threads ran at once: they run
# all at once but pay for pickling and copies (about 80% efficient), and a switch
# needs a clear gain (1.45x) to be worth it: 0.8 / 1.45.
_PROCESS_EFFICIENCY = 0.8
_SWITCH_GAIN = 1.45
_PROCESS_ADVANTAGE = _PROCESS_EFFICIENCY / _SWITCH_GAIN
# Below this many threads on CPU at once, and this many waiting for a core (all of this
# process's threads: its consumer's too), the UDF mostly waits (I/O, sleeps).
_MOSTLY_WAITING = 0.3
# ... over windows of at least this much wall time in all, read one after another: a
# window of a few milliseconds can fall in another process's burst. A GIL-bound UDF read
# 0.12 on CPU, 0.26 waiting over 8 chunks of 2 ms in a CI run, as a sleeping one reads;
# threads kept it (keeping threads a little longer costs nothing: they run meanwhile).
_MOSTLY_WAITING_SEC = 0.2
# Threads that release the GIL but run under _PROCESS_EFFICIENCY of the time, while this
# many of this process's threads were on a core or waiting for one, are tried on processes:
# SimCLR's pair (1.15-1.28 of 2 ran at once, 0.83-0.96 waited: OpenCV's pool and GIL handoffs)
# made 350-440 pairs/s on threads and 540-700 on processes. The model cannot tell it from the
# ImageNet crop's reading (1.2-1.4 on CPU, 0.8-1.0 waiting; modelled 0.74-0.88x against
# SimCLR's 0.86-0.99x), which made 29 batches/s on processes and 32 on threads: a trial can.
_BUSY = 0.9
# The UDF is a bottleneck worth processes if the consumer waited this much of the window.
_BOTTLENECK_WAIT = 0.2
# Where the model above gives processes less than _SWITCH_GAIN but more than this, they are
# tried (``EngineTrial``): the model cannot see native thread pools, nor the consumer's
# share of the cores (Cedar's ASR and NLP: modelled 0.87x and 1.14x, measured 2x).
_TRY_GAIN = 0.5
# A trial measures each engine over at least this long and this many chunks, the
# processes after each worker's first chunks (imports, first calls, a heap that grows: on
# a VM whose host backs memory on first touch, SimCLR's second chunk on a fresh worker
# took 1.9 s where later ones take 0.2 s), and keeps them if they
# delivered this many times the elements per second the threads did.
_TRIAL_SEC = 0.3
_TRIAL_CHUNKS = 4
_TRIAL_WARMUP_CHUNKS = 2  # per worker
_TRIAL_GAIN = 1.1
# What processes pay per byte of output that threads do not: the worker's write into its
# warm ring of shared memory and the consumer's copy out (into huge pages, the GIL released),
# each about 0.12 ns a byte on the 2-core machines measured (a 77 MB batch: 9 ms; 48-54 ms
# when the copy was a bytearray's, 4 KiB page faults with the GIL held).
_TRANSFER_SEC_PER_BYTE = 0.25e-9


def delay_clock() -> tuple[float, float]:
    """``(wall time, seconds this process's threads have waited for a core)``.

    Read once per measurement window, never per chunk: each of the per-thread
    files it reads releases the GIL and takes it again, a switch interval's wait
    (5 ms) each where GIL-bound threads run, and read at each chunk that slowed the
    consumer until it no longer waited for the pool.
    """
    return time.perf_counter(), _run_delay()


def _run_delay() -> float:
    """Seconds this process's live threads have spent runnable, waiting for a core
    (Linux's per-thread schedstat; 0 where it is missing). A thread waiting for the GIL
    sleeps, so it does not count: this is the machine's contention, not the GIL's."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat", "rb") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):  # exited meanwhile, or no schedstat
            pass
    return total * 1e-9


def initial_engine(engine: str, cpu_budget: int, parallelism: int,
                   decision_key: Callable[[], str] | None
                   ) -> tuple[str, str, EngineChooser | None, EngineTrial | None, str | None]:
    """``(engine to start on, why, chooser, trial, key)``: ``"auto"`` starts on threads
    and measures, unless one core makes it moot, an earlier iterator decided, or one
    ended in a trial of processes, which this iterator goes on with (``trial``).

    ``key`` is ``decision_key()``, computed for ``"auto"`` only (else None).
    """
    if engine != "auto":
        reason = ("a fixed num_parallel_calls, Options(engine='threads'), or JAX code in "
                  "the work (XLA releases the GIL)"
                  if engine == "threads" else f"Options(engine={engine!r})")
        return engine, reason, None, None, None
    if cpu_budget < 2 or parallelism < 2:
        return ("threads", "one core or one worker: processes cannot run more at once", None,
                None, None)
    key = decision_key() if decision_key is not None else None
    earlier = _decision(key)
    if earlier is not None:
        return earlier[0], f"{earlier[1]} (measured by an earlier iterator)", None, None, key
    trial = resume_trial(key)
    if trial is not None:
        return ("processes", f"trying worker processes: {trial.doubt} (an earlier "
                "iterator's trial, going on)", None, trial, key)
    return ("threads", "chosen by measurement after the first chunks",
            EngineChooser(cpu_budget, key), None, key)


# Engine decisions by the UDFs they measured (see ``engine_key``), for later
# iterators of the same pipeline; bounded, as pipelines may be built anew.
# Iterators on several threads read and write them: under _DECISIONS_LOCK.
_DECISIONS: dict[str, tuple[str, str]] = {}
_DECISIONS_LOCK = threading.Lock()
_MAX_DECISIONS = 1024


# Trials their iterators ended before the verdict, by pipeline code, for the next iterator.
_PAUSED_TRIALS: dict[str, EngineTrial] = {}


def resume_trial(key: str | None) -> EngineTrial | None:
    """The trial an earlier iterator of the pipeline ``key`` names paused, if any: it goes
    on, on processes, from what it has measured (taken: one iterator at a time has it)."""
    if key is None:
        return None
    with _DECISIONS_LOCK:
        return _PAUSED_TRIALS.pop(key, None)


def _decision(key: str | None) -> tuple[str, str] | None:
    if key is None:
        return None
    with _DECISIONS_LOCK:
        return _DECISIONS.get(key)


def remember(key: str | None, decision: tuple[str, str]) -> None:
    """Keeps ``(engine, reason)`` for later iterators of the pipeline ``key`` names."""
    _keep(_DECISIONS, key, decision)


def _keep(table: dict, key: str | None, value) -> None:
    """``table[key] = value`` under the lock, the table bounded (``_MAX_DECISIONS``)."""
    if key is None:
        return
    with _DECISIONS_LOCK:
        if len(table) >= _MAX_DECISIONS:
            table.clear()
        table[key] = value


class EngineChooser:
    """Decides threads or processes from the first chunks computed on threads.

    Over a window of chunks, the worker threads' CPU time divided by the
    window's wall time is how many of them ran at once. A job that releases
    the GIL (NumPy, PIL, I/O) runs them in parallel; one that holds it runs
    one at a time, whatever the thread count (Cedar's test: wall versus CPU
    time under threads); one that waits on I/O keeps few of them on CPU at
    all, nor waiting for a core (``delay_clock``: on a busy machine few on CPU is
    contention), and threads overlap its waits. That matters only if the consumer
    waited for the pool: otherwise the UDF is not the bottleneck.

    Few threads at once is not enough for processes: they can only use cores
    this process leaves idle (its other stages and the consumer count: on a
    busy machine few threads at once is contention, not the GIL), and each
    output crosses between processes (``_TRANSFER_SEC_PER_BYTE``). Processes
    are chosen where, with both counted, they would run the UDF at least
    ``_SWITCH_GAIN`` times as fast.
    """

    def __init__(self, cpu_budget: int, decision_key: str | None = None,
                 delays: Callable[[], tuple[float, float]] = delay_clock):
        self._cpu_budget = cpu_budget
        self._key = decision_key
        # Threads' waits for a core, from before the first chunk (the pool's threads idle:
        # no GIL to wait for) to the first decision of each window.
        self._delays = delays
        self._delays_start = delays()
        self._threads_rate = _Rate()
        self._idle_consumer_windows = 0
        self._waiting_sec = 0.0  # the windows in a row that read "mostly waits"
        self._new_window()
        self._chunks = 0

    def _new_window(self) -> None:
        """Measures anew from the next chunk (after the warm-up)."""
        self._chunks = _WARMUP_CHUNKS
        self._first_start: float | None = None
        self._first_clock: tuple[float, float] | None = None
        self._last_end = 0.0
        self._cpu = self._waited = 0.0
        self._elements = 0
        self._queued_in_window: float | None = None

    @property
    def threads_rate(self) -> float:
        """Elements per second the consumer took from the threads since the warm-up."""
        return self._threads_rate.per_sec()

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
        if decision is not None and decision[0] != "trial":
            remember(self._key, decision)
        return decision

    def _decide(self, timing, waited: float, threads: int, elements: int,
                bytes_per_element: float, clock: tuple[float, float]
                ) -> tuple[str, str] | None:
        self._chunks += 1
        if self._chunks <= _WARMUP_CHUNKS:
            return None  # first calls pay imports and caches
        start, end, cpu = timing
        self._threads_rate.add(clock[0], elements)
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
        if self._waited < _BOTTLENECK_WAIT * window:
            self._idle_consumer_windows += 1
            if self._idle_consumer_windows < _IDLE_CONSUMER_WINDOWS:
                self._new_window()
                return None
            return "threads", (f"the consumer waited for the UDF only {self._waited / window:.0%}"
                               f" of the time over {self._idle_consumer_windows} windows: it is "
                               "not the bottleneck")
        queued = self._queued()
        measured = (f"{running:.2f} of {threads} worker threads ran at once"
                    + (f" (and {queued:.2f} waited for a core)" if queued >= 0.05 else "")
                    + f" over {self._chunks - _WARMUP_CHUNKS} chunks")
        if running < _MOSTLY_WAITING and queued < _MOSTLY_WAITING:
            # Threads waiting for a core would have run: on a busy machine, few threads on
            # CPU is contention, not I/O (Cedar's ASR: 0.26 on CPU, 1.2 waiting). A few
            # waits are not: a sleeping UDF read 0.11 on CPU, 0.24 waiting, in a CI run.
            self._waiting_sec += window
            if self._waiting_sec < _MOSTLY_WAITING_SEC:
                self._new_window()
                return None
            return "threads", f"{measured}: the UDF mostly waits (I/O), which threads overlap"
        self._waiting_sec = 0.0
        saturated = (running < _PROCESS_EFFICIENCY * threads
                     and running + queued >= _BUSY * threads)
        if running >= _PROCESS_ADVANTAGE * threads and not saturated:
            return "threads", f"{measured}: the UDF releases the GIL enough for threads"
        idle = self._idle_cores(clock)
        transfer = self._transfer_share(bytes_per_element)
        gain = (min(threads, running + idle) / running * _PROCESS_EFFICIENCY
                * (1 - transfer))
        if gain >= _SWITCH_GAIN:
            return "processes", f"{measured}: the UDF holds the GIL"
        estimate = (f"{idle:.2f} of {self._cpu_budget} cores idle; moving each "
                    f"{bytes_per_element:,.0f}-byte output would take {transfer:.0%} "
                    "of their time")
        if gain < _TRY_GAIN:
            return "threads", (f"{measured}, but processes would run it only {gain:.2f}x as "
                               f"fast ({estimate})")
        if not self._threads_rate.measured():
            return None  # to be tried: the threads' rate first
        return "trial", (f"{measured}; modelled, processes would run it {gain:.2f}x as fast "
                         f"({estimate})")

    def _idle_cores(self, clock: tuple[float, float]) -> float:
        """The cores this process left idle since the window began."""
        assert self._first_clock is not None
        wall = clock[0] - self._first_clock[0]
        if wall <= 0:
            return float(self._cpu_budget)
        return max(0.0, self._cpu_budget - (clock[1] - self._first_clock[1]) / wall)

    def _queued(self) -> float:
        """How many of this process's threads waited for a core at once, on average, since
        the chooser began (read once per window; a negative change, threads that exited
        taking theirs along, reads as none)."""
        if self._queued_in_window is None:
            (wall0, delay0), (wall, delay) = self._delays_start, self._delays()
            self._queued_in_window = (max(0.0, delay - delay0) / (wall - wall0)
                                      if wall > wall0 else 0.0)
        return self._queued_in_window

    def _transfer_share(self, bytes_per_element: float) -> float:
        """The share of a worker process's time that moving its outputs would take."""
        if not self._elements or not bytes_per_element:
            return 0.0
        transfer = bytes_per_element * _TRANSFER_SEC_PER_BYTE
        return transfer / (transfer + self._cpu / self._elements)


class _Rate:
    """Elements per second the consumer took, from the first take counted, over one
    stretch of takes or several (``pause``: iterators of one pipeline, each too short)."""

    def __init__(self):
        self._first: float | None = None
        self._last = 0.0
        self._chunks = self._elements = 0
        self._sec = 0.0  # of the stretches paused

    def add(self, now: float, elements: int) -> None:
        if self._first is None:
            self._first = self._last = now  # the clock starts at this take: its elements
            return                          # came before
        self._last, self._chunks, self._elements = now, self._chunks + 1, self._elements + elements

    def pause(self) -> None:
        """Ends this stretch: the next take starts another, the time between uncounted."""
        if self._first is not None:
            self._sec += self._last - self._first
        self._first = None

    def _seconds(self) -> float:
        return self._sec + (0.0 if self._first is None else self._last - self._first)

    def measured(self) -> bool:
        return self._chunks >= _TRIAL_CHUNKS and self._seconds() >= _TRIAL_SEC

    def per_sec(self) -> float:
        seconds = self._seconds()
        return self._elements / seconds if seconds > 0 else 0.0


class EngineTrial:
    """Worker processes tried against the rate the threads delivered, where the model
    doubts (``EngineChooser``'s "trial"): the pool runs on processes, skips the chunks
    submitted before the switch and each worker's first ones, then measures them over
    the same minimums as the threads (``_TRIAL_SEC``, ``_TRIAL_CHUNKS``); processes stay
    if they delivered ``_TRIAL_GAIN`` times the threads' elements per second.
    """

    def __init__(self, threads_rate: float, doubt: str, key: str | None = None):
        self.threads_rate, self.doubt, self._key = threads_rate, doubt, key
        self._skip = 0
        self._rate = _Rate()

    def start(self, chunks_in_flight: int, workers: int = 1) -> None:
        """``workers`` processes are up; ``chunks_in_flight`` were submitted to the threads."""
        self._skip = chunks_in_flight + _TRIAL_WARMUP_CHUNKS * workers

    def pause(self) -> None:
        """The iterator ended before the verdict: the pipeline's next iterator goes on
        with this trial (``resume_trial``), on processes, where one too short to measure
        it alone would measure anew (issue 29: epochs that moved between the engines)."""
        self._rate.pause()
        _keep(_PAUSED_TRIALS, self._key, self)

    def record(self, now: float, elements: int) -> tuple[str, str] | None:
        """A chunk the consumer took at ``now``; ``(engine, reason)`` once measured,
        remembered for later iterators as ``EngineChooser``'s decisions are."""
        if self._skip:
            self._skip -= 1
            return None
        self._rate.add(now, elements)
        if not self._rate.measured():
            return None
        rate = self._rate.per_sec()
        measured = (f"tried: {rate:,.0f} elements/s on worker processes against "
                    f"{self.threads_rate:,.0f} on threads")
        if rate >= _TRIAL_GAIN * self.threads_rate:
            decision = "processes", f"the UDF holds the GIL ({self.doubt}); {measured}"
        else:
            decision = "threads", f"{self.doubt}; {measured}"
        remember(self._key, decision)
        return decision
