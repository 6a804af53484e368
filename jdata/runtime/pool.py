"""The pool behind parallel iterators: chunks of work in flight on an executor.

Work is submitted in chunks of consecutive elements sized from measured
processing time (``ChunkSizer``), so that cheap functions do not pay a
thread hand-off per element. A ``Pool`` runs its chunks on threads or, for
UDFs that hold the GIL, in worker processes (``jdata.runtime.processes``);
with ``engine="auto"`` an ``EngineChooser`` (``jdata.runtime.engine``)
moves it from threads to processes by measurement (trying them where its
model doubts), and back to threads if the processes tried delivered no more or
shared memory has no room for their work. Neither the outputs nor
the states depend on the engine.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import threading
import time
from typing import Any, Callable

from jdata.runtime import executors, forkserver, memory, persistent, worker
from jdata.runtime import startup
from jdata.runtime.engine import EngineTrial, initial_engine, remember
from jdata.runtime.iterator import Reader
from jdata.runtime.outcomes import Outcome, UnpicklableJobError, WorkerError, compute_all
from jdata.runtime.segments import SharedMemoryError
from jdata.runtime.stats import OpStats

# A chunk should take about this long, so thread hand-offs stay negligible.
_TARGET_CHUNK_SEC = 2e-3
_MAX_CHUNK = 256
# Worker processes pay an IPC round trip per chunk, so their chunks are longer.
_TARGET_PROCESS_CHUNK_SEC = 10e-3
# Chunks in flight per worker: enough to keep every worker busy while the
# consumer drains results.
_CHUNKS_PER_WORKER = 2
# Copies of a chunk's outputs a worker may hold at once, for the memory
# budget: the chunks in flight; a worker process also keeps a ring of shared
# memory segments, each a little larger than a chunk.
_CHUNK_COPIES = {"threads": _CHUNKS_PER_WORKER,
                 "processes": _CHUNKS_PER_WORKER + worker.SLOTS * worker.SEGMENT_SLACK}


class ChunkSizer:
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


class IndexTask(list):
    """A chunk of indices to read in epoch ``epoch``: the epoch travels with the work, so
    one job (and its worker processes) serves every epoch (``jdata.runtime.persistent``)."""

    def __init__(self, epoch: int, indices):
        super().__init__(indices)
        self.epoch = epoch

    def part(self, i: int) -> IndexTask:
        """The task of the ``i``-th index alone."""
        return IndexTask(self.epoch, [self[i]])

    def __reduce__(self):
        return IndexTask, (self.epoch, list(self))


class IndexJob:
    """Computes ``reader[i]`` for an ``IndexTask``; one reader per thread or process.

    Readers cache blocks of keys and permutations, so they are not
    thread-safe; building one is cheap and deterministic. ``make_reader``
    takes the epoch; each thread keeps the reader of the last epoch it read.
    """

    def __init__(self, make_reader: Callable[[int], Reader]):
        self._make_reader = make_reader
        self._local = threading.local()

    def reader(self, epoch: int) -> Reader:
        local = self._local
        if getattr(local, "epoch", None) != epoch:
            local.reader, local.epoch = self._make_reader(epoch), epoch
        return local.reader

    def release(self) -> None:
        """Lets go of every thread's reader (readers of file sources hold open files)."""
        self._local = threading.local()

    def __call__(self, indices: IndexTask) -> list[Outcome]:
        reader = self.reader(indices.epoch)
        read_block = getattr(reader, "read_block", None)
        if read_block is None or indices[-1] - indices[0] != len(indices) - 1:
            return compute_all(reader.__getitem__, indices)
        # Consecutive indices: one block read (a file's batched read, a map's tight loop),
        # going on after each failing element as element-by-element reads would.
        out: list[Outcome] = []
        lo, hi = indices[0], indices[-1] + 1
        while lo < hi:
            elements, error = read_block(lo, hi)
            if not elements and error is None:  # never by contract; never loop on it
                return out + compute_all(reader.__getitem__, range(lo, hi))
            out.extend(map(Outcome, elements))
            lo += len(elements)
            if error is not None:
                out.append(Outcome(error=error))
                lo += 1
        return out

    def __reduce__(self):
        return IndexJob, (self._make_reader,)


