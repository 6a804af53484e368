"""The public iterator: ``Dataset.iterator()`` and ``iter(dataset)``."""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from typing import TYPE_CHECKING, Any, NoReturn, Self

import numpy as np

from jdata import _html, _opsummary, _plan, _planner
from jdata._constants import INFINITE, UNKNOWN
from jdata._errors import IteratorClosedError
from jdata._opregistry import OpRegistry
from jdata.runtime import heap, persistent, states
from jdata.runtime.context import Context

if TYPE_CHECKING:
    from jdata.runtime.stats import PipelineStats

_STATE_VERSION = 3
# Version 1 states (before the plan's facts were recorded) restore without that
# check; versions 1 and 2 (before the epoch was recorded) restore at epoch 0.
_READABLE_VERSIONS = (1, 2, 3)


class DatasetIterator:
    """Iterates a dataset; its position can be saved and restored exactly.

    ``get_state()`` returns plain JSON-able data (indices and counters, not
    elements, wherever the input is random access), including the iterator's
    epoch (see ``Dataset.iterator``). ``set_state(state)``, or
    ``dataset.iterator(state)``, resumes with exactly the remaining elements.

    >>> import jdata, json
    >>> it = jdata.range(5).iterator()
    >>> next(it), next(it)
    (np.int64(0), np.int64(1))
    >>> saved = json.dumps(it.get_state())
    >>> [int(x) for x in jdata.range(5).iterator(json.loads(saved))]
    [2, 3, 4]
    """

    def __init__(self, node: _plan.Node, ctx: Context,
                 state: dict[str, Any] | str | bytes | None = None,
                 epoch: int = 0, epochs: Epochs | None = None, profiler: Any = None) -> None:
        self._node = node  # already optimized (Dataset.iterator)
        # Cedar's planner's profile of this iterator (Options(plan=...)), or None.
        self._profiler = profiler
        self._signature = _plan.structure_signature(node)
        self._facts = plan_facts(node)
        self._ctx = ctx
        self._epochs = epochs
        self._closed = False
        # The root's state where the stream ended; the root is closed then (see ``_end``).
        self._ended: Any = None
        if state is not None:
            state, epoch = self._checked(state)
        self._epoch = epoch
        heap.keep_freed_pages()
        ctx.pool_home = node
        self._ops = ctx.ops = OpRegistry(node, cpu=profiler is not None)  # the context's
        persistent.opened(node)
        self._root = _planner.make_iterator(node, ctx, epoch)
        self._stream: Any = self._root  # what next() reads: _CLOSED once closed
        self._ops.watch_output()
        if state is not None:
            self._restore(self._root, state["state"])
            self._restored(epoch)
        if profiler is not None:
            profiler.start(self._ops)

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._stream)
        except StopIteration:
            self._end()
            raise

    def _end(self) -> None:
        """The stream ended: its threads stop and its worker processes are parked for the
        dataset's next iterator now, not when this one is dropped (a training loop keeps
        it for its state while the next epoch's starts). ``get_state()`` gives the state
        at the end; ``set_state()`` builds the stages again."""
        if self._ended is not None or self._closed:
            return
        if self._profiler is not None:
            self._profiler.decide(ended=True)
        try:
            self._ended = self._root.get_state()
        except Exception:  # no state to keep: the stages stay until it goes, as get_state raises
            return
        self._stream = _ENDED
        self._root.close()
        self._ctx.stop_tuner()

    @property
    def epoch(self) -> int:
        """Which epoch of the dataset this iterator runs (see ``Dataset.iterator``)."""
        return self._epoch

    def get_state(self) -> dict[str, Any]:
        """The iterator's position as JSON-able data (refused after ``close()``)."""
        if self._closed:
            _CLOSED.refuse("get_state()")
        root = self._root.get_state() if self._ended is None else copy.deepcopy(self._ended)
        return {"version": _STATE_VERSION, "plan": self._signature, "facts": self._facts,
                "epoch": self._epoch, "state": root}

    def set_state(self, state: dict[str, Any] | str | bytes) -> None:
        """Moves the iterator to a position returned by ``get_state``.

        The state is checked first, as untrusted input (it comes back from
        disk): anything this pipeline's iterators could not have returned,
        including a state of the same pipeline over other data (a source of
        another size, another random key), is a ``ValueError`` naming the op
        and the field. Nothing in a state is ever imported, called or
        unpickled. (A UDF's code may change between save and restore.) The
        iterator moves to the state's epoch, and its dataset's next iterator
        continues with the epoch after it.
        """
        if self._closed:
            _CLOSED.refuse("set_state()")
        state, epoch = self._checked(state)
        if epoch == self._epoch and self._ended is None:
            self._restore(self._root, state["state"])
        else:
            # Another epoch is another stream (shuffle order, keys), and an ended
            # stream's stages are closed: rebuilt, and swapped in only once the state
            # fits, so a bad state changes nothing.
            if self._ended is not None:
                self._ctx.renew_tuner()
            root = _planner.make_iterator(self._node, self._ctx, epoch)
            try:
                self._restore(root, state["state"])
            except BaseException:
                root.close()
                raise
            self._root, old = root, self._root
            self._stream = root
            self._epoch = epoch
            self._ops.watch_output()
            if self._ended is None:
                old.close()
            self._ended = None
        self._restored(epoch)

    def _checked(self, state: Any) -> tuple[dict[str, Any], int]:
        """The state's dict and epoch, once its envelope is checked (see ``set_state``)."""
        if isinstance(state, (str, bytes)):
            try:
                state = json.loads(state)
            except (ValueError, RecursionError) as e:
                raise ValueError(f"state is not JSON: {e}") from None
        version = state.get("version") if isinstance(state, dict) else None
        if type(version) is not int or version not in _READABLE_VERSIONS:
            raise ValueError(
                f"state={str(state)[:80]!r} is not a jdata iterator state (version "
                f"{_STATE_VERSION}); pass what DatasetIterator.get_state() returned")
        keys = ("version", "plan", "state") + (("facts",) if version > 1 else ()) + (
            ("epoch",) if version > 2 else ())
        fields = states.Fields(state, "iterator", keys)
        epoch = fields.int("epoch", 0, states.MAX_EPOCH) if version > 2 else 0
        if state["plan"] != self._signature:
            raise ValueError(
                "the state was saved from a different pipeline:\n"
                f"  saved:    {str(state['plan'])[:2000]}\n  this one: {self._signature}\n"
                "restore it with the dataset it was taken from")
        if version > 1:
            _check_facts(state["facts"], self._facts)
        return state, epoch

    @staticmethod
    def _restore(root: Any, state: Any) -> None:
        try:
            root.set_state(state)
        except RecursionError:
            raise ValueError("the state is nested too deeply for this pipeline") from None

    def _restored(self, epoch: int) -> None:
        if self._epochs is not None:
            self._epochs.restart_after(epoch)

    def stats(self) -> PipelineStats:
        """Statistics of the pipeline's stages and ops, and the autotuner's decisions.

        Returns a ``PipelineStats``: ``print`` it for a table of the
        asynchronous stages (throughput, latency, parallelism, buffer fill,
        time the consumer waited, engine and why), a table of every op of the
        plan (elements, own time, bytes, share of the consumer's wait; named
        as ``explain()`` names them) and a bottleneck hint; read ``.rows``,
        ``.ops``, ``.bottleneck`` and ``.history`` as data, or ``.plot()``
        them over time (needs matplotlib). See ``docs/slow.md``.

        >>> import jdata
        >>> ds = jdata.range(1000).map(lambda x: x + 1, num_parallel_calls=2).prefetch(2)
        >>> it = ds.iterator()
        >>> total = sum(int(x) for x in it)
        >>> [row["elements"] for row in it.stats().rows]
        [1000, 1000]
        >>> [(op["op"], op["elements"]) for op in it.stats().ops]
        [('prefetch', 1000), ('map(<lambda>)', 1000), ('range', 1000)]
        """
        ops, bottleneck = _opsummary.summarize(self._ops)
        return self._ctx.autotuner().stats(ops, bottleneck, self._ops.throughput())

    def close(self) -> None:
        """Stops the iterator and releases its resources. Idempotent.

        After it, ``next()``, ``get_state()`` and ``set_state()`` raise
        ``IteratorClosedError`` (a ``ValueError``) at once: take the state before
        closing (closing drops buffered elements, so no state is left to take), and
        make a new iterator to go on.

        Worker processes are kept for the dataset's next iterator unless this
        is the last open one (``jdata.runtime.persistent``); an iterator that is
        dropped without ``close()``, as a ``for`` loop drops it, keeps them. An
        iterator that reached its end has released its threads and parked its
        worker processes already, and keeps its state until closed.
        """
        self._close(release=True)

    def _close(self, release: bool) -> None:
        if not self._closed:
            self._closed = True
            self._stream = _CLOSED
            if self._profiler is not None:
                self._profiler.cancel()
            try:
                if self._ended is None:  # else closed at the end already
                    self._root.close()
                self._ctx.stop_tuner()
            finally:
                persistent.closed(self._node, release)

    def __repr__(self) -> str:
        closed = "closed" if getattr(self, "_closed", True) else "open"
        return (f"<jdata.DatasetIterator {closed}, epoch {getattr(self, '_epoch', '?')}, "
                f"plan {getattr(self, '_node', '?')}>")

    def _repr_html_(self) -> str:
        """Notebooks show whether the iterator is open, its epoch, its engine option and
        its plan with the engine of each op."""
        from jdata import _dataset  # imports this module: not at the top

        rows = [("state", "closed" if self._closed else "open"), ("epoch", str(self._epoch)),
                ("engine", f"Options(engine={self._ctx.options.engine!r})")]
        plan = _html.described(
            lambda: "\n".join(_dataset._explain(self._node, 0, self._ctx,
                                                _plan.op_labels(self._node))),
            str(self._node))
        return _html.block("jdata.DatasetIterator", rows, plan)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._close(release=False)
        except Exception:  # interpreter shutdown: nothing left to release
            pass


