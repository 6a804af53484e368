"""group_by_window: reduces windows of same-key elements. See ``Dataset.group_by_window``."""

from __future__ import annotations

import dataclasses
import numbers
from typing import Callable, ClassVar

import numpy as np

from jdata import _nested, _planner, _probe
from jdata._constants import UNKNOWN
from jdata._plan import Node
from jdata.ops.window import ValuesNode
from jdata.runtime import states, udf
from jdata.runtime.iterator import Iterator
from jdata.runtime.tap import Tap

_OP = "group_by_window"


@dataclasses.dataclass(frozen=True, eq=False)
class GroupByWindowNode(Node):
    """See ``Dataset.group_by_window``.

    A ``reduce_func`` that knows its output spec without running (those that
    ``bucket_by_sequence_length`` builds) may define ``output_spec(input_spec)``;
    otherwise the spec is that of ``reduce_func``'s dataset for the first element.
    """

    input: Node
    key_func: Callable
    reduce_func: Callable
    window_size: int | None
    window_size_func: Callable | None
    op_name: ClassVar[str] = "group_by_window"

    def cardinality(self) -> int:
        return UNKNOWN

    def compute_spec(self):
        output_spec = getattr(self.reduce_func, "output_spec", None)
        if output_spec is not None:
            return output_spec(self.input.element_spec())
        first = _probe.first_element(self.input, _OP)
        key = check_key(udf.call(self.key_func, first, _OP, 0))
        window = group_dataset(self.input, [first])
        return _nested.dataset_node(udf.call(self.reduce_func, (key, window), _OP, 0),
                                   _OP).element_spec()


def check_key(key) -> np.int64:
    """``key_func``'s output as an ``np.int64``; raises unless it is an integer scalar."""
    if is_int_scalar(key):
        return np.int64(key)
    raise TypeError(f"{_OP}: key_func must return an integer scalar (the group's key), but "
                    f"returned {_describe(key)}")


def check_window_size(size, key) -> int:
    if not is_int_scalar(size):
        raise TypeError(f"{_OP}: window_size_func must return an integer scalar, but returned "
                        f"{_describe(size)} for key {key}")
    if int(size) < 1:
        raise ValueError(f"{_OP}: window_size_func returned {int(size)} for key {key}; window "
                         "sizes must be >= 1")
    return int(size)


