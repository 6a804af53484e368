"""from_tfrecord and from_text_lines: records of files read in order, with exact state.

Both read their files one after the other; the state is the file, the byte
offset of the next record in it, and counters, so a restore seeks there
instead of reading again. A corrupt record raises ``jdata.DataError`` naming
the file, the record and its byte offset; the iterator then goes on with the
next record it can find (the next file if the corruption hides where the
next record starts), so ``ignore_errors()`` skips exactly the bad records.
"""

from __future__ import annotations

import dataclasses
import gzip
import struct
from typing import ClassVar

from jdata import _planner
from jdata._errors import DataError
from jdata._plan import Node
from jdata._spec import STRING, TensorSpec
from jdata.io import _paths
from jdata.runtime import states
from jdata.runtime.iterator import Iterator

COMPRESSIONS = ("", "GZIP")


class _Corrupt(Exception):
    """A record that cannot be read; ``lost_file``: the rest of the file cannot be found."""

    def __init__(self, reason: str, lost_file: bool):
        super().__init__(reason)
        self.lost_file = lost_file


@dataclasses.dataclass(frozen=True, eq=False)
class _FileRecordsNode(Node):
    paths: tuple
    compression_type: str = ""
    # (num_shards, index), set by the optimizer's pushdown of a shard: records of other
    # shards are passed over at the source (a TFRecord's are seeked past, never read).
    shard: tuple | None = None

    def compute_spec(self):
        return TensorSpec((), STRING)

    def __str__(self):
        gz = f", compression_type={self.compression_type!r}" if self.compression_type else ""
        shard = "" if self.shard is None else f", shard={self.shard[1]} of {self.shard[0]}"
        return f"{type(self).__name__.removesuffix('Node')}(files={len(self.paths)}{gz}{shard})"


@dataclasses.dataclass(frozen=True, eq=False)
class TFRecordNode(_FileRecordsNode):
    """See ``jdata.from_tfrecord``."""

    op_name: ClassVar[str] = "from_tfrecord"


@dataclasses.dataclass(frozen=True, eq=False)
class TextLinesNode(_FileRecordsNode):
    """See ``jdata.from_text_lines``."""

    op_name: ClassVar[str] = "from_text_lines"


