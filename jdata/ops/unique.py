"""unique: drops elements seen before. See ``Dataset.unique``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from jdata import _plan, _planner
from jdata._constants import UNKNOWN
from jdata._plan import Node, Unchanged
from jdata._spec import TensorSpec
from jdata.runtime import state_codec, states
from jdata.runtime.iterator import Iterator

_OP = "unique"
_SUPPORTED = ("unique: elements must be integer scalars or strings (str/bytes), as in "
              "tf.data; map() other elements to such a key first")


@dataclasses.dataclass(frozen=True, eq=False)
class UniqueNode(Unchanged):
    """See ``Dataset.unique``."""

    input: Node
    op_name: ClassVar[str] = "unique"

    def __post_init__(self):
        # Checking needs the input's spec; computing it runs UDFs on a first
        # element, which construction must not do, so only UDF-free inputs are checked.
        if not _plan.spec_is_static(self.input):
            return
        try:
            spec = self.input.element_spec()
        except Exception:  # e.g. an empty source: iteration reports any problem instead
            return
        _check_spec(spec)

    def cardinality(self) -> int:
        return 0 if self.input.cardinality() == 0 else UNKNOWN


def _check_spec(spec) -> None:
    if not isinstance(spec, TensorSpec) or spec.shape != () or spec.dtype.kind not in "iuO":
        raise TypeError(f"{_SUPPORTED}; this dataset's element_spec is {spec}")


def _key(element):
    """The hashable identity of an element, or a TypeError for unsupported ones."""
    if isinstance(element, str):
        return str(element)  # np.str_ -> str, so keys hash and encode alike
    if isinstance(element, bytes):
        return bytes(element)
    if isinstance(element, (np.integer, np.ndarray)) and np.ndim(element) == 0:
        if element.dtype.kind in "iu":
            return int(element)
        if element.dtype == object and isinstance(element[()], (str, bytes)):
            return _key(element[()])
    raise TypeError(f"{_SUPPORTED}; got {type(element).__name__} {element!r:.60}")


def _sort_key(key):
    # Ints, str and bytes do not compare with each other; order by type first.
    return (type(key).__name__, key)


class _UniqueIterator(Iterator):
    """Keeps the keys seen in first-seen order too, so a snapshot is O(1): the
    count of keys seen; ``get_state`` encodes them."""

    def __init__(self, node: UniqueNode, ctx, epoch: int):
        self._input = _planner.make_iterator(node.input, ctx, epoch)
        self._seen: set = set()
        self._order: list = []

    def __next__(self):
        while True:
            element = next(self._input)
            key = _key(element)
            if key not in self._seen:
                self._seen.add(key)
                self._order.append(key)
                return element

    def snapshot(self):
        return {"input": self._input.snapshot(),
                "seen": states.Deferred(_encode_seen, self._order, len(self._order))}

    def set_state(self, state):
        states.Fields(state, _OP, ("input", "seen"))
        keys = [state_codec.decode(k, _OP, "seen")
                for k in states.check_list(state["seen"], _OP, "seen")]
        for key in keys:
            if type(key) not in (int, str, bytes):
                raise states.invalid(_OP, "seen", f"{key!r:.60} is not an int, str or bytes key")
        if len(set(keys)) != len(keys):
            raise states.invalid(_OP, "seen", "holds a key twice")
        self._input.set_state(state["input"])
        self._seen, self._order = set(keys), keys

    def close(self):
        self._input.close()


def _encode_seen(order: list, count: int) -> list:
    # Sorted, so that equal positions give equal states.
    return [state_codec.encode(k) for k in sorted(order[:count], key=_sort_key)]


_planner.register(UniqueNode, iterator=_UniqueIterator)
