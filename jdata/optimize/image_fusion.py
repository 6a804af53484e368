"""Fuses ``decode_jpeg`` -> ``resize`` -> crop -> ``random_flip`` of ``jdata.ops.image`` into
one UDF that decodes at a reduced DCT scale and resamples only the crop's box.

``jdata.ops.image`` says what the fused UDF computes and how its pixels
relate to the unfused ops' (``Options(optimize=False)`` gives those). The
crop and the flip are optional; ``decode_jpeg`` -> ``resize`` alone fuses.

Each random op keeps its own key stream: the fused ``random_map`` holds the
fused ops' keys stacked (see ``RandomMapNode``) and hands each element the
key each op would have given it at its position (maps keep positions, so
they agree). Only adjacent maps fuse, with the same parallelism and order,
none vectorized. An element that fails is reported by the fused op at the
same position: as ``random_map`` where a random op was fused in.
"""

from __future__ import annotations

import numpy as np

from jdata._plan import Node
from jdata.ops import image
from jdata.ops.map import MapNode
from jdata.ops.random_map import RandomMapNode
from jdata.optimize.rewrite import bottom_up

_MAPS = (MapNode, RandomMapNode)


def fusable(outer: Node, inner: Node) -> bool:
    return (type(outer) in _MAPS and type(inner) in _MAPS
            and not outer.vectorize and not inner.vectorize
            and outer.num_parallel_calls == inner.num_parallel_calls
            and outer.deterministic == inner.deterministic)


def stacked_keys(inner: Node, outer: Node) -> np.ndarray | None:
    """The random ops' keys in the fused UDF's order (``inner``'s first); one key as is."""
    keys = [n.key.reshape(-1, 2) for n in (inner, outer) if type(n) is RandomMapNode]
    if not keys:
        return None
    stacked = np.concatenate(keys)
    return stacked[0] if len(stacked) == 1 else stacked


class DecodeResizeFusionRule:
    name = "decode_resize_fusion"

    def apply(self, plan: Node, options) -> Node:
        def fuse(node: Node) -> Node:
            if type(node) not in _MAPS or not fusable(node, node.input):
                return node
            inner = node.input
            fn = image.fused(inner.fn, node.fn, type(node) is RandomMapNode)
            if fn is None:
                return node
            key = stacked_keys(inner, node)
            parallelism = {"num_parallel_calls": node.num_parallel_calls,
                           "deterministic": node.deterministic}
            if key is None:
                return MapNode(inner.input, fn, **parallelism)
            return RandomMapNode(inner.input, fn, key, **parallelism)

        return bottom_up(plan, fuse)
