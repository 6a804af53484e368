"""A worker's buffers of shared and coordinated jobs, one per (job, slot); no Ray.

A shared job's slot is a ``_window.SharedWindow`` (every consumer reads it at
its own pace), a coordinated job's a ``_rounds.RoundBuffer`` (consumers read in
rounds). Each is made on its slot's first read over the slot's stream, and
goes when its job is stopped or nobody read it for ``idle_sec``.
"""

from __future__ import annotations

import functools
import os
import threading
import time

from jdata.service import _rounds, _window, _worker_reads

# A shared job's blocks are read by every consumer, one call each: longer blocks (its
# consumers keep reads in flight, so only the first elements come later).
SHARED_BLOCK_SEC = 0.1


def default_window_bytes() -> int:
    """A shared job's window on a worker: 5% of its node's memory, at least 64 MB."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        memory = 8 << 30
    return max(64 << 20, memory // 20)


def open_stream(node, options, epoch: int, skip: int):
    """The whole plan's iterator at ``epoch``, past its first ``skip`` outcomes (read by
    index where the plan has random access)."""
    from jdata import _planner
    from jdata.ops.skip import SkipNode
    from jdata.runtime.context import Context

    if skip and node.random_access():
        return _planner.make_iterator(SkipNode(node, skip), Context(options=options), epoch)
    it = _planner.make_iterator(node, Context(options=options), epoch)
    try:
        while skip > 0:
            passed, _, broken = _worker_reads.exact(it, min(skip, _worker_reads.BLOCK_ELEMENTS))
            if not passed:
                break
            skip -= len(passed)
            if broken:  # past an error the iterator may not go on: open it again past it
                it.close()
                return open_stream(node, options, epoch, skip)
    except BaseException:
        it.close()
        raise
    return it


class Buffers:
    """Thread-safe: the actor's threads read side by side."""

    def __init__(self, window_bytes: int | None, idle_sec: float):
        self._window_bytes = window_bytes or default_window_bytes()
        self._idle_sec = idle_sec
        self._lock = threading.Lock()  # guards _entries
        self._entries: dict[tuple[str, int], tuple] = {}  # (job, slot) -> (buffer, iterator)

    def window(self, spec, opener, stats) -> _window.SharedWindow:
        size = functools.partial(_worker_reads.next_block_size, block_sec=SHARED_BLOCK_SEC)
        return self._get(spec, opener, stats, lambda produce: _window.SharedWindow(
            produce, self._window_bytes, _worker_reads.FIRST_BLOCK, size))

    def rounds(self, spec, opener, stats, num_consumers: int,
               bound_sec: float) -> _rounds.RoundBuffer:
        return self._get(spec, opener, stats, lambda produce: _rounds.RoundBuffer(
            produce, num_consumers, bound_sec))

    def _get(self, spec, opener, stats, make):
        """The buffer of (job, slot), made on its first read by ``make(produce)``:
        ``produce(n)`` gives the next at most ``n`` outcomes of the slot's stream one by
        one, a failing element kept in its place, as ``(elements, failure places, bytes)``."""
        key = (spec.job_id, spec.unit)
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None:
            return entry[0]
        it = opener()
        state = {"it": it, "sent": 0}

        def produce(n: int):
            with stats.producing():
                return produce_counted(n)

        def produce_counted(n: int):
            began = time.perf_counter()
            elements, failures, broken = _worker_reads.exact(state["it"], n)
            state["sent"] += len(elements)
            if broken:
                state["it"].close()
                state["it"] = opener_past(state["sent"])
            nbytes = _blocks_bytes(elements)
            stats.add(len(elements), nbytes, time.perf_counter() - began)
            return elements, failures, nbytes

        def opener_past(sent: int):
            fresh = opener()
            _worker_reads.exact(fresh, sent)
            return fresh

        buffer = make(produce)
        with self._lock:
            entry = self._entries.setdefault(key, (buffer, state))
        if entry[0] is not buffer:  # another read made it first
            buffer.close()
            it.close()
        return entry[0]

    def forget(self, job_id: str, consumer: str) -> None:
        with self._lock:
            buffers = [b for (j, _), (b, _) in self._entries.items() if j == job_id]
        for buffer in buffers:
            if isinstance(buffer, _window.SharedWindow):
                buffer.forget(consumer)

    def drop_job(self, job_id: str) -> None:
        with self._lock:
            keys = [key for key in self._entries if key[0] == job_id]
            dropped = [self._entries.pop(key) for key in keys]
        _close(dropped)

    def snapshot(self) -> dict:
        """Per job, its buffers' figures summed over slots (idle buffers go first)."""
        now = time.monotonic()
        with self._lock:
            idle = [k for k, (b, _) in self._entries.items() if now - b.last_read > self._idle_sec]
            dropped = [self._entries.pop(k) for k in idle]
            entries = list(self._entries.items())
        _close(dropped)
        out: dict[str, dict] = {}
        for (job_id, _), (buffer, _) in entries:
            figures = out.setdefault(job_id, {})
            for name, value in buffer.snapshot().items():
                figures[name] = figures.get(name, 0) + value
        return out


def _close(entries) -> None:
    for buffer, state in entries:
        buffer.close()
        state["it"].close()


def _blocks_bytes(elements: list) -> int:
    from jdata.service import _blocks

    return _blocks.nbytes(elements, elements)
