"""Helpers rules share: rebuilding a node over new inputs, bottom-up rewrites, moving an
op below others, naming composed UDFs, what declared UDFs and element sizes allow."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from jdata import _probe, _tree
from jdata._declare import traits_of
from jdata._plan import Node, is_node_collection
from jdata._spec import TensorSpec
from jdata.ops.map import MapNode
from jdata.runtime import part_times
from jdata.runtime.stats import element_bytes as _measured_bytes


@dataclasses.dataclass(frozen=True)
class Rewritten:
    """A rule's new plan with notes for ``explain()`` (e.g. what it measured)."""

    plan: Node
    notes: tuple[str, ...] = ()


def with_inputs(node: Node, rewrite: Callable[[Node], Node]) -> Node:
    """``node`` with ``rewrite`` applied to each input; ``node`` itself if none changed."""
    changes = {}
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        if isinstance(value, Node):
            new = rewrite(value)
        elif not is_node_collection(value):  # e.g. a source's data: never scanned
            continue
        elif isinstance(value, dict):
            new = {k: rewrite(v) for k, v in value.items()}
        else:
            new = type(value)(rewrite(v) for v in value)
        if _changed(value, new):
            changes[field.name] = new
    return dataclasses.replace(node, **changes) if changes else node


def _changed(old, new) -> bool:
    if isinstance(old, Node):
        return old is not new
    values = old.values() if isinstance(old, dict) else old
    new_values = new.values() if isinstance(new, dict) else new
    return any(a is not b for a, b in zip(values, new_values))


def bottom_up(plan: Node, rewrite: Callable[[Node], Node]) -> Node:
    """Applies ``rewrite`` to every node, inputs first; unchanged subtrees stay the same objects.

    Unchanged nodes keep their identity, so a rule that fires nowhere
    returns ``plan`` itself.
    """
    def visit(node: Node) -> Node:
        return rewrite(with_inputs(node, visit))

    return visit(plan)


def sink(node: Node, may_pass: Callable[[Node, Node], bool]) -> Node:
    """Moves ``node`` below its input while ``may_pass(node, input)`` holds.

    Both are single-input ops (``input`` fields); each crossed op keeps its
    parameters and reads ``node``'s output instead of its old input.
    """
    below = node.input
    if not may_pass(node, below):
        return node
    moved = sink(dataclasses.replace(node, input=below.input), may_pass)
    return dataclasses.replace(below, input=moved)


def udf_name(fn) -> str:
    """How plans print a UDF (its qualified name), for names of composed UDFs."""
    return getattr(fn, "__qualname__", type(fn).__name__)


class Chain:
    """UDFs called in order on one element, with the maps' calling convention between
    them (tuples unpacked, outputs normalized): a fused ``random_map``'s UDF. ``parts``
    are ``(fn, random)`` pairs; the random ones take the rows of the element's stacked
    keys in order. Picklable where its UDFs are (worker processes)."""

    def __init__(self, parts: tuple[tuple[Any, bool], ...]):
        self.parts = parts
        self.__qualname__ = ".".join(udf_name(fn) for fn, _ in reversed(parts))
        self.op_parts = tuple(("random_map" if random else "map", fn) for fn, random in parts)

    def __call__(self, *args):
        *element, keys = args
        keys = np.asarray(keys).reshape(-1, 2)
        value: Any = element[0] if len(element) == 1 else tuple(element)
        if part_times.sampled():  # Cedar's planner profiles: each part timed
            return self._timed(value, keys)
        row = 0
        for fn, random in self.parts:
            extra = (keys[row],) if random else ()
            row += random
            value = fn(*value, *extra) if type(value) is tuple else fn(value, *extra)
            value = _tree.normalize(value, "random_map")
        return value

    def _timed(self, value: Any, keys: np.ndarray) -> Any:
        seconds, outputs, row = [], [], 0
        for fn, random in self.parts:
            extra = (keys[row],) if random else ()
            row += random
            start = time.perf_counter()
            value = fn(*value, *extra) if type(value) is tuple else fn(value, *extra)
            value = _tree.normalize(value, "random_map")
            seconds.append(time.perf_counter() - start)
            outputs.append(value)
        part_times.record(self, seconds, outputs)
        return value


def pointwise_map(node: Node) -> bool:
    """True for a ``map`` whose UDF is declared pointwise (``jdata.declare``)."""
    if type(node) is not MapNode:
        return False
    traits = traits_of(node.fn)
    return traits is not None and traits.pointwise


def element_bytes(node: Node) -> float | None:
    """Bytes per element: from the spec if its shapes are fixed, else measured on the
    first elements (images of varied sizes); ``None`` if neither works."""
    try:
        leaves = _tree.leaves(node.element_spec())
        if all(isinstance(leaf, TensorSpec) and None not in leaf.shape for leaf in leaves):
            return float(sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize
                             for leaf in leaves))
        elements = _probe.first_elements(node, node.op_name)
        return float(np.mean([_measured_bytes(e) for e in elements]))
    except Exception:  # no evidence, no move
        return None
