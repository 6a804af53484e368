"""window: a dataset of windows, each a dataset. See ``Dataset.window``."""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, ClassVar

from jdata import _nested, _planner, _spec, _tree
from jdata._constants import INFINITE, UNKNOWN
from jdata._errors import UDFError
from jdata._plan import Node
from jdata.runtime import states
from jdata.runtime.iterator import Iterator
from jdata.runtime.tap import Tap
from jdata.runtime.values import frozen


@dataclasses.dataclass(frozen=True, eq=False)
class WindowNode(Node):
    """See ``Dataset.window``."""

    input: Node
    size: int
    shift: int
    stride: int
    drop_remainder: bool
    op_name: ClassVar[str] = "window"

    @property
    def span(self) -> int:
        """Input elements from a full window's first element to its last, inclusive."""
        return (self.size - 1) * self.stride + 1

    def cardinality(self) -> int:
        n = self.input.cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        if self.drop_remainder:
            return 0 if n < self.span else (n - self.span) // self.shift + 1
        return -(-n // self.shift)

    def random_access(self) -> bool:
        # Overlapping windows are served by the iterator, which reads each
        # input element once; a reader would read it once per window.
        return self.input.random_access() and self.shift >= self.span

    def compute_spec(self):
        return _tree.map(_spec.DatasetSpec, self.input.element_spec())


@dataclasses.dataclass(frozen=True, eq=False)
class ValuesNode(Node):
    """A dataset of given values: one leaf of a window, or a ``group_by_window`` group.

    ``spec_fn`` gives the element spec on demand, so building a window never
    computes the input's spec (which may run the pipeline) unless asked.
    """

    values: tuple
    spec_fn: Callable
    op_name: ClassVar[str] = "values"

    def cardinality(self) -> int:
        return len(self.values)

    def random_access(self) -> bool:
        return True

    def compute_spec(self):
        return self.spec_fn()

    def __str__(self):
        return f"Values(length={len(self.values)})"


def leaf_spec(node: Node, leaf: int):
    """The spec of leaf number ``leaf`` of ``node``'s elements."""
    return _tree.leaves(node.element_spec())[leaf]


def window_element(elements: list, input_node: Node):
    """The input's structure with each leaf replaced by a dataset of its values."""
    columns = [_tree.leaves(e) for e in elements]
    treedef = _tree.structure(elements[0])
    datasets = [_nested.as_dataset(ValuesNode(tuple(c[j] for c in columns),
                                             functools.partial(leaf_spec, input_node, j)))
                for j in range(treedef.num_leaves)]
    return _tree.unflatten(treedef, datasets)


class _WindowReader:
    """Window ``k`` of a random-access input: elements ``k*shift + j*stride``."""

    def __init__(self, node: WindowNode, ctx, epoch: int):
        self._input = _planner.make_reader(node.input, ctx, epoch)
        self._node = node
        self._n = len(self._input)
        self._len = node.cardinality()

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        start = index * self._node.shift
        stop = min(start + self._node.span, self._n)
        indices = range(start, stop, self._node.stride)
        return window_element([self._input[i] for i in indices], self._node.input)


class _WindowIterator(Iterator):
    """tf.data's window algorithm over a buffer of the next ``span`` input elements.

    The buffer holds ``(token, element)`` pairs from a ``Tap``: the state
    stores the tokens (indices over a random-access input), and each element
    is read once however many windows it belongs to.
    """

    def __init__(self, node: WindowNode, ctx, epoch: int):
        self._tap = Tap(_planner.make_iterator(node.input, ctx, epoch), "window", node.input)
        self._node = node
        self._buffer: list[tuple] = []
        # Journaled, so a snapshot is O(1) however wide the windows are.
        self._journal = states.Journal(self._buffer, list, _redo, len)
        self._end_of_input = False

    def __next__(self):
        node = self._node
        while not self._end_of_input and len(self._buffer) < node.span:
            try:
                pair = self._tap.next()
            except StopIteration:
                self._end_of_input = True
                break
            self._buffer.append(pair)
            self._journal.log(pair)
        if not self._buffer or (node.drop_remainder and len(self._buffer) < node.span):
            raise StopIteration
        elements = [element for _, element in self._buffer[::node.stride]]
        self._shift()
        return window_element(elements, node.input)

    def _shift(self) -> None:
        shift = self._node.shift
        if shift < len(self._buffer):
            del self._buffer[:shift]
            self._journal.log(shift)
            return
        # The next window starts past the buffer: skip the elements in between.
        for _ in range(shift - len(self._buffer)):
            if self._end_of_input:
                break
            try:
                self._tap.next_token()
            except StopIteration:
                self._end_of_input = True
            except UDFError:
                pass  # a skipped element's error does not matter (as in tf.data)
        dropped = len(self._buffer)
        self._buffer.clear()
        self._journal.log(dropped)

    def snapshot(self):
        return {"input": self._tap.snapshot(),
                "buffer": self._journal.capture(self._encode),
                "end_of_input": self._end_of_input}

    def _encode(self, buffer: list) -> list:
        return self._tap.encode(token for token, _ in buffer)

    def set_state(self, state):
        fields = states.Fields(state, "window", ("input", "buffer", "end_of_input"))
        end_of_input = fields.bool("end_of_input")
        self._tap.set_state(state["input"])
        tokens = self._tap.decode(state["buffer"], "buffer", self._node.span)
        self._buffer = [(token, self._tap.fetch(token)) for token in tokens]
        self._journal.reset(self._buffer)
        self._end_of_input = end_of_input

    def close(self):
        self._tap.it.close()


def _redo(buffer: list, op) -> None:
    """Replays one journaled change: a pair appended, or a count dropped from the front."""
    if type(op) is tuple:
        buffer.append(op)
    else:
        del buffer[:op]


class _ValuesReader:
    """The values, ``frozen``: a window or group is read again by each of its iterators,
    and overlapping windows share elements."""

    def __init__(self, node: ValuesNode, ctx, epoch: int):
        self._values = node.values

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index: int):
        return frozen(self._values[index])


_planner.register(WindowNode, iterator=_WindowIterator, reader=_WindowReader)
_planner.register(ValuesNode, reader=_ValuesReader)
