"""from_array_record: records of ArrayRecord files, random access. See
``jdata.from_array_record``."""

from __future__ import annotations

import bisect
import dataclasses
import threading
from typing import ClassVar

import numpy as np

from jdata import _planner
from jdata._errors import DataError
from jdata._plan import Node
from jdata._spec import STRING, TensorSpec
from jdata.io import _paths

_OP = "from_array_record"
# Random access: no read-ahead past the records asked for (as grain reads them).
_READER_OPTIONS = "readahead_buffer_size:0"


def _module():
    try:
        from array_record.python import array_record_module
    except ImportError as e:
        raise ImportError(f"{_OP} needs the array-record package: "
                          "pip install 'jdata[io]'") from e
    return array_record_module


def open_reader(path: str):
    return _module().ArrayRecordReader(_paths.local_path(path), _READER_OPTIONS)


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
            reader = open_reader(path)
            counts.append(int(reader.num_records()))
            reader.close()
        except ImportError:
            raise
        except Exception as e:
            raise ValueError(f"{op}: {path} is not a readable ArrayRecord file ({e})") from e
    return tuple(counts)


class _Reader:
    """Record ``i`` of the concatenated files; one ArrayRecord reader per file, opened on
    first use (by one thread: several read at once in parallel pipelines)."""

    prefers_blocks = True  # batched range reads: iterators read it a block at a time

    def __init__(self, node: ArrayRecordNode, ctx, epoch: int):
        self._paths = node.paths
        self._starts = [0, *np.cumsum(node.lengths).tolist()]
        self._len = self._starts[-1]
        self._readers: list = [None] * len(node.paths)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._len

    def _file(self, index: int) -> int:
        return bisect.bisect_right(self._starts, index) - 1

    def _reader(self, f: int):
        reader = self._readers[f]
        if reader is None:
            with self._lock:
                reader = self._readers[f]
                if reader is None:
                    reader = self._readers[f] = open_reader(self._paths[f])
        return reader

    def __getitem__(self, index: int) -> bytes:
        f = self._file(index)
        record = index - self._starts[f]
        try:
            return self._reader(f).read([record])[0]
        except Exception as e:
            raise DataError(_OP, index, self._paths[f], record, e) from e

    def read_block(self, lo: int, hi: int):
        """Batched range reads, one per file the block spans; record by record where one
        fails, to name the bad record and keep the good ones before it."""
        out: list = []
        while lo < hi:
            f = self._file(lo)
            start = self._starts[f]
            end = min(hi, self._starts[f + 1])
            try:
                out.extend(self._reader(f).read(lo - start, end - start))
            except Exception:
                for index in range(lo, end):
                    try:
                        out.append(self[index])
                    except DataError as e:
                        return out, e
            lo = end
        return out, None


_planner.register(ArrayRecordNode, reader=_Reader)
