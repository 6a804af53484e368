"""zip: combines datasets element-wise. See ``jdata.zip``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._plan import Node, min_cardinality
from jdata.runtime import states
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class ZipNode(Node):
    """See ``jdata.zip``. Elements are tuples, or dicts keyed by ``keys`` when given."""

    datasets: tuple
    keys: tuple | None
    op_name: ClassVar[str] = "zip"

    def cardinality(self) -> int:
        return min_cardinality(d.cardinality() for d in self.datasets)

    def random_access(self) -> bool:
        return all(d.random_access() for d in self.datasets)

    def compute_spec(self):
        return self.pack([d.element_spec() for d in self.datasets])

    def pack(self, values: list):
        """One output element (or spec) from the inputs' values, in input order."""
        if self.keys is None:
            return tuple(values)
        return dict(zip(self.keys, values))

    def __str__(self):
        if self.keys is None:
            return f"Zip({len(self.datasets)} datasets)"
        return f"Zip(keys={list(self.keys)})"


class _ZipReader:
    def __init__(self, node: ZipNode, ctx, epoch: int):
        self._node = node
        self._inputs = [_planner.make_reader(d, ctx, epoch) for d in node.datasets]
        self._len = min(len(r) for r in self._inputs)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        return self._node.pack([r[index] for r in self._inputs])


class _ZipIterator(Iterator):
    """Pulls one element from every input per output element; stops at the shortest."""

    def __init__(self, node: ZipNode, ctx, epoch: int):
        self._node = node
        self._inputs = [_planner.make_iterator(d, ctx, epoch) for d in node.datasets]

    def __next__(self):
        values, error = [], None
        for it in self._inputs:
            try:
                values.append(next(it))
            except StopIteration:  # the shortest input ends the zip
                raise
            except Exception as e:
                # Keep pulling the other inputs so that they stay aligned: the
                # next output pairs their next elements (as tf.data does).
                if error is None:
                    error = e
                values.append(None)
        if error is not None:
            raise error
        return self._node.pack(values)

    def snapshot(self):
        return {"inputs": [it.snapshot() for it in self._inputs]}

    def set_state(self, state):
        saved = states.Fields(state, "zip", ("inputs",)).list("inputs", len(self._inputs))
        for it, s in zip(self._inputs, saved):
            it.set_state(s)

    def close(self):
        for it in self._inputs:
            it.close()


_planner.register(ZipNode, iterator=_ZipIterator, reader=_ZipReader)
