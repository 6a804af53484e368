"""prefetch: prepares elements ahead of the consumer. See ``Dataset.prefetch``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jdata import _planner
from jdata._constants import AUTOTUNE
from jdata._plan import Node, Unchanged
from jdata.runtime import opstats, parallel, prefetch


@dataclasses.dataclass(frozen=True, eq=False)
class PrefetchNode(Unchanged):
    """See ``Dataset.prefetch``."""

    input: Node
    buffer_size: int
    op_name: ClassVar[str] = "prefetch"
    keeps_positions: ClassVar[bool] = True
    tunable_buffer: ClassVar[bool] = True
    keeps_count: ClassVar[bool] = True


@dataclasses.dataclass(frozen=True, eq=False)
class InjectedPrefetchNode(PrefetchNode):
    """The ``prefetch(AUTOTUNE)`` the optimizer adds at the output (``inject_prefetch``).

    It starts synchronous (a thread handoff only pays when the consumer has
    work of its own to overlap), and the autotuner gives it a buffer when
    that pays. Its state is the same as a ``prefetch``'s.
    """

    buffer_size: int = AUTOTUNE

    def __str__(self):
        return "Prefetch(buffer_size=AUTOTUNE, injected: synchronous until tuned)"


# The buffer of prefetch(AUTOTUNE) until the autotuner sizes it.
AUTOTUNE_BUFFER = 4


def _iterator(node: PrefetchNode, ctx, epoch: int):
    input_iterator = _planner.make_iterator(node.input, ctx, epoch)
    if node.buffer_size == 0:
        return input_iterator
    size = AUTOTUNE_BUFFER if node.buffer_size == AUTOTUNE else node.buffer_size
    if (node.buffer_size == AUTOTUNE and ctx.options.autotune
            and isinstance(opstats.counted(input_iterator), parallel.Pooled)):
        # Right over a parallel stage, which computes ahead on its own workers: a
        # thread handoff per element pays only when the consumer has work of its own
        # to overlap, so it starts synchronous, as the injected prefetch does, and the
        # autotuner gives it a buffer when that pays (5% of nlp's throughput, measured).
        size = 0
    return prefetch.PrefetchIterator(input_iterator, size)


def _injected_iterator(node: InjectedPrefetchNode, ctx, epoch: int):
    size = 0 if ctx.options.autotune else AUTOTUNE_BUFFER
    return prefetch.PrefetchIterator(_planner.make_iterator(node.input, ctx, epoch), size)


_planner.register(PrefetchNode, iterator=_iterator)
_planner.register(InjectedPrefetchNode, iterator=_injected_iterator)
