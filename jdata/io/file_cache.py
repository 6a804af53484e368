"""cache(filename) and snapshot(path): elements materialized on disk by the first complete
pass and read back by later ones. See ``Dataset.cache`` and ``Dataset.snapshot``.

The directory is written as ``save`` writes one (``jdata.io.saved``):
atomically, so a pass that stops early (``take``, an exception, ``close()``,
a killed process) leaves no readable cache, and concurrent writers cannot
corrupt it. A complete directory written by a different pipeline (another
fingerprint) is an error, not silently read.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from typing import ClassVar

from jdata import _fingerprint, _planner
from jdata._constants import INFINITE
from jdata._plan import Node, Unchanged
from jdata.io import array_record, load_op, saved
from jdata.runtime import states
from jdata.runtime.iterator import Iterator


@dataclasses.dataclass(frozen=True, eq=False)
class FileCacheNode(Unchanged):
    """``directory``: the cache's path (for a snapshot, ``path/<fingerprint>``)."""

    input: Node
    directory: str
    snapshot: bool = False
    op_name: ClassVar[str] = "cache_file"
    keeps_count: ClassVar[bool] = True

    def __post_init__(self):
        # Where the pipeline is built, not at its first element.
        array_record._module("snapshot" if self.snapshot else "cache")

    def __str__(self):
        kind = "Snapshot" if self.snapshot else "CacheFile"
        return f"{kind}({self.directory})"


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fingerprint_of(node: FileCacheNode) -> str:
    """The input's fingerprint, computed once per node (it hashes in-memory sources whole)."""
    digest = _FINGERPRINTS.get(node)
    if digest is None:
        digest = _FINGERPRINTS[node] = _fingerprint.fingerprint(node.input)
    return digest


def _unhashable_hint(input_node: Node) -> str:
    """Why the fingerprint changes with every run, for the mismatch error, or ``""``."""
    why = _fingerprint.fingerprint_uncertainty(input_node)
    if why is None:
        return ""
    return (". No later run can reuse this cache either: the pipeline holds a value that "
            f"cannot be hashed, so its fingerprint is unique to this process ({why}); create "
            "that value inside the UDF, or make it picklable")


class _FileCacheIterator(Iterator):
    """Reads the directory if it is complete; else reads the input and writes it.

    State: ``{"from_cache": True, "inner": ...}`` while reading the directory,
    ``{"from_cache": False, "input": ...}`` while reading the input. A pass
    restored in the middle of writing goes on reading the input without
    writing (what it read before lives in another process's temporary
    directory); the next complete pass writes the cache.
    """

    def __init__(self, node: FileCacheNode, ctx, epoch: int):
        self._node, self._ctx, self._epoch = node, ctx, epoch
        self._writer: saved.DirectoryWriter | None = None
        metadata = self._complete_metadata()
        if metadata is not None:
            self._from_cache = True
            self._inner = _planner.make_iterator(load_op.node(node.directory, metadata),
                                                 ctx, 0)
        else:
            self._from_cache = False
            self._inner = _planner.make_iterator(node.input, ctx, epoch)
            if node.input.cardinality() != INFINITE:  # an endless pass never completes
                self._writer = saved.DirectoryWriter(
                    node.directory, _fingerprint_of(node), "snapshot" if node.snapshot else "cache")

    def _complete_metadata(self) -> dict | None:
        metadata = saved.read_metadata(self._node.directory)
        if metadata is not None and metadata["fingerprint"] != _fingerprint_of(self._node):
            raise ValueError(
                f"cache: {self._node.directory} holds the elements of a different pipeline "
                f"(fingerprint {metadata['fingerprint'][:12]}..., this one "
                f"{_fingerprint_of(self._node)[:12]}...); delete it or cache to another "
                f"filename{_unhashable_hint(self._node.input)}")
        return metadata

    def __next__(self):
        try:
            element = next(self._inner)
        except StopIteration:
            self._finish()
            raise
        if self._writer is not None:
            try:
                self._writer.write(element)
            except BaseException:
                self._abandon()
                raise
        return element

    def _finish(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.publish()

    def _abandon(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.abandon()

    def snapshot(self):
        return {"from_cache": self._from_cache, "inner": self._inner.snapshot()}

    def set_state(self, state):
        op = "snapshot" if self._node.snapshot else "cache"
        from_cache = states.Fields(state, op, ("from_cache", "inner")).bool("from_cache")
        self._abandon()  # elements before the restored position are not in this writer
        if from_cache != self._from_cache:
            self._inner.close()
            if from_cache:
                metadata = self._complete_metadata()
                if metadata is None:
                    raise ValueError(f"cache: the state reads {self._node.directory}, which "
                                     "is gone")
                self._inner = _planner.make_iterator(
                    load_op.node(self._node.directory, metadata), self._ctx, 0)
            else:
                self._inner = _planner.make_iterator(self._node.input, self._ctx, self._epoch)
            self._from_cache = from_cache
        self._inner.set_state(state["inner"])

    def close(self):
        self._abandon()
        self._inner.close()


def snapshot_directory(path: str, input_node: Node) -> str:
    return os.path.join(os.fspath(path), _fingerprint.fingerprint(input_node))


_planner.register(FileCacheNode, iterator=_FileCacheIterator)
