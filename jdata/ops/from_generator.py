"""from_generator: elements from a Python iterable. See ``jdata.from_generator``.

A generator cannot be rewound or saved, so the state is the number of
elements produced and a restore *replays*: it calls ``fn()`` again and skips
that many elements. ``fn`` must therefore yield the same sequence on every
call; restoring costs time proportional to the position. The state also
holds a digest of the pass's first element: a replay whose first element
differs (``fn`` over a shared iterator, which goes on where it stopped)
raises instead of silently skipping elements that were never produced.

Finding the ``element_spec`` without ``output_signature`` reads the first
elements (``jdata._probe``). That pass is not thrown away: it is
parked, with the elements it read, and the next pass adopts it and yields
those elements first, so a generator that cannot start over loses nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
import weakref
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from jdata import _planner, _probe, _spec, _tree
from jdata._errors import UDFError
from jdata._plan import Node
from jdata.runtime import states
from jdata.runtime.iterator import Iterator
from jdata.runtime.values import frozen

_OP = "from_generator"


@dataclasses.dataclass(frozen=True, eq=False)
class FromGeneratorNode(Node):
    """See ``jdata.from_generator``."""

    fn: Callable
    output_signature: Any = None
    args: tuple = ()
    op_name: ClassVar[str] = _OP

    def __post_init__(self):
        if self.output_signature is not None:
            check_signature(self.output_signature)

    def compute_spec(self):
        if self.output_signature is not None:
            return self.output_signature
        return _probe.leading_spec(self, _OP)


def check_signature(signature) -> None:
    leaves = _tree.leaves(signature)
    if not leaves or not all(isinstance(s, _spec.TensorSpec) for s in leaves):
        raise TypeError(
            f"{_OP}: output_signature={signature!r} must be a pytree of jdata.TensorSpec, "
            "e.g. (jdata.TensorSpec((), np.int64), jdata.TensorSpec((None,), np.float32))")


def _conform(element, signature, treedef, specs):
    """Converts an element to the signature's structure and dtypes, as tf.data does."""
    try:
        leaves = treedef.flatten_up_to(element)
    except (ValueError, TypeError) as e:
        raise TypeError(f"the generator yielded {element!r}, whose structure does not match "
                        f"output_signature {signature}") from e
    return treedef.unflatten([_conform_leaf(leaf, spec) for leaf, spec in zip(leaves, specs)])


def _conform_leaf(leaf, spec: _spec.TensorSpec):
    if spec.dtype == _spec.STRING:
        array = np.asarray(leaf, dtype=object) if not isinstance(leaf, (bytes, str)) else leaf
    else:
        array = np.asarray(leaf, dtype=spec.dtype)
    shape = np.shape(array)
    if len(shape) != spec.rank or any(d is not None and d != n for d, n in zip(spec.shape, shape)):
        raise TypeError(f"the generator yielded a leaf of shape {shape} where output_signature "
                        f"expects {spec}")
    return array[()] if isinstance(array, np.ndarray) and array.ndim == 0 else array


class _Pass(NamedTuple):
    """A pass a probe started: its iterator, and the ``(element, error)`` outcomes read."""

    generator: Any
    outcomes: list


# Probe passes awaiting the node's next pass (see the module docs); the lock makes sure
# only one pass adopts each.
_PARKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PARKED_LOCK = threading.Lock()


def _digest(element) -> str:
    """A short digest of an element's leaves: whether a replay starts where the run did."""
    h = hashlib.blake2b(digest_size=8)
    for leaf in _tree.leaves(element):
        array = np.asarray(leaf)
        h.update(f"{array.dtype.str}{array.shape}".encode())
        h.update(repr(array.tolist()).encode() if array.dtype == object else array.tobytes())
    return h.hexdigest()


