"""Cedar's reordering, driven by what UDFs declare (``jdata.declare``) and by their specs.

- A *selection* that shrinks the element (a crop: fewer bytes out than in,
  by the element specs, or measured on the first elements when sizes
  vary) moves before the
  *pointwise* maps it follows, so they compute on the crop only (e.g. crop
  before float conversion). Pointwise maps keep shapes and compute each
  value alone, so the result is the same; the selection reads the same
  positions and, in a ``random_map``, the same keys (maps keep positions).
- A ``filter`` whose declared ``reads`` a preceding ``map`` does not
  ``write`` (for dict elements) moves before it, so the map runs only on
  the elements kept; the filter sees the same field values.

Only plain ``map``s are crossed (a ``random_map``'s keys follow positions,
which a filter changes). A UDFError then reports the position in the
reordered stream.
"""

from __future__ import annotations

import numpy as np

from jdata import _tree
from jdata._declare import traits_of
from jdata._plan import Node
from jdata._spec import TensorSpec
from jdata.ops.filter import FilterNode
from jdata.ops.map import MapNode
from jdata.ops.random_map import RandomMapNode
from jdata.optimize.rewrite import bottom_up, sink
from jdata.runtime import probe
from jdata.runtime.stats import element_bytes


def _element_bytes(node: Node) -> float | None:
    """Bytes per element: from the spec if its shapes are fixed, else measured on the
    first elements (images of varied sizes); ``None`` if neither works."""
    try:
        leaves = _tree.leaves(node.element_spec())
        if all(isinstance(leaf, TensorSpec) and None not in leaf.shape for leaf in leaves):
            return float(sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize
                             for leaf in leaves))
        elements = probe.first_elements(node, node.op_name)
        return float(np.mean([element_bytes(e) for e in elements]))
    except Exception:  # no evidence, no move
        return None


def _pointwise_map(node: Node) -> bool:
    traits = traits_of(getattr(node, "fn", None))
    return type(node) is MapNode and traits is not None and traits.pointwise


def _shrinking_selection(node: Node) -> bool:
    traits = traits_of(getattr(node, "fn", None))
    if type(node) not in (MapNode, RandomMapNode) or traits is None or not traits.selection:
        return False
    after, before = _element_bytes(node), _element_bytes(node.input)
    return after is not None and before is not None and after < before


def _filter_independent_of(filter_node: FilterNode, map_node: Node) -> bool:
    reads = getattr(traits_of(filter_node.predicate), "reads", None)
    writes = getattr(traits_of(getattr(map_node, "fn", None)), "writes", None)
    return (type(map_node) is MapNode and reads is not None and writes is not None
            and not reads & writes)


class ReorderRule:
    name = "reorder"

    def apply(self, plan: Node, options) -> Node:
        def move(node: Node) -> Node:
            # The cheap check first: measuring sizes may run the pipeline's first elements.
            if _pointwise_map(getattr(node, "input", None)) and _shrinking_selection(node):
                return sink(node, lambda _, below: _pointwise_map(below))
            if type(node) is FilterNode:
                return sink(node, _filter_independent_of)
            return node

        return bottom_up(plan, move)