class _Closed:
    """What a closed iterator's ``next()`` reads instead of its root: the check costs
    nothing per element (no flag tested on each ``next()``), and an engine's closed
    buffers are never reached, where threads would wait forever, processes would say
    their workers were shut down, and a sequential pipeline would end as if exhausted."""

    def __next__(self) -> NoReturn:
        self.refuse("next()")

    @staticmethod
    def refuse(what: str) -> NoReturn:
        raise IteratorClosedError(
            f"{what} on a closed iterator: close() released its threads, processes and "
            "buffers. Make a new one with ds.iterator(), or ds.iterator(state) with a state "
            "taken by get_state() before close() to go on from there")


_CLOSED = _Closed()


class _Ended:
    """What an ended iterator's ``next()`` reads: its stages are closed (see ``_end``)."""

    def __next__(self) -> NoReturn:
        raise StopIteration


_ENDED = _Ended()


class Epochs:
    """Counts a dataset's iterators: the Nth one runs epoch N (tf.data reshuffles
    per iterator). Thread-safe; not pickled (a fresh process starts at 0)."""

    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    def take(self) -> int:
        """The epoch of a new iterator."""
        with self._lock:
            epoch, self._next = self._next, min(self._next + 1, states.MAX_EPOCH)
            return epoch

    def restart_after(self, epoch: int) -> None:
        """After a restore to ``epoch``: the next iterator continues with the one after."""
        with self._lock:
            self._next = min(epoch + 1, states.MAX_EPOCH)


