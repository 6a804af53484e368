"""from_generator: elements from a Python iterable. See ``jdata.from_generator``.

A generator cannot be rewound or saved, so the state is the number of
elements produced and a restore *replays*: it calls ``fn()`` again and skips
that many elements. ``fn`` must therefore yield the same sequence on every
call; restoring costs time proportional to the position.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar

import numpy as np

from jdata import _planner, _spec, _tree
from jdata._errors import UDFError
from jdata._plan import Node
from jdata.runtime import probe
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
        return probe.leading_spec(self, _OP)


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


class _FromGeneratorIterator(Iterator):
    """Calls ``fn()`` on the first ``__next__``; the state is ``produced``.

    An element the generator failed on counts as produced, so a replay skips
    it too (swallowing the error again) and restores land exactly.
    """

    def __init__(self, node: FromGeneratorNode, ctx, epoch: int):
        self._fn = node.fn
        self._args = node.args
        self._signature = node.output_signature
        if node.output_signature is not None:
            self._specs, self._treedef = _tree.flatten(node.output_signature)
        self._produced = 0
        self._generator = None

    def __next__(self):
        if self._generator is None:
            self._start()
        position = self._produced
        try:
            element = next(self._generator)
        except StopIteration:
            raise
        except Exception as e:
            self._produced = position + 1
            raise UDFError(_OP, position, e) from e
        self._produced = position + 1
        try:
            return self._convert(element)
        except Exception as e:
            raise UDFError(_OP, position, e) from e

    def _convert(self, element):
        # Frozen, as every source's elements: a generator may yield objects it
        # keeps (``iter(records)``) and yields again on the next pass.
        if self._signature is None:
            return frozen(_tree.normalize(element, _OP))
        return frozen(_conform(element, self._signature, self._treedef, self._specs))

    def _start(self) -> None:
        """A new pass over ``fn()``, fast-forwarded past the elements already produced."""
        self._generator = iter(())  # if fn() fails, the pass is over: no endless retries
        try:
            iterable = self._fn(*self._args)
        except Exception as e:
            raise UDFError(_OP, self._produced, e) from e
        try:
            self._generator = iter(iterable)
        except TypeError:
            raise TypeError(f"{_OP}: fn() returned a {type(iterable).__name__}, which is not "
                            "iterable; fn must return a new iterable (e.g. a generator) on "
                            "every call") from None
        for _ in range(self._produced):
            try:
                next(self._generator)
            except StopIteration:
                return
            except Exception:  # it failed here in the original run too, and was counted
                pass

    def snapshot(self):
        return {"produced": self._produced}

    def set_state(self, state):
        # Restoring replays the generator that far: a position past its end just ends it.
        produced = states.Fields(state, _OP, ("produced",)).int("produced")
        self.close()
        self._produced = produced

    def close(self):
        close = getattr(self._generator, "close", None)
        if close is not None:
            close()
        self._generator = None


_planner.register(FromGeneratorNode, iterator=_FromGeneratorIterator)
