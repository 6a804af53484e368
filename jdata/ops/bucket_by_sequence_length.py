"""bucket_by_sequence_length: group_by_window over length buckets, each padded-batched.

See ``Dataset.bucket_by_sequence_length``. As in tf.data, this op has no node
of its own: it builds a ``GroupByWindowNode`` whose functions are the small
frozen dataclasses below, so plans print them readably and they pickle and
fingerprint like any other parameter.
"""

from __future__ import annotations

import bisect
import dataclasses
import warnings
from typing import Any, Callable

import numpy as np

from jdata import _spec, _tree
from jdata import _validate as check
from jdata._plan import Node
from jdata.ops import padded_batch
from jdata.ops.group_by_window import GroupByWindowNode, is_int_scalar
from jdata.runtime.udf import check_callable

_OP = "bucket_by_sequence_length"


def build(input_node: Node, element_length_func: Callable, bucket_boundaries,
          bucket_batch_sizes, padded_shapes, padding_values, pad_to_bucket_boundary: bool,
          no_padding: bool, drop_remainder: bool) -> Node:
    """Validates the arguments and returns the equivalent ``GroupByWindowNode``."""
    check_callable(element_length_func, "element_length_func", _OP)
    boundaries = _check_boundaries(bucket_boundaries)
    batch_sizes = _check_batch_sizes(bucket_batch_sizes, boundaries)
    check.bool_arg(pad_to_bucket_boundary, "pad_to_bucket_boundary", _OP)
    check.bool_arg(no_padding, "no_padding", _OP)
    check.bool_arg(drop_remainder, "drop_remainder", _OP)
    if pad_to_bucket_boundary and not boundaries:
        raise ValueError(f"{_OP}: pad_to_bucket_boundary=True needs bucket_boundaries (elements "
                         "are padded to their bucket's boundary minus one); pass boundaries or "
                         "pad_to_bucket_boundary=False")
    padded_shapes = padded_batch.normalize_shapes(padded_shapes)
    padded_batch.check_padding_values(padding_values)
    if no_padding:
        _warn_unused(padded_shapes=padded_shapes, padding_values=padding_values,
                     pad_to_bucket_boundary=pad_to_bucket_boundary or None)
    return GroupByWindowNode(
        input_node,
        key_func=BucketOf(element_length_func, boundaries, pad_to_bucket_boundary),
        reduce_func=BatchBucket(boundaries, batch_sizes, padded_shapes, padding_values,
                                pad_to_bucket_boundary, no_padding, drop_remainder),
        window_size=None,
        window_size_func=BucketBatchSize(batch_sizes))


def _as_sequence(value, arg: str, what: str) -> list | tuple:
    # NumPy arrays too: ports compute boundaries with np.arange or np.linspace.
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return value.tolist() if value.dtype.kind in "iu" else list(value)
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{_OP}: {arg}={value!r} must be {what} (a list, tuple or 1-D array)")
    return value


def _check_boundaries(bucket_boundaries) -> tuple[int, ...]:
    # An empty list is one bucket for every length, as in tf.data.
    bucket_boundaries = _as_sequence(bucket_boundaries, "bucket_boundaries",
                                     "a list of increasing lengths, e.g. [10, 20, 40]")
    boundaries = tuple(check.int_arg(b, "bucket_boundaries", _OP, minimum=1)
                       for b in bucket_boundaries)
    if any(a >= b for a, b in zip(boundaries, boundaries[1:])):
        raise ValueError(f"{_OP}: bucket_boundaries={list(boundaries)} must be strictly "
                         "increasing")
    return boundaries


def _check_batch_sizes(bucket_batch_sizes, boundaries: tuple) -> tuple[int, ...]:
    bucket_batch_sizes = _as_sequence(bucket_batch_sizes, "bucket_batch_sizes",
                                      "a list of batch sizes, one per bucket")
    if len(bucket_batch_sizes) != len(boundaries) + 1:
        raise ValueError(
            f"{_OP}: len(bucket_batch_sizes) must equal len(bucket_boundaries) + 1 (one batch "
            f"size per bucket, the last for lengths >= {boundaries[-1] if boundaries else 0}), "
            "but "
            f"len(bucket_batch_sizes)={len(bucket_batch_sizes)} and "
            f"len(bucket_boundaries)={len(boundaries)}")
    return tuple(check.int_arg(b, "bucket_batch_sizes", _OP, minimum=1)
                 for b in bucket_batch_sizes)


