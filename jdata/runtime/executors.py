"""Where parallel work runs: core counts and the thread executor.

The process executor, for UDFs that hold the GIL, is
``jdata.runtime.processes.ProcessExecutor``; both take a job and return
futures of ``(outcomes, (start, end, CPU seconds))`` from ``submit``.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
import time
from typing import Callable


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


class ThreadExecutor:
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