def is_int_scalar(value) -> bool:
    """True for Python and NumPy integers and 0-d integer arrays (not bools)."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, numbers.Integral):
        return True
    return isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iu"


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    return f"{value!r} of type {type(value).__name__}"


def group_dataset(input_node: Node, elements: list):
    """The dataset of a group's elements, with the input's element spec."""
    return _nested.as_dataset(ValuesNode(tuple(elements), input_node.element_spec))


@dataclasses.dataclass
class _Reduction:
    """The dataset ``reduce_func`` built for one window, being iterated."""

    key: int
    tokens: list  # the window's input tokens, to rebuild it on restore
    position: int  # the window's number: its nested epoch and error position
    inner: Iterator


class _GroupByWindowIterator(Iterator):
    """Fills groups from the input and drains each full group's reduced dataset.

    Groups hold ``(token, element)`` pairs from a ``Tap``, so the state stores
    indices over a random-access input. The dataset being drained is restored
    by rebuilding its window from the saved tokens and calling ``reduce_func``
    again, then moving its iterator to the saved inner state.
    """

    def __init__(self, node: GroupByWindowNode, ctx, epoch: int):
        self._tap = Tap(_planner.make_iterator(node.input, ctx, epoch), _OP, node.input)
        self._node = node
        self._ctx = ctx
        self._epoch = epoch
        self._groups: dict[int, list[tuple]] = {}
        self._grouped = 0  # elements in the groups
        # Journaled, so a snapshot is O(1) however many elements the groups hold.
        self._journal = states.Journal(self._groups, _copy_groups, _redo,
                                       lambda _: self._grouped)
        # window_size_func is a pure function of the key, so its results are
        # cached for the iterator's life and need not be saved.
        self._window_sizes: dict[int, int] = {}
        self._reduction: _Reduction | None = None
        self._end_of_input = False
        self._position = 0  # input elements pulled
        self._windows = 0  # windows reduced

    def __next__(self):
        while True:
            if self._reduction is not None:
                try:
                    return next(self._reduction.inner)
                except StopIteration:
                    self._reduction.inner.close()
                    self._reduction = None
            if not self._end_of_input:
                self._pull()
            elif self._groups:
                self._reduce(min(self._groups))  # tf.data flushes groups in key order
            else:
                raise StopIteration

    def _pull(self) -> None:
        try:
            token, element = self._tap.next()
        except StopIteration:
            self._end_of_input = True
            return
        position = self._position
        self._position = position + 1
        key = int(check_key(udf.call(self._node.key_func, element, _OP, position)))
        size = self._window_size(key, position)
        group = self._groups.setdefault(key, [])
        pair = (token, element)
        group.append(pair)
        self._grouped += 1
        self._journal.log((key, pair))
        if len(group) >= size:
            self._reduce(key)

    def _window_size(self, key: int, position: int) -> int:
        if self._node.window_size is not None:
            return self._node.window_size
        if key not in self._window_sizes:
            size = udf.call(self._node.window_size_func, np.int64(key), _OP, position)
            self._window_sizes[key] = check_window_size(size, key)
        return self._window_sizes[key]

    def _reduce(self, key: int) -> None:
        group = self._groups.pop(key)  # before reduce_func runs, so a failing window is skipped
        self._grouped -= len(group)
        self._journal.log(key)
        position = self._windows
        self._windows = position + 1
        tokens = [token for token, _ in group]
        self._reduction = _Reduction(key, tokens, position,
                                     self._open(key, [element for _, element in group], position))

    def _open(self, key: int, elements: list, position: int) -> Iterator:
        window = group_dataset(self._node.input, elements)
        return _nested.open_dataset(self._node.reduce_func, (np.int64(key), window), _OP,
                                   position, self._ctx, self._epoch)

    def snapshot(self):
        r = self._reduction
        return {
            "input": self._tap.snapshot(),
            "position": self._position,
            "windows": self._windows,
            "end_of_input": self._end_of_input,
            "groups": self._journal.capture(self._encode_groups),
            "reduction": None if r is None else {
                "key": r.key, "window": states.Deferred(self._tap.encode, r.tokens),
                "position": r.position, "inner": r.inner.snapshot()},
        }

    def _encode_groups(self, groups: dict) -> list:
        return [[key, self._tap.encode(token for token, _ in group)]
                for key, group in sorted(groups.items())]

    def set_state(self, state):
        fields = states.Fields(state, _OP, ("input", "position", "windows", "end_of_input",
                                            "groups", "reduction"))
        position, windows = fields.int("position"), fields.int("windows")
        end_of_input = fields.bool("end_of_input")
        self._close_reduction()
        self._tap.set_state(state["input"])
        groups = {}
        for entry in fields.list("groups", max_length=position):
            key, tokens = states.check_list(entry, _OP, "groups", length=2)
            key = states.check_int(key, _OP, "groups", states.INT64_MIN, states.INT64_MAX)
            if key in groups:
                raise states.invalid(_OP, "groups", f"holds key {key} twice")
            groups[key] = self._fetch(tokens, "groups")
        self._groups = groups
        self._grouped = sum(map(len, groups.values()))
        self._journal.reset(groups)
        self._position, self._windows, self._end_of_input = position, windows, end_of_input
        saved = state["reduction"]
        if saved is not None:
            self._restore_reduction(saved)

    def _restore_reduction(self, saved) -> None:
        fields = states.Fields(saved, _OP, ("key", "window", "position", "inner"))
        key = states.check_int(saved["key"], _OP, "key", states.INT64_MIN, states.INT64_MAX)
        position = fields.int("position", 0, max(self._windows - 1, 0))
        window = self._fetch(saved["window"], "window")
        inner = self._open(key, [element for _, element in window], position)
        inner.set_state(saved["inner"])
        self._reduction = _Reduction(key, [token for token, _ in window], position, inner)

    def _fetch(self, encoded, field: str) -> list[tuple]:
        return [(token, self._tap.fetch(token)) for token in self._tap.decode(encoded, field)]

    def _close_reduction(self) -> None:
        if self._reduction is not None:
            self._reduction.inner.close()
            self._reduction = None

    def close(self):
        self._close_reduction()
        self._tap.it.close()


def _copy_groups(groups: dict) -> dict:
    return {key: list(group) for key, group in groups.items()}


def _redo(groups: dict, op) -> None:
    """Replays one journaled change: ``(key, pair)`` grouped, or a key's group reduced."""
    if type(op) is tuple:
        groups.setdefault(op[0], []).append(op[1])
    else:
        del groups[op]


_planner.register(GroupByWindowNode, iterator=_GroupByWindowIterator)
