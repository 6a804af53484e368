"""from_parquet: rows of Parquet files as dicts, reading only the columns asked for.
See ``jdata.from_parquet``."""

from __future__ import annotations

import bisect
import dataclasses
import threading
from typing import ClassVar

import numpy as np

from jdata import _planner, _probe
from jdata._errors import DataError
from jdata._extras import require
from jdata._plan import Node
from jdata.io import _open_files, _paths

_OP = "from_parquet"


def _pq():
    return require("pyarrow.parquet", _OP)


def _types():
    return require("pyarrow.types", _OP)


def open_file(path: str):
    source = path if not _paths.is_url(path) else _paths.open_binary(path)
    return _pq().ParquetFile(source)


class _SharedFile:
    """An open Parquet file that the reader threads of a parallel pipeline share: one
    row group read at a time per file (two threads reading one ``pyarrow.ParquetFile``
    at once hung, both inside ``read_row_group``, in a full shuffle read by a parallel
    map); other files read in parallel."""

    __slots__ = ("_file", "_lock")

    def __init__(self, path: str):
        self._file = open_file(path)
        self._lock = threading.Lock()

    def read_row_group(self, group: int, columns=None):
        with self._lock:
            return self._file.read_row_group(group, columns=columns)


def _check_type(name: str, arrow_type) -> None:
    t = _types()

    while t.is_list(arrow_type) or t.is_large_list(arrow_type):
        arrow_type = arrow_type.value_type
    if not (t.is_integer(arrow_type) or t.is_floating(arrow_type) or t.is_boolean(arrow_type)
            or t.is_string(arrow_type) or t.is_large_string(arrow_type)
            or t.is_binary(arrow_type) or t.is_large_binary(arrow_type)):
        raise ValueError(f"{_OP}: column {name!r} has type {arrow_type}; jdata reads numeric, "
                         "boolean, string and binary columns and lists of them")


def row_groups(paths: tuple, columns, only: tuple | None, batched: bool = False) -> tuple:
    """``(file index, row group, rows)`` of each row group to read; checks the columns
    (``batched``: none may hold lists, whose batches would be ragged)."""
    t = _types()

    groups, ragged = [], []
    for f, path in enumerate(paths):
        try:
            parquet = open_file(path)
            metadata = parquet.metadata
            parquet.close(force=True)  # the file object under it too, for a URL's
        except ImportError:
            raise
        except Exception as e:
            _paths.raise_if_unreadable(path, e)
            raise ValueError(f"{_OP}: {path} is not a readable Parquet file ({e})") from e
        schema = metadata.schema.to_arrow_schema()
        names = schema.names
        for name in columns if columns is not None else names:
            if name not in names:
                raise ValueError(f"{_OP}: {path} has no column {name!r}; it has {names}")
            kind = schema.field(name).type
            _check_type(name, kind)
            if (t.is_list(kind) or t.is_large_list(kind)) and name not in ragged:
                ragged.append(name)
        wanted = range(metadata.num_row_groups) if only is None else only
        for g in wanted:
            if not 0 <= g < metadata.num_row_groups:
                raise ValueError(f"{_OP}: {path} has {metadata.num_row_groups} row groups; "
                                 f"there is no row group {g}")
            groups.append((f, int(g), metadata.row_group(g).num_rows))
    if batched and ragged:
        raise ValueError(f"{_OP}: columns {ragged} hold lists, whose batches would be ragged; "
                         "read rows (no batch_size) and use padded_batch, or leave those "
                         "columns out")
    return tuple(groups)


