"""Fuses adjacent ``map``s and ``random_map``s of any UDFs into one ``random_map``: one UDF
call, one hand-off between threads and one trip through the pool per element for the
chain, instead of one per op.

``map_fusion`` fuses maps and ``image_chain_fusion`` chains ``jdata.ops.image``'s
kernels; this rule takes the chains they leave, those with a UDF of the user's and a
random op in them. SSD's augmentation as tf.data users write it puts a lambda between
built-in crops and flips (``lambda image, boxes: (to_float(image), boxes)``): six
stages unfused, each element crossing six pools, which ran at 0.86x the same UDFs
chained by hand on 2 cores (383 against 443 images/s, one run).

The same elements as unfused: each random op keeps its own key stream (the fused
``random_map`` holds the ops' keys stacked, as ``image_chain_fusion``'s; maps and
random maps keep positions, so each UDF sees the key it would have seen), and the
calling convention between UDFs is the maps' (tuples unpacked, outputs normalized).
Only ops at the same parallelism and order fuse, none vectorized (those are
``map_fusion``'s, one XLA program). An element that fails is reported at the same
position, by the fused op: ``UDFError`` names ``random_map`` where the failing UDF
was a ``map``'s.
"""

from __future__ import annotations

from typing import Any, Callable

from jdata._plan import Node
from jdata.ops import _image_udfs
from jdata.ops.random_map import RandomMapNode
from jdata.optimize.image_fusion import fusable, stacked_keys
from jdata.optimize.rewrite import Chain, bottom_up

Parts = tuple[tuple[Any, bool], ...]  # a chain's (fn, random) pairs in order


def _parts(node: Node) -> Parts | None:
    """A map's or random_map's UDFs as chain parts, or ``None`` where a fused decode
    (``decode_resize_fusion``'s, whose chain is its own) is one of them."""
    fn = node.fn
    if isinstance(fn, Chain):  # an image chain, or this rule's from below
        return fn.parts
    if isinstance(fn, _image_udfs.DecodeResized):
        return None
    return ((fn, type(node) is RandomMapNode),)


def fuse_chains(plan: Node, parts_of: Callable[[Node], Parts | None],
                make: Callable[[Parts], Chain]) -> Node:
    """``plan`` with each fusable pair of maps and random_maps, at least one random, whose
    ``parts_of`` both are chain parts (not ``None``), as one random_map of ``make(parts)``
    holding their keys stacked (this rule's and ``image_chain_fusion``'s rewrite)."""
    def fuse(node: Node) -> Node:
        inner = getattr(node, "input", None)
        if inner is None or not fusable(node, inner):
            return node
        outer_parts, inner_parts = parts_of(node), parts_of(inner)
        if outer_parts is None or inner_parts is None:
            return node
        parts = inner_parts + outer_parts
        if not any(random for _, random in parts):
            return node  # maps only: map_fusion's
        key = stacked_keys(inner, node)
        assert key is not None  # a random part has a key
        return RandomMapNode(inner.input, make(parts), key,
                             num_parallel_calls=node.num_parallel_calls,
                             deterministic=node.deterministic)

    return bottom_up(plan, fuse)


class RandomMapFusionRule:
    name = "random_map_fusion"

    def apply(self, plan: Node, options) -> Node:
        return fuse_chains(plan, _parts, Chain)
