"""``tf.train.Example`` and ``SequenceExample`` records -> NumPy, without TensorFlow.

The functions and feature specs of ``tf.io`` (``parse_example``,
``FixedLenFeature``...) with TF's argument order, output shapes, dtypes and
sparse index layout; results match TensorFlow's bit for bit. Parsing runs on
the ``protobuf`` package (``pip install 'jdata-jax[io]'``), imported on first use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, TypeAlias

import numpy as np

from jdata._extras import require
from jdata.io import _example_outputs as _outputs
from jdata.io._example_outputs import SparseTensor as SparseTensor
from jdata.io._example_specs import FixedLenFeature as FixedLenFeature
from jdata.io._example_specs import FixedLenSequenceFeature as FixedLenSequenceFeature
from jdata.io._example_specs import VarLenFeature as VarLenFeature

__all__ = ["FixedLenFeature", "FixedLenSequenceFeature", "SparseTensor", "VarLenFeature",
           "parse_example", "parse_sequence_example", "parse_single_example",
           "parse_single_sequence_example"]

# One record, or a batch: a list or 1-D NumPy object array of records.
Serialized: TypeAlias = bytes | Sequence[bytes] | np.ndarray[Any, Any]
Feature: TypeAlias = FixedLenFeature | VarLenFeature | FixedLenSequenceFeature


def parse_example(serialized: Serialized, features: Mapping[str, Feature]) -> dict[str, Any]:
    """Parses serialized ``tf.train.Example`` records, as ``tf.io.parse_example``.

    One record (``bytes``) gives each feature's value for that record; a batch
    (a list or 1-D NumPy object array of ``bytes``, as ``batch()`` makes
    them) gives arrays with a leading batch dimension. ``FixedLenFeature``:
    an array of ``[batch, *shape]``; ``VarLenFeature``: a
    ``jdata.io.SparseTensor`` (indices ``[record, position]``);
    ``FixedLenSequenceFeature`` (``allow_missing=True``): ``[batch, longest,
    *shape]``, padded. A record that is not an Example, a feature of another
    type than its spec's, the wrong number of values or a missing feature
    without default is a ``ValueError`` naming the feature and the record.
    Parse batches (``ds.batch(256).map(functools.partial(
    jdata.io.parse_example, features=spec))``): the work is per batch and per
    key, not per value.

    >>> import numpy as np, jdata
    >>> record = bytes.fromhex("0a260a140a06746f6b656e73120a1a080a0603010401050e0a0e0a056c"
    ...                        "6162656c12051a030a0107")  # label: [7], tokens: [3, 1, 4, 1, 5, 14]
    >>> spec = {"label": jdata.io.FixedLenFeature([], np.int64),
    ...         "tokens": jdata.io.VarLenFeature(np.int64)}
    >>> parsed = jdata.io.parse_example([record, record], spec)
    >>> parsed["label"]
    array([7, 7])
    >>> parsed["tokens"].values, parsed["tokens"].dense_shape
    (array([ 3,  1,  4,  1,  5, 14,  3,  1,  4,  1,  5, 14]), array([2, 6]))

    Args:
      serialized: one record (``bytes``) or a batch of them.
      features: ``{key: FixedLenFeature | VarLenFeature | FixedLenSequenceFeature}``.
    """
    op = "parse_example"
    if isinstance(serialized, bytes):
        parsed: dict[str, Any] | None = _parser(op, single=True).parse(serialized, features)
        if parsed is not None:
            return parsed
    records, single = _records(serialized, op)
    features = _features(features, "features", op,
                         (FixedLenFeature, VarLenFeature, FixedLenSequenceFeature))
    for key, spec in features.items():
        if isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
            raise ValueError(f"{op}: features[{key!r}] is a FixedLenSequenceFeature with "
                             "allow_missing=False, which TensorFlow does not support in "
                             "Examples either; pass allow_missing=True")
    parse = _parser(op)
    entries = parse.example_entries(records, [key.encode() for key in features], op)
    parsed = _parse_features(parse, entries, len(records), features, op)
    return {key: _outputs.first(value) for key, value in parsed.items()} if single else parsed


def parse_single_example(serialized: bytes,
                         features: Mapping[str, Feature]) -> dict[str, Any]:
    """``parse_example`` of one record, as ``tf.io.parse_single_example``: outputs have no
    batch dimension. One record takes a fast path (about 3x the per-record cost of a
    batch of 256, where a batch of one costs about 30x): parse batches where you can."""
    _single(serialized, "parse_single_example")
    return parse_example(serialized, features)


def parse_sequence_example(
        serialized: Serialized, context_features: Mapping[str, Feature] | None = None,
        sequence_features: Mapping[str, Feature] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Parses serialized ``tf.train.SequenceExample`` records, as
    ``tf.io.parse_sequence_example``.

    Returns ``(context, feature_lists, lengths)``: ``context`` parses the
    context features (``FixedLenFeature``, ``VarLenFeature``) as
    ``parse_example`` would; ``feature_lists`` the feature lists, one
    ``tf.train.Feature`` a step: ``FixedLenSequenceFeature`` gives ``[batch,
    longest, *shape]`` (0 or ``b""`` after a list's end), ``VarLenFeature`` a
    ``SparseTensor`` indexed ``[record, step, position]``; ``lengths`` the
    number of steps of each ``FixedLenSequenceFeature`` (int64 ``[batch]``).
    One record (``bytes``) gives outputs without the batch dimension. A
    missing list is an error unless ``allow_missing=True`` (then no steps).

    >>> import numpy as np, jdata
    >>> record = bytes.fromhex(  # context id: [1]; feature list words: [3, 1], [4, 1], [5, 9]
    ...     "0a0d0a0b0a02696412051a030a010112230a210a05776f72647312180a061a040a0203010a061a040a"
    ...     "0204010a061a040a020509")
    >>> context, lists, lengths = jdata.io.parse_sequence_example(
    ...     [record, b""], {"id": jdata.io.FixedLenFeature([], np.int64, default_value=0)},
    ...     {"words": jdata.io.FixedLenSequenceFeature([2], np.int64, allow_missing=True)})
    >>> context["id"], lengths["words"]
    (array([1, 0]), array([3, 0]))
    >>> lists["words"][0]
    array([[3, 1],
           [4, 1],
           [5, 9]])

    Args:
      serialized: one record (``bytes``) or a batch of them.
      context_features: ``{key: FixedLenFeature | VarLenFeature}``.
      sequence_features: ``{key: FixedLenSequenceFeature | VarLenFeature}``.
    """
    op = "parse_sequence_example"
    records, single = _records(serialized, op)
    if not context_features and not sequence_features:
        raise ValueError(f"{op}: context_features and sequence_features are both empty; "
                         "name at least one feature")
    context_specs = _features(context_features, "context_features", op,
                              (FixedLenFeature, VarLenFeature)) if context_features else {}
    list_specs = _features(sequence_features, "sequence_features", op,
                           (FixedLenSequenceFeature, VarLenFeature)) if sequence_features else {}
    for key, spec in list_specs.items():
        if getattr(spec, "default_value", None) is not None:
            raise ValueError(f"{op}: sequence_features[{key!r}] has default_value="
                             f"{spec.default_value!r}; feature lists are padded with 0 or "
                             "b'' (as in TensorFlow): drop the default_value")
    parse = _parser(op)
    context_entries, list_entries = parse.sequence_entries(
        records, [key.encode() for key in context_specs], [key.encode() for key in list_specs],
        op)
    context = _parse_features(parse, context_entries, len(records), context_specs, op)
    lists, lengths = _parse_lists(parse, list_entries, len(records), list_specs, op)
    if single:
        return ({key: _outputs.first(value) for key, value in context.items()},
                {key: _outputs.first(value) for key, value in lists.items()},
                {key: value[0] for key, value in lengths.items()})
    return context, lists, lengths


