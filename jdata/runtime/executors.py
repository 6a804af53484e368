"""Where parallel work runs: core counts and the thread executor.

The process executor, for UDFs that hold the GIL, is
``jdata.runtime.processes.ProcessExecutor``; both take a job and return
futures of ``(outcomes, (start, end, CPU seconds))`` from ``submit``.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import os
import queue
import threading
import time
from typing import Callable

from jdata.runtime import trace


# jdata's daemon threads inside a call (a UDF, a pull) right now. At interpreter exit they
# are given up to _EXIT_WAIT_SEC to finish it and take no more: a thread still inside
# native code (OpenCV, libjpeg) while the C++ runtime tears down aborts the process
# ("terminate called without an active exception", exit code 134).
_busy: set[threading.Thread] = set()
_EXIT_WAIT_SEC = 5.0
_exiting = threading.Event()


def busy_marks():
    """``(enter, leave)``: each takes the calling thread (``threading.current_thread()``,
    looked up once per thread) and marks it inside a call or out of it. Bound set methods,
    about 30 ns a call: prefetch producers mark each element."""
    return _busy.add, _busy.discard


# Whether the interpreter is exiting: daemon threads take no more work (a bound method:
# prefetch producers ask per element).
exiting = _exiting.is_set


@atexit.register
def _let_busy_threads_finish() -> None:
    _exiting.set()
    deadline = time.monotonic() + _EXIT_WAIT_SEC
    for thread in list(_busy):
        thread.join(max(0.0, deadline - time.monotonic()))


def usable_cores() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


def resolve_parallelism(num_parallel_calls: int) -> int:
    """``AUTOTUNE`` (-1) becomes the number of usable cores."""
    if num_parallel_calls > 0:
        return num_parallel_calls
    return usable_cores()


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


class _DaemonThreads:
    """A pool of daemon threads running submitted calls, in submission order.

    ``concurrent.futures.ThreadPoolExecutor`` joins its threads at
    interpreter exit, so one hung UDF would keep the user's program from
    ever exiting; daemon threads do not hold it. Threads start on demand,
    when no idle one can take a call, up to ``max_threads``.
    """

    def __init__(self, max_threads: int):
        self._max_threads = max_threads
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable, *args) -> cf.Future:
        future: cf.Future = cf.Future()
        self._calls.put((future, fn, args))
        if not self._idle.acquire(blocking=False):
            with self._lock:
                if self._threads < self._max_threads:
                    self._threads += 1
                    threading.Thread(target=self._serve, name=f"jdata-{self._threads}",
                                     daemon=True).start()
        return future

    def _serve(self) -> None:
        me, (enter, leave) = threading.current_thread(), busy_marks()
        while True:
            call = self._calls.get()
            if call is None or _exiting.is_set():
                return
            future, fn, args = call
            del call
            if future.set_running_or_notify_cancel():
                enter(me)
                try:
                    future.set_result(fn(*args))
                except BaseException as e:
                    future.set_exception(e)
                finally:
                    leave(me)
            del future, fn, args  # nothing of a finished call kept alive while idle
            self._idle.release()

    def shutdown(self) -> None:
        """Lets calls already submitted run, then ends the threads."""
        with self._lock:
            for _ in range(self._threads):
                self._calls.put(None)


class ThreadExecutor:
    """Runs the job on threads.

    ``submit`` returns a future of ``(outcomes, (start, end, CPU seconds))``.

    Holds ``cpu_budget`` threads; a gate lets ``workers`` of them compute at once.
    """

    def __init__(self, job: Callable, workers: int, cpu_budget: int, stats=None):
        self._job = job
        self._stats = stats  # the stage's OpStats: its label names its slices in traces
        self._gate = _Gate(workers)
        self._threads = _DaemonThreads(max(workers, cpu_budget))

    def resize(self, workers: int) -> None:
        self._gate.set_limit(workers)

    def _run(self, items):
        with self._gate:
            start, cpu_start = time.perf_counter(), time.thread_time()
            outcomes = (trace.call(self._stats.label, self._job, items)
                        if self._stats is not None else self._job(items))
            return outcomes, (start, time.perf_counter(), time.thread_time() - cpu_start)

    def submit(self, items) -> cf.Future:
        return self._threads.submit(self._run, items)

    def shared_bytes(self) -> int:
        """Shared memory held: none (threads share the process's memory)."""
        return 0

    def shutdown(self) -> None:
        # Chunks already queued still run (an engine switch drains them).
        self._threads.shutdown()
