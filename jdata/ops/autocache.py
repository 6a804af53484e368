"""autocache: a candidate cache point for the data service. See ``Dataset.autocache``.

The node is the identity: it changes no element, position or count, and its
iterator and reader are its input's own, so a local pipeline pays nothing
for it. What it marks is read by ``jdata.service.autocache``: the plan below
it (``node.input``) is the prefix that a cache at the marker would hold.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._plan import Node, Unchanged

# What ``mode`` may force; None lets the service choose by measuring epoch 1.
MODES = ("compute", "marker", "output")


@dataclasses.dataclass(frozen=True, eq=False)
class AutocacheNode(Unchanged):
    """See ``Dataset.autocache``."""

    input: Node
    mode: str | None = None
    op_name: ClassVar[str] = "autocache"
    keeps_positions: ClassVar[bool] = True
    keeps_count: ClassVar[bool] = True
    keeps_access: ClassVar[bool] = True

    def __str__(self):
        mode = "chosen by the service" if self.mode is None else repr(self.mode)
        return f"Autocache(mode={mode})"


def _reader(node: AutocacheNode, ctx, epoch: int):
    return _planner.make_reader(node.input, ctx, epoch)


def _iterator(node: AutocacheNode, ctx, epoch: int):
    return _planner.make_iterator(node.input, ctx, epoch)


_planner.register(AutocacheNode, iterator=_iterator, reader=_reader)