class _FileRecordsIterator(Iterator):
    """Records of ``paths`` in order; the subclass reads one record from an open file."""

    def __init__(self, node: _FileRecordsNode, ctx, epoch: int):
        self._op, self._paths, self._compression = node.op_name, node.paths, node.compression_type
        self._shards, self._shard = node.shard or (1, 0)
        self._file = self._offset = self._record = self._position = 0
        self._handle = None
        self._lost_file = False  # the rest of the current file cannot be read

    def __next__(self):
        while self._file < len(self._paths):
            if self._lost_file:
                self._next_file()
                continue
            if self._handle is None:
                self._open()
            offset = self._offset
            if self._position % self._shards != self._shard:  # another shard's record
                try:
                    size = self._skip(self._handle)
                except _Corrupt:  # the rest of the file is lost, as when read
                    self._lost_file = True
                    self._record, self._position = self._record + 1, self._position + 1
                    continue
                if size is None:
                    self._next_file()
                    continue
                self._offset, self._record, self._position = (
                    offset + size, self._record + 1, self._position + 1)
                continue
            try:
                record, size = self._read(self._handle)
            except _Corrupt as e:
                return self._fail(e, offset)
            except OSError as e:  # e.g. a bad gzip stream: the rest is unreadable
                return self._fail(_Corrupt(f"{type(e).__name__}: {e}", True), offset)
            if record is None:
                self._next_file()
                continue
            self._offset = offset + size
            self._record += 1
            self._position += 1
            return record
        raise StopIteration

    def _fail(self, corrupt: _Corrupt, offset: int):
        path, record, position = self._paths[self._file], self._record, self._position
        self._record += 1
        self._position += 1
        if corrupt.lost_file:
            self._lost_file = True
        else:
            self._offset = self._handle.tell()
        raise DataError(self._op, position, path, record,
                        ValueError(f"{corrupt} (at byte {offset})"))

    def _open(self) -> None:
        raw = _paths.open_binary(self._paths[self._file])
        self._handle = gzip.GzipFile(fileobj=raw) if self._compression == "GZIP" else raw
        if self._offset:
            self._handle.seek(self._offset)

    def _next_file(self) -> None:
        self._close_handle()
        self._file += 1
        self._offset = self._record = 0
        self._lost_file = False

    def _close_handle(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _read(self, handle) -> tuple[bytes | None, int]:
        raise NotImplementedError

    def _skip(self, handle) -> int | None:
        """Moves past one record without returning it; its size, or None at the end."""
        record, size = self._read(handle)
        return None if record is None else size

    def snapshot(self):
        return {"file": self._file, "offset": self._offset, "record": self._record,
                "position": self._position, "lost_file": self._lost_file}

    def set_state(self, state):
        fields = states.Fields(state, self._op, ("file", "offset", "record", "position",
                                                 "lost_file"))
        checked = (fields.int("file", 0, len(self._paths)), fields.int("offset"),
                   fields.int("record"), fields.int("position"), fields.bool("lost_file"))
        self._close_handle()
        (self._file, self._offset, self._record, self._position,
         self._lost_file) = checked

    def close(self):
        self._close_handle()


# -- TFRecord: uint64 length, uint32 masked CRC-32C of the length, data, masked CRC of data.

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


def _crc32c():
    try:
        import google_crc32c
    except ImportError as e:
        raise ImportError("TFRecord files need google-crc32c for their checksums: "
                          "pip install 'jdata[io]'") from e
    return google_crc32c.value


def masked_crc(data: bytes, crc32c=None) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    crc = (crc32c or _crc32c())(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class _TFRecordIterator(_FileRecordsIterator):
    def __init__(self, node, ctx, epoch):
        super().__init__(node, ctx, epoch)
        self._crc = _crc32c()

    def _length(self, handle) -> int | None:
        """Reads a record's header: the data length, or None at the end of the file."""
        header = handle.read(_HEADER.size)
        if not header:
            return None
        if len(header) < _HEADER.size:
            raise _Corrupt("the file ends inside a record's header (truncated)", True)
        length, length_crc = _HEADER.unpack(header)
        if masked_crc(header[:8], self._crc) != length_crc:
            raise _Corrupt("the record's length fails its checksum (corrupt)", True)
        return length

    def _read(self, handle):
        length = self._length(handle)
        if length is None:
            return None, 0
        data = handle.read(length)
        footer = handle.read(_FOOTER.size)
        if len(data) < length or len(footer) < _FOOTER.size:
            raise _Corrupt(f"the file ends inside a record of {length} bytes (truncated)", True)
        if masked_crc(data, self._crc) != _FOOTER.unpack(footer)[0]:
            raise _Corrupt("the record's data fails its checksum (corrupt)", False)
        return data, _HEADER.size + length + _FOOTER.size

    def _skip(self, handle):
        length = self._length(handle)
        if length is None:
            return None
        handle.seek(length + _FOOTER.size, 1)  # the data is never read
        return _HEADER.size + length + _FOOTER.size


def write_tfrecord(path: str, records) -> int:
    """Writes ``records`` (``bytes`` each) as a TFRecord file that TensorFlow reads; returns
    how many. Local paths only."""
    crc32c = _crc32c()
    n = 0
    with open(path, "wb") as f:
        for record in records:
            record = bytes(record)
            header = struct.pack("<Q", len(record))
            f.write(header + struct.pack("<I", masked_crc(header, crc32c)))
            f.write(record + struct.pack("<I", masked_crc(record, crc32c)))
            n += 1
    return n


# -- Text lines: the line terminator (\n or \r\n) is dropped, as in tf.data.

class _TextLinesIterator(_FileRecordsIterator):
    def _read(self, handle):
        line = handle.readline()
        if not line:
            return None, 0
        size = len(line)
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        return line, size


_planner.register(TFRecordNode, iterator=_TFRecordIterator)
_planner.register(TextLinesNode, iterator=_TextLinesIterator)
