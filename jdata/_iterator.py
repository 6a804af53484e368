"""The public iterator: ``Dataset.iterator()`` and ``iter(dataset)``."""

from __future__ import annotations

import json
from typing import Any

from jdata import _plan, _planner
from jdata.runtime.context import Context

_STATE_VERSION = 1


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
        return {"version": _STATE_VERSION, "plan": self._signature,
                "state": self._root.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the iterator to a position returned by ``get_state``."""
        if isinstance(state, (str, bytes)):
            state = json.loads(state)
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"state={str(state)[:80]!r} is not a jdata iterator state (version "
                f"{_STATE_VERSION}); pass what DatasetIterator.get_state() returned")
        if state["plan"] != self._signature:
            raise ValueError(
                "the state was saved from a different pipeline:\n"
                f"  saved:    {state['plan']}\n  this one: {self._signature}\n"
                "restore it with the dataset it was taken from")
        self._root.set_state(state["state"])

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