class MapJob:
    """Computes ``fn(element, position)`` for a chunk of ``(position, element)`` items.

    An item whose element is an ``Outcome`` is an input error, passed on.
    """

    def __init__(self, fn: Callable[[Any, int], Any]):
        self._fn = fn

    def _apply(self, item):
        position, element = item
        if isinstance(element, Outcome):
            return element.get()
        return self._fn(element, position)

    def __call__(self, items: list) -> list[Outcome]:
        return compute_all(self._apply, items)


class Pool:
    """An executor plus the bookkeeping of chunks in flight, in submission order.

    ``engine`` is ``"threads"``, ``"processes"`` or ``"auto"``: start on
    threads and move to processes if the first chunks show that the job
    holds the GIL (see ``EngineChooser``); ``"auto"`` goes back to threads
    where shared memory has no room for the processes' work, and stays there
    if the job cannot be pickled for them (a UDF holding a lock, say).
    """

    def __init__(self, job: Callable, parallelism: int, engine: str = "threads",
                 cpu_budget: int | None = None, decision_key=None, home=None, reuse_key=None):
        self.job = job
        # Where worker processes are parked for the dataset's next iterator (None: never).
        self._home, self._reuse_key = home, reuse_key
        # Orders a start thread's take of parked workers before its pool's shutdown, which
        # parks that start (see _start_processes). Reentrant: a garbage collection inside
        # the take may shut the pool down on that thread.
        self._switch_lock = threading.RLock()
        self._shut = False
        self.parallelism = parallelism
        self.cpu_budget = cpu_budget or executors.usable_cores()
        # (tags, items, future) per chunk, oldest first.
        self.inflight: collections.deque = collections.deque()
        self._auto = engine == "auto"
        (self.engine, self.engine_reason, self.chooser, self._trial,
         self._key) = initial_engine(engine, self.cpu_budget, parallelism, decision_key)
        self.stats = OpStats("workers", parallelism, _CHUNKS_PER_WORKER, engine=self.engine,
                             engine_reason=self.engine_reason)
        memory.track(self.stats)
        if self._auto and self.engine == "processes":
            # As an earlier iterator decided: its parked workers, or new ones at once where
            # the fork server answers; else threads compute until the processes are up.
            self._executor = self._start("threads")
            self.engine = self.stats.engine = "threads"
            self._begin_switch(self.engine_reason)
        else:
            self._executor = self._start(self.engine)
        self.sizer = ChunkSizer(chunk_target(self.engine))

    # Worker processes being started for a switch from threads: a future of the
    # executor, and why. The threads go on computing meanwhile.
    _starting: cf.Future | None = None
    _starting_reason = ""
    # Processes being tried against the threads (started, then measured), or None.
    _trial: EngineTrial | None = None
    # The last read by index submitted: what new worker processes warm up on.
    _last_read: IndexTask | None = None

    @property
    def deciding(self) -> bool:
        """Whether ``"auto"`` is still measuring, starting the processes it chose, or
        trying them."""
        return self.chooser is not None or self._starting is not None or self._trial is not None

    def _start(self, engine: str):
        if engine == "processes":
            return self._processes(persistent.take(self._home, self._reuse_key))
        return executors.ThreadExecutor(self.job, self.parallelism, self.cpu_budget,
                                        self.stats)

    def _processes(self, kept):
        """Worker processes: ``kept`` (parked by an earlier iterator: no fork, no job to
        ship), once up if still starting, or new ones."""
        from jdata.runtime import processes
        if isinstance(kept, startup.Starting):  # waited for on the start thread, or on this one
            kept = kept.started()        # where the fork server is up (milliseconds)
        if kept is not None:
            kept.resize(self.parallelism)
            return kept
        return processes.ProcessExecutor(self.job, self.parallelism)

    def resize(self, parallelism: int) -> None:
        self.parallelism = self.stats.parallelism = parallelism
        self._executor.resize(parallelism)

    def full(self) -> bool:
        return len(self.inflight) >= self.parallelism * _CHUNKS_PER_WORKER

    def chunk_size(self) -> int:
        """Elements in the next chunk: about the sizer's target time, and few enough
        that the chunks every worker may hold fit what the memory budget leaves."""
        size = self.sizer.size()
        per_element = self.stats.bytes_per_element
        if per_element and size > 1:
            copies = self.parallelism * _CHUNK_COPIES[self.engine]
            size = min(size, int(memory.room(self.stats) / (per_element * copies)))
        return max(1, size)

    def submit(self, items: list, tags: list) -> None:
        if self._starting is not None and self._starting.done():
            self._finish_switch()
        if type(items) is IndexTask:
            self._last_read = items
        self.inflight.append((tags, items, self._executor.submit(items)))

    def take(self, deterministic: bool) -> list[tuple[Any, Outcome]]:
        """The next finished chunk as ``(tag, outcome)`` pairs.

        The oldest chunk when deterministic, else whichever finishes first.
        """
        start = time.perf_counter()
        if deterministic:
            tags, items, future = self.inflight.popleft()
            ready = future.done()
        else:
            # The wait for the first chunk to finish is the consumer's wait too.
            ready = any(f.done() for _, _, f in self.inflight)
            done, _ = cf.wait([f for _, _, f in self.inflight], return_when=cf.FIRST_COMPLETED)
            position = next(i for i, (_, _, f) in enumerate(self.inflight) if f in done)
            tags, items, future = self.inflight[position]
            del self.inflight[position]
        outcomes, timing = self._result(tags, items, future)
        waited = 0.0 if ready else time.perf_counter() - start
        self._record(outcomes, timing, waited)
        if self.chooser is not None:  # measuring on threads
            self._maybe_switch(timing, waited, outcomes)
        elif self._starting is not None and self._starting.done():
            self._finish_switch()
        elif self._trial is not None and self.engine == "processes":
            self._judge(self._trial.record(time.perf_counter(), len(outcomes)))
        return list(zip(tags, outcomes, strict=True))

    def _result(self, tags: list, items: list, future: cf.Future) -> tuple[list, tuple]:
        try:
            return future.result()
        except SharedMemoryError as e:
            if not self._auto:
                raise SharedMemoryError(f"{e} ({_chunk(tags)})") from None
            self._fall_back_to_threads(e)
            return self._executor.submit(items).result()
        except WorkerError as e:  # raised in the collector: its traceback would say nothing
            raise WorkerError(f"{e} ({self._culprit(e, tags, items)})") from None

    def _culprit(self, error: WorkerError, tags: list, items: list) -> str:
        """Which input of the chunk killed its worker, found by running them again one at a time.

        Only after a death, so the chunks keep their size (no per-element
        bookkeeping in the worker); inputs are computed by position, so a
        deterministic crash happens again (each replaced worker dies once).
        """
        if not error.computing:
            return _chunk(tags)
        if len(tags) == 1:
            return f"it died on the input at position {tags[0]}"
        for i, (tag, item) in enumerate(zip(tags, items)):
            try:
                single = items.part(i) if type(items) is IndexTask else [item]
                self._executor.submit(single).result()
            except WorkerError as again:
                if again.computing:
                    return f"it died on the input at position {tag}"
                break  # no worker can start, or no room in shared memory: no answer
        return f"{_chunk(tags)}; run again one at a time, none of them killed a worker"

    def _record(self, outcomes: list, timing: tuple, waited: float) -> None:
        busy = timing[1] - timing[0]
        self.sizer.record(busy, len(outcomes))
        stats = self.stats
        stats.elements += len(outcomes)
        stats.busy_sec += busy
        stats.cpu_sec += timing[2]
        stats.wait_sec += waited
        stats.buffered = sum(len(tags) for tags, _, _ in self.inflight)
        if outcomes and outcomes[0].error is None:
            stats.record_bytes(outcomes[0].value)
        stats.held_bytes = (int(stats.buffered * stats.bytes_per_element)
                            + self._executor.shared_bytes())

    def _maybe_switch(self, timing: tuple[float, float, float], waited: float,
                      outcomes: list) -> None:
        decision = self.chooser.record(timing, waited, self.parallelism, len(outcomes),
                                       self.stats.bytes_per_element,
                                       (time.perf_counter(), time.process_time()))
        if decision is None:
            return
        engine, reason = decision
        if engine == "trial":
            self._trial = EngineTrial(self.chooser.threads_rate, reason, self._key)
            reason = f"trying worker processes: {reason}"
        elif engine != "processes":
            self._settle(engine, reason)
            return
        self._begin_switch(reason)

    def _judge(self, decision: tuple[str, str] | None) -> None:
        """Ends a trial of processes with its measured decision."""
        if decision is None:
            return
        self._trial = None
        engine, reason = decision
        if engine == "threads":
            self._back_to_threads()
        self._settle(engine, reason)

    def _begin_switch(self, reason: str) -> None:
        # A running fork server starts workers in milliseconds: the switch is made at
        # once. Its first start imports jdata (most of a second), and new workers of a
        # read by index warm up (startup.warm_up); or an earlier iterator's start, parked,
        # may still be doing either: then the processes start on a thread of their own
        # while the threads go on computing, and the switch completes at the first chunk
        # submitted or taken once they are up.
        self.chooser = None
        self._starting, self._starting_reason = cf.Future(), reason
        if forkserver.ready() and not isinstance(self.job, IndexJob):
            self._start_processes(self._starting)
            self._finish_switch()
            return
        self.stats.engine_reason = f"starting worker processes: {reason}"
        threading.Thread(target=self._start_processes, args=(self._starting,), daemon=True,
                         name="jdata-start-processes").start()

    def _start_processes(self, starting: cf.Future) -> None:
        try:
            # Takes nothing once its pool shut down and parked this very start: it would
            # wait for itself, or for a later pool's start that waits for it.
            with self._switch_lock:
                kept = None if self._shut else persistent.take(self._home, self._reuse_key)
            if isinstance(kept, startup.Starting) and kept.is_of(starting):
                # This very start, parked by a shutdown that a garbage collection ran inside
                # the take: back to the park, and on with it.
                persistent.park(self._home, self._reuse_key, kept)
                kept = None
            executor = self._processes(kept)
            if kept is None and self._last_read is not None:
                startup.warm_up(executor, self._last_read, self.parallelism)
            starting.set_result(executor)
        except BaseException as e:
            starting.set_exception(e)

    def _finish_switch(self) -> None:
        starting, self._starting = self._starting, None
        try:
            processes = starting.result()
        except (SharedMemoryError, UnpicklableJobError) as e:
            self._stay_on_threads(e)
            return
        processes.resize(self.parallelism)  # the autotuner may have changed it meanwhile
        old, self._executor = self._executor, processes
        old.shutdown()  # its chunks in flight still finish and are taken in order
        self.sizer = ChunkSizer(chunk_target("processes"))
        self._settle("processes", self._starting_reason)
        if self._trial is not None:
            self._trial.start(len(self.inflight), self.parallelism)

    def _fall_back_to_threads(self, error: SharedMemoryError) -> None:
        """Moves the work to threads after a task found no room in shared memory."""
        self._back_to_threads()
        self._stay_on_threads(error)

    def _back_to_threads(self) -> None:
        """Moves the work from worker processes to threads, chunks in flight included."""
        old, self._executor = self._executor, self._start("threads")
        old.shutdown()  # settles every future: done, failed or cancelled
        self.inflight = collections.deque(
            (tags, items, future if _succeeded(future) else self._executor.submit(items))
            for tags, items, future in self.inflight)
        self.sizer = ChunkSizer(chunk_target("threads"))

    def _stay_on_threads(self, error: SharedMemoryError | UnpicklableJobError) -> None:
        # Remembered, so later iterators of the pipeline do not try processes again.
        if isinstance(error, UnpicklableJobError):
            reason = f"the UDF cannot be pickled for worker processes ({error.__cause__})"
        else:
            reason = f"worker processes would not fit in shared memory: {error}"
        self._trial = None
        remember(self._key, ("threads", reason))
        self._settle("threads", reason)

    def _settle(self, engine: str, reason: str) -> None:
        # Published last (other threads read them: stats, tests): no half-made decision shows.
        self.engine, self.engine_reason = engine, reason
        self.stats.engine, self.stats.engine_reason = engine, reason
        self.chooser = None

    def cancel(self) -> None:
        for _, _, future in self.inflight:
            future.cancel()
        self.inflight.clear()

    def shutdown(self) -> None:
        self.cancel()
        trial, self._trial = self._trial, None
        if trial is not None:
            trial.pause()
        executor = self._executor
        if not (self.engine == "processes"
                and persistent.park(self._home, self._reuse_key, executor)):
            executor.shutdown()
        starting, self._starting = self._starting, None
        with self._switch_lock:
            self._shut = True
            parked = starting is not None and persistent.park(  # chosen, not switched to
                self._home, self._reuse_key, startup.Starting(starting))
        if starting is not None and not parked:
            starting.add_done_callback(startup.shutdown_started)


def _succeeded(future: cf.Future) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


def _chunk(tags: list) -> str:
    """Which inputs a chunk held, for errors."""
    if len(tags) == 1:
        return f"the chunk held the input at position {tags[0]}"
    return f"the chunk held the {len(tags)} inputs at positions {tags[0]} to {tags[-1]}"


def chunk_target(engine: str) -> float:
    return _TARGET_PROCESS_CHUNK_SEC if engine == "processes" else _TARGET_CHUNK_SEC


