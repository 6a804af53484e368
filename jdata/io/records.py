"""from_tfrecord and from_text_lines: records of files read in order, with exact state.

Both read their files one after the other; the state is the file, the byte
offset of the next record in it, and counters, so a restore seeks there
instead of reading again. A corrupt record raises ``jdata.DataError`` naming
the file, the record and its byte offset; the iterator then goes on with the
next record it can find, so ``ignore_errors()`` skips exactly the bad
records. Where the corruption hides where the next record starts (a corrupt
length, a truncated file, a damaged GZIP stream), the rest of the file is
lost with it: the error says how many bytes were skipped unread, and
iteration goes on with the next file. A file that cannot be opened or read
(deleted, no permission, too many open files) raises its ``OSError``.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable
from typing import Callable, ClassVar

from jdata import _planner
from jdata._errors import DataError
from jdata._extras import require
from jdata._plan import Node, Unchanged
from jdata._spec import STRING, TensorSpec
from jdata.io._streams import Corrupt, open_stream
from jdata.runtime import states
from jdata.runtime.iterator import Iterator

COMPRESSIONS = ("", "GZIP")


@dataclasses.dataclass(frozen=True, eq=False)
class _FileRecordsNode(Node):
    paths: tuple
    compression_type: str = ""
    reads_shards: ClassVar[bool] = True

    def compute_spec(self):
        return TensorSpec((), STRING)

    def sharded(self, num_shards: int, index: int) -> Node:
        return ShardedRecordsNode(self, num_shards, index)

    def __str__(self):
        gz = f", compression_type={self.compression_type!r}" if self.compression_type else ""
        return f"{type(self).__name__.removesuffix('Node')}(files={len(self.paths)}{gz})"


@dataclasses.dataclass(frozen=True, eq=False)
class TFRecordNode(_FileRecordsNode):
    """See ``jdata.from_tfrecord``."""

    op_name: ClassVar[str] = "from_tfrecord"


@dataclasses.dataclass(frozen=True, eq=False)
class TextLinesNode(_FileRecordsNode):
    """See ``jdata.from_text_lines``."""

    op_name: ClassVar[str] = "from_text_lines"


@dataclasses.dataclass(frozen=True, eq=False)
class ShardedRecordsNode(Unchanged):
    """A ``shard`` pushed into the TFRecord or text-lines source below it (the optimizer's
    ``pushdown``): the reader passes over other shards' records (a TFRecord's are
    seeked past, never read). Its elements are the ``shard``'s."""

    input: _FileRecordsNode
    num_shards: int
    index: int
    op_name: ClassVar[str] = "shard"

    def __str__(self):
        return f"{self.input}, read as shard {self.index} of {self.num_shards}"


class _FileRecordsIterator(Iterator):
    """Records of ``paths`` in order; the subclass reads (or skips) one record of a stream.

    With a pushed-down shard, other shards' records are skipped, not read; a
    skip that finds the rest of the file lost raises that loss all the same
    (it loses this shard's records in the file too), as an unpushed ``shard``
    does.
    """

    def __init__(self, node: _FileRecordsNode, ctx, epoch: int, shard: tuple = (1, 0)):
        self._op, self._paths, self._compression = node.op_name, node.paths, node.compression_type
        self._shards, self._shard = shard
        self._file = self._offset = self._record = self._position = 0
        self._stream = None
        self._lost_file = False  # the rest of the current file cannot be read

    def __next__(self):
        while self._file < len(self._paths):
            if self._lost_file:
                self._next_file()
                continue
            ours = self._position % self._shards == self._shard
            offset = self._offset
            try:
                if self._stream is None:
                    self._stream = open_stream(self._paths[self._file], self._compression, offset)
                record, size = (self._read if ours else self._skip)(self._stream)
            except Corrupt as e:
                raise self._failed(e, offset)
            if size is None:  # the end of the file
                self._next_file()
                continue
            self._offset, self._record, self._position = (
                offset + size, self._record + 1, self._position + 1)
            if ours:
                return record
        raise StopIteration

    def _failed(self, corrupt: Corrupt, offset: int) -> DataError:
        """The error of the record at ``offset``; the iterator moves past it (and past the
        rest of the file if that is lost)."""
        path, record, position = self._paths[self._file], self._record, self._position
        self._record, self._position = record + 1, position + 1
        unread = None
        if corrupt.lost_file:
            self._lost_file = True
            unread = 0 if self._stream is None else self._stream.unread_bytes(offset)
        else:
            self._offset = self._stream.pos
        return DataError(self._op, position, path, record,
                         ValueError(f"{corrupt} (at byte {offset})"), unread)

    def _next_file(self) -> None:
        self._close_stream()
        self._file += 1
        self._offset = self._record = 0
        self._lost_file = False

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _read(self, stream) -> tuple[bytes | None, int | None]:
        """One record and its size in the file; ``(None, None)`` at the end of the file."""
        raise NotImplementedError

    def _skip(self, stream) -> tuple[None, int | None]:
        """Moves past one record without returning it: ``(None, its size)``, or
        ``(None, None)`` at the end of the file."""
        return None, self._read(stream)[1]

    def snapshot(self):
        return {"file": self._file, "offset": self._offset, "record": self._record,
                "position": self._position, "lost_file": self._lost_file}

    def set_state(self, state):
        fields = states.Fields(state, self._op, ("file", "offset", "record", "position",
                                                 "lost_file"))
        checked = (fields.int("file", 0, len(self._paths)), fields.int("offset"),
                   fields.int("record"), fields.int("position"), fields.bool("lost_file"))
        self._close_stream()
        (self._file, self._offset, self._record, self._position,
         self._lost_file) = checked

    def close(self):
        self._close_stream()


