"""A batch's feature values, gathered per key: the protobuf half of ``jdata.io.parse_example``.

Two stages, each a few upb calls for the whole batch with an exact
record-by-record path beside it:

1. ``example_entries``: records -> for each requested key, the records that
   hold it and its serialized ``Feature`` there. All records are parsed as one
   message (``MergedBatch``), an end-of-record entry after each telling them
   apart.
2. ``values``: one key's serialized Features -> a ``Column``: which of them
   hold values, how many, and all the values in one NumPy array. All Features
   parse as one message (``MergedFeatures``) whose value lists run on through
   the batch, an end-of-feature value after each telling them apart.

Python work is then per key, not per value. The markers are values a record
could hold (nothing on the wire is reserved): a batch holding one has more
markers than it should, which is checked, and is read by the exact path
instead, as is anything else the merged parse cannot vouch for (a corrupt
record, a feature of the wrong type). The exact path is also what names the
record and the feature at fault in an error.
"""

from __future__ import annotations

import functools
import itertools
import operator
import struct
from typing import NamedTuple

import numpy as np
from google.protobuf.message import DecodeError

from jdata.io import _example_proto as proto

# Feature kinds by the dtype names of the feature specs.
KINDS = {"int64": "int64_list", "float32": "float_list", "string": "bytes_list"}
_NUMPY = {"int64_list": np.int64, "float_list": np.float32, "bytes_list": object}
_DTYPE_NAMES = {"int64_list": "int64", "float_list": "float32", "bytes_list": "bytes"}
_SPEC_DTYPES = {"int64_list": "np.int64", "float_list": "np.float32", "bytes_list": "bytes"}
_KEY, _VALUE = operator.attrgetter("key"), operator.attrgetter("value")
_HEADER_TABLE_SIZE = 1 << 14  # every length with a 1- or 2-byte varint
_NO_ROWS = np.zeros(0, np.int64)
# Not upb's message, which names the view parsed with: no business of the user's.
_UNPARSABLE = "protobuf cannot parse it (truncated or corrupt)"


class Column(NamedTuple):
    """One key's values in a batch: ``counts[i]`` values for ``rows[i]``, all in ``values``."""

    rows: np.ndarray  # int64: the record (or, for feature lists, step) of each entry
    counts: np.ndarray  # int64
    values: np.ndarray  # int64, float32 or object (bytes)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """``payload`` as length-delimited field ``number``."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


_RECORD_END_KEY = b"\xff\xfejdata:end-of-record"  # not UTF-8: no tf.train.Features key
_RECORD_END = _field(1, _field(1, _field(1, _field(1, _RECORD_END_KEY))))
_FEATURE_END_INT = -0x5F3C92E71DA46B0B
# A quiet NaN with a payload: it survives the float64 round trip of protobuf versions whose
# containers have no __array__ (a signalling NaN would come back quieted).
_FEATURE_END_FLOAT_BITS = 0x7FE6D3C1
_FEATURE_END_BYTES = b"\xff\xfejdata:end-of-feature"
_FEATURE_END = {  # each a MergedFeatures.feature holding the one marker value
    "int64_list": _field(1, _field(3, _field(1, _varint(_FEATURE_END_INT + (1 << 64))))),
    "float_list": _field(1, _field(2, _field(1, struct.pack("<I", _FEATURE_END_FLOAT_BITS)))),
    "bytes_list": _field(1, _field(1, _field(1, _FEATURE_END_BYTES))),
}


@functools.cache
def _header_table() -> tuple:
    # Built whole, then published: threads parsing at once never see half a table.
    return tuple(b"\x0a" + _varint(n) for n in range(_HEADER_TABLE_SIZE))


def _headers(items: list[bytes]):
    """The field-1 length-delimited header of each item."""
    lengths = list(map(len, items))
    if max(lengths, default=0) >= _HEADER_TABLE_SIZE:
        return (b"\x0a" + _varint(n) for n in lengths)
    return map(_header_table().__getitem__, lengths)


def _merge(items: list[bytes], end: bytes) -> bytes:
    """Each item as one occurrence of field 1, followed by ``end``: one message."""
    return b"".join(itertools.chain.from_iterable(
        zip(_headers(items), items, itertools.repeat(end))))


def example_entries(records: list[bytes], keys, op: str) -> dict:
    """``{key: (rows, serialized Features)}``: the records holding each key (ascending)
    and that key's Feature in each. A key given twice in a record is the last one, as
    protobuf reads a map."""
    found = _merged_entries(records, keys) if records else None
    return _entries_one_by_one(records, keys, op) if found is None else found


def _merged_entries(records, keys) -> dict | None:
    try:
        entries = proto.MergedBatch.FromString(_merge(records, _RECORD_END)).example
    except DecodeError:
        return None  # a record is corrupt: the exact path says which
    entries = list(entries.features.feature)  # each entry's wrapper made once
    names = list(map(_KEY, entries))
    period = names.index(_RECORD_END_KEY) + 1
    batch = len(records)
    if len(names) == period * batch and names == names[:period] * batch:
        # Every record holds the same keys in the same order (as writers do): slices.
        found = {}
        for key in keys:
            offsets = [j for j, name in enumerate(names[:period]) if name == key]
            found[key] = ((np.arange(batch), list(map(_VALUE, entries[offsets[-1]::period])))
                          if offsets else (_NO_ROWS, []))
        return found
    if names.count(_RECORD_END_KEY) != batch:
        return None  # a record holds the marker key itself
    where = {key: {} for key in keys}  # key -> {record: entry}; a later entry replaces
    record = 0
    for i, name in enumerate(names):
        if name == _RECORD_END_KEY:
            record += 1
        elif name in where:
            where[name][record] = i
    return {key: (np.fromiter(at, np.int64, len(at)), [entries[i].value for i in at.values()])
            for key, at in where.items()}


