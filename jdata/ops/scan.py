"""scan: a running fold over the elements, and ``reduce``. See ``Dataset.scan``."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar

from jdata import _planner, _probe, _spec, _tree
from jdata._plan import Node
from jdata.runtime import state_codec, states, udf
from jdata.runtime.iterator import Iterator
from jdata.runtime.values import frozen


@dataclasses.dataclass(frozen=True, eq=False)
class ScanNode(Node):
    """See ``Dataset.scan``."""

    input: Node
    initial_state: Any
    scan_func: Callable
    op_name: ClassVar[str] = "scan"

    def cardinality(self) -> int:
        return self.input.cardinality()

    def compute_spec(self):
        def first_output(element):
            return step(self.scan_func, frozen(self.initial_state), element, 0)[1]
        return _probe.udf_output_spec(self.input, first_output, "scan")


def step(fn: Callable, state, element, position: int):
    """One ``scan_func(state, element)`` call: the checked ``(new_state, output)``."""
    # The element is not unpacked: tf.data passes exactly (state, element).
    result = udf.call(fn, (state, element), "scan", position)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError(
            f"scan: scan_func must return a pair (new_state, output_element), but at position "
            f"{position} it returned {type(result).__name__} {_short(result)}")
    new_state = check_same_structure(_tree.normalize(result[0], "scan"), state, "scan",
                                     position)
    # Read-only, as tf.data's state tensors are immutable: a snapshot holds the state
    # itself and encodes it only if get_state() asks, so it must not change later.
    return frozen(new_state), _tree.normalize(result[1], "scan")


def check_same_structure(new_state, old_state, op: str, position: int):
    """Returns ``new_state`` if it has the structure and dtypes of ``old_state``.

    tf.data requires this of ``scan`` and ``reduce`` states (only shapes may change).
    """
    new_spec, old_spec = _spec.spec_of(new_state), _spec.spec_of(old_state)
    new_flat, new_tree = _tree.flatten(new_spec)
    old_flat, old_tree = _tree.flatten(old_spec)
    if new_tree != old_tree:
        raise TypeError(
            f"{op}: at position {position} the function returned a state with structure "
            f"{new_tree}, but the state had structure {old_tree}; the new state must have the "
            "initial state's structure")
    for new, old in zip(new_flat, old_flat):
        if new.dtype != old.dtype:
            raise TypeError(
                f"{op}: at position {position} the function returned a state leaf of dtype "
                f"{new.dtype}, but the state had dtype {old.dtype}; keep the initial state's "
                "dtypes (e.g. cast with .astype, or give initial_state that dtype)")
    return new_state


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _ScanIterator(Iterator):
    def __init__(self, node: ScanNode, ctx, epoch: int):
        self._input = _planner.make_iterator(node.input, ctx, epoch)
        self._fn = node.scan_func
        self._initial = node.initial_state
        # Every pass starts from the same initial state: it gets its own containers.
        self._state = frozen(node.initial_state)
        self._position = 0

    def __next__(self):
        element = next(self._input)
        position = self._position
        self._position = position + 1
        self._state, output = step(self._fn, self._state, element, position)
        return output

    def snapshot(self):
        return {"input": self._input.snapshot(), "position": self._position,
                "scan_state": states.Deferred(state_codec.encode, self._state)}

    def set_state(self, state):
        position = states.Fields(state, "scan", ("input", "position", "scan_state")).int(
            "position")
        # The initial state is the template: namedtuples come from it, never from the state.
        scan_state = state_codec.decode(state["scan_state"], "scan", "scan_state", self._initial)
        try:
            scan_state = check_same_structure(scan_state, self._initial, "scan", position)
        except TypeError as e:
            raise states.invalid("scan", "scan_state", str(e)) from None
        self._input.set_state(state["input"])
        self._position = position
        self._state = frozen(scan_state)

    def close(self):
        self._input.close()


def reduce(iterator, initial_state, reduce_func: Callable):
    """Folds every element of ``iterator`` into the state; closes the iterator.

    Used by ``Dataset.reduce``; ``reduce_func(state, element)`` returns the new state.
    """
    state = frozen(initial_state)  # the caller's, which reduce_func must not change
    with iterator:
        for position, element in enumerate(iterator):
            new_state = udf.call(reduce_func, (state, element), "reduce", position)
            state = check_same_structure(_tree.normalize(new_state, "reduce"), state, "reduce",
                                         position)
    return state


_planner.register(ScanNode, iterator=_ScanIterator)
