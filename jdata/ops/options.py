"""with_options: attaches Options to a pipeline. See ``Dataset.with_options``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._options import Options
from jdata._plan import Node


@dataclasses.dataclass(frozen=True, eq=False)
class OptionsNode(Node):
    """See ``Dataset.with_options``. Changes no element; read by ``Dataset.options``."""

    input: Node
    options: Options
    op_name: ClassVar[str] = "options"
    keeps_positions: ClassVar[bool] = True

    def cardinality(self) -> int:
        return self.input.cardinality()

    def random_access(self) -> bool:
        return self.input.random_access()

    def compute_spec(self):
        return self.input.element_spec()


def _reader(node: OptionsNode, ctx, epoch: int):
    return _planner.make_reader(node.input, ctx, epoch)


def _iterator(node: OptionsNode, ctx, epoch: int):
    return _planner.make_iterator(node.input, ctx, epoch)


_planner.register(OptionsNode, iterator=_iterator, reader=_reader)
