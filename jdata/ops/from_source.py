"""from_source: any random-access source. See ``jdata.from_source``."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from jdata import _planner, _probe
from jdata._plan import Node
from jdata.runtime.values import frozen


@dataclasses.dataclass(frozen=True, eq=False)
class FromSourceNode(Node):
    """See ``jdata.from_source``."""

    source: Any
    op_name: ClassVar[str] = "from_source"
    spec_inferred: ClassVar[bool] = True

    def cardinality(self) -> int:
        return len(self.source)

    def random_access(self) -> bool:
        return True

    def compute_spec(self):
        return _probe.leading_spec(self, "from_source")

    def __str__(self):
        return f"FromSource({type(self.source).__name__}, length={len(self.source)})"


class _FromSourceReader:
    """The source's elements, ``frozen``: the source keeps them for the next epoch."""

    def __init__(self, node: FromSourceNode, ctx, epoch: int):
        self._source = node.source
        self._len = len(node.source)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int):
        return frozen(self._source[index])


_planner.register(FromSourceNode, reader=_FromSourceReader)