def plan_facts(node: _plan.Node) -> list[list[Any]]:
    """What a state is valid only with, per op of the plan (in ``walk`` order):
    ``[op, cardinality, key digest]``, ``None`` where the cardinality is not
    known or the op has no random key.

    A state taken over a source of another size, or with another shuffle
    key, would restore to another stream (elements skipped or repeated).
    """
    facts: list[list[Any]] = []
    for n in _plan.walk(node):
        cardinality = n.cardinality()
        digest = hashlib.sha256(np.ascontiguousarray(n.key).tobytes()).hexdigest()[:16] \
            if n.random else None
        facts.append([n.op_name, None if cardinality in (INFINITE, UNKNOWN) else cardinality,
                      digest])
    return facts


def _check_facts(saved: Any, facts: list[list[Any]]) -> None:
    states.check_list(saved, "iterator", "facts", len(facts))
    # Inputs first (reversed walk order): a difference shows first where it comes from.
    for entry, (op, cardinality, digest) in reversed(list(zip(saved, facts))):
        if not isinstance(entry, list) or len(entry) != 3 or entry[0] != op:
            raise states.invalid("iterator", "facts", f"{entry!r:.60} is not a fact of {op}")
        if entry[1] != cardinality:
            raise ValueError(
                f"{op}: the state was saved over {entry[1]} elements, but this pipeline's "
                f"{op} has {cardinality} (state field 'facts'); restore it with the data it "
                "was saved from")
        if entry[2] != digest:
            raise ValueError(
                f"{op}: the state was saved with another random key (state field 'facts'); "
                "restore it with the key it was saved with")
