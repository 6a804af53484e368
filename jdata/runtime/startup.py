"""Worker processes a pool is starting for a switch from threads (``jdata.runtime.pool``):
their warm-up, and the start parked with them when the pool shuts down meanwhile."""

from __future__ import annotations

import concurrent.futures as cf
import os

# New worker processes of a switch from threads first compute this many chunks each, results
# dropped, on the start thread while the threads go on: a fresh worker's first chunks pay for
# imports, first calls and a heap that grows (SimCLR: 2.3 s and 1.9 s, then 0.2 s), and taken
# in order they stalled the stream (8 batches/s down to 1-3 for 4-7 s). Only a read by index
# is computed twice (a pure function of its positions); a warm-up never waits longer than
# WARMUP_TIMEOUT_SEC.
WARMUP_CHUNKS = 2
WARMUP_TIMEOUT_SEC = 60.0


class Starting:
    """Worker processes a pool chose and was still starting when it shut down, parked as
    they are: the dataset's next iterator, which chooses them too, waits for them instead
    of starting more (a first start imports jdata: most of a second, an epoch of a small
    dataset). Stopped, where parking stops them, once started."""

    def __init__(self, future: cf.Future):
        self._future, self._pid = future, os.getpid()

    def usable(self) -> bool:
        # Never in a forked child: the thread that would finish the start is not there.
        return self._pid == os.getpid() and not (
            self._future.done() and self._future.exception() is not None)

    def shutdown(self) -> None:
        self._future.add_done_callback(shutdown_started)

    def is_of(self, future: cf.Future) -> bool:
        return self._future is future

    def started(self):
        """The started executor, or None where the start failed or it cannot serve."""
        try:
            executor = self._future.result()
        except Exception:
            return None
        if executor.usable():
            return executor
        executor.shutdown()
        return None


def warm_up(executor, read, workers: int) -> None:
    """Has each of ``workers`` new worker processes compute ``read`` ``WARMUP_CHUNKS``
    times, results dropped (a worker that dies is replaced; the chunk's real computation
    says why)."""
    futures = [executor.submit(read) for _ in range(WARMUP_CHUNKS * workers)]
    cf.wait(futures, timeout=WARMUP_TIMEOUT_SEC)
    for future in futures:
        future.cancel()


def shutdown_started(starting: cf.Future) -> None:
    if starting.exception() is None:
        starting.result().shutdown()