@dataclasses.dataclass(frozen=True, eq=False)
class ParquetNode(Node):
    """See ``jdata.from_parquet``. ``groups``: ``(file index, row group, rows)`` in order."""

    paths: tuple
    columns: tuple | None
    groups: tuple
    batch_size: int | None = None  # elements are batches of rows: a dict of column arrays
    op_name: ClassVar[str] = _OP
    spec_inferred: ClassVar[bool] = True  # list lengths, batch sizes: from the first rows

    def rows(self) -> int:
        return sum(rows for _, _, rows in self.groups)

    def cardinality(self) -> int:
        rows = self.rows()
        return rows if self.batch_size is None else -(-rows // self.batch_size)

    def random_access(self) -> bool:
        return True

    def compute_spec(self):
        return _probe.leading_spec(self, _OP)

    def __str__(self):
        columns = "all" if self.columns is None else list(self.columns)
        batches = "" if self.batch_size is None else f", batch_size={self.batch_size}"
        return (f"FromParquet(files={len(self.paths)}, row_groups={len(self.groups)}, "
                f"rows={self.rows()}, columns={columns}{batches})")


class _Reader:
    """Rows by index; the row group last read is kept as NumPy columns. Files are open
    in the source's shared set (``jdata.io._open_files``)."""

    prefers_blocks = True

    def __init__(self, node: ParquetNode, ctx, epoch: int):
        self._node = node
        self._starts = [0, *np.cumsum([rows for _, _, rows in node.groups]).tolist()]
        self._files = _open_files.shared(node, node.paths, _SharedFile)
        self._cached: tuple | None = None  # (group, names, NumPy columns, null masks)

    def __len__(self) -> int:
        return self._starts[-1]

    def columns(self, lo: int, hi: int) -> dict:
        """Rows ``lo .. hi-1`` as ``{column: NumPy array}`` (views where they fit in one
        row group); a row with a null (outside float columns) fails the whole range."""
        pieces: list = []
        names: list = []
        for g, first, last in self._spans(lo, hi):
            names, arrays, (nulls, masks) = self._group(g)
            null = _first_null(nulls, first, last)
            if null is not None:
                raise self._null_error(g, null, masks)
            pieces.append([a[first:last] for a in arrays])
        if len(pieces) == 1:
            return dict(zip(names, pieces[0]))
        return {name: np.concatenate([p[c] for p in pieces])
                for c, name in enumerate(names)}

    def _group(self, g: int) -> tuple:
        """``(names, NumPy columns, (rows with a null or None, per-column null masks))``."""
        cached = self._cached
        if cached is not None and cached[0] == g:
            return cached[1:]
        f, group, _ = self._node.groups[g]
        path = self._node.paths[f]
        columns = None if self._node.columns is None else list(self._node.columns)
        try:
            table = self._files.get(f).read_row_group(group, columns=columns)
        except Exception as e:
            _paths.raise_if_unreadable(path, e)
            raise DataError(_OP, self._starts[g], path, group,
                            ValueError(f"row group {group} cannot be read: {e}")) from e
        names, arrays, masks = table.column_names, [], {}
        for name, column in zip(names, table.columns):
            if column.null_count and not _is_float(column.type):
                # The rows with a null fail (below); the others keep the column's dtype.
                masks[name] = column.is_null().to_numpy(zero_copy_only=False)
                column = column.fill_null(_placeholder(column.type))
            arrays.append(column.to_numpy(zero_copy_only=False))
        nulls = np.logical_or.reduce(list(masks.values())) if masks else None
        self._cached = (g, names, arrays, (nulls, masks))
        return names, arrays, (nulls, masks)

    def _null_error(self, g: int, row: int, masks: dict) -> DataError:
        f, group, _ = self._node.groups[g]
        null = [name for name, mask in masks.items() if mask[row]]
        return DataError(_OP, self._starts[g] + row, self._node.paths[f], row,
                         ValueError(f"row {row} of row group {group} has a null in "
                                    f"{null}; jdata elements cannot hold None (fill nulls "
                                    "when writing, or skip such rows with ignore_errors())"))

    def __getitem__(self, index: int) -> dict:
        elements, error = self.read_block(index, index + 1)
        if error is not None:
            raise error
        return elements[0]

    def read_block(self, lo: int, hi: int):
        out: list = []
        for g, first, last in self._spans(lo, hi):
            try:
                names, arrays, (nulls, masks) = self._group(g)
            except (DataError, OSError) as e:  # raised after the rows before it
                return out, e
            null = _first_null(nulls, first, last)
            stop = last if null is None else null
            rows: list[dict] = [{} for _ in range(stop - first)]
            for name, array in zip(names, arrays):  # column by column: 2.5x dict(zip(...))
                for row, value in zip(rows, array[first:stop]):
                    row[name] = value
            out.extend(rows)
            if null is not None:
                return out, self._null_error(g, null, masks)
        return out, None

    def _spans(self, lo: int, hi: int):
        """``(row group, first row, end row)`` in each group that rows ``lo .. hi-1`` touch."""
        while lo < hi:
            g = bisect.bisect_right(self._starts, lo) - 1
            end = min(hi, self._starts[g + 1])
            yield g, lo - self._starts[g], end - self._starts[g]
            lo = end


def _first_null(nulls, first: int, last: int) -> int | None:
    """The first row in ``first .. last-1`` with a null (outside float columns), if any."""
    if nulls is None or not nulls[first:last].any():
        return None
    return first + int(np.argmax(nulls[first:last]))


def _placeholder(arrow_type):
    pa, t = require("pyarrow", _OP), _types()

    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        value = []
    elif t.is_string(arrow_type) or t.is_large_string(arrow_type):
        value = ""
    elif t.is_binary(arrow_type) or t.is_large_binary(arrow_type):
        value = b""
    elif t.is_boolean(arrow_type):
        value = False
    else:
        value = 0
    return pa.scalar(value, arrow_type)


def _is_float(arrow_type) -> bool:
    t = _types()

    return t.is_floating(arrow_type)  # nulls read as NaN, as pandas reads them


class _BatchReader:
    """Batch ``i``: rows ``i * batch_size`` on, as a dict of column arrays."""

    def __init__(self, node: ParquetNode, ctx, epoch: int):
        self._rows = _Reader(node, ctx, epoch)
        self._size = node.batch_size
        self._len = node.cardinality()

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> dict:
        lo = index * self._size
        return self._rows.columns(lo, min(lo + self._size, len(self._rows)))


def _reader(node: ParquetNode, ctx, epoch: int):
    return _Reader(node, ctx, epoch) if node.batch_size is None else _BatchReader(
        node, ctx, epoch)


_planner.register(ParquetNode, reader=_reader)
