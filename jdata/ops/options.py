"""with_options: attaches Options to a pipeline. See ``Dataset.with_options``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._options import Options
from jdata._plan import Node, Unchanged


@dataclasses.dataclass(frozen=True, eq=False)
class OptionsNode(Unchanged):
    """See ``Dataset.with_options``. Changes no element; read by ``Dataset.options``."""

    input: Node
    options: Options
    op_name: ClassVar[str] = "options"
    keeps_positions: ClassVar[bool] = True
    keeps_count: ClassVar[bool] = True
    keeps_access: ClassVar[bool] = True


def _reader(node: OptionsNode, ctx, epoch: int):
    return _planner.make_reader(node.input, ctx, epoch)


def _iterator(node: OptionsNode, ctx, epoch: int):
    return _planner.make_iterator(node.input, ctx, epoch)


_planner.register(OptionsNode, iterator=_iterator, reader=_reader)
