"""Parallel iterators with exact state, on a pool of threads or worker processes.

Two iterators run work on a ``jdata.runtime.pool.Pool`` ahead of the consumer:

- ``ParallelIndexIterator`` serves ``reader[i]`` for ``i = 0, 1, ...`` over a
  random-access subtree. Each worker thread builds its own reader (readers
  cache blocks of keys and permutations, so they are not thread-safe; building
  one is cheap and deterministic), so every element is computed by index and
  the state is just the next index, whatever the parallelism.
- ``ParallelMapIterator`` pulls elements from a sequential input on the
  consumer's thread and applies a function to them on the pool. Its state is
  the input's state from before the oldest element not yet emitted, so a
  restore re-pulls (and recomputes) the elements that were in flight.

With ``deterministic=False`` elements are emitted in completion order and
the state also lists the positions already emitted past the oldest pending
one.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from jdata.runtime import pool, states
from jdata.runtime.iterator import Iterator, Reader, Tunable
from jdata.runtime.outcomes import Outcome, WorkerError
from jdata.runtime.pool import IndexJob, IndexTask, MapJob
from jdata.runtime.stats import OpStats


class Pooled(Tunable):
    """Emits the outcomes of chunks computed on a ``Pool``.

    Subclasses keep the pool topped up (``_fill``) and record what was
    emitted (``_mark_emitted``), which is what their state is made of.
    """

    def __init__(self, job: Callable, parallelism: int, deterministic: bool, engine: str,
                 cpu_budget: int | None, decision_key, op: str, home=None, reuse_key=None):
        self._pool = pool.Pool(job, parallelism, engine, cpu_budget, decision_key, home,
                               reuse_key)
        self._op = op  # for errors in restored states
        self._deterministic = deterministic
        self._ready: collections.deque = collections.deque()  # (tag, outcome) to emit
        # Completion order only: tags emitted past the oldest one still pending.
        self._done: set[int] = set()
        # A lost worker loses the elements it was computing, and an environment
        # failure (OSError) an element: the iterator stops until restored rather
        # than skip them (its state still points at them).
        self._fatal: WorkerError | OSError | None = None

    @property
    def stats(self) -> OpStats:
        return self._pool.stats

    def set_parallelism(self, parallelism: int) -> None:
        self._pool.resize(parallelism)

    def _with_done(self, state: dict) -> dict:
        if not self._deterministic:
            state["done"] = sorted(self._done)
        return state

    def _reset(self, done: list[int]) -> None:
        """Drops the work in flight before a restore."""
        self._fatal = None
        self._pool.cancel()
        self._ready.clear()
        self._done = set(done)

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
        error = outcome.error
        if isinstance(error, OSError):
            # The environment's fault (a file gone, a network error), not the
            # element's: it is not consumed, and the iterator stops until restored
            # from its state, which still points at the element.
            self._ready.appendleft((tag, outcome))
            self._fatal = error
            raise error
        self._mark_emitted(tag)
        return outcome.get()


class ParallelIndexIterator(Pooled):
    """``reader[i]`` for ``i = 0 .. len-1``, computed ahead on the pool's workers.

    The state is ``{"index": i}`` (the next index to emit), the same as
    ``IndexIterator``'s; with ``deterministic=False`` it adds ``"done"``, the
    indices past ``index`` already emitted.
    """

    def __init__(self, make_reader: Callable[[int], Reader], parallelism: int,
                 deterministic: bool = True, engine: str = "threads",
                 cpu_budget: int | None = None, decision_key=None, op: str = "parallel",
                 epoch: int = 0, home=None, reuse_key=None):
        """``make_reader(epoch)`` builds a reader; worker processes may be taken over from,
        and are parked for, other iterators of ``reuse_key`` under ``home`` (see
        ``jdata.runtime.persistent``)."""
        job = IndexJob(make_reader)
        super().__init__(job, parallelism, deterministic, engine, cpu_budget, decision_key, op,
                         home, reuse_key)
        self._epoch = epoch
        # A reader of its own, dropped at once: kept in the job's slot for this thread
        # (which reads nothing) it would hold the source's files open after close().
        self._len = len(make_reader(epoch))
        self._low = 0  # every index below was emitted
        self._next_submit = 0

    def _fill(self) -> None:
        while not self._pool.full() and self._next_submit < self._len:
            indices, size = [], self._pool.chunk_size()
            while self._next_submit < self._len and len(indices) < size:
                if self._next_submit not in self._done:
                    indices.append(self._next_submit)
                self._next_submit += 1
            if indices:
                self._pool.submit(IndexTask(self._epoch, indices), indices)

    def _mark_emitted(self, index: int) -> None:
        if index == self._low:
            self._low += 1
            while self._low in self._done:
                self._done.remove(self._low)
                self._low += 1
        else:
            self._done.add(index)

    def snapshot(self):
        return self._with_done({"index": self._low})

    def set_state(self, state):
        # The shape of IndexIterator's state, so a restore may change the parallelism.
        fields = states.Fields(state, self._op, ("index",), optional=("done",))
        low = fields.int("index", 0, self._len)
        done = (fields.ints("done", low + 1, self._len - 1, distinct=True)
                if "done" in fields else [])
        self._reset(done)
        self._low = self._next_submit = low

    def close(self):
        self._pool.shutdown()
        self._pool.job.release()


class ParallelMapIterator(Pooled):
    """``fn(element, position)`` over a sequential input, computed on the pool's workers.

    Elements are pulled on the consumer's thread (the input iterator is not
    thread-safe), each with the input's state from just before it. The state
    is the state before the oldest element not yet emitted, its position and,
    with ``deterministic=False``, the positions past it already emitted; a
    restore re-pulls from there and skips those.
    """

    def __init__(self, input_iterator: Iterator, fn: Callable[[Any, int], Any],
                 parallelism: int, deterministic: bool = True, engine: str = "threads",
                 cpu_budget: int | None = None, decision_key=None, op: str = "map"):
        super().__init__(MapJob(fn), parallelism, deterministic, engine, cpu_budget,
                         decision_key, op)
        self._input = input_iterator
        self._position = 0  # of the next element to pull
        self._exhausted = False
        # Pulled, not yet emitted: position -> input state before it, oldest first.
        self._pending: collections.OrderedDict[int, Any] = collections.OrderedDict()

    def _pull_chunk(self) -> list:
        items, size = [], self._pool.chunk_size()
        while not self._exhausted and len(items) < size:
            before = self._input.snapshot()
            position = self._position
            try:
                element = next(self._input)
            except StopIteration:
                self._exhausted = True
                break
            except Exception as e:  # the input moved past it: emit the error in its turn
                element = Outcome(error=e)
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

    def snapshot(self):
        if self._pending:
            position, before = next(iter(self._pending.items()))
        else:
            position, before = self._position, self._input.snapshot()
        return self._with_done({"input": before, "position": position})

    def set_state(self, state):
        # The shape of a sequential map's state, so a restore may change the parallelism.
        fields = states.Fields(state, self._op, ("input", "position"), optional=("done",))
        position = fields.int("position")
        done = fields.ints("done", position + 1, distinct=True) if "done" in fields else []
        self._input.set_state(state["input"])
        self._reset(done)
        self._pending.clear()
        self._position = position
        self._exhausted = False

    def close(self):
        self._pool.shutdown()
        self._input.close()


