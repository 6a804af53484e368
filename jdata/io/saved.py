"""Directories of saved elements: ``save``/``load``, ``cache(filename)`` and ``snapshot``.

A directory holds ArrayRecord shards (``data-00000.array_record``...) of
records in ``jdata.io.codec``'s format, and ``jdata_metadata.json``: the
element structure, the element spec as text, the writing pipeline's
fingerprint, the element count and the shards. Writers fill a temporary
directory beside the target and rename it into place once complete, so a
directory at the target is always complete: an interrupted pass leaves
only a ``<name>.tmp-*`` directory (removed when the writer can clean up),
and of concurrent writers the first to finish wins, the others discard
their copies.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import weakref

from jdata import _spec
from jdata.io import _paths, codec

METADATA = "jdata_metadata.json"
FORMAT = "jdata.save/1"
_SHARD_BYTES = 256 << 20
_LOGGER = logging.getLogger("jdata")


def _local(path, op: str) -> str:
    path = os.fspath(path)
    if _paths.is_url(path):
        raise ValueError(f"{op}: {path!r}: jdata writes to local directories only, so far")
    return _paths.strip_file_scheme(path)


class DirectoryWriter:
    """Writes elements to a temporary directory; ``publish`` renames it to ``final``."""

    def __init__(self, final: str, fingerprint: str, op: str):
        from jdata.io.array_record import _module

        self._module = _module(op)
        self.final, self._op = os.path.abspath(_local(final, op)), op
        parent = os.path.dirname(self.final)
        os.makedirs(parent, exist_ok=True)
        self._tmp = tempfile.mkdtemp(prefix=os.path.basename(self.final) + ".tmp-", dir=parent)
        # A writer dropped unfinished (an iterator garbage-collected mid-pass) leaves nothing.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._tmp, True)
        self._fingerprint, self._spec = fingerprint, "unknown (no elements)"
        self._shards: list[dict] = []
        self._writer = None
        self._shard_bytes = 0
        self._structure, self._first = None, True
        self.count = self.bytes = 0

    def _rotate(self) -> None:
        self._close_shard()
        name = f"data-{len(self._shards):05d}.array_record"
        self._writer = self._module.ArrayRecordWriter(os.path.join(self._tmp, name),
                                                      "group_size:1")
        self._shards.append({"file": name, "records": 0})
        self._shard_bytes = 0

    def _close_shard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def write(self, element) -> None:
        structure = codec.describe(element)
        if self._first:
            self._structure, self._first = structure, False
            self._spec = str(_spec.spec_of(element))
        elif structure != self._structure:
            raise ValueError(f"{self._op}: element {self.count} has structure {structure}, "
                             f"but the first had {self._structure}; every element must have "
                             "the same structure")
        data = codec.encode(element)
        if self._writer is None or self._shard_bytes >= _SHARD_BYTES:
            self._rotate()
        self._writer.write(data)
        self._shards[-1]["records"] += 1
        self._shard_bytes += len(data)
        self.count += 1
        self.bytes += len(data)

    def publish(self) -> bool:
        """Completes the directory and moves it into place; False if another writer won."""
        if self._writer is None and not self._shards:
            self._rotate()  # an empty dataset: one empty shard
        self._close_shard()
        metadata = {"format": FORMAT, "structure": self._structure, "element_spec": self._spec,
                    "fingerprint": self._fingerprint, "cardinality": self.count,
                    "bytes": self.bytes, "shards": self._shards}
        with open(os.path.join(self._tmp, METADATA), "w") as f:
            json.dump(metadata, f)
        try:
            os.rename(self._tmp, self.final)
        except OSError:  # a complete directory is there already (a concurrent writer)
            self._cleanup()
            return False
        self._cleanup.detach()
        return True

    def abandon(self) -> None:
        self._close_shard()
        self._cleanup()


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}" if _paths.is_url(directory) else os.path.join(
        directory, name)


def read_metadata(path: str) -> dict | None:
    """The metadata of a complete directory (local or any fsspec URL), or None if there is
    none at ``path``; checked, since anyone may have edited it."""
    try:
        with _paths.open_binary(_join(path, METADATA)) as f:
            metadata = json.loads(f.read())
    except FileNotFoundError:
        return None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise ValueError(f"{path}: {METADATA} is not jdata's format {FORMAT!r}")
    _check(metadata, _join(path, METADATA))
    return metadata


def _check(metadata: dict, where: str) -> None:
    """Fails on what a writer never writes: shards outside the directory, counts that are
    not counts, an element structure that is not one."""
    fix = "the directory was changed after it was written; write it again"
    shards = metadata.get("shards")
    if not isinstance(shards, list):
        raise ValueError(f"{where}: 'shards' is {str(shards)[:80]}, not a list ({fix})")
    for shard in shards:
        name = shard.get("file") if isinstance(shard, dict) else None
        if not _is_file_name(name):
            raise ValueError(f"{where} names the shard {str(name)[:200]!r}, which is not a file "
                             f"of the directory: shards are read only from there ({fix})")
        if not _is_count(shard.get("records")):
            raise ValueError(f"{where}: shard {name!r} has {shard.get('records')!r} records "
                             f"({fix})")
    if metadata.get("cardinality") != sum(shard["records"] for shard in shards):
        raise ValueError(f"{where}: 'cardinality' is {metadata.get('cardinality')!r}, but its "
                         f"shards hold {sum(shard['records'] for shard in shards)} records ({fix})")
    try:
        codec.leaf_count(metadata.get("structure"))
    except ValueError as e:
        raise ValueError(f"{where}: 'structure': {e} ({fix})") from None


def _is_file_name(name) -> bool:
    return (isinstance(name, str) and name not in ("", ".", "..")
            and not any(c in name for c in "/\\\0"))


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def shard_paths(path: str, metadata: dict) -> tuple:
    """The paths of a checked directory's shards, each inside the directory."""
    return tuple(_join(path, shard["file"]) for shard in metadata["shards"])


def save(iterator, path: str, fingerprint: str) -> dict:
    """Writes every element of ``iterator`` to a new directory ``path``; returns a summary."""
    if os.path.exists(_local(path, "save")):
        raise FileExistsError(f"save: {path} exists; choose a new path or delete it first")
    writer = DirectoryWriter(path, fingerprint, "save")
    started = last_report = time.monotonic()
    try:
        for element in iterator:
            writer.write(element)
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                _LOGGER.info("save: %d elements (%.1f MB) written to %s, %.0f elements/s",
                             writer.count, writer.bytes / 1e6, path,
                             writer.count / (last_report - started))
    except BaseException:
        writer.abandon()
        raise
    if not writer.publish():
        raise FileExistsError(f"save: another writer created {path} first")
    return {"path": writer.final, "elements": writer.count, "bytes": writer.bytes,
            "seconds": time.monotonic() - started}
