"""load: the elements of a directory that ``save``, ``cache(filename)`` or ``snapshot`` wrote
(``jdata.io.saved``), with random access. See ``jdata.load``.

A directory is untrusted input: its metadata is checked when it is loaded
(``saved.read_metadata``), each shard's record count against the metadata's,
and a record that does not decode is a ``DataError`` naming its shard and
index, as an unreadable record of any file source is.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from jdata import _planner, _probe
from jdata.io import array_record, codec, saved

_OP = "load"


@dataclasses.dataclass(frozen=True, eq=False)
class LoadNode(array_record.ArrayRecordNode):
    """See ``jdata.load``: the directory's shards (``paths``, of ``lengths`` records), each
    record decoded into an element of ``structure`` (the metadata's)."""

    structure: Any = None
    op_name: ClassVar[str] = _OP

    def compute_spec(self):
        return _probe.leading_spec(self, _OP)

    def __str__(self):
        return f"Load(files={len(self.paths)}, records={sum(self.lengths)})"


def node(path: str, metadata: dict) -> LoadNode:
    """The plan that reads the directory at ``path`` (local or a URL), whose metadata
    ``saved.read_metadata`` read and checked."""
    files = saved.shard_paths(path, metadata)
    counts = tuple(shard["records"] for shard in metadata["shards"])
    for file, expected, actual in zip(files, counts, array_record.record_counts(files, _OP)):
        if actual != expected:
            raise ValueError(
                f"{_OP}: {saved.METADATA} of {path} says {file} holds {expected} records, but "
                f"it holds {actual}: the directory was changed after it was written; write it "
                "again")
    return LoadNode(files, counts, metadata["structure"])


class _LoadReader(array_record.RecordReader):
    """Element ``i``: record ``i`` decoded."""

    def __init__(self, node: LoadNode, ctx, epoch: int):
        super().__init__(node, ctx, epoch)
        self._decode = codec.Decoder(node.structure)

    def __getitem__(self, index: int):
        elements, error = self.read_block(index, index + 1)
        if error is not None:
            raise error
        return elements[0]

    def read_block(self, lo: int, hi: int):
        records, error = super().read_block(lo, hi)
        elements: list = []
        for index, record in enumerate(records, lo):
            try:
                elements.append(self._decode(record))
            except Exception as e:  # a record written by no writer: damaged, or crafted
                return elements, self.error(index, e)
        return elements, error


_planner.register(LoadNode, reader=_LoadReader)
