"""The process engine: work items computed in worker processes.

For UDFs that hold the GIL, threads cannot run in parallel; worker processes
can. ``ProcessExecutor.submit(items)`` returns a ``concurrent.futures.Future``
of the job's outcomes, like a thread pool's, so the parallel iterators of
``jdata.runtime.parallel`` use either engine with the same bookkeeping (and
the same exact state).

- Workers are forked from a fork server that has already imported jdata
  (start-up in milliseconds, and never a fork of this possibly
  multi-threaded process). The job (the UDF, or the reader factory of a
  random-access subtree) is cloudpickled, so lambdas, closures and functions
  defined in ``__main__`` work. What only Ray can rebuild (a Ray actor handle,
  a ``jdata.service.Service``) is refused when the job is pickled, with the reason.
- Inputs go to workers pickled; outputs come back with their NumPy arrays
  in shared memory (``jdata.runtime.segments``), copied out on arrival. A
  full shared-memory directory fails the job (or a task) with a
  ``SharedMemoryError``, never a SIGBUS.
- Exceptions raised in a worker come back with the worker's traceback
  chained as the innermost ``__cause__``; a worker's death fails its tasks
  with a ``WorkerError`` that says which one it died on.
- Nothing outlives the executor: ``shutdown()`` (called by ``close()``, by
  garbage collection through a finalizer, and at interpreter exit) stops
  the workers, terminating then killing those that do not stop, all at once
  and within ``_STOP_SEC`` whatever their number, and unlinks the
  shared-memory segments of workers that could not clean up after
  themselves; the fork server reaps them. In any process but the one that
  created the executor (a child of ``os.fork()``), ``shutdown()`` does
  nothing: the workers are not that process's. Workers die with the fork
  server, and the server with the user's process.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import io
import itertools
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
import weakref
from multiprocessing.connection import Connection

import cloudpickle
import numpy as np

from jdata.runtime import forkserver, segments
from jdata.runtime import worker as worker_module
from jdata.runtime.outcomes import UnpicklableJobError, WorkerError

# Shutdown stops every worker within _STOP_SEC, whatever their number: those
# between tasks exit when their task pipe closes; after _TERM_AFTER_SEC the
# rest get SIGTERM (which stops a UDF running Python code), after
# _KILL_AFTER_SEC SIGKILL.
_STOP_SEC = 2.0
_TERM_AFTER_SEC = 1.0
_KILL_AFTER_SEC = 1.5
# How often the collector looks for new workers and a shutdown.
_POLL_SEC = 0.5


class _Worker:
    """A worker process, known by its pid and its two pipes.

    It is the fork server's child, not ours: its exit shows as end-of-file
    on its result pipe, which it holds until it exits.
    """

    def __init__(self, index: int, job_segment: segments.Segment):
        task_reader, task_writer = os.pipe()
        result_reader, result_writer = os.pipe()
        try:
            self.pid = forkserver.fork([task_reader, result_writer])
        except BaseException:
            os.close(task_writer)
            os.close(result_reader)
            raise
        finally:
            os.close(task_reader)
            os.close(result_writer)
        self.name = f"jdata-worker-{index} (pid {self.pid})"
        self.tasks = Connection(task_writer, readable=False)
        self.results = Connection(result_reader, writable=False)
        self.outstanding = 0
        self.segment_names: set[str] = set()
        self.alive = True
        # Where to read the job: a segment, not the pipe (a pipe moves a
        # job of many megabytes, e.g. an in-memory dataset, far slower).
        self.tasks.send_bytes(cloudpickle.dumps(job_segment.name))


def _stop_all(workers: list[_Worker], start: float) -> None:
    """Stops ``workers``, whose task pipes are closed, together: by ``start + _STOP_SEC``
    each has exited or been killed."""
    running = _wait_for_exits(workers, start + _TERM_AFTER_SEC)
    for sig, until in ((signal.SIGTERM, _KILL_AFTER_SEC), (signal.SIGKILL, _STOP_SEC)):
        for w in running:
            try:
                # Not yet at EOF, so not exited: the pid is still this worker's.
                os.kill(w.pid, sig)
            except ProcessLookupError:
                pass
        running = _wait_for_exits(running, start + until)
    for w in workers:
        w.results.close()


def _wait_for_exits(workers: list[_Worker], deadline: float) -> list[_Worker]:
    """Discards what the workers still send until their pipes end; those still running."""
    running = {w.results: w for w in workers}
    while running:
        # Past the deadline, one look still finds those that have exited.
        ready = multiprocessing.connection.wait(list(running),
                                                max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        for conn in ready:
            try:
                conn.recv_bytes()
            except (EOFError, OSError):
                del running[conn]
    return list(running.values())


class _Shared:
    """What the collector thread and the finalizer need; never refers to the executor."""

    def __init__(self, job_segment: segments.Segment):
        self.owner_pid = os.getpid()
        self.job_segment = job_segment
        self.lock = threading.Lock()
        self.freed = threading.Condition(self.lock)  # a worker's task slot came free
        self.workers: list[_Worker] = []
        # Replaced dead workers: their pipes close at shutdown, not while the
        # collector may still be waiting on them.
        self.dead: list[_Worker] = []
        self.futures: dict[int, tuple[_Worker, cf.Future]] = {}
        self.segments: dict[str, segments.Segment] = {}
        self.closing = False
        self.fatal: str | None = None
        self.wake_r, self.wake_w = multiprocessing.connection.Pipe(duplex=False)
        self.collector = threading.Thread(target=self.collect, daemon=True,
                                          name="jdata-collector")

    # -- the collector thread --

    def collect(self) -> None:
        try:
            self._collect()
        except BaseException as e:  # a bug here must fail the waiting consumer, not hang it
            with self.lock:
                lost = list(self.futures.values())
                self.futures.clear()
            for _, future in lost:
                if future.set_running_or_notify_cancel():
                    future.set_exception(WorkerError(f"jdata: the result collector failed: {e!r}"))
            raise

    def _collect(self) -> None:
        while not self.closing:
            with self.lock:
                live = [w for w in self.workers if w.alive]
            waitables = [self.wake_r] + [w.results for w in live]
            for ready in multiprocessing.connection.wait(waitables, _POLL_SEC):
                if ready is self.wake_r:
                    self.wake_r.recv()
                    continue
                for w in live:
                    if ready is w.results:
                        self._receive(w)

    def _receive(self, w: _Worker) -> None:
        try:
            message = cloudpickle.loads(w.results.recv_bytes())
        except (EOFError, OSError):
            self._died(w)
            return
        if self.closing:
            return  # every future is cancelled
        if message[0] == "fatal":
            self.fatal = message[1]
            self._died(w)
        elif message[0] == "failed":  # its results found no room in shared memory
            _, task_id, retired, error = message
            self._retire(retired)
            future = self._settle(w, task_id)
            if future is not None:
                future.set_exception(error)
        else:
            self._deliver(w, *message[1:])

    def _deliver(self, w: _Worker, task_id, name, spans, retired, payload, timing) -> None:
        self._retire(retired)
        buffers = []
        if name is not None:
            w.segment_names.add(name)
            segment = self.segments.get(name)
            if segment is None:
                try:
                    segment = self.segments[name] = segments.Segment(name)
                except FileNotFoundError:  # killed since: the fork server unlinked it
                    self._died(w)
                    return
            buffers = [_copied(segment.buf, offset, n) for offset, n in spans]
        future = self._settle(w, task_id)
        if future is None:
            return
        try:
            future.set_result((pickle.loads(payload, buffers=buffers), timing))
        except Exception as e:  # an outcome that cannot be rebuilt here
            future.set_exception(e)

    def _retire(self, names: list[str]) -> None:
        for name in names:
            segment = self.segments.pop(name, None)
            if segment is not None:
                segment.close()

    def _settle(self, w: _Worker, task_id: int) -> cf.Future | None:
        """Frees the task's slot: its future, unless cancelled (by a restore or shutdown)."""
        with self.lock:
            _, future = self.futures.pop(task_id, (None, None))
            w.outstanding -= 1
            self.freed.notify_all()
        if future is None or not future.set_running_or_notify_cancel():
            return None
        return future

    def _died(self, w: _Worker) -> None:
        with self.lock:
            if not w.alive:
                return
            w.alive = False
            # A worker computes its tasks in order: it died on the oldest one left.
            lost = sorted((tid, f) for tid, (owner, f) in self.futures.items() if owner is w)
            for tid, _ in lost:
                del self.futures[tid]
            self.freed.notify_all()
        if self.closing:
            return
        for i, (_, future) in enumerate(lost):
            if future.set_running_or_notify_cancel():
                error = WorkerError(self._death_message(w, first=i == 0))
                error.computing = i == 0 and not self.fatal
                future.set_exception(error)

    def _death_message(self, w: _Worker, first: bool) -> str:
        if self.fatal:
            return f"jdata: worker process {w.name} failed to start:\n{self.fatal}"
        when = ("while computing this chunk" if first
                else "before computing this chunk (queued behind the one it died on)")
        return (f"jdata: worker process {w.name} died {when} (killed, out of memory, or the "
                "UDF called os._exit or crashed the interpreter?)")

    # -- shutdown --

    def shutdown(self) -> None:
        if os.getpid() != self.owner_pid:
            return  # a forked child's copy: the workers are its parent's
        if threading.current_thread() is self.collector:
            # The executor's finalizer, run by a garbage collection that an allocation of
            # the collector set off, maybe while the collector holds the lock (taking it
            # here would wait forever: the workers and the job's segment would be left).
            # A thread of its own shuts down once the lock is free; not a daemon, so the
            # interpreter waits for it at exit.
            threading.Thread(target=self.shutdown, name="jdata-shutdown").start()
            return
        start = time.monotonic()
        with self.lock:
            if self.closing:
                return
            self.closing = True
            workers = self.workers + self.dead
            pending = list(self.futures.values())
            self.futures.clear()
        _send_quietly(self.wake_w, None)
        if self.collector.is_alive():
            # Woken, it stops at once, unless it is copying out a large result. Workers
            # are told to stop only after: one that exits unlinks the segments its
            # last results (still in the pipe) name.
            self.collector.join(max(0.0, start + _TERM_AFTER_SEC - time.monotonic()))
        for w in workers:
            w.tasks.close()  # never blocks, unlike a message to a busy worker: it exits at EOF
        _stop_all(workers, start)
        for w in workers:
            for name in w.segment_names:  # gone already unless it was killed
                segments.unlink(name)
        for segment in self.segments.values():
            segment.close()
        self.segments.clear()
        self.job_segment.close()
        self.job_segment.unlink()
        if not self.collector.is_alive():
            self.wake_r.close()
            self.wake_w.close()
        for _, future in pending:
            future.cancel()