def parse_single_sequence_example(
        serialized: bytes, context_features: Mapping[str, Feature] | None = None,
        sequence_features: Mapping[str, Feature] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(context, feature_lists)`` of one record, as
    ``tf.io.parse_single_sequence_example`` (see ``parse_sequence_example``)."""
    _single(serialized, "parse_single_sequence_example")
    context, lists, _ = parse_sequence_example(serialized, context_features, sequence_features)
    return context, lists


def _parser(op: str, single: bool = False) -> ModuleType:
    """The protobuf half of parsing: batched, or the fast path of one record (``single``)."""
    require("google.protobuf.message", op)
    if single:
        from jdata.io import _example_single

        return _example_single
    from jdata.io import _example_parse

    return _example_parse


def _records(serialized: Any, op: str) -> tuple[list[bytes], bool]:
    """``(records, whether serialized is one record)``."""
    if isinstance(serialized, np.ndarray):
        if serialized.ndim > 1:
            raise ValueError(f"{op}: serialized has shape {serialized.shape}; pass one record "
                             "or a 1-D batch (.reshape(-1) flattens a batch of batches)")
        if serialized.dtype.kind == "S":
            raise TypeError(f"{op}: serialized is a NumPy bytes array (dtype "
                            f"{serialized.dtype}), which drops the zero bytes records end "
                            "with; pass a list or an object array (dtype=object)")
        serialized = serialized.tolist()
    if isinstance(serialized, bytes):
        return [serialized], True
    if not isinstance(serialized, (list, tuple)):
        raise TypeError(f"{op}: serialized={type(serialized).__name__} must be one record "
                        "(bytes) or a batch: a list or 1-D NumPy object array of bytes")
    records = list(serialized)
    if not set(map(type, records)) <= {bytes, np.bytes_}:
        index, record = next((i, r) for i, r in enumerate(records) if not isinstance(r, bytes))
        raise TypeError(f"{op}: record {index} of serialized is a {type(record).__name__}, "
                        "not bytes")
    return records, False


def _single(serialized: Any, op: str) -> None:
    if not isinstance(serialized, bytes) and not (isinstance(serialized, np.ndarray)
                                                  and serialized.ndim == 0):
        raise ValueError(f"{op}: serialized must be one record (bytes), not a "
                         f"{type(serialized).__name__}; parse batches with "
                         f"{op.replace('_single', '')}")


def _features(features: Any, arg: str, op: str,
              kinds: tuple[type, ...]) -> Mapping[str, Any]:
    names = " or ".join(f"jdata.io.{kind.__name__}" for kind in kinds)
    if not isinstance(features, Mapping):
        raise TypeError(f"{op}: {arg}={features!r} must be a dict {{key: {names}}}")
    if not features:
        raise ValueError(f"{op}: {arg} is empty; name at least one feature")
    for key, spec in features.items():
        if not isinstance(key, str):
            raise TypeError(f"{op}: {arg} key {key!r} must be a str, a feature's name")
        if not isinstance(spec, kinds):
            raise TypeError(f"{op}: {arg}[{key!r}] is a {type(spec).__name__}; use {names}")
    return features


def _parse_features(parse: ModuleType, entries: dict[bytes, Any], batch: int,
                    features: Mapping[str, Any], op: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, spec in features.items():
        rows, found = entries[key.encode()]
        column = parse.values(found, rows, parse.KINDS[spec.dtype],
                              isinstance(spec, FixedLenFeature),
                              lambda i, key=key, rows=rows: f"{op}: feature {key!r} of "
                                                            f"record {rows[i]}")
        if isinstance(spec, FixedLenFeature):
            out[key] = _outputs.dense(column, batch, spec.shape, spec.dtype,
                                      spec.default_value, key, op)
        elif isinstance(spec, VarLenFeature):
            out[key] = _outputs.sparse(column, batch)
        else:
            out[key] = _outputs.padded(column, batch, spec.shape, spec.dtype,
                                       spec.default_value, key, op)
    return out


def _parse_lists(parse: ModuleType, entries: dict[bytes, Any], batch: int,
                 features: Mapping[str, Any], op: str) -> tuple[dict[str, Any], dict[str, Any]]:
    lists: dict[str, Any] = {}
    lengths: dict[str, Any] = {}
    for key, spec in features.items():
        rows, steps, found = entries[key.encode()]
        records = np.repeat(rows, steps)

        def where(i: int, key: str = key, records: Any = records,
                  steps: Any = steps) -> str:  # only worded for an error
            return (f"{op}: step {_outputs.positions(steps)[i]} of feature list {key!r} of "
                    f"record {records[i]}")

        column = parse.values(found, records, parse.KINDS[spec.dtype], False, where)
        if isinstance(spec, VarLenFeature):
            lists[key] = _outputs.sparse(column, batch, (rows, steps))
        else:
            lists[key], lengths[key] = _outputs.stepped(
                (rows, steps), column, batch, spec.shape, spec.dtype, spec.allow_missing, key,
                op)
    return lists, lengths
