"""Parallel execution with exact state, on threads or worker processes.

Two iterators run work on a pool of workers ahead of the consumer:

- ``ParallelIndexIterator`` serves ``reader[i]`` for ``i = 0, 1, ...`` over a
  random-access subtree. Each worker thread builds its own reader (readers
  cache blocks of keys and permutations, so they are not thread-safe; building
  one is cheap and deterministic), so every element is computed by index and
  the state is just the next index, whatever the parallelism.
- ``ParallelMapIterator`` pulls elements from a sequential input on the
  consumer's thread and applies a function to them on the pool. Its state is
  the input's state from before the oldest element not yet emitted, so a
  restore re-pulls (and recomputes) the elements that were in flight.

Work is submitted in chunks of consecutive elements sized from measured
processing time, so that cheap functions do not pay a thread hand-off per
element. With ``deterministic=False`` elements are emitted in completion
order and the state also lists the positions already emitted past the oldest
pending one.

The pool runs its chunks on threads or, for UDFs that hold the GIL, in worker
processes (``jdata.runtime.processes``); ``EngineChooser`` picks between them
by measurement. Neither the state nor the outputs depend on the engine.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import os
import threading
import time
import traceback
from typing import Any, Callable

import cloudpickle

from jdata._errors import UDFError
from jdata.runtime.iterator import Iterator, Reader
from jdata.runtime.stats import OpStats

# A chunk should take about this long, so thread hand-offs stay negligible.
_TARGET_CHUNK_SEC = 2e-3
_MAX_CHUNK = 256
# Worker processes pay an IPC round trip per chunk, so their chunks are longer.
_TARGET_PROCESS_CHUNK_SEC = 10e-3
# Chunks in flight per worker: enough to keep every worker busy while the
# consumer drains results.
_CHUNKS_PER_WORKER = 2
# The engine choice: chunks ignored, then measured, and the least time measured.
_WARMUP_CHUNKS = 1
_DECIDE_CHUNKS = 4
_DECIDE_SEC = 0.01
# Processes win if fewer than this fraction of the threads ran at once: they run
# all at once but pay for pickling and copies (about 80% efficient), and a switch
# needs a clear gain (1.5x) to be worth it: 0.8 / 1.5.
_PROCESS_ADVANTAGE = 0.55
# Below this many threads on CPU at once, the UDF mostly waits (I/O, sleeps).
_MOSTLY_WAITING = 0.3
# The UDF is a bottleneck worth processes if the consumer waited this much of the window.
_BOTTLENECK_WAIT = 0.2


def usable_cores() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


def resolve_parallelism(num_parallel_calls: int) -> int:
    """``AUTOTUNE`` (-1) becomes the number of usable cores."""
    if num_parallel_calls > 0:
        return num_parallel_calls
    return usable_cores()


class WorkerError(RuntimeError):
    """A worker process died or could not start: the iterator cannot go on."""


class Tunable(Iterator):
    """An asynchronous iterator with statistics and knobs the autotuner may turn."""

    stats: OpStats

    def set_parallelism(self, parallelism: int) -> None:
        """Changes how many workers compute at once (no-op where fixed)."""

    def set_buffer_size(self, buffer_size: int) -> None:
        """Changes how many elements are prepared ahead (no-op where fixed)."""


class _Outcome:
    """An element's result or the exception computing it raised."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error

    def get(self):
        if self.error is not None:
            raise self.error
        return self.value

    def __reduce__(self):
        # Leaving a worker process: an error carries its traceback as text
        # (tracebacks do not pickle) and becomes picklable if it was not.
        if self.error is None:
            return _Outcome, (self.value,)
        return _remote_outcome, (_picklable(self.error), _traceback_text(_innermost(self.error)))


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text."""

    def __str__(self):
        return "\n" + self.args[0]


def _innermost(error: BaseException) -> BaseException:
    """The exception the UDF raised: a ``UDFError``'s cause, else ``error`` itself."""
    return error.__cause__ if isinstance(error, UDFError) else error


