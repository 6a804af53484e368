"""Vectorized execution of UDFs: ``jit(vmap(fn))`` over blocks of elements.

Used by ``map`` and ``random_map`` with ``vectorize=True``: the UDF runs over
blocks of ``BLOCK_SIZE`` elements, through ``BlockReader`` (random-access
inputs) or ``BlockIterator`` (sequential inputs).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Callable, Protocol

import jax
import numpy as np

from jdata import _tree
from jdata._errors import UDFError
from jdata.runtime import states
from jdata.runtime.iterator import Iterator

# Elements per jit(vmap(fn)) call. Every block is padded to this size so that
# jit compiles one program per element shape, whatever the input length.
BLOCK_SIZE = 64


# One compiled function per node, shared by all its iterators and readers (a
# checkpoint restore builds new iterators; it must not recompile). Kept beside
# the node, not in it, so that nodes stay frozen and picklable.
_VECTORIZED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class UDFNode(Protocol):
    """What ``vectorized`` reads of a ``map`` or ``random_map`` node (a plan node,
    hashable and weakly referenceable)."""

    @property
    def fn(self) -> Callable: ...

    @property
    def op_name(self) -> str: ...


def vectorized(node: UDFNode) -> VectorizedFn:
    """The ``VectorizedFn`` of a ``map`` or ``random_map`` node, built on first use."""
    try:
        return _VECTORIZED[node]
    except KeyError:
        vfn = _VECTORIZED[node] = VectorizedFn(node.fn, node.op_name)
        return vfn


@dataclasses.dataclass(frozen=True)
class _Failure:
    """An element whose computation raised; raised when the element is served.

    ``wrap`` marks exceptions of the UDF itself, re-raised as ``UDFError``;
    others (an upstream op's error, an invalid output) are re-raised as they are.
    """

    error: Exception
    wrap: bool


class VectorizedFn:
    """A UDF run as ``jit(vmap(fn))`` on blocks of elements.

    Tuple elements are unpacked into positional arguments as ``udf.call``
    does; ``keys`` (``random_map``'s per-element keys) come last. Every
    argument is mapped over its leading axis.
    """

    def __init__(self, fn: Callable, op: str):
        self._fn = fn
        self.op = op
        self._jitted = None

    def _function(self):
        if self._jitted is None:
            self._jitted = jax.jit(jax.vmap(self._fn))
        return self._jitted

    def compute(self, elements: list, positions: list[int], size: int,
                keys: np.ndarray | None = None) -> list:
        """Outputs (or ``_Failure``s) of ``elements``, in order.

        ``vmap`` needs one shape per call, so consecutive elements with the
        same structure, shapes and dtypes form a run; each run is padded to
        ``size`` rows.
        """
        out: list = []
        start = 0
        signatures = [_signature(e) for e in elements]
        for stop in range(1, len(elements) + 1):
            if stop == len(elements) or signatures[stop] != signatures[start]:
                run_keys = None if keys is None else keys[start:stop]
                out.extend(self._run(elements[start:stop], positions[start:stop], run_keys,
                                     size))
                start = stop
        return out

    def _run(self, elements: list, positions: list[int], keys, size: int) -> list:
        n = len(elements)
        padding = size - n
        try:
            # The padding repeats the last element, a valid input for fn.
            stacked = _tree.stack(elements + elements[-1:] * padding, self.op)
            args = stacked if type(elements[0]) is tuple else (stacked,)
            if keys is not None:
                args = (*args, np.concatenate([keys, np.repeat(keys[-1:], padding, axis=0)]))
            batch = self._function()(*args)
        except Exception as e:
            # Under jit, fn sees tracers, not values: an error is the same for
            # every element of the run, so each reports it at its own position.
            return [_Failure(e, wrap=True)] * n
        try:
            batch = _tree.normalize(batch, self.op)  # one device-to-host copy per block
        except TypeError as e:
            return [_Failure(e, wrap=False)] * n
        leaves, treedef = _tree.flatten(batch)
        return [_tree.unflatten(treedef, [leaf[i] for leaf in leaves]) for i in range(n)]


def _signature(element):
    if isinstance(element, np.generic):
        return element.dtype
    leaves, treedef = _tree.flatten(element)
    return treedef, tuple((np.shape(leaf), getattr(leaf, "dtype", type(leaf)))
                          for leaf in leaves)


def serve(result, op: str, position: int):
    """Returns a computed output, or raises the failure recorded for it."""
    if isinstance(result, _Failure):
        if result.wrap:
            raise UDFError(op, position, result.error) from result.error
        raise result.error
    return result


class BlockReader:
    """Element ``i`` of a vectorized map over a random-access input.

    Reading ``i, i+1, ...`` computes each aligned block of ``BLOCK_SIZE``
    elements once, with one compiled call. A jump (as in a full shuffle)
    computes the element alone instead, so random reads do not read and
    compute ``BLOCK_SIZE`` elements for each one they return.
    """

    def __init__(self, input_reader, compute: Callable[[list, list, int], list],
                 op: str = "map"):
        self._input = input_reader
        self._len = len(input_reader)
        self._compute = compute
        self._op = op
        self._start = 0
        self._results: list = []
        self._last: int | None = None

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        if not 0 <= index < self._len:
            raise IndexError(f"index {index} out of range for length {self._len}")
        offset = index - self._start
        if not 0 <= offset < len(self._results):
            self._load(index)
            offset = index - self._start
        self._last = index
        return serve(self._results[offset], self._op, index)

    def _load(self, index: int) -> None:
        scanning = self._last is None or 0 < index - self._last <= BLOCK_SIZE
        start = index - index % BLOCK_SIZE if scanning else index
        stop = min(start + BLOCK_SIZE, self._len) if scanning else index + 1
        results: list = [None] * (stop - start)
        elements, positions = [], []
        for i in range(start, stop):
            try:
                elements.append(self._input[i])
                positions.append(i)
            except Exception as e:  # an upstream op's error belongs to element i only
                results[i - start] = _Failure(e, wrap=False)
        # A lone element is computed as a block of one (a second compiled shape).
        size = BLOCK_SIZE if scanning else 1
        computed = iter(self._compute(elements, positions, size) if elements else [])
        self._results = [r if r is not None else next(computed) for r in results]
        self._start = start


class BlockIterator(Iterator):
    """A vectorized map over a sequential input: pulls a block ahead, serves it.

    The state is the input's state from before the current block, the
    block's first position and the number of its elements already served.
    The block's elements were pulled ahead of the consumer, so the input's
    current state would skip them; storing them would make the state large.
    Instead a restore re-reads the block from the earlier state (iterators
    are deterministic from a state), recomputes it and skips what was served.
    """

    def __init__(self, input_iterator: Iterator, compute: Callable[[list, list, int], list],
                 op: str = "map"):
        self._input = input_iterator
        self._compute = compute
        self._op = op
        self._start = 0  # position of the block's first element, or of the next one
        self._offset = 0  # elements of the block served (to skip, right after a restore)
        self._results: list | None = None
        self._before = None  # the input's state before the block
        self._pending: Exception | None = None  # the input's error that ended the block

    def __next__(self):
        if self._results is None:
            self._load()
        results, k = self._results, self._offset
        if k == len(results):  # only the input's error that ended the block is left
            pending = self._pending
            self._commit()
            raise pending
        self._offset = k + 1
        position = self._start + k
        if self._offset == len(results) and self._pending is None:
            self._commit()
        return serve(results[k], self._op, position)

    def _load(self) -> None:
        before = self._input.snapshot()
        elements, pending = [], None
        while len(elements) < BLOCK_SIZE:
            try:
                elements.append(next(self._input))
            except StopIteration:
                break
            except Exception as e:
                if not elements:
                    raise  # the input has moved past it: nothing to hold back
                pending = e  # raised in order, after the elements before it
                break
        if not elements:
            raise StopIteration
        positions = list(range(self._start, self._start + len(elements)))
        self._results = self._compute(elements, positions, BLOCK_SIZE)
        self._before, self._pending = before, pending

    def _commit(self) -> None:
        self._start += len(self._results)
        self._offset = 0
        self._results, self._before, self._pending = None, None, None

    def snapshot(self):
        input_state = self._input.snapshot() if self._results is None else self._before
        return {"input": input_state, "position": self._start, "offset": self._offset}

    def set_state(self, state):
        fields = states.Fields(state, self._op, ("input", "position", "offset"))
        start, offset = fields.int("position"), fields.int("offset", 0, BLOCK_SIZE)
        self._input.set_state(state["input"])
        self._start, self._offset = start, 0
        self._results, self._before, self._pending = None, None, None
        if offset:  # inside a block: compute it again, and check the offset against it
            try:
                self._load()
            except StopIteration:
                self._results = []
            if offset > len(self._results) or (offset == len(self._results)
                                               and self._pending is None):
                raise states.invalid(self._op, "offset", f"{offset} is past the block's "
                                     f"{len(self._results)} elements")
            self._offset = offset

    def close(self):
        self._input.close()
