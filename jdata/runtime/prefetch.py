"""Prefetching on a background thread, with exact state."""

from __future__ import annotations

import collections
import threading
import time
import weakref

from jdata._errors import IteratorClosedError
from jdata.runtime import executors, memory, trace
from jdata.runtime.iterator import Iterator, Tunable
from jdata.runtime.outcomes import Outcome
from jdata.runtime.stats import OpStats

_END = object()  # the producer saw the input's end
# How long close() waits for a pull in progress before leaving the (daemon)
# producer thread to finish it alone.
_CLOSE_TIMEOUT_SEC = 10.0
# How often a consumer waiting for an element checks that the producer lives.
_POLL_SEC = 1.0
# Prefetch measures the size of one element in this many.
_BYTES_SAMPLE_EVERY = 16
# How often a producer held back by the memory budget looks again (other
# pipelines may have let go of memory).
_BUDGET_POLL_SEC = 0.05


class PrefetchIterator(Tunable):
    """Pulls up to ``buffer_size`` elements ahead on a background thread.

    Each buffered element carries the input's state from just before it, so
    ``get_state`` returns the state before the oldest buffered element: a
    restore re-pulls what was buffered. Lock order is input, then buffer:
    the producer appends an element while still holding the input lock, so
    ``get_state`` (which takes both) never sees an element that has left the
    input but not reached the buffer.

    The buffer also stays within what the process's memory budget leaves it
    (``jdata.runtime.memory``; one element always fits, so it never stalls).

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
        self._handoff = _Handoff()
        self.stats = OpStats("prefetch", 1, buffer_size)
        memory.track(self.stats)

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
        self._handoff = _Handoff()
        self._thread = threading.Thread(target=_produce, args=(weakref.ref(self), self._handoff),
                                        name="jdata-prefetch", daemon=True)
        self._thread.start()

    def __next__(self):
        if self._thread is None:
            if self._buffer_size == 0:
                return self._next_synchronously()
            self._start()
        with self._cond:
            if not self._buffer:
                start, thread = time.perf_counter(), self._thread
                while not self._buffer:
                    if self._stop:  # close() from another thread while this one waited
                        raise IteratorClosedError(
                            "next() waited on an iterator that close() (called on another "
                            "thread meanwhile) closed: make a new one with ds.iterator()")
                    if not self._cond.wait(_POLL_SEC) and not thread.is_alive():
                        raise RuntimeError("jdata: the prefetch thread ended without a result")
                self.stats.wait_sec += time.perf_counter() - start
            _, outcome = self._buffer[0]
            if outcome is _END:
                raise StopIteration  # kept in the buffer: the end stays the end
            self._buffer.popleft()
            stats = self.stats
            stats.elements += 1
            stats.buffered = len(self._buffer)
            stats.held_bytes = int(stats.buffered * stats.bytes_per_element)
            self._cond.notify_all()
        return outcome.get()

    def _over_budget(self) -> bool:
        """One more element would take the buffer past the memory the process's budget
        leaves it (the buffer is never empty for that reason)."""
        n = len(self._buffer)
        need = (n + 1) * self.stats.bytes_per_element
        return n > 0 and need > memory.limit() >> 6 and need > memory.room(self.stats)

    def snapshot(self):
        with self._input_lock, self._cond:
            if self._buffer:
                return self._buffer[0][0]
            return self._input.snapshot()

    def _halt(self, timeout: float | None = None) -> bool:
        """Stops the producer; False if a pull in progress outlived ``timeout``."""
        thread = self._thread
        if thread is None:
            return True
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if thread is threading.current_thread():
            return False  # close() by a garbage collection on the producer's thread
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
            return
        # The producer still uses the input (a pull in progress, or this is its own thread,
        # where a garbage collection closed the pipeline): it closes it on its way out.
        with self._cond:
            if not self._handoff.done:
                self._handoff.inputs.append(self._input)
                return
        self._input.close()


class _Handoff:
    """What a producer closes on its way out: the input, where ``close()`` could not."""

    def __init__(self) -> None:
        self.done = False  # the producer is on its way out (under the iterator's condition)
        self.inputs: list[Iterator] = []


def _produce(ref: weakref.ref, handoff: _Handoff) -> None:
    """The producer of the ``PrefetchIterator`` that ``ref`` refers to.

    It holds the iterator only while it pulls: waiting for room, it holds the
    buffer and the condition, which lead to no UDF. A pipeline whose UDF refers
    back to its iterator (``ds.map(self.preprocess)`` in a trainer that holds
    ``self.it``) is then garbage once its owner is dropped, and is collected and
    closed like any other, instead of being kept alive by its own thread, buffer
    full, forever.
    """
    this = ref()
    if this is None:
        return
    cond, buffer, stats = this._cond, this._buffer, this.stats
    me, (enter, leave) = threading.current_thread(), executors.busy_marks()
    try:
        while True:
            with cond:
                while True:
                    if this is None or this._stop:
                        return
                    if len(buffer) >= this._buffer_size:
                        wait = _POLL_SEC  # then looks whether the iterator is still there
                    elif this._over_budget():
                        wait = _BUDGET_POLL_SEC
                    else:
                        break
                    this = None
                    cond.wait(wait)
                    this = ref()
            with this._input_lock:
                if this._stop or executors.exiting():
                    return
                before = None
                start = time.perf_counter()
                try:
                    before = this._input.snapshot()
                    enter(me)
                    try:
                        outcome = Outcome(trace.call(stats.label, next, this._input))
                    finally:
                        leave(me)
                    if stats.elements % _BYTES_SAMPLE_EVERY == 0:
                        stats.record_bytes(outcome.value)
                except StopIteration:
                    outcome = _END
                except BaseException as e:  # delivered to the consumer in order
                    outcome = Outcome(error=e)
                stats.busy_sec += time.perf_counter() - start
                with cond:
                    if this._stop:  # closed meanwhile: no element after close()
                        return
                    buffer.append((before, outcome))
                    stats.held_bytes = int(len(buffer) * stats.bytes_per_element)
                    cond.notify_all()
            if outcome is _END:
                return
            del before, outcome
    finally:
        with cond:
            handoff.done = True
            inputs, handoff.inputs = handoff.inputs, []
        for input_iterator in inputs:
            input_iterator.close()
