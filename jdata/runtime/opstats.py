"""Per-op statistics (every op of ``explain()``'s plan) and profiler trace slices.

Each op's iterator or reader is wrapped (``jdata._opregistry``)
in a ``Tally`` that counts its elements exactly and times one call in about
every ``_MEAN_PERIOD``, at random, extrapolating: a timer per element per op
would cost more than the tight loops it measures. Calls that move blocks
(``next_many``, ``read_block``) count a block's elements at once. A tally
belongs to one iterator or reader, which one thread uses at a time (worker
threads build readers of their own), so counts need no lock.

While a ``jax.profiler`` trace runs, the sampled calls notice it and every
call then becomes a ``TraceAnnotation`` slice named after the op (until the
trace stops): with no trace, the hot path asks nothing.

Ops inside worker processes (``Options(engine="processes")``) are not
wrapped: their time is their stage's (see ``jdata._opsummary``).
"""

from __future__ import annotations

import time

from jdata.runtime import trace
from jdata.runtime.stats import element_bytes

_FIRST_TIMED = 16  # the first calls of an op are all timed (warm-up is real time)
_MEAN_PERIOD = 32  # then one call in this many, at random, counts for them all
_BYTES_EVERY = 16  # timed calls per size measurement (sizes vary less than times)
ONE, LIST, BLOCK = range(3)  # what a call returns (see Tally.call)


class Tally:
    """One iterator's or reader's counts; ``sec`` is the time inside its calls (sampled)."""

    __slots__ = ("name", "countdown", "period", "calls_done", "failed", "block_calls",
                 "block_elements", "sec", "cpu", "timed", "bytes_per_element", "sampler",
                 "always", "worker", "timed_cpu", "_seed")

    def __init__(self, name: str, always: bool = False, worker: bool = False,
                 cpu: bool = False):
        self.name = name
        # Every call timed: a stage's handoffs, whose times (waits) vary too much to sample
        # and cost microseconds already, and its workers' calls (OpRegistry.workers).
        self.always = always or worker
        # CPU time too (a slow clock): on worker threads' calls (_opsummary), and with
        # ``cpu`` on the calls a sampled tally times (a waiting call's wall time is mostly
        # the wait: Cedar's planner profiles by the CPU, jdata._autoplan).
        self.worker = worker
        self.timed_cpu = worker or cpu
        self.countdown = self.period = 1  # calls left in the period; the last one is timed
        self.calls_done = self.failed = self.block_calls = self.block_elements = 0
        self.sec = self.cpu = self.bytes_per_element = 0.0
        self.timed = 0
        self.sampler = None  # called after each timed call (the plan's output: samples)
        self._seed = hash(name) & 0x7FFFFFFF

    @property
    def elements(self) -> int:
        calls = self.calls_done + self.period - self.countdown
        return calls - self.block_calls - self.failed + self.block_elements

    def seconds(self, cpu: bool = False) -> float:
        """The time inside all calls (with ``cpu``, the thread's CPU time): the timed ones'
        estimate, and the calls since the last timed one at the mean so far."""
        sec = self.cpu if cpu else self.sec
        pending = self.period - self.countdown
        return sec + pending * sec / self.calls_done if self.calls_done else 0.0

    def call(self, shape: int, fn, *args):
        """``fn(*args)`` timed; it stands for the ``period`` calls that ended with it.

        ``shape`` says where an element is in the result, for its size: ``ONE``,
        ``LIST`` (``next_many``) or ``BLOCK`` (``read_block``'s ``(elements, error)``).
        """
        tracing = trace.enabled()
        cpu_start = time.thread_time() if self.timed_cpu else 0.0
        start = time.perf_counter()
        try:
            out = trace.sliced(self.name, fn, *args) if tracing else fn(*args)
        finally:
            self.sec += (time.perf_counter() - start) * self.period
            if self.timed_cpu:
                self.cpu += (time.thread_time() - cpu_start) * self.period
            self.calls_done += self.period
            self.timed += 1
            self.countdown = self.period = 1 if tracing else self._next_period()
        if self.timed % _BYTES_EVERY == 1:
            self._measure(shape, out)
        if self.sampler is not None:
            self.sampler(self)
        return out

    def _next_period(self) -> int:
        if self.timed < _FIRST_TIMED or self.always:
            return 1
        # A random period, so that no cost that recurs every n calls (a block read
        # every 1024 elements) is always or never the one timed.
        self._seed = (self._seed * 1103515245 + 12345) & 0x7FFFFFFF
        return 1 + (self._seed >> 8) % (2 * _MEAN_PERIOD - 1)

    def _measure(self, shape: int, out) -> None:
        elements = [out] if shape == ONE else out if shape == LIST else out[0]
        if elements:
            size = element_bytes(elements[0])
            old = self.bytes_per_element
            self.bytes_per_element = size if old == 0 else 0.8 * old + 0.2 * size


class CountedIterator:
    """An op's iterator, counted and sampled by its ``Tally`` (the same protocol)."""

    def __init__(self, inner, tally: Tally):
        self.inner, self._tally, self._next = inner, tally, inner.__next__

    def __iter__(self):
        return self

    def __next__(self):
        tally = self._tally
        countdown = tally.countdown - 1
        try:
            if countdown:
                tally.countdown = countdown
                return self._next()
            return tally.call(ONE, self._next)
        except BaseException:  # StopIteration or an error: no element
            tally.failed += 1
            raise

    def next_many(self, n: int) -> list:
        tally = self._tally
        countdown = tally.countdown - 1
        tally.block_calls += 1  # a block call is no element call, whatever it returns
        if countdown:
            tally.countdown = countdown
            out = self.inner.next_many(n)
        else:
            out = tally.call(LIST, self.inner.next_many, n)
        tally.block_elements += len(out)
        return out

    def snapshot(self):
        return self.inner.snapshot()

    def get_state(self):
        return self.inner.get_state()

    def set_state(self, state):
        self.inner.set_state(state)

    def close(self):
        self.inner.close()

    def __getattr__(self, name):  # anything else an op asks of its input's iterator
        if name == "inner":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


class CountedReader:
    """An op's reader, counted and sampled by its ``Tally`` (``OpRegistry.reader`` makes one)."""

    def __init__(self, inner, tally: Tally):
        self.inner, self._tally, self._get = inner, tally, inner.__getitem__
        self.prefers_blocks = getattr(inner, "prefers_blocks", False)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int):
        tally = self._tally
        countdown = tally.countdown - 1
        try:
            if countdown:
                tally.countdown = countdown
                return self._get(index)
            return tally.call(ONE, self._get, index)
        except BaseException:
            tally.failed += 1
            raise

    def __getattr__(self, name):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class CountedBlockReader(CountedReader):
    """A ``CountedReader`` of a reader with ``read_block`` (a method of the class: one set
    on the instance would make a reference cycle, and keep a file source's reader, and
    its open files, alive until a garbage collection)."""

    def read_block(self, lo: int, hi: int):
        tally = self._tally
        countdown = tally.countdown - 1
        tally.block_calls += 1
        if countdown:
            tally.countdown = countdown
            out = self.inner.read_block(lo, hi)
        else:
            out = tally.call(BLOCK, self.inner.read_block, lo, hi)
        tally.block_elements += len(out[0])
        return out


def counted(iterator):
    """The iterator a ``CountedIterator`` counts, or ``iterator`` itself (for ops that
    treat some inputs apart, such as a prefetch right over a parallel stage)."""
    return iterator.inner if isinstance(iterator, CountedIterator) else iterator
