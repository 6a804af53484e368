"""Fuses adjacent ``map``s and ``random_map``s of ``jdata.ops.image``'s kernels into one
``random_map``: one UDF call (one hand-off between threads, one trip through the pool)
per element for the whole chain instead of one per kernel.

SimCLR's view (``random_resized_crop``, ``random_flip``, ``convert_image_dtype``,
``color_jitter``, ``random_grayscale``, ``random_gaussian_blur``) is six stages
unfused: each element then crosses six thread pools, and each crossing costs a
wake-up and the GIL, which the kernels themselves (OpenCV, NumPy) mostly release.

The same pixels as unfused: each random op keeps its own key stream (the fused
``random_map`` holds the ops' keys stacked, ``RandomMapNode``; maps keep positions,
so each kernel sees the key it would have seen), and the calling convention between
kernels is the maps' (tuples unpacked, outputs normalized). Only built-in kernels
fuse (their cost is known to be per element and they have no side effects), at the
same parallelism and order, none vectorized; ``decode_resize_fusion`` runs first and
keeps its chains. An element that fails is reported by the fused ``random_map`` at
the same position.
"""

from __future__ import annotations

from typing import Any

from jdata._declare import unwrapped
from jdata._plan import Node
from jdata.ops import _image_udfs
from jdata.ops.random_map import RandomMapNode
from jdata.optimize.random_map_fusion import fuse_chains
from jdata.optimize.rewrite import Chain


class ImageChain(_image_udfs.ImageUDF, Chain):
    """Built-in kernels called in order on one element (``Chain``), printed as one."""

    def __init__(self, parts: tuple[tuple[Any, bool], ...]):
        Chain.__init__(self, parts)
        _image_udfs.ImageUDF.__init__(self, "image_chain", self.__qualname__)


def _parts(node: Node) -> tuple[tuple[Any, bool], ...] | None:
    """A map's or random_map's kernels as chain parts; ``None`` unless all are built in."""
    fn = unwrapped(node.fn)
    if isinstance(fn, ImageChain):
        return fn.parts
    if not isinstance(fn, _image_udfs.ImageUDF) or isinstance(fn, _image_udfs.DecodeResized):
        return None
    return ((fn, type(node) is RandomMapNode),)


class ImageChainFusionRule:
    name = "image_chain_fusion"

    def apply(self, plan: Node, options) -> Node:
        return fuse_chains(plan, _parts, ImageChain)
