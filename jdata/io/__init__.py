"""File sources: ArrayRecord, TFRecord, text and Parquet files, and file lists (``pip install
'jdata-jax[io]'``). Re-exported as ``jdata.from_array_record`` and so on. Also
``tf.train.Example`` parsing (``parse_example`` and its feature specs, as in
``tf.io``), which stays here.

Paths may be local paths, glob patterns or fsspec URLs (``gs://``, ``s3://``,
``memory://``...; the filesystem's package must be installed). Missing files
fail when the dataset is built, naming the path. A file that cannot be read
later (deleted, no permission, too many open files) raises its ``OSError``;
``jdata.DataError`` (which ``ignore_errors()`` skips) is only for records
that are corrupt.

>>> import os, tempfile, jdata
>>> path = os.path.join(tempfile.mkdtemp(), "lines.txt")
>>> _ = open(path, "w").write("first\\nsecond\\n")
>>> [line for line in jdata.from_text_lines(path)]
[b'first', b'second']
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jdata import _validate
from jdata._dataset import Dataset
from jdata._sources import from_tensor_slices
from jdata._types import Key, Path, Paths
from jdata.io import _paths
from jdata.io import array_record as _array_record
from jdata.io import parquet as _parquet
from jdata.io import records as _records
from jdata.io.example import FixedLenFeature as FixedLenFeature
from jdata.io.example import FixedLenSequenceFeature as FixedLenSequenceFeature
from jdata.io.example import SparseTensor as SparseTensor
from jdata.io.example import VarLenFeature as VarLenFeature
from jdata.io.example import parse_example as parse_example
from jdata.io.example import parse_sequence_example as parse_sequence_example
from jdata.io.example import parse_single_example as parse_single_example
from jdata.io.example import parse_single_sequence_example as parse_single_sequence_example
from jdata.io.records import write_tfrecord as write_tfrecord

__all__ = ["FixedLenFeature", "FixedLenSequenceFeature", "SparseTensor", "VarLenFeature",
           "from_array_record", "from_parquet", "from_text_lines", "from_tfrecord",
           "list_files", "load", "parquet_row_groups", "parse_example",
           "parse_sequence_example", "parse_single_example", "parse_single_sequence_example",
           "write_tfrecord"]


def from_array_record(paths: Paths) -> Dataset:
    """The records (``bytes``) of ArrayRecord files, in order, with random access.

    Files written by the ``array-record`` package or grain work. Being random
    access, the dataset supports full shuffles, index-only state, ``shard``
    by record ranges and parallel subtrees; blocks of records are read with
    the reader's batched range reads. At most 128 files are open at once
    (fewer under a low descriptor limit), the least recently used closed
    first, shared by the pipeline's threads; closing the iterator closes them.

    Args:
      paths: a path, a glob pattern, or a list of them (their files concatenated).
    """
    files = _paths.expand(paths, "from_array_record")
    return Dataset(_array_record.ArrayRecordNode(files, _array_record.record_counts(files)))


def _compression(compression_type: str | None, op: str) -> str:
    value = (compression_type or "").upper()
    if value not in _records.COMPRESSIONS:
        raise ValueError(f"{op}: compression_type={compression_type!r}; jdata reads None "
                         "(uncompressed) and 'GZIP'")
    return value


def from_tfrecord(paths: Paths, compression_type: str | None = None) -> Dataset:
    """The records (``bytes``) of TFRecord files, in order; TensorFlow is not needed.

    Each record's checksums are verified: a corrupt or truncated record raises
    ``jdata.DataError`` naming the file, the record and its byte offset
    (``ignore_errors()`` skips it). Damage that hides where the next record
    starts (a corrupt length, a truncated file, damaged GZIP data) loses the
    rest of the file: the error says how many bytes are skipped
    (``DataError.unread_bytes``), reading goes on with the next file, and every
    ``shard`` of the file raises it. A file that cannot be read at all
    (deleted, no permission) raises its ``OSError``. The state is the file
    and byte offset, so a restore seeks instead of reading again.
    ``compression_type``: ``None`` or ``"GZIP"``.
    """
    op = "from_tfrecord"
    files = _paths.expand(paths, op)
    _records.checksums()  # the checksum library: missing, it fails here, not at a first read
    return Dataset(_records.TFRecordNode(files, _compression(compression_type, op)))


def from_text_lines(paths: Paths, compression_type: str | None = None) -> Dataset:
    """The lines (``bytes``, without ``\\n`` or ``\\r\\n``) of text files, in order, as
    ``tf.data.TextLineDataset`` gives them. The state is the file and byte offset."""
    op = "from_text_lines"
    return Dataset(_records.TextLinesNode(_paths.expand(paths, op),
                                          _compression(compression_type, op)))


def from_parquet(paths: Paths, columns: Sequence[str] | None = None,
                 row_groups: int | Sequence[int] | None = None,
                 batch_size: int | None = None) -> Dataset:
    """The rows of Parquet files as dicts ``{column: value}``, with random access.

    Only ``columns`` (a list of names; all if ``None``) are read from storage
    (the tf.data paper's projection pushdown). Numbers and booleans become
    NumPy scalars, strings ``str``, binary ``bytes``, lists NumPy arrays; a
    null in a float column is NaN, elsewhere it fails its row with a
    ``jdata.DataError`` (``ignore_errors()`` skips the row). With
    ``batch_size``, each element is a batch of that many rows (the last may be
    smaller), ``{column: NumPy array}`` sliced straight from the columns: no
    per-row Python work (a null then fails its whole batch; list columns,
    which would batch ragged, are refused). ``row_groups``
    (indices) reads only those row groups of each file: with
    ``parquet_row_groups`` it shards a dataset by row group::

        jdata.io.parquet_row_groups(files).shard(n, i).interleave(
            lambda path, group: jdata.from_parquet(path, columns, row_groups=[group]))
    """
    op = "from_parquet"
    files = _paths.expand(paths, op)
    if columns is not None:
        if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
            raise TypeError(f"{op}: columns={columns!r} must be a list of column names")
        columns = tuple(columns)
        if not columns:
            raise ValueError(f"{op}: columns=[] reads nothing; pass None for every column")
    if row_groups is not None:
        row_groups = tuple(int(g) for g in np.atleast_1d(row_groups))
    if batch_size is not None:
        batch_size = _validate.int_arg(batch_size, "batch_size", op, minimum=1)
    groups = _parquet.row_groups(files, columns, row_groups, batched=batch_size is not None)
    return Dataset(_parquet.ParquetNode(files, columns, groups, batch_size))


def parquet_row_groups(paths: Paths) -> Dataset:
    """``(path, row group index)`` of every row group of the files, in order: the splits to
    shard or hand out by row group (see ``from_parquet``)."""
    files = _paths.expand(paths, "parquet_row_groups")
    splits = [(files[f], g) for f, g, _ in _parquet.row_groups(files, None, None)]
    return from_tensor_slices(([p for p, _ in splits], np.array([g for _, g in splits],
                                                                  np.int64)))


def load(path: Path) -> Dataset:
    """The elements a ``Dataset.save(path)`` wrote, in order, with random access.

    Reads the directory's ArrayRecord shards and rebuilds each element
    (dicts, tuples, lists, namedtuples of NumPy arrays and scalars, bytes
    and str); no pickle is involved, so loading never runs code. Fails at
    once, naming the path, if there is no complete saved dataset there, or
    if the directory was changed after it was written (its metadata names a
    shard outside it, or a record count its shard does not hold). A record
    that does not decode raises ``jdata.DataError`` naming its shard and
    index, and decoding never allocates more than the record's size.
    """
    from jdata.io import load_op, saved

    path = _paths.as_path(path, "load")
    metadata = saved.read_metadata(path)
    if metadata is None:
        raise FileNotFoundError(f"load: no saved dataset at {path!r} (no "
                                f"{saved.METADATA}; an interrupted save leaves none)")
    return Dataset(load_op.node(path, metadata))


def list_files(pattern: Paths, key: Key | None = None) -> Dataset:
    """The files matching ``pattern`` (a glob, or a list of globs), as ``str`` paths.

    Sorted, or in an order drawn from ``key`` (a full shuffle, a new order each
    epoch). No match fails at once. Use with ``interleave`` to read files in
    parallel: ``list_files("data/*.tfrecord").interleave(jdata.from_tfrecord,
    cycle_length=4, num_parallel_calls=4)``.
    """
    files = list(_paths.expand(pattern, "list_files"))
    ds = from_tensor_slices(files)
    return ds if key is None else ds.shuffle(key)
