"""One record's features read straight off its message: the fast path of
``jdata.io.parse_single_example`` (and of ``parse_example`` of one record).

The batched path (``_example_parse``) does its work per key over a whole
batch: a few dozen NumPy calls per key, which a batch of 256 records shares,
but a single record pays alone (about 30x the per-record cost of a batch).
Here one protobuf parse splits the record into its features (as the
batched path's view does: values left serialized), each requested feature is
decoded and costs an array and a reshape, and the spec is checked and
compiled once per spec.

Only what this path can vouch for is parsed here: anything else (a record
that is not an ``Example``, a feature of another type than its spec's, the
wrong number of values, a missing feature without default) returns ``None``,
and the batched path parses the record again and words the error, so both
paths give the same outputs and the same errors.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from google.protobuf.message import DecodeError

from jdata.io import _example_proto as proto
from jdata.io._example_outputs import NUMPY_DTYPES, SparseTensor
from jdata.io._example_specs import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature

_KINDS = {"int64": "int64_list", "float32": "float_list", "string": "bytes_list"}
_KEY, _VALUE = operator.attrgetter("key"), operator.attrgetter("value")
# Below this many int64 values, np.fromiter beats np.array over a protobuf container.
_SHORT_INTS = 64


class _Reader(NamedTuple):
    """How to read one requested feature: ``build(values)`` (``values`` ``None`` where the
    record lacks it) returns the output, or ``None`` where the batched path must decide."""

    key: str
    raw_key: bytes  # as the record holds it
    kind: str  # the Feature's oneof field that the spec's dtype reads
    dtype: type
    build: Callable


# The items of the spec parsed last and their readers (one tuple: threads swap it whole).
_LAST: tuple = ((), None)


def parse(record: bytes, features: dict) -> dict | None:
    """``features`` of ``record`` as ``parse_single_example`` returns them, or ``None``
    where the batched path must parse it (see the module docs)."""
    global _LAST
    try:
        items = tuple(features.items())
        last_items, readers = _LAST
        # Equal at the cost of identity checks when the spec is the one used last
        # (as a map over a dataset passes it); hashing the specs costs more.
        if items != last_items:
            readers = _compiled(items)
            _LAST = (items, readers)
    except (AttributeError, TypeError):  # not a dict, or unhashable specs: the batched path
        return None                       # checks the arguments and says what is wrong
    if readers is None:
        return None
    try:
        entries = proto.RawExample.FromString(record).features.feature
    except DecodeError:
        return None
    # The map read as the batched path reads it (a later entry of a key replaces an
    # earlier one); the Features asked for are then decoded, and no others.
    found = dict(zip(map(_KEY, entries), map(_VALUE, entries)))
    out = {}
    for reader in readers:
        data = found.get(reader.raw_key)
        try:
            feature = None if data is None else proto.Feature.FromString(data)
        except DecodeError:
            return None
        kind = None if feature is None else feature.WhichOneof("kind")
        if kind is None:  # a Feature of no kind is a missing one, as TF reads an Example
            values = None
        elif kind != reader.kind:
            return None
        else:
            values = _array(getattr(feature, kind).value, reader.dtype)
        value = reader.build(values)
        if value is None:
            return None
        out[reader.key] = value
    return out


def _array(listed, dtype) -> np.ndarray:
    """A Feature's value list as a NumPy array."""
    if dtype is object:
        values = np.empty(len(listed), object)
        values[:] = list(listed)
        return values
    if dtype is np.int64 and len(listed) < _SHORT_INTS:  # np.array's path costs more then
        return np.fromiter(listed, np.int64, len(listed))
    # Floats always so: each through a Python float would quiet a signalling NaN.
    return np.array(listed, dtype)


@functools.lru_cache(maxsize=256)
def _compiled(items: tuple) -> tuple[_Reader, ...] | None:
    """The readers of a spec's ``(key, spec)`` items, or ``None`` for a spec the batched
    path refuses (it says why)."""
    readers = []
    for key, spec in items:
        if not isinstance(key, str):
            return None
        if isinstance(spec, FixedLenFeature):
            build = _fixed(spec)
        elif isinstance(spec, VarLenFeature):
            build = _sparse(spec)
        elif (isinstance(spec, FixedLenSequenceFeature) and spec.allow_missing
              and math.prod(spec.shape)):
            build = _steps(spec)
        else:
            return None
        readers.append(_Reader(key, key.encode(), _KINDS[spec.dtype],
                               NUMPY_DTYPES[spec.dtype], build))
    return tuple(readers) if readers else None


def _fixed(spec: FixedLenFeature) -> Callable:
    shape, size, dtype = spec.shape, math.prod(spec.shape), NUMPY_DTYPES[spec.dtype]
    default = None
    if spec.default_value is not None:
        default = np.empty(shape, dtype)
        default[...] = np.array(spec.default_value, dtype)
        default.flags.writeable = False  # shared by every record that lacks the feature

    def build(values):
        if values is None:
            # A copy: the batched path hands each record an array of its own.
            return None if default is None else default.copy()[()]
        if len(values) != size:
            return None
        return values.reshape(shape) if shape else values[0]
    return build


def _sparse(spec: VarLenFeature) -> Callable:
    dtype = NUMPY_DTYPES[spec.dtype]

    def build(values):
        if values is None:
            values = np.zeros(0, dtype)
        n = len(values)
        return SparseTensor(np.arange(n, dtype=np.int64).reshape(n, 1), values,
                            np.array([n], np.int64))
    return build


def _steps(spec: FixedLenSequenceFeature) -> Callable:
    shape, size, dtype = spec.shape, math.prod(spec.shape), NUMPY_DTYPES[spec.dtype]

    def build(values):
        if values is None:
            return np.empty((0, *shape), dtype)
        if len(values) % size:
            return None
        return values.reshape(len(values) // size, *shape)
    return build