def _send_quietly(conn, message) -> None:
    try:
        conn.send(message)
    except OSError:
        pass


_job_serial = itertools.count()


class _JobPickler(cloudpickle.Pickler):
    """cloudpickle's pickler, refusing what pickles here but cannot be rebuilt in a worker
    process: a Ray actor handle, alone or inside a ``jdata.service.Service``, unpickles only
    where Ray runs, and worker processes run none (the job would fail at their start)."""

    def __init__(self, file, refused: tuple):
        super().__init__(file)
        self._refused = refused

    def reducer_override(self, obj):
        if isinstance(obj, self._refused):
            raise TypeError(_refusal(obj))
        return super().reducer_override(obj)


def _ray_bound_types() -> tuple:
    """The types to refuse, of the modules the process has imported (none without Ray: so
    the runtime imports nothing of the service's)."""
    service, actor = sys.modules.get("jdata.service"), sys.modules.get("ray.actor")
    return tuple(t for t in (getattr(service, "Service", None),
                             getattr(actor, "ActorHandle", None)) if t is not None)


def _refusal(obj) -> str:
    actor = sys.modules.get("ray.actor")
    if actor is not None and isinstance(obj, actor.ActorHandle):
        what = (f"a Ray actor handle ({obj!r}) cannot travel into pipeline worker "
                "processes, which run no Ray")
    else:
        what = ("a jdata.service.Service (it holds the dispatcher's Ray handle) cannot "
                "travel into pipeline worker processes, which run no Ray")
    return (f"{what}: compute what the UDF needs from it outside the UDF (e.g. n = "
            "len(svc.status().workers), then use n), and pass plain values")


