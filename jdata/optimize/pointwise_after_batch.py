"""Moves pointwise maps that grow the elements after the ``batch`` they precede:
``map(normalize).batch(64)`` becomes ``batch(64).map(normalize)``.

``jdata.ops.image``'s pointwise kernels (``to_float``, ``normalize``,
``convert_image_dtype``)
compute each value alone, keep shapes and take a stack of elements as well
as one, so they commute with batching. Where they grow the elements
(``uint8`` images to ``float32``), batching first stacks a quarter of the
bytes, and the map runs once per batch in one pass instead of once per
element. A user's UDF declared pointwise (``jdata.declare``) stays per
element: nothing says it takes a stack (an OpenCV call on one image does
not). A run of such maps
right before the batch moves together if the run grows the elements. The
decision follows element sizes (specs, or the first elements measured), as
``reorder`` does, so every run gets the same plan.

An element that fails such a map fails its batch (``UDFError("map", batch
position)``), so plans with ``ignore_errors()``, which would then drop a
whole batch, are left alone.
"""

from __future__ import annotations

import dataclasses

from jdata._declare import unwrapped
from jdata._plan import Node, walk
from jdata.ops import _image_color_udfs as color_udfs
from jdata.ops import _image_udfs as image_udfs
from jdata.ops.batch import BatchNode
from jdata.ops.ignore_errors import IgnoreErrorsNode
from jdata.optimize.rewrite import bottom_up, element_bytes, pointwise_map


def _grows(top: Node, below: Node) -> bool:
    after, before = element_bytes(top), element_bytes(below)
    return after is not None and before is not None and after > before


def _batchable(node: Node) -> bool:
    """A map of one of jdata's pointwise image kernels, which take a batch as well."""
    return (pointwise_map(node) and not node.vectorize
            and isinstance(unwrapped(node.fn), (image_udfs.ToFloat, image_udfs.Normalize,
                                                color_udfs.ConvertImageDtype)))


class PointwiseAfterBatchRule:
    name = "pointwise_after_batch"

    def apply(self, plan: Node, options) -> Node:
        if any(isinstance(n, IgnoreErrorsNode) for n in walk(plan)):
            return plan

        def move(node: Node) -> Node:
            if type(node) is not BatchNode:
                return node
            maps, below = [], node.input
            while _batchable(below):
                maps.append(below)
                below = below.input
            if not maps or not _grows(maps[0], below):
                return node
            moved = dataclasses.replace(node, input=below)
            for m in reversed(maps):
                moved = dataclasses.replace(m, input=moved)
            return moved

        return bottom_up(plan, move)
