"""Adds ``prefetch(AUTOTUNE)`` at the output, as tf.data does, for the autotuner to use.

With a buffer, the last stage runs on a background thread while the
training step runs. But a handoff between Python threads costs more than
many cheap pipelines take per batch, and pays only when the consumer has
work of its own: so the injected prefetch starts synchronous (buffer 0)
and the autotuner's model gives it a buffer once the measured consumer
time makes that worth it. The rule fires only for plans that produce
batches or run parallel work, and only with ``Options(autotune=True)`` and
``Options(inject_prefetch=True)`` (the defaults); a plan already ending in
``prefetch`` or ``to_global`` (which prefetches onto the devices) is left alone.
"""

from __future__ import annotations

from jdata._plan import Node, walk
from jdata.ops.options import OptionsNode
from jdata.ops.prefetch import InjectedPrefetchNode

def _worth_it(plan: Node) -> bool:
    return any(node.batching or (node.parallel and node.num_parallel_calls)
               for node in walk(plan))


def _output(plan: Node) -> Node:
    while isinstance(plan, OptionsNode):
        plan = plan.input
    return plan


class InjectPrefetchRule:
    name = "inject_prefetch"

    def apply(self, plan: Node, options) -> Node:
        output = _output(plan)
        # to_global keeps its own batches ahead, on the devices.
        if (not options.autotune or not options.inject_prefetch
                or output.op_name in ("prefetch", "to_global") or not _worth_it(plan)):
            return plan
        return InjectedPrefetchNode(plan)