class _FromGeneratorIterator(Iterator):
    """Calls ``fn()`` on the first ``__next__``; the state is ``produced`` and ``first``
    (the digest of the pass's first element, ``""`` before it or if it failed).

    An element the generator failed on counts as produced, so a replay skips
    it too (swallowing the error again) and restores land exactly.
    """

    def __init__(self, node: FromGeneratorNode, ctx, epoch: int):
        self._node = node
        self._signature = node.output_signature
        if node.output_signature is not None:
            self._specs, self._treedef = _tree.flatten(node.output_signature)
        self._produced, self._first = 0, ""
        self._generator = None
        self._replay: collections.deque = collections.deque()  # an adopted pass's outcomes
        # A probe's pass records what it reads, to be parked on close.
        self._probing = ctx.probing
        self._pulled: list | None = None

    def __next__(self):
        if self._generator is None:
            self._start()
        position = self._produced
        element, error = self._pull()
        self._produced = position + 1
        if error is not None:
            raise UDFError(_OP, position, error) from error
        try:
            element = self._convert(element)
        except Exception as e:
            raise UDFError(_OP, position, e) from e
        if position == 0:
            self._first = _digest(element)
        return element

    def _pull(self) -> tuple:
        """The next ``(element, None)`` or ``(None, error)``; raises StopIteration at the end."""
        if self._replay:
            return self._replay.popleft()
        try:
            outcome = (next(self._generator), None)
        except StopIteration:
            raise
        except Exception as e:
            outcome = (None, e)
        if self._pulled is not None:
            self._pulled.append(outcome)
        return outcome

    def _convert(self, element):
        # Frozen, as every source's elements: a generator may yield objects it
        # keeps (``iter(records)``) and yields again on the next pass.
        if self._signature is None:
            return frozen(_tree.normalize(element, _OP))
        return frozen(_conform(element, self._signature, self._treedef, self._specs))

    def _start(self) -> None:
        """A new pass over ``fn()`` (or the probe's, adopted), fast-forwarded past the
        elements already produced."""
        with _PARKED_LOCK:
            parked = _PARKED.pop(self._node, None)
        if parked is not None:
            self._generator = parked.generator
            self._replay.extend(parked.outcomes)
        else:
            self._generator = self._call_fn()
        if self._probing:
            self._pulled = list(parked.outcomes) if parked is not None else []
        self._fast_forward()

    def _call_fn(self):
        self._generator = iter(())  # if fn() fails, the pass is over: no endless retries
        try:
            iterable = self._node.fn(*self._node.args)
        except Exception as e:
            raise UDFError(_OP, self._produced, e) from e
        try:
            return iter(iterable)
        except TypeError:
            raise TypeError(f"{_OP}: fn() returned a {type(iterable).__name__}, which is not "
                            "iterable; fn must return a new iterable (e.g. a generator) on "
                            "every call") from None

    def _fast_forward(self) -> None:
        for position in range(self._produced):
            try:
                element, error = self._pull()
            except StopIteration:
                return
            # An error here was an error in the original run too, and was counted.
            if position == 0 and self._first and error is None:
                self._check_replay(element)

    def _check_replay(self, element) -> None:
        try:
            first = _digest(self._convert(element))
        except Exception:  # converted in the original run: a different element now
            first = ""
        if first != self._first:
            produced = self._produced
            self.close()
            raise ValueError(
                f"{_OP}: cannot restore to position {produced}: fn() now yields a different "
                "first element than in the run the state was saved from, so skipping "
                f"{produced} elements would silently drop data. A restore replays fn() from "
                "the start, so fn must return an iterable that starts over on every call "
                "(build the iterator inside fn); a generator over a shared iterator (e.g. "
                "one around jraph.dynamically_batch(iter(...))) cannot be restored: write "
                "its elements out once (Dataset.save) and read them with jdata.load")

    def snapshot(self):
        return {"produced": self._produced, "first": self._first}

    def set_state(self, state):
        # Restoring replays the generator that far: a position past its end just ends it.
        fields = states.Fields(state, _OP, ("produced",), optional=("first",))
        produced = fields.int("produced")
        first = state.get("first", "")  # absent from states saved before it existed
        if not isinstance(first, str) or len(first) > 64:
            raise states.invalid(_OP, "first", f"{first!r} is not an element digest")
        self.close()
        self._produced, self._first = produced, first

    def close(self):
        generator, self._generator = self._generator, None
        pulled, self._pulled = self._pulled, None
        self._replay.clear()
        if pulled is not None and generator is not None:
            with _PARKED_LOCK:  # a probe's pass: the next pass goes on with it
                if self._node not in _PARKED:
                    _PARKED[self._node] = _Pass(generator, pulled)
                    return
        close = getattr(generator, "close", None)
        if close is not None:
            close()


_planner.register(FromGeneratorNode, iterator=_FromGeneratorIterator)