def _entries_one_by_one(records, keys, op: str) -> dict:
    found = {key: ([], []) for key in keys}
    for index, record in enumerate(records):
        try:
            entries = proto.RawExample.FromString(record).features.feature
        except DecodeError:
            raise ValueError(f"{op}: record {index} of the batch is not a serialized "
                             f"tf.train.Example: {_UNPARSABLE}") from None
        _pick(found, entries, index)
    return {key: (np.array(rows, np.int64), values) for key, (rows, values) in found.items()}


def _pick(found: dict, entries, index: int) -> None:
    """Appends record ``index``'s value of each key of ``found`` that its map ``entries``
    holds (the last, where one is given twice) to ``found[key]``: ``(rows, values)``."""
    features = dict(zip(map(_KEY, entries), map(_VALUE, entries)))
    for key, (rows, values) in found.items():
        if key in features:
            rows.append(index)
            values.append(features[key])


def sequence_entries(records: list[bytes], context_keys, list_keys, op: str):
    """``(context, feature_lists)``: ``example_entries`` of the context features, and
    ``{key: (rows, steps, serialized step Features)}`` of the feature lists, ``steps``
    holding each listed record's number of steps."""
    context = {key: ([], []) for key in context_keys}
    lists = {key: ([], []) for key in list_keys}  # serialized FeatureLists first
    for index, record in enumerate(records):
        try:
            example = proto.RawSequenceExample.FromString(record)
        except DecodeError:
            raise ValueError(f"{op}: record {index} of the batch is not a serialized "
                             f"tf.train.SequenceExample: {_UNPARSABLE}") from None
        _pick(context, example.context.feature, index)
        _pick(lists, example.feature_lists.feature_list, index)
    return ({key: (np.array(rows, np.int64), values) for key, (rows, values) in context.items()},
            {key: _steps(key, *found, op) for key, found in lists.items()})


def _steps(key: bytes, rows: list, feature_lists: list, op: str) -> tuple:
    """``(rows, steps, step Features)`` of one key's serialized FeatureLists."""
    steps, features = [], []
    for index, data in zip(rows, feature_lists):
        try:
            step_features = proto.RawFeatureList.FromString(data).feature
        except DecodeError:
            raise ValueError(f"{op}: feature list {key.decode(errors='replace')!r} of record "
                             f"{index} is not a serialized tf.train.FeatureList: "
                             f"{_UNPARSABLE}") from None
        steps.append(len(step_features))
        features.extend(step_features)
    return np.array(rows, np.int64), np.array(steps, np.int64), features


def values(features: list[bytes], rows: np.ndarray, kind: str, drop_kindless: bool,
           where) -> Column:
    """The values of serialized Features of ``kind`` (``"int64_list"``...), one Feature for
    each of ``rows``. A Feature of another kind is a ``ValueError`` naming ``where(i)``
    (the i-th Feature's place). A Feature of no kind is dropped if ``drop_kindless`` (an
    absent feature, as TF reads an Example), else an entry of no values (a step of a
    feature list)."""
    merged = _merged_values(features, kind)
    # Merged, a Feature of no kind looks like one of no values: only dropping tells.
    if merged is not None and not (drop_kindless and not merged[0].all()):
        return Column(rows, *merged)
    return _values_one_by_one(features, rows, kind, drop_kindless, where)


def _merged_values(features, kind: str):
    try:
        merged = proto.MergedFeatures.FromString(_merge(features, _FEATURE_END[kind])).feature
    except DecodeError:
        return None
    if any(merged.HasField(other) for other in _NUMPY if other != kind):
        return None  # a Feature of another kind: an error the exact path words
    found = getattr(merged, kind).value
    if kind == "bytes_list":
        found = _objects(found)
        ends = found == _FEATURE_END_BYTES
    else:
        found = np.array(found, _NUMPY[kind])
        ends = (found.view(np.uint32) == _FEATURE_END_FLOAT_BITS if kind == "float_list"
                else found == _FEATURE_END_INT)
    end_at = np.flatnonzero(ends)
    if len(end_at) != len(features):
        return None  # a Feature holds the marker value itself
    return np.diff(end_at, prepend=-1) - 1, found[~ends]


def _objects(items) -> np.ndarray:
    out = np.empty(len(items), object)
    out[:] = list(items)
    return out


def _values_one_by_one(features, rows, kind: str, drop_kindless: bool, where) -> Column:
    kept, counts, parts = [], [], []
    for i, data in enumerate(features):
        try:
            feature = proto.Feature.FromString(data)
        except DecodeError:
            raise ValueError(f"{where(i)} is not a serialized tf.train.Feature: "
                             f"{_UNPARSABLE}") from None
        found = feature.WhichOneof("kind")
        if found is None and drop_kindless:
            continue
        if found is not None and found != kind:
            raise ValueError(
                f"{where(i)} holds {_DTYPE_NAMES[found]} values, but its spec's dtype is "
                f"{_DTYPE_NAMES[kind]} (data types don't match); declare it with "
                f"dtype={_SPEC_DTYPES[found]}")
        listed = getattr(feature, kind).value
        kept.append(i)
        counts.append(len(listed))
        parts.append(_objects(listed) if kind == "bytes_list" else
                     np.array(listed, _NUMPY[kind]))
    found_values = np.concatenate(parts) if parts else np.zeros(0, _NUMPY[kind])
    return Column(rows[kept], np.array(counts, np.int64), found_values)