def _warn_unused(**args) -> None:
    for name, value in args.items():
        if value is not None:
            warnings.warn(f"{_OP}: {name} has no effect with no_padding=True", stacklevel=4)


@dataclasses.dataclass(frozen=True)
class BucketOf:
    """``key_func``: an element's bucket, ``i`` for ``boundaries[i-1] <= length < boundaries[i]``.

    With ``pad_to_bucket_boundary`` it rejects lengths >= ``max(boundaries)``
    as soon as the element arrives (tf.data fails later, when batching).
    """

    element_length_func: Callable
    boundaries: tuple[int, ...]
    pad_to_bucket_boundary: bool

    def __call__(self, *element) -> np.int64:
        length = self.element_length_func(*element)
        if not is_int_scalar(length):
            raise TypeError(f"{_OP}: element_length_func must return an integer scalar, but "
                            f"returned {length!r}")
        if self.pad_to_bucket_boundary and length >= self.boundaries[-1]:
            raise ValueError(
                f"{_OP}: an element has length {int(length)}, but with "
                f"pad_to_bucket_boundary=True elements must have length < "
                f"max(bucket_boundaries) = {self.boundaries[-1]}; add a larger boundary or "
                "filter out longer elements")
        return np.int64(bisect.bisect_right(self.boundaries, int(length)))


@dataclasses.dataclass(frozen=True)
class BucketBatchSize:
    """``window_size_func``: a bucket's batch size."""

    batch_sizes: tuple[int, ...]

    def __call__(self, bucket) -> int:
        return self.batch_sizes[int(bucket)]


@dataclasses.dataclass(frozen=True)
class BatchBucket:
    """``reduce_func``: batches a bucket's window, padded as the arguments say."""

    boundaries: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    padded_shapes: Any
    padding_values: Any
    pad_to_bucket_boundary: bool
    no_padding: bool
    drop_remainder: bool

    def __call__(self, bucket, window):
        batch_size = self.batch_sizes[int(bucket)]
        if self.no_padding:
            return window.batch(batch_size, drop_remainder=self.drop_remainder)
        shapes = self.padded_shapes
        if self.pad_to_bucket_boundary:
            shapes = self._bucket_shapes(window.element_spec, self.boundaries[int(bucket)] - 1)
        return window.padded_batch(batch_size, shapes, self.padding_values,
                                   drop_remainder=self.drop_remainder)

    def _bucket_shapes(self, spec, size: int):
        """``padded_shapes`` with every ``None`` dimension set to ``size``.

        With ``padded_shapes=None``, as in tf.data, the dimensions the element
        spec does not know are set to ``size`` and the known ones are kept. They
        are kept as ``None`` (the longest in the batch), which is the known size,
        but does not fail if a probed spec was more specific than later data.
        """
        leaves, treedef = _tree.flatten(spec)
        if self.padded_shapes is None:
            return _tree.unflatten(treedef, [[size if d is None else None for d in s.shape]
                                             for s in leaves])
        names = padded_batch.leaf_names(treedef)
        shapes = padded_batch.leaf_shapes(self.padded_shapes, treedef,
                                          [s.rank for s in leaves], names)
        return _tree.unflatten(treedef, [[size if d is None else d for d in shape]
                                         for shape in shapes])

    def output_spec(self, input_spec):
        """The batches' spec without running: sizes that differ by bucket are ``None``."""
        sizes = set(self.batch_sizes)
        batch = sizes.pop() if self.drop_remainder and len(sizes) == 1 else None
        if self.no_padding:
            return _spec.batched(input_spec, batch)
        return padded_batch.padded_spec(input_spec, self.padded_shapes, batch)
