"""The public iterator: ``Dataset.iterator()`` and ``iter(dataset)``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from jdata import _plan, _planner
from jdata._constants import INFINITE, UNKNOWN
from jdata.runtime import states
from jdata.runtime.context import Context

_STATE_VERSION = 2
# Version 1 states (before the plan's facts were recorded) restore without that check.
_READABLE_VERSIONS = (1, 2)


class DatasetIterator:
    """Iterates a dataset; its position can be saved and restored exactly.

    ``get_state()`` returns plain JSON-able data (indices and counters, not
    elements, wherever the input is random access). ``set_state(state)``, or
    ``dataset.iterator(state)``, resumes with exactly the remaining elements.

    >>> import jdata, json
    >>> it = jdata.range(5).iterator()
    >>> next(it), next(it)
    (np.int64(0), np.int64(1))
    >>> saved = json.dumps(it.get_state())
    >>> [int(x) for x in jdata.range(5).iterator(json.loads(saved))]
    [2, 3, 4]
    """

    def __init__(self, node: _plan.Node, ctx: Context, state: dict | None = None):
        self._node = node  # already optimized (Dataset.iterator)
        self._signature = _plan.structure_signature(node)
        self._facts = plan_facts(node)
        self._ctx = ctx
        self._root = _planner.make_iterator(node, ctx, 0)
        self._closed = False
        if state is not None:
            self.set_state(state)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._root)

    def get_state(self) -> dict[str, Any]:
        """The iterator's position as JSON-able data."""
        return {"version": _STATE_VERSION, "plan": self._signature, "facts": self._facts,
                "state": self._root.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the iterator to a position returned by ``get_state``.

        The state is checked first, as untrusted input (it comes back from
        disk): anything this pipeline's iterators could not have returned,
        including a state of the same pipeline over other data (a source of
        another size, another random key), is a ``ValueError`` naming the op
        and the field. Nothing in a state is ever imported, called or
        unpickled. (A UDF's code may change between save and restore.)
        """
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
        states.Fields(state, "iterator",
                      ("version", "plan", "state") + (("facts",) if version > 1 else ()))
        if state["plan"] != self._signature:
            raise ValueError(
                "the state was saved from a different pipeline:\n"
                f"  saved:    {str(state['plan'])[:2000]}\n  this one: {self._signature}\n"
                "restore it with the dataset it was taken from")
        if version > 1:
            _check_facts(state["facts"], self._facts)
        try:
            self._root.set_state(state["state"])
        except RecursionError:
            raise ValueError("the state is nested too deeply for this pipeline") from None

    def stats(self):
        """Statistics of the pipeline's asynchronous stages and the autotuner's decisions.

        Returns a ``PipelineStats``: ``print`` it for a table (throughput,
        latency, parallelism, buffer fill, time the consumer waited, engine
        and why), read ``.rows`` and ``.history`` as data, or ``.plot()`` the
        tuned knobs over time (needs matplotlib).

        >>> import jdata
        >>> ds = jdata.range(1000).map(lambda x: x + 1, num_parallel_calls=2).prefetch(2)
        >>> it = ds.iterator()
        >>> total = sum(int(x) for x in it)
        >>> [row["elements"] for row in it.stats().rows]
        [1000, 1000]
        """
        return self._ctx.autotuner().stats()

    def close(self) -> None:
        """Stops the iterator and releases its resources. Idempotent."""
        if not self._closed:
            self._closed = True
            self._root.close()
            if self._ctx._tuner is not None:
                self._ctx._tuner.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass


def plan_facts(node: _plan.Node) -> list[list]:
    """What a state is valid only with, per op of the plan (in ``walk`` order):
    ``[op, cardinality, key digest]``, ``None`` where the cardinality is not
    known or the op has no random key.

    A state taken over a source of another size, or with another shuffle
    key, would restore to another stream (elements skipped or repeated).
    """
    facts = []
    for n in _plan.walk(node):
        cardinality = n.cardinality()
        digest = hashlib.sha256(np.ascontiguousarray(n.key).tobytes()).hexdigest()[:16] \
            if n.random else None
        facts.append([n.op_name, None if cardinality in (INFINITE, UNKNOWN) else cardinality,
                      digest])
    return facts


def _check_facts(saved, facts: list[list]) -> None:
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
