"""Element specs: the shape and dtype of every leaf of an element."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jdata import _tree

STRING = np.dtype(object)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one leaf; ``None`` in ``shape`` marks an unknown size.

    ``bytes`` and ``str`` leaves have dtype ``object`` (batched they are NumPy
    object arrays), like ``tf.string``. A spec is a pytree leaf.
    """

    shape: tuple[int | None, ...]
    dtype: np.dtype[Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype})"

    @property
    def rank(self) -> int:
        return len(self.shape)


def leaf_spec(leaf: Any) -> TensorSpec:
    if isinstance(leaf, (bytes, str)):
        return TensorSpec((), STRING)
    arr = np.asarray(leaf)
    dtype = STRING if arr.dtype.kind in "OSU" else arr.dtype
    return TensorSpec(tuple(arr.shape), dtype)


def spec_of(element: Any) -> Any:
    """The spec of one concrete element."""
    return _tree.map(leaf_spec, element)


def _merge_leaf(a: TensorSpec, b: TensorSpec) -> TensorSpec:
    if len(a.shape) != len(b.shape):
        raise ValueError(f"incompatible ranks: {a} and {b}")
    shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape))
    return TensorSpec(shape, a.dtype if a.dtype == b.dtype else np.result_type(a.dtype, b.dtype))


def merge(a: Any, b: Any) -> Any:
    """The most specific spec compatible with both ``a`` and ``b``."""
    if _tree.structure(a) != _tree.structure(b):
        raise ValueError(f"elements have different structures: {a} and {b}; every element "
                         "of a dataset must have the same structure")
    return _tree.map(_merge_leaf, a, b)


def batched(spec: Any, batch_size: int | None) -> Any:
    """The spec of a batch of elements of ``spec``."""
    return _tree.map(lambda s: TensorSpec((batch_size, *s.shape), s.dtype), spec)


def unbatched(spec: Any) -> Any:
    """The spec of one row of a batch of ``spec``; raises for scalars."""
    def row(s: TensorSpec) -> TensorSpec:
        if not s.shape:
            raise ValueError(f"cannot unbatch a scalar leaf ({s}); every leaf needs rank >= 1")
        return TensorSpec(s.shape[1:], s.dtype)
    return _tree.map(row, spec)


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """The spec of a leaf that is itself a dataset (``window``'s elements)."""

    element_spec: Any


def merge_compatible(specs: list[Any], names: list[str], op: str) -> Any:
    """The merged spec of inputs whose elements must combine; ``TypeError`` if they can't.

    As in tf.data (concatenate, choose/sample_from_datasets), structures,
    dtypes and ranks must match; sizes that differ become ``None``. A rank
    mismatch is rejected too: a ``TensorSpec`` cannot express an unknown rank.
    """
    first_leaves, first_tree = _tree.flatten(specs[0])
    merged = list(first_leaves)
    for spec, name in zip(specs[1:], names[1:]):
        leaves, tree = _tree.flatten(spec)
        if tree != first_tree:
            raise TypeError(f"{op}: {name} has elements of structure {tree}, but {names[0]} "
                            f"has {first_tree}; the datasets must have the same structure")
        for i, (a, b) in enumerate(zip(first_leaves, leaves)):
            if not (isinstance(a, TensorSpec) and isinstance(b, TensorSpec)):
                if a != b:
                    raise TypeError(f"{op}: {name} has a leaf {b}, but {names[0]} has {a}")
                continue
            if a.dtype != b.dtype or len(a.shape) != len(b.shape):
                raise TypeError(f"{op}: {name} has a leaf {b}, but {names[0]} has {a}; "
                                "leaves must have the same dtype and rank (cast with map)")
            merged[i] = _merge_leaf(merged[i], b)
    return _tree.unflatten(first_tree, merged)
