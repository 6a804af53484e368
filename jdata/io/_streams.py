"""Files read forward from an offset, plain or GZIP, for the record readers
(``jdata.io.records``).

A stream never reads past what the file holds: a length read from a
corrupt (or crafted) header cannot make it allocate more than the file's
size (plain files) or more than the data really there (GZIP, read in
chunks). Damage to a compressed stream (a bit flip, a truncation) is a
``Corrupt`` that loses the rest of the file; any other ``OSError`` is the
environment's (a disk, a network) and propagates as it is.
"""

from __future__ import annotations

import io
import zlib

from jdata.io import _paths

# GZIP data is read in chunks of this many bytes, so a huge length costs only
# the bytes really there.
_CHUNK_BYTES = 1 << 20
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around deflate data


class Corrupt(Exception):
    """Unreadable data; ``lost_file``: where the next record starts is lost with it."""

    def __init__(self, reason: str, lost_file: bool):
        super().__init__(reason)
        self.lost_file = lost_file


def open_stream(path: str, compression: str, offset: int):
    """The file at ``path``, positioned at ``offset`` (of its uncompressed data)."""
    raw = _paths.open_binary(path)
    try:
        size = raw.seek(0, io.SEEK_END)
        raw.seek(0)
        stream = GzipStream(raw, size) if compression == "GZIP" else PlainStream(raw, size)
        if offset and not stream.skip(offset):
            raise Corrupt(f"the file ends before byte {offset} of the saved position", True)
    except BaseException:
        raw.close()
        raise
    return stream


class PlainStream:
    """An uncompressed file; ``pos`` is the offset of the next byte to read.

    ``read(n)`` is for sizes the format fixes (a header), ``read_declared(n)``
    for sizes the file declares, which may be anything.
    """

    def __init__(self, raw, size: int):
        self._raw, self._size = raw, size
        # As they are (a call per record less): a line ends at the end of the file at the
        # latest, and a fixed size is small.
        self.readline, self.read = raw.readline, raw.read

    @property
    def pos(self) -> int:
        return self._raw.tell()

    def read_declared(self, n: int) -> bytes:
        """Up to ``n`` bytes, ``n`` read from the file: no more than the file has left."""
        if n > _CHUNK_BYTES:
            n = min(n, self._size - self._raw.tell())
        return self._raw.read(n)

    def skip(self, n: int) -> bool:
        """Moves ``n`` bytes on without reading them; False if the file ends first."""
        return self._raw.seek(n, io.SEEK_CUR) <= self._size

    def unread_bytes(self, offset: int) -> int:
        """Bytes of the file from ``offset`` (where the damage starts) to its end."""
        return max(0, self._size - offset)

    def close(self) -> None:
        self._raw.close()


class GzipStream:
    """A GZIP file (one member or several), decompressed as it is read; ``pos`` counts
    uncompressed bytes.

    Decoded with ``zlib`` here rather than ``gzip.GzipFile``, whose read-ahead
    hides where decoding failed: this stream knows which compressed bytes
    produced nothing (``unread_bytes``). Damage to the compressed data (a bit
    flip, a truncation, a bad checksum) is a ``Corrupt`` losing the rest of
    the file: deflate cannot resume past it.
    """

    def __init__(self, raw, size: int):
        self._raw, self._size = raw, size
        self._inflate = None  # between members (an empty file has none)
        self._input = b""  # compressed bytes read from the file, not yet decompressed
        self._input_at = 0  # the file offset of self._input[0]
        self._out, self._at = b"", 0  # decompressed bytes; those from self._at on are unread
        self._out_pos = 0  # the uncompressed offset of self._out[0]

    @property
    def pos(self) -> int:
        return self._out_pos + self._at

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes: fewer at the end of the data (which is what bounds ``n``)."""
        if len(self._out) - self._at < n:
            self._gather(lambda pieces, have: have >= n)
        at = self._at
        data = self._out[at:at + n]
        self._at = at + len(data)
        return data

    read_declared = read  # decompressed a chunk at a time: bounded by the data there

    def readline(self) -> bytes:
        at = self._at
        end = self._out.find(b"\n", at) + 1
        if not end:
            self._gather(lambda pieces, have: b"\n" in pieces[-1])
            at = self._at
            end = self._out.find(b"\n", at) + 1 or len(self._out)
        line = self._out[at:end]
        self._at = end
        return line

    def skip(self, n: int) -> bool:
        while len(self._out) - self._at < n:
            n -= len(self._out) - self._at
            self._out_pos += len(self._out)
            chunk = self._decompress()
            self._out, self._at = chunk or b"", 0
            if chunk is None:
                return False
        self._at += n
        return True

    def _gather(self, enough) -> None:
        """Decompresses until ``enough(pieces, bytes buffered)`` or the end of the data."""
        pieces = [self._out[self._at:]]
        have = len(pieces[0])
        while not enough(pieces, have):
            chunk = self._decompress()
            if chunk is None:
                break
            pieces.append(chunk)
            have += len(chunk)
        self._out_pos += self._at
        self._out, self._at = b"".join(pieces), 0

    def unread_bytes(self, offset: int) -> int:
        """Compressed bytes from which nothing was delivered (``offset``, uncompressed, is
        not used): the file's rest from the block where decoding failed."""
        return max(0, self._size - self._input_at)

    def _decompress(self) -> bytes | None:
        """Up to ``_CHUNK_BYTES`` more bytes of output; None at the end of the data."""
        if (self._inflate is None or self._inflate.eof) and not self._next_member():
            return None
        if not self._input and not self._read_input():
            raise Corrupt("the compressed data is truncated (the file ends inside it)", True)
        try:
            out = self._inflate.decompress(self._input, _CHUNK_BYTES)
        except zlib.error as e:
            raise Corrupt(f"the compressed data is corrupt ({e})", True) from e
        # At a member's end its remaining input is in unused_data (unconsumed_tail may
        # still hold a stale copy of it).
        tail = b"" if self._inflate.eof else self._inflate.unconsumed_tail
        self._input_at += len(self._input) - len(tail)
        self._input = tail
        return out

    def _next_member(self) -> bool:
        """Starts decoding the next member; False if none follows (zero bytes after the
        last are padding, as ``gzip`` reads them)."""
        if self._inflate is not None:  # the bytes after its end belong to the next member
            rest = self._inflate.unused_data
            self._input, self._input_at = rest + self._input, self._input_at - len(rest)
        while True:
            data = self._input.lstrip(b"\0")
            self._input_at += len(self._input) - len(data)
            self._input = data
            if data:
                self._inflate = zlib.decompressobj(_GZIP_WBITS)
                return True
            if not self._read_input():
                return False

    def _read_input(self) -> bool:
        self._input = self._raw.read(_CHUNK_BYTES)
        return bool(self._input)

    def close(self) -> None:
        self._raw.close()
