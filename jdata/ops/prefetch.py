"""prefetch: prepares elements ahead of the consumer. See ``Dataset.prefetch``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._constants import AUTOTUNE
from jdata._plan import Node
from jdata.runtime import prefetch


@dataclasses.dataclass(frozen=True, eq=False)
class PrefetchNode(Node):
    """See ``Dataset.prefetch``."""

    input: Node
    buffer_size: int
    # Set by the optimizer's injected prefetch: start synchronous, and let
    # the autotuner give it a buffer when the consumer has work to overlap.
    start_synchronous: bool = False
    op_name: ClassVar[str] = "prefetch"

    def cardinality(self) -> int:
        return self.input.cardinality()

    def compute_spec(self):
        return self.input.element_spec()


# The buffer of prefetch(AUTOTUNE) until the autotuner sizes it.
AUTOTUNE_BUFFER = 4


def _iterator(node: PrefetchNode, ctx, epoch: int):
    input_iterator = _planner.make_iterator(node.input, ctx, epoch)
    if node.buffer_size == 0:
        return input_iterator
    size = AUTOTUNE_BUFFER if node.buffer_size == AUTOTUNE else node.buffer_size
    if node.start_synchronous and node.buffer_size == AUTOTUNE and ctx.options.autotune:
        size = 0
    return prefetch.PrefetchIterator(input_iterator, size)


_planner.register(PrefetchNode, iterator=_iterator)
