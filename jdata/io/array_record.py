"""from_array_record: records of ArrayRecord files, random access. See
``jdata.from_array_record``."""

from __future__ import annotations

import bisect
import dataclasses
from typing import ClassVar

import numpy as np

from jdata import _planner
from jdata._errors import DataError
from jdata._extras import require
from jdata._plan import Node
from jdata._spec import STRING, TensorSpec
from jdata.io import _open_files, _paths

_OP = "from_array_record"
# Random access: no read-ahead past the records asked for (as grain reads them).
_READER_OPTIONS = "readahead_buffer_size:0"


def _module(feature: str = _OP):
    """The ArrayRecord bindings; ``feature`` is what the error names if they are missing."""
    return require("array_record.python.array_record_module", feature)


def open_reader(path: str, feature: str = _OP):
    return _module(feature).ArrayRecordReader(_paths.local_path(path), _READER_OPTIONS)


@dataclasses.dataclass(frozen=True, eq=False)
class ArrayRecordNode(Node):
    """See ``jdata.from_array_record``. ``lengths[i]`` is the record count of ``paths[i]``."""

    paths: tuple
    lengths: tuple
    op_name: ClassVar[str] = _OP

    def cardinality(self) -> int:
        return sum(self.lengths)

    def random_access(self) -> bool:
        return True

    def compute_spec(self):
        return TensorSpec((), STRING)

    def __str__(self):
        return f"FromArrayRecord(files={len(self.paths)}, records={sum(self.lengths)})"


def record_counts(paths: tuple, op: str = _OP) -> tuple:
    counts = []
    for path in paths:
        try:
            counts.append(_count(path, op))
        except ImportError:
            raise
        except Exception as e:
            _paths.raise_if_unreadable(path, e)
            raise ValueError(f"{op}: {path} is not a readable ArrayRecord file ({e})") from e
    return tuple(counts)


def _count(path: str, op: str) -> int:
    reader = open_reader(path, op)
    try:
        return int(reader.num_records())
    finally:
        reader.close()  # raises (RuntimeError) for a damaged file that opened


class RecordReader:
    """Record ``i`` of the concatenated files, through the source's shared set of open
    files (``jdata.io._open_files``): several threads may read at once."""

    prefers_blocks = True  # batched range reads: iterators read it a block at a time

    def __init__(self, node: ArrayRecordNode, ctx, epoch: int):
        self._op, self._paths = node.op_name, node.paths
        self._starts = [0, *np.cumsum(node.lengths).tolist()]
        self._len = self._starts[-1]
        self._files = _open_files.shared(node, node.paths, open_reader)

    def __len__(self) -> int:
        return self._len

    def _file(self, index: int) -> int:
        return bisect.bisect_right(self._starts, index) - 1

    def record(self, index: int) -> bytes:
        f = self._file(index)
        try:
            return self._files.get(f).read([index - self._starts[f]])[0]
        except Exception as e:
            _paths.raise_if_unreadable(self._paths[f], e)
            raise self.error(index, e) from e

    __getitem__ = record

    def error(self, index: int, cause: BaseException) -> DataError:
        """The error of the record at ``index``, naming its file and its index there."""
        f = self._file(index)
        return DataError(self._op, index, self._paths[f], index - self._starts[f], cause)

    def read_block(self, lo: int, hi: int):
        """Batched range reads, one per file the block spans; record by record where one
        fails, to name the bad record and keep the good ones before it. A file that
        cannot be opened at all ends the block with its ``OSError``."""
        out: list = []
        while lo < hi:
            f = self._file(lo)
            start = self._starts[f]
            end = min(hi, self._starts[f + 1])
            try:
                out.extend(self._files.get(f).read(lo - start, end - start))
            except Exception:
                for index in range(lo, end):
                    try:
                        out.append(self.record(index))
                    except (DataError, OSError) as e:
                        return out, e
            lo = end
        return out, None


_planner.register(ArrayRecordNode, reader=RecordReader)
