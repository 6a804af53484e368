"""A key's gathered values -> what ``tf.io``'s parse functions return for its spec.

Pure NumPy, over ``Column``s (``_example_parse``): entry ``i`` holds
``counts[i]`` of the concatenated ``values`` and belongs to record
``rows[i]`` (for feature lists, entries are steps). Shapes, dtypes, index
layouts and padding are TF's; the errors name the feature, the record (and
step) and the fix.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:  # _example_parse needs protobuf, imported when a parse runs
    from jdata.io._example_parse import Column

NUMPY_DTYPES = {"int64": np.int64, "float32": np.float32, "string": object}
PADDING = {"int64": 0, "float32": 0.0, "string": b""}


class SparseTensor(NamedTuple):
    """A ``VarLenFeature``'s values, laid out as ``tf.sparse.SparseTensor``.

    ``values[i]`` sits at ``indices[i]`` (int64, shape ``[nnz, rank]``) of a
    tensor of shape ``dense_shape`` (int64, shape ``[rank]``). For a batch,
    ``indices[i] = [record, position]`` and ``dense_shape = [batch, longest]``
    (feature lists: ``[record, step, position]``); for one record the leading
    record index is dropped.
    """

    indices: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]
    dense_shape: np.ndarray[Any, Any]


def _rows_array(batch: int, shape: tuple[int, ...], dtype: str,
                fill: Any) -> np.ndarray[Any, Any]:
    out = np.empty((batch, *shape), NUMPY_DTYPES[dtype])
    out[...] = fill
    return out


def dense(column: Column, batch: int, shape: tuple[int, ...], dtype: str, default: Any,
          key: str, op: str) -> np.ndarray[Any, Any]:
    """A ``FixedLenFeature``: ``[batch, *shape]``, ``default`` where a record lacks it."""
    size = math.prod(shape)
    wrong = np.flatnonzero(column.counts != size)
    if wrong.size:
        i = wrong[0]
        raise ValueError(
            f"{op}: feature {key!r} of record {column.rows[i]} has {column.counts[i]} "
            f"values, but shape {shape} holds {size} (Number of values != expected); fix "
            "the shape, or read a list of any length with VarLenFeature")
    values = column.values.reshape(len(column.rows), *shape)
    if len(column.rows) == batch:  # rows ascend without repeats: every record, in order
        return values
    if default is None:
        absent = np.setdiff1d(np.arange(batch), column.rows)[0]
        raise ValueError(
            f"{op}: Feature: {key} (data type: {dtype}) is required but could not be found "
            f"in record {absent}; give its FixedLenFeature a default_value for the records "
            "that lack it")
    out = _rows_array(batch, shape, dtype, np.array(default, NUMPY_DTYPES[dtype]))
    out[column.rows] = values
    return out


def padded(column: Column, batch: int, shape: tuple[int, ...], dtype: str, pad: Any,
           key: str, op: str) -> np.ndarray[Any, Any]:
    """A ``FixedLenSequenceFeature`` of an Example: ``[batch, longest, *shape]``, each
    record's values cut into elements of ``shape``, the shorter ones padded with ``pad``."""
    size = math.prod(shape)
    wrong = np.flatnonzero(column.counts % size)
    if wrong.size:
        i = wrong[0]
        raise ValueError(
            f"{op}: feature {key!r} of record {column.rows[i]} has {column.counts[i]} "
            f"values, not a multiple of {size} (the values of one element of shape {shape})")
    lengths = column.counts // size
    return _scatter_steps(column.rows, lengths, column.values, batch, shape, dtype, pad)


def _scatter_steps(rows: np.ndarray[Any, Any], lengths: np.ndarray[Any, Any],
                   values: np.ndarray[Any, Any], batch: int, shape: tuple[int, ...], dtype: str,
                   pad: Any) -> np.ndarray[Any, Any]:
    out = _rows_array(batch, (int(lengths.max(initial=0)), *shape), dtype,
                      PADDING[dtype] if pad is None else pad)
    steps = positions(lengths)
    out[np.repeat(rows, lengths), steps] = values.reshape(len(steps), *shape)
    return out


def positions(counts: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """0, 1, ..., counts[0] - 1, 0, 1, ..., counts[1] - 1, ..."""
    starts = np.cumsum(counts) - counts
    out: np.ndarray[Any, Any] = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(
        starts, counts)
    return out


def stepped(lists: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]], column: Column,
            batch: int, shape: tuple[int, ...], dtype: str, allow_missing: bool, key: str,
            op: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A ``FixedLenSequenceFeature`` of feature lists: ``([batch, longest, *shape],
    lengths)``. ``lists`` is ``(rows, steps)``: the records holding the list and their
    numbers of steps; ``column``'s entries are the steps, in order."""
    rows, steps = lists
    if not allow_missing and len(rows) < batch:
        absent = np.setdiff1d(np.arange(batch), rows)[0]
        raise ValueError(
            f"{op}: Feature list '{key}' is required but could not be found in record "
            f"{absent}; pass allow_missing=True to its FixedLenSequenceFeature to read a "
            "missing list as one of no steps")
    size = math.prod(shape)
    wrong = np.flatnonzero(column.counts != size)
    if wrong.size:
        i = wrong[0]
        record = np.repeat(rows, steps)[i]
        raise ValueError(
            f"{op}: step {positions(steps)[i]} of feature list {key!r} of record {record} "
            f"has {column.counts[i]} values, but shape {shape} holds {size} (Number of "
            "values != expected)")
    lengths = np.zeros(batch, np.int64)
    lengths[rows] = steps
    return _scatter_steps(rows, steps, column.values, batch, shape, dtype, None), lengths


def sparse(column: Column, batch: int,
           lists: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None) -> SparseTensor:
    """A ``VarLenFeature``: indices ``[record, position]``, or for feature lists (``lists``
    as in ``stepped``) ``[record, step, position]``."""
    counts = column.counts
    within = positions(counts)
    if lists is None:
        leading = [np.repeat(column.rows, counts)]
        extent = [batch]
    else:
        rows, steps = lists
        leading = [np.repeat(np.repeat(rows, steps), counts),
                   np.repeat(positions(steps), counts)]
        extent = [batch, int(steps.max(initial=0))]
    indices = np.stack([*leading, within], axis=1).astype(np.int64, copy=False)
    dense_shape = np.array([*extent, int(counts.max(initial=0))], np.int64)
    return SparseTensor(indices, column.values, dense_shape)


def first(value: Any) -> Any:
    """One record's output from its batch of one: the record dimension dropped."""
    if isinstance(value, SparseTensor):
        return SparseTensor(np.ascontiguousarray(value.indices[:, 1:]), value.values,
                            value.dense_shape[1:])
    return value[0]