def _traceback_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def _picklable(error: BaseException) -> BaseException:
    try:
        cloudpickle.loads(cloudpickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def _remote_outcome(error: BaseException, text: str) -> _Outcome:
    # The UDF's own exception gets the remote traceback chained, so the user
    # sees where it failed in the worker.
    _innermost(error).__cause__ = RemoteTraceback(text)
    return _Outcome(error=error)


class _ChunkSizer:
    """Sizes chunks so each takes about ``target_sec`` (an EMA of time per element)."""

    def __init__(self, target_sec: float = _TARGET_CHUNK_SEC):
        self.target_sec = target_sec
        self._sec_per_element: float | None = None

    def record(self, seconds: float, elements: int) -> None:
        if elements:
            sample = seconds / elements
            old = self._sec_per_element
            self._sec_per_element = sample if old is None else 0.8 * old + 0.2 * sample

    def size(self) -> int:
        if self._sec_per_element is None:
            return 1
        return max(1, min(_MAX_CHUNK, int(self.target_sec / max(self._sec_per_element, 1e-9))))


class IndexJob:
    """Computes ``reader[i]`` for a chunk of indices; one reader per thread or process.

    Readers cache blocks of keys and permutations, so they are not
    thread-safe; building one is cheap and deterministic.
    """

    def __init__(self, make_reader: Callable[[], Reader]):
        self._make_reader = make_reader
        self._local = threading.local()

    def reader(self) -> Reader:
        reader = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._local.reader = self._make_reader()
        return reader

    def __call__(self, indices: list[int]) -> list[_Outcome]:
        reader = self.reader()
        read_block = getattr(reader, "read_block", None)
        if read_block is None or indices[-1] - indices[0] != len(indices) - 1:
            return _compute_all(reader.__getitem__, indices)
        # Consecutive indices: one block read (a file's batched read, a map's tight loop),
        # going on after each failing element as element-by-element reads would.
        out: list[_Outcome] = []
        lo, hi = indices[0], indices[-1] + 1
        while lo < hi:
            elements, error = read_block(lo, hi)
            if not elements and error is None:  # never by contract; never loop on it
                return out + _compute_all(reader.__getitem__, range(lo, hi))
            out.extend(map(_Outcome, elements))
            lo += len(elements)
            if error is not None:
                out.append(_Outcome(error=error))
                lo += 1
        return out

    def __reduce__(self):
        return IndexJob, (self._make_reader,)


class MapJob:
    """Computes ``fn(element, position)`` for a chunk of ``(position, element)`` items.

    An item whose element is an ``_Outcome`` is an input error, passed on.
    """

    def __init__(self, fn: Callable[[Any, int], Any]):
        self._fn = fn

    def _apply(self, item):
        position, element = item
        if isinstance(element, _Outcome):
            return element.get()
        return self._fn(element, position)

    def __call__(self, items: list) -> list[_Outcome]:
        return _compute_all(self._apply, items)


def _compute_all(fn: Callable, items) -> list[_Outcome]:
    out = []
    for item in items:
        try:
            out.append(_Outcome(fn(item)))
        except Exception as e:  # delivered to the consumer at the element's turn
            out.append(_Outcome(error=e))
    return out


class _Gate:
    """A counting semaphore whose limit can change while threads wait on it."""

    def __init__(self, limit: int):
        self._cond = threading.Condition()
        self._limit, self._active = limit, 0

    def set_limit(self, limit: int) -> None:
        with self._cond:
            self._limit = limit
            self._cond.notify_all()

    def __enter__(self):
        with self._cond:
            while self._active >= self._limit:
                self._cond.wait()
            self._active += 1

    def __exit__(self, *exc):
        with self._cond:
            self._active -= 1
            self._cond.notify()


class _ThreadExecutor:
    """Runs the job on threads.

    ``submit`` returns a future of ``(outcomes, (start, end, CPU seconds))``.

    Holds ``cpu_budget`` threads; a gate lets ``workers`` of them compute at once.
    """

    def __init__(self, job: Callable, workers: int, cpu_budget: int):
        self._job = job
        self._gate = _Gate(workers)
        self._executor = cf.ThreadPoolExecutor(max(workers, cpu_budget),
                                               thread_name_prefix="jdata")

    def resize(self, workers: int) -> None:
        self._gate.set_limit(workers)

    def _run(self, items):
        with self._gate:
            start, cpu_start = time.perf_counter(), time.thread_time()
            outcomes = self._job(items)
            return outcomes, (start, time.perf_counter(), time.thread_time() - cpu_start)

    def submit(self, items) -> cf.Future:
        return self._executor.submit(self._run, items)

    def shutdown(self) -> None:
        # Chunks already queued still run (an engine switch drains them).
        self._executor.shutdown(wait=False)


class _Pool:
    """An executor plus the bookkeeping of chunks in flight, in submission order.

    ``engine`` is ``"threads"``, ``"processes"`` or ``"auto"``: start on
    threads and move to processes if the first chunks show that the job
    holds the GIL (see ``EngineChooser``).
    """

    def __init__(self, job: Callable, parallelism: int, engine: str = "threads",
                 cpu_budget: int | None = None, decision_key=None):
        self.job = job
        self.parallelism = parallelism
        self.cpu_budget = cpu_budget or usable_cores()
        self.inflight: collections.deque = collections.deque()
        self.engine, self.engine_reason, self.chooser = _initial_engine(
            engine, self.cpu_budget, parallelism, decision_key)
        self._executor = self._start(self.engine)
        self.sizer = _ChunkSizer(_chunk_target(self.engine))
        self.stats = OpStats("workers", parallelism, _CHUNKS_PER_WORKER, engine=self.engine,
                             engine_reason=self.engine_reason)

    def _start(self, engine: str):
        if engine == "processes":
            from jdata.runtime import processes
            return processes.ProcessExecutor(self.job, self.parallelism)
        return _ThreadExecutor(self.job, self.parallelism, self.cpu_budget)

    def resize(self, parallelism: int) -> None:
        self.parallelism = self.stats.parallelism = parallelism
        self._executor.resize(parallelism)

    def full(self) -> bool:
        return len(self.inflight) >= self.parallelism * _CHUNKS_PER_WORKER

    def submit(self, items: list, tags: list) -> None:
        self.inflight.append((tags, self._executor.submit(items)))

    def take(self, deterministic: bool) -> list[tuple[Any, _Outcome]]:
        """The next finished chunk as ``(tag, outcome)`` pairs.

        The oldest chunk when deterministic, else whichever finishes first.
        """
        if deterministic:
            tags, future = self.inflight.popleft()
        else:
            done, _ = cf.wait([f for _, f in self.inflight], return_when=cf.FIRST_COMPLETED)
            position = next(i for i, (_, f) in enumerate(self.inflight) if f in done)
            tags, future = self.inflight[position]
            del self.inflight[position]
        if future.done():
            waited = 0.0
            outcomes, timing = future.result()
        else:
            start = time.perf_counter()
            outcomes, timing = future.result()
            waited = time.perf_counter() - start
        self._record(outcomes, timing, waited)
        if self.chooser is not None:  # measuring on threads
            self._maybe_switch(timing, waited)
        return list(zip(tags, outcomes, strict=True))

    def _record(self, outcomes: list, timing: tuple, waited: float) -> None:
        busy = timing[1] - timing[0]
        self.sizer.record(busy, len(outcomes))
        stats = self.stats
        stats.elements += len(outcomes)
        stats.busy_sec += busy
        stats.wait_sec += waited
        stats.buffered = sum(len(tags) for tags, _ in self.inflight)
        if outcomes and outcomes[0].error is None:
            stats.record_bytes(outcomes[0].value)

    def _maybe_switch(self, timing: tuple[float, float, float], waited: float) -> None:
        decision = self.chooser.record(timing, waited, self.parallelism)
        if decision is None:
            return
        engine, reason = decision
        if engine == "processes":
            old, self._executor = self._executor, self._start("processes")
            old.shutdown()  # its chunks in flight still finish and are taken in order
            self.sizer = _ChunkSizer(_chunk_target(engine))
        # Published last (other threads read them: stats, tests): no half-made decision shows.
        self.engine, self.engine_reason = engine, reason
        self.stats.engine, self.stats.engine_reason = engine, reason
        self.chooser = None

    def cancel(self) -> None:
        for _, future in self.inflight:
            future.cancel()
        self.inflight.clear()

    def shutdown(self) -> None:
        self.cancel()
        self._executor.shutdown()


def _initial_engine(engine: str, cpu_budget: int, parallelism: int,
                    decision_key) -> tuple[str, str, EngineChooser | None]:
    """``(engine to start on, why, chooser)``: ``"auto"`` starts on threads and
    measures, unless one core makes it moot or an earlier iterator decided."""
    if engine != "auto":
        reason = ("a fixed num_parallel_calls, Options(engine='threads'), or JAX code in "
                  "the work (XLA releases the GIL)"
                  if engine == "threads" else f"Options(engine={engine!r})")
        return engine, reason, None
    if cpu_budget < 2 or parallelism < 2:
        return "threads", "one core or one worker: processes cannot run more at once", None
    earlier = _DECISIONS.get(decision_key) if decision_key is not None else None
    if earlier is not None:
        return earlier[0], f"{earlier[1]} (measured by an earlier iterator)", None
    return ("threads", "chosen by measurement after the first chunks",
            EngineChooser(cpu_budget, decision_key))


def _chunk_target(engine: str) -> float:
    return _TARGET_PROCESS_CHUNK_SEC if engine == "processes" else _TARGET_CHUNK_SEC


# Engine decisions by the code they measured (see ``_planner.engine_key``), for
# later iterators of the same pipeline; bounded, as pipelines may be built anew.
_DECISIONS: dict = {}
_MAX_DECISIONS = 1024


class EngineChooser:
    """Decides threads or processes from the first chunks computed on threads.

    Over a window of chunks, the worker threads' CPU time divided by the
    window's wall time is how many of them ran at once. A job that releases
    the GIL (NumPy, PIL, I/O) runs them in parallel; one that holds it runs
    one at a time, whatever the thread count (Cedar's test: wall versus CPU
    time under threads); one that waits on I/O keeps few of them on CPU at
    all, and threads overlap its waits. That matters only if the consumer
    waited for the pool: otherwise the UDF is not the bottleneck.
    """

    def __init__(self, cpu_budget: int, decision_key=None):
        self._cpu_budget = cpu_budget
        self._key = decision_key
        self._chunks = 0
        self._first_start: float | None = None
        self._last_end = 0.0
        self._cpu = self._waited = 0.0

    def record(self, timing: tuple[float, float, float], waited: float,
               threads: int) -> tuple[str, str] | None:
        """Adds a chunk's ``(start, end, CPU)``; ``(engine, reason)`` once decided.

        The decision is remembered under ``decision_key`` (the op's code):
        later iterators (the next epoch, the next ``iter(ds)``, the same
        pipeline built again) start with it instead of measuring again.
        """
        decision = self._decide(timing, waited, threads)
        if decision is not None and self._key is not None:
            if len(_DECISIONS) >= _MAX_DECISIONS:
                _DECISIONS.clear()
            _DECISIONS[self._key] = decision
        return decision

    def _decide(self, timing, waited: float, threads: int) -> tuple[str, str] | None:
        self._chunks += 1
        if self._chunks <= _WARMUP_CHUNKS:
            return None  # first calls pay imports and caches
        start, end, cpu = timing
        if self._first_start is None:
            self._first_start = start
        self._last_end = max(self._last_end, end)
        self._cpu += cpu
        self._waited += waited
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
        if running < _PROCESS_ADVANTAGE * threads:
            return "processes", f"{measured}: the UDF holds the GIL"
        return "threads", f"{measured}: the UDF releases the GIL enough for threads"


class _Pooled(Tunable):
    """Emits the outcomes of chunks computed on a ``_Pool``.

    Subclasses keep the pool topped up (``_fill``) and record what was
    emitted (``_mark_emitted``), which is what their state is made of.
    """

    def __init__(self, job: Callable, parallelism: int, deterministic: bool, engine: str,
                 cpu_budget: int | None, decision_key):
        self._pool = _Pool(job, parallelism, engine, cpu_budget, decision_key)
        self._deterministic = deterministic
        self._ready: collections.deque = collections.deque()  # (tag, outcome) to emit
        # Completion order only: tags emitted past the oldest one still pending.
        self._done: set[int] = set()
        # A lost worker loses the elements it was computing: the iterator
        # stops for good rather than skip them (its state still resumes).
        self._fatal: WorkerError | None = None

    @property
    def stats(self) -> OpStats:
        return self._pool.stats

    def set_parallelism(self, parallelism: int) -> None:
        self._pool.resize(parallelism)

    def _with_done(self, state: dict) -> dict:
        if not self._deterministic:
            state["done"] = sorted(self._done)
        return state

    def _reset(self, state: dict) -> None:
        """Drops the work in flight before a restore."""
        self._fatal = None
        self._pool.cancel()
        self._ready.clear()
        self._done = {int(t) for t in state.get("done", ())}

    def _fill(self) -> None:
        raise NotImplementedError

    def _mark_emitted(self, tag) -> None:
        raise NotImplementedError

    def __next__(self):
        if self._fatal is not None:
            raise self._fatal
        try:
            self._fill()
            if not self._ready:
                if not self._pool.inflight:
                    raise StopIteration
                self._ready.extend(self._pool.take(self._deterministic))
        except WorkerError as e:
            self._fatal = e
            raise
        tag, outcome = self._ready.popleft()
        self._mark_emitted(tag)
        return outcome.get()


class ParallelIndexIterator(_Pooled):
    """``reader[i]`` for ``i = 0 .. len-1``, computed ahead on the pool's workers.

    The state is ``{"index": i}`` (the next index to emit), the same as
    ``IndexIterator``'s; with ``deterministic=False`` it adds ``"done"``, the
    indices past ``index`` already emitted.
    """

    def __init__(self, make_reader: Callable[[], Reader], parallelism: int,
                 deterministic: bool = True, engine: str = "threads",
                 cpu_budget: int | None = None, decision_key=None):
        job = IndexJob(make_reader)
        super().__init__(job, parallelism, deterministic, engine, cpu_budget, decision_key)
        self._len = len(job.reader())
        self._low = 0  # every index below was emitted
        self._next_submit = 0

    def _fill(self) -> None:
        while not self._pool.full() and self._next_submit < self._len:
            indices = []
            while self._next_submit < self._len and len(indices) < self._pool.sizer.size():
                if self._next_submit not in self._done:
                    indices.append(self._next_submit)
                self._next_submit += 1
            if indices:
                self._pool.submit(indices, indices)

    def _mark_emitted(self, index: int) -> None:
        if index == self._low:
            self._low += 1
            while self._low in self._done:
                self._done.remove(self._low)
                self._low += 1
        else:
            self._done.add(index)

    def get_state(self):
        return self._with_done({"index": self._low})

    def set_state(self, state):
        self._reset(state)
        self._low = int(state["index"])
        self._next_submit = self._low

    def close(self):
        self._pool.shutdown()


class ParallelMapIterator(_Pooled):
    """``fn(element, position)`` over a sequential input, computed on the pool's workers.

    Elements are pulled on the consumer's thread (the input iterator is not
    thread-safe), each with the input's state from just before it. The state
    is the state before the oldest element not yet emitted, its position and,
    with ``deterministic=False``, the positions past it already emitted; a
    restore re-pulls from there and skips those.
    """

    def __init__(self, input_iterator: Iterator, fn: Callable[[Any, int], Any],
                 parallelism: int, deterministic: bool = True, engine: str = "threads",
                 cpu_budget: int | None = None, decision_key=None):
        super().__init__(MapJob(fn), parallelism, deterministic, engine, cpu_budget,
                         decision_key)
        self._input = input_iterator
        self._position = 0  # of the next element to pull
        self._exhausted = False
        # Pulled, not yet emitted: position -> input state before it, oldest first.
        self._pending: collections.OrderedDict[int, Any] = collections.OrderedDict()

    def _pull_chunk(self) -> list:
        items = []
        while not self._exhausted and len(items) < self._pool.sizer.size():
            before = self._input.get_state()
            position = self._position
            try:
                element = next(self._input)
            except StopIteration:
                self._exhausted = True
                break
            except Exception as e:  # the input moved past it: emit the error in its turn
                element = _Outcome(error=e)
            self._position = position + 1
            if position in self._done:
                continue  # emitted before a restore (completion order only)
            self._pending[position] = before
            items.append((position, element))
        return items

    def _fill(self) -> None:
        while not self._pool.full() and not self._exhausted:
            items = self._pull_chunk()
            if items:
                self._pool.submit(items, [p for p, _ in items])

    def _mark_emitted(self, position: int) -> None:
        oldest = next(iter(self._pending))
        del self._pending[position]
        if position != oldest:
            self._done.add(position)
        elif self._pending:
            new_oldest = next(iter(self._pending))
            self._done = {p for p in self._done if p > new_oldest}
        else:
            self._done.clear()

    def get_state(self):
        if self._pending:
            position, before = next(iter(self._pending.items()))
        else:
            position, before = self._position, self._input.get_state()
        return self._with_done({"input": before, "position": position})

    def set_state(self, state):
        self._reset(state)
        self._pending.clear()
        self._input.set_state(state["input"])
        self._position = int(state["position"])
        self._exhausted = False

    def close(self):
        self._pool.shutdown()
        self._input.close()


_END = object()  # the producer saw the input's end
# How long close() waits for a pull in progress before leaving the (daemon)
# producer thread to finish it alone.
_CLOSE_TIMEOUT_SEC = 10.0
# How often a consumer waiting for an element checks that the producer lives.
_POLL_SEC = 1.0
# Prefetch measures the size of one element in this many.
_BYTES_SAMPLE_EVERY = 16


class PrefetchIterator(Tunable):
    """Pulls up to ``buffer_size`` elements ahead on a background thread.

    Each buffered element carries the input's state from just before it, so
    ``get_state`` returns the state before the oldest buffered element: a
    restore re-pulls what was buffered. Lock order is input, then buffer:
    the producer appends an element while still holding the input lock, so
    ``get_state`` (which takes both) never sees an element that has left the
    input but not reached the buffer.

    A ``buffer_size`` of 0 pulls synchronously, on the consumer's thread,
    until the autotuner gives it a buffer (see ``InjectPrefetchRule``): a
    thread handoff only pays when the consumer has work of its own to
    overlap.
    """

    def __init__(self, input_iterator: Iterator, buffer_size: int):
        self._input = input_iterator
        self._buffer_size = buffer_size
        self._input_lock = threading.Lock()
        self._cond = threading.Condition()
        self._buffer: collections.deque = collections.deque()  # (state before, outcome)
        self._stop = False
        self._thread: threading.Thread | None = None
        self.stats = OpStats("prefetch", 1, buffer_size)

    def set_buffer_size(self, buffer_size: int) -> None:
        with self._cond:
            # Once a producer thread runs, a buffer stays (at least 1).
            if self._thread is not None:
                buffer_size = max(1, buffer_size)
            self._buffer_size = self.stats.buffer_size = buffer_size
            self._cond.notify_all()

    def _next_synchronously(self):
        stats = self.stats
        start = time.perf_counter()
        try:
            return next(self._input)
        finally:
            busy = time.perf_counter() - start
            # The consumer waits for the whole pull: to the model, a buffer of 0.
            stats.busy_sec += busy
            stats.wait_sec += busy
            stats.elements += 1

    def _start(self) -> None:
        self._stop = False
        self._thread = threading.Thread(target=self._produce, name="jdata-prefetch", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        stats = self.stats
        while True:
            with self._cond:
                while len(self._buffer) >= self._buffer_size and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
            with self._input_lock:
                if self._stop:
                    return
                before = None
                start = time.perf_counter()
                try:
                    before = self._input.get_state()
                    outcome = _Outcome(next(self._input))
                    if stats.elements % _BYTES_SAMPLE_EVERY == 0:
                        stats.record_bytes(outcome.value)
                except StopIteration:
                    outcome = _END
                except BaseException as e:  # delivered to the consumer in order
                    outcome = _Outcome(error=e)
                stats.busy_sec += time.perf_counter() - start
                with self._cond:
                    self._buffer.append((before, outcome))
                    self._cond.notify_all()
            if outcome is _END:
                return

    def __next__(self):
        if self._thread is None:
            if self._buffer_size == 0:
                return self._next_synchronously()
            self._start()
        with self._cond:
            if not self._buffer:
                start = time.perf_counter()
                while not self._buffer:
                    if not self._cond.wait(_POLL_SEC) and not self._thread.is_alive():
                        raise RuntimeError("jdata: the prefetch thread ended without a result")
                self.stats.wait_sec += time.perf_counter() - start
            _, outcome = self._buffer[0]
            if outcome is _END:
                raise StopIteration  # kept in the buffer: the end stays the end
            self._buffer.popleft()
            self.stats.elements += 1
            self.stats.buffered = len(self._buffer)
            self._cond.notify_all()
        return outcome.get()

    def get_state(self):
        with self._input_lock, self._cond:
            if self._buffer:
                return self._buffer[0][0]
            return self._input.get_state()

    def _halt(self, timeout: float | None = None) -> bool:
        """Stops the producer; False if a pull in progress outlived ``timeout``."""
        thread = self._thread
        if thread is None:
            return True
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        # The producer checks _stop between pulls; a pull in progress (a slow
        # UDF upstream) cannot be interrupted, only waited for.
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._thread = None
        return True

    def set_state(self, state):
        self._halt()  # the input must be idle before it moves
        self._buffer.clear()
        self._input.set_state(state)

    def close(self):
        self._buffer.clear()
        if self._halt(_CLOSE_TIMEOUT_SEC):
            self._input.close()
        # Otherwise the producer still uses the input; it exits after its pull.