# -- TFRecord: uint64 length, uint32 masked CRC-32C of the length, data, masked CRC of data.

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


def checksums() -> Callable[[bytes], int]:
    """``google_crc32c.value``, the CRC-32C of TFRecord checksums."""
    return require("google_crc32c", "TFRecord files (their checksums)").value


def masked_crc(data: bytes, crc32c=None) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    crc = (crc32c or checksums())(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class _TFRecordIterator(_FileRecordsIterator):
    def __init__(self, node, ctx, epoch, shard=(1, 0)):
        super().__init__(node, ctx, epoch, shard)
        self._crc = checksums()

    def _length(self, stream) -> int | None:
        """Reads a record's header: the data length, or None at the end of the file."""
        header = stream.read(_HEADER.size)
        if not header:
            return None
        if len(header) < _HEADER.size:
            raise Corrupt("the file ends inside a record's header (truncated)", True)
        length, length_crc = _HEADER.unpack(header)
        if masked_crc(header[:8], self._crc) != length_crc:
            raise Corrupt("the record's length fails its checksum (corrupt)", True)
        return length

    def _read(self, stream):
        length = self._length(stream)
        if length is None:
            return None, None
        data = stream.read_declared(length)  # at most what the file holds, whatever it says
        footer = stream.read(_FOOTER.size)
        if len(data) < length or len(footer) < _FOOTER.size:
            raise _truncated(length)
        if masked_crc(data, self._crc) != _FOOTER.unpack(footer)[0]:
            raise Corrupt("the record's data fails its checksum (corrupt)", False)
        return data, _HEADER.size + length + _FOOTER.size

    def _skip(self, stream):
        length = self._length(stream)
        if length is None:
            return None, None
        if not stream.skip(length + _FOOTER.size):  # the data is never read
            raise _truncated(length)
        return None, _HEADER.size + length + _FOOTER.size


def _truncated(length: int) -> Corrupt:
    return Corrupt(f"the file ends inside a record of {length} bytes (truncated, or the "
                   "length is corrupt)", True)


def write_tfrecord(path: str, records: Iterable[bytes]) -> int:
    """Writes ``records`` (``bytes`` each) as a TFRecord file that TensorFlow reads; returns
    how many. Local paths only."""
    crc32c = checksums()
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
    def _read(self, stream):
        line = stream.readline()
        if not line:
            return None, None
        size = len(line)
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        return line, size


_ITERATORS = {TFRecordNode: _TFRecordIterator, TextLinesNode: _TextLinesIterator}


def _sharded_iterator(node: ShardedRecordsNode, ctx, epoch: int):
    source = node.input
    return _ITERATORS[type(source)](source, ctx, epoch, (node.num_shards, node.index))


_planner.register(TFRecordNode, iterator=_TFRecordIterator)
_planner.register(TextLinesNode, iterator=_TextLinesIterator)
_planner.register(ShardedRecordsNode, iterator=_sharded_iterator)