def _dumps(job) -> bytes:
    refused = _ray_bound_types()
    if not refused:
        return cloudpickle.dumps(job)
    out = io.BytesIO()
    _JobPickler(out, refused).dump(job)
    return out.getvalue()


def _pickled(job) -> bytes:
    try:
        return _dumps(job)
    except Exception as e:  # cloudpickle raises TypeError, PicklingError, AttributeError...
        raise UnpicklableJobError(
            f"worker processes need the pipeline's UDFs pickled (cloudpickle), and one "
            f"cannot be: {type(e).__name__}: {e}. Run it on threads "
            "(jdata.Options(engine='threads')), or create what it holds (a lock, a "
            "connection, an open file) inside the UDF") from e


def _job_segment(job_bytes: bytes) -> segments.Segment:
    name = segments.segment_name(segments.session(), "job", next(_job_serial))
    segment = segments.Segment.create(
        name, max(1, len(job_bytes)), "the job (the UDF, with the in-memory data it holds)")
    segment.buf[:len(job_bytes)] = job_bytes
    return segment


_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for executor in list(_live):
        executor.shutdown()
    forkserver.shutdown()


class ProcessExecutor:
    """Runs ``job(items)`` in up to ``workers`` processes.

    ``submit`` returns a future of ``(outcomes, (start, end, CPU seconds))``
    of the work in the worker (its clock).

    ``resize(n)`` changes how many workers take new tasks (starting more
    when needed). Each worker keeps at most ``worker.SLOTS - 1`` tasks
    outstanding (``submit`` waits for a free one).
    """

    def __init__(self, job, workers: int):
        self._shared = _Shared(_job_segment(_pickled(job)))
        self._ids = itertools.count()
        self._active = 0
        self._finalizer = weakref.finalize(self, self._shared.shutdown)
        _live.add(self)
        self.resize(workers)
        self._shared.collector.start()

    def resize(self, workers: int) -> None:
        shared = self._shared
        with shared.lock:
            while len(shared.workers) < workers:
                shared.workers.append(_Worker(len(shared.workers), shared.job_segment))
        self._active = max(1, workers)
        _send_quietly(shared.wake_w, None)  # the collector watches the new workers

    def submit(self, items: list) -> cf.Future:
        """Sends ``items`` to the least busy worker, first waiting for one with a free slot.

        (Results of tasks cancelled by a restore still occupy their slots
        until they arrive.)
        """
        shared = self._shared
        if os.getpid() != shared.owner_pid:
            raise RuntimeError(
                f"jdata: this iterator's worker processes belong to process {shared.owner_pid}; "
                "after os.fork(), make a new iterator in the child (iter(ds), ds.iterator()).")
        future: cf.Future = cf.Future()
        with shared.lock:
            while True:
                if shared.closing:
                    raise RuntimeError("jdata: the worker processes were shut down")
                self._replace_dead_workers()
                candidates = [w for w in shared.workers[:self._active] if w.alive]
                if not candidates:
                    raise WorkerError("jdata: every worker process died"
                                      + (f"; the first failed to start:\n{shared.fatal}"
                                         if shared.fatal else ""))
                w = min(candidates, key=lambda c: c.outstanding)
                if w.outstanding < worker_module.SLOTS - 1:
                    break
                shared.freed.wait(_POLL_SEC)
            task_id = next(self._ids)
            shared.futures[task_id] = (w, future)
            w.outstanding += 1
        try:
            w.tasks.send_bytes(cloudpickle.dumps((task_id, items), protocol=5))
        except OSError:
            pass  # the worker died: the collector fails its futures
        return future

    def _replace_dead_workers(self) -> None:
        # A worker that died (killed, out of memory) is replaced, so an
        # iterator restored after the error goes on; one that could not
        # start would fail again, so that error stands.
        shared = self._shared
        if shared.fatal is not None:
            return
        for i, w in enumerate(shared.workers[:self._active]):
            if not w.alive:
                shared.dead.append(w)
                shared.workers[i] = _Worker(i, shared.job_segment)
                _send_quietly(shared.wake_w, None)

    def usable(self) -> bool:
        """Whether this executor can run more tasks for this process: not shut down, its
        workers able to start, and this process its owner (not a forked child)."""
        shared = self._shared
        return (shared.owner_pid == os.getpid() and not shared.closing
                and shared.fatal is None)

    def pids(self) -> list[int]:
        return [w.pid for w in self._shared.workers]

    def shared_bytes(self) -> int:
        """Shared memory this executor's processes hold: the job and the workers' result
        segments this process has mapped (each worker keeps a ring of them)."""
        shared = self._shared
        mapped = list(shared.segments.values())  # one step under the GIL: the collector adds
        return shared.job_segment.size + sum(segment.size for segment in mapped)

    def shutdown(self) -> None:
        self._finalizer()


def _copied(buf, offset: int, n: int) -> np.ndarray:
    """``n`` bytes of a segment at ``offset``, copied out into memory of NumPy's: the copy
    runs without the GIL, so the consumer computes on meanwhile, and NumPy asks the kernel
    for huge pages for a large block (a 77 MB batch through a worker: 9 ms, where a
    ``bytearray``'s 4 KiB page faults with the GIL held took 48-54 ms)."""
    out = np.empty(n, np.uint8)
    np.copyto(out, np.frombuffer(buf, np.uint8, n, offset))
    return out
