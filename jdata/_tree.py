"""Pytree helpers for elements: thin wrappers over ``jax.tree_util``.

Elements are pytrees (dict, tuple, list, namedtuple) of NumPy arrays, NumPy
scalars, ``bytes`` and ``str``. ``None`` is not a valid leaf.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

# Typed as Any where jaxlib's PyTreeDef has no type stubs.
flatten: Callable[..., tuple[list[Any], Any]] = jax.tree_util.tree_flatten
unflatten: Callable[[Any, Any], Any] = jax.tree_util.tree_unflatten
leaves: Callable[..., list[Any]] = jax.tree_util.tree_leaves
structure: Callable[..., Any] = jax.tree_util.tree_structure


def map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    return jax.tree_util.tree_map(fn, tree, *rest)


def stack(elements: list, op: str = "batch"):
    """Stacks a list of same-structured elements leaf by leaf.

    ``bytes``/``str`` leaves become NumPy object arrays.
    """
    first = elements[0]
    if isinstance(first, (np.generic, np.ndarray)):  # one leaf each: no tree overhead
        return _stack_leaf(elements, op)
    # Flat dicts and tuples, the usual elements, column by column: 5-10x jax's flattening.
    kind = type(first)
    if kind is dict:
        keys = first.keys()
        if all(type(e) is dict and e.keys() == keys for e in elements):
            return {k: _stack_column([e[k] for e in elements], op) for k in first}
    elif kind is tuple:
        n = len(first)
        if all(type(e) is tuple and len(e) == n for e in elements):
            return tuple(_stack_column([e[i] for e in elements], op) for i in range(n))
    flat, treedef = flatten(first)
    columns = [flat]
    for i, element in enumerate(elements[1:], 1):
        leaves_i, treedef_i = flatten(element)
        if treedef_i != treedef:
            raise ValueError(
                f"{op}: element {i} of the batch has structure {treedef_i}, but element 0 has "
                f"{treedef}; every element of a batch must have the same structure")
        columns.append(leaves_i)
    return unflatten(treedef, [_stack_leaf([c[j] for c in columns], op) for j in range(len(flat))])


def _stack_column(values: list, op: str):
    """One field of a batch of dicts or tuples: a nested structure or a leaf."""
    if isinstance(values[0], (dict, tuple, list)):
        return stack(values, op)
    return _stack_leaf(values, op)


def _stack_leaf(values: list, op: str) -> np.ndarray:
    if isinstance(values[0], (bytes, str)) and all(isinstance(v, (bytes, str)) for v in values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    if isinstance(values[0], np.generic):
        out = np.array(values)  # 15x np.stack for scalars
        if out.dtype.kind in "biufcmM":  # numbers only: a str among them makes text
            return out
    try:
        if any(isinstance(v, (dict, tuple, list, bytes, str)) for v in values):
            raise ValueError("leaves of different kinds")
        return np.stack(values)
    except ValueError as e:
        if any(isinstance(v, (dict, tuple, list)) for v in values):
            raise ValueError(f"{op}: the elements of the batch do not all have the same "
                             "structure (a leaf in one is a dict, tuple or list in "
                             "another); every element of a batch must have the same "
                             "structure") from e
        shapes = sorted({np.shape(v) for v in values})
        raise ValueError(
            f"{op}: cannot stack leaves of shapes {shapes} into one batch; use "
            "padded_batch() to pad them to a common shape, or map() them to one shape first"
        ) from e


def unstack(batch, n: int) -> list:
    """The ``n`` rows of a batch, each with the batch's structure."""
    if isinstance(batch, np.ndarray):
        return list(batch[:n])
    flat, treedef = flatten(batch)
    return [unflatten(treedef, [leaf[i] for leaf in flat]) for i in range(n)]


def batch_size_of(batch, op: str) -> int:
    """The common leading dimension of every leaf of ``batch``."""
    flat = leaves(batch)
    if not flat:
        raise ValueError(f"{op}: the element has no leaves to unbatch")
    sizes = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in flat}
    if None in sizes:
        raise ValueError(f"{op}: cannot unbatch a scalar leaf; every leaf needs rank >= 1")
    if len(sizes) != 1:
        raise ValueError(f"{op}: leaves have different leading dimensions {sorted(sizes)}")
    return sizes.pop()


def normalize(element: Any, op: str) -> Any:
    """Converts a UDF's output leaves to NumPy; rejects what cannot be a leaf."""
    if isinstance(element, (np.ndarray, np.generic, bytes, str)):
        return element
    if element is None:
        raise TypeError(f"{op}: the user function returned None; return the element")
    return map(lambda leaf: _normalize_leaf(leaf, op), element)


class Leaves(list):
    """A block of elements that are all leaves: NumPy arrays or scalars, bytes, str.

    Readers return it where they know that already, so that a UDF's block
    call (``udf.call_block``) does not look at each element for a tuple to
    unpack. Only leaves may be added to it.
    """


def normalize_block(elements: list, op: str) -> tuple[list, Exception | None]:
    """``normalize`` on each element: the outputs up to the first invalid one, and its error."""
    types = list(builtins.map(type, elements))  # this module's map is the tree map
    if types and types.count(types[0]) == len(types) and issubclass(types[0], _LEAF_TYPES):
        return Leaves(elements), None  # the common case: one leaf type, nothing to convert
    out: list = []
    try:
        out.extend(normalize(e, op) for e in elements)
    except Exception as e:
        return out, e
    return out, None


_LEAF_TYPES = (np.ndarray, np.generic, bytes, str)


def _normalize_leaf(leaf, op: str):
    if isinstance(leaf, (np.ndarray, np.generic, bytes, str)):
        return leaf
    if isinstance(leaf, (bool, int, float, complex)):
        return np.asarray(leaf)[()]
    if isinstance(leaf, jax.Array):
        return np.asarray(leaf)
    from jdata._dataset import Dataset  # the error path only: no cost per element

    if isinstance(leaf, Dataset):
        raise TypeError(
            f"{op}: the user function returned a jdata.Dataset, but {op} makes one element "
            "of each input; to read a dataset made from each element, use "
            "flat_map(fn) (one dataset after another) or interleave(fn) (several at once) "
            f"instead of {op}(fn)")
    raise TypeError(
        f"{op}: the user function returned a leaf of type {type(leaf).__name__}; element "
        "leaves must be NumPy arrays or scalars, bytes or str (convert it with np.asarray)")
