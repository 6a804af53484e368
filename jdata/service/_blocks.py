"""Blocks: how a worker's elements travel to the client.

A block is a run of consecutive elements of one split. When its elements
share one structure of dicts and tuples over NumPy leaves of one dtype and
shape, it travels **stacked**: one array per leaf (``Columns``), so Ray
moves a few buffers through the object store (without copies on a node)
instead of pickling each element, and the client cuts the arrays back into
the same elements: NumPy scalars stay scalars of their type, arrays become
read-only views of the same dtype and shape, dicts keep their key order.
Leaves that do not stack (text, arrays of ``STACK_BYTES`` or more, which
Ray moves one by one without copies) are kept as lists inside the stacked
block; anything else (other containers, mixed structures, a failed element)
travels as the list itself.

A user function's error travels as a ``Failure`` in its element's place,
and the block names the positions of its failures, so the client finds them
without looking at each element.
"""

from __future__ import annotations

import pickle

import numpy as np

from jdata._extras import require

# Dtype kinds whose NumPy scalar type fixes the dtype (np.datetime64 does not: its unit).
_SCALAR_KINDS = frozenset("biufc")
# Arrays this big travel as they are (Ray moves each without a copy): stacking would
# copy them for a per-element overhead that no longer matters.
STACK_BYTES = 64 << 10


class Failure:
    """An element whose user function raised (a ``jdata.UDFError``), sent in its place.

    The client raises it where the element would have been, and its split
    goes on after it, as a local iterator does (``ignore_errors`` below
    ``distribute`` skips it); it counts as received for a re-read's ``skip``.
    """

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error

    def __reduce__(self):
        return (Failure, (self.error,))


class Columns:
    """A block of same-structured elements as stacked leaves (see the module doc).

    ``tree`` mirrors an element: a dict (same keys, same order) or a tuple of
    subtrees, or a ``Leaf`` column.
    """

    __slots__ = ("tree", "n")

    def __init__(self, tree, n: int):
        self.tree, self.n = tree, n

    def __reduce__(self):
        return (Columns, (self.tree, self.n))

    def elements(self) -> list:
        return _elements(self.tree, self.n)


class Leaf:
    """One leaf of every element of a block: ``kind`` "s" (NumPy scalars; ``values`` an
    array), "a" (arrays; stacked on a new first axis), "l" (anything else; the list)."""

    __slots__ = ("kind", "values")

    def __init__(self, kind: str, values):
        self.kind, self.values = kind, values

    def __reduce__(self):
        return (Leaf, (self.kind, self.values))


def _column(values: list):
    """``values`` (one position of every element) as a subtree of ``Columns.tree``, or None
    when they do not share a structure."""
    first = values[0]
    kind = type(first)
    if kind is dict:
        keys = list(first)
        if not all(type(v) is dict and list(v) == keys for v in values):
            return None
        out = {}
        for k in keys:
            sub = _column([v[k] for v in values])
            if sub is None:
                return None
            out[k] = sub
        return out
    if kind is tuple:
        n = len(first)
        if not all(type(v) is tuple and len(v) == n for v in values):
            return None
        subs = tuple(_column([v[i] for v in values]) for i in range(n))
        return None if any(s is None for s in subs) else subs
    if isinstance(first, np.generic):
        if first.dtype.kind in _SCALAR_KINDS and set(map(type, values)) == {kind}:
            return Leaf("s", np.array(values, dtype=first.dtype))
    elif kind is np.ndarray:
        dtype, shape = first.dtype, first.shape
        if first.nbytes < STACK_BYTES and dtype.kind != "O" and all(
                type(v) is np.ndarray and v.dtype == dtype and v.shape == shape
                for v in values):
            return Leaf("a", np.stack(values))
    elif kind in (bytes, str):
        return Leaf("l", values)
    return None if isinstance(first, (list, dict, tuple, Failure)) else Leaf("l", values)


def _elements(tree, n: int) -> list:
    if type(tree) is dict:
        if not tree:
            return [{} for _ in range(n)]
        keys = list(tree)
        columns = [_elements(sub, n) for sub in tree.values()]
        return [dict(zip(keys, row)) for row in zip(*columns)]
    if type(tree) is tuple:
        return [tuple(row) for row in zip(*[_elements(sub, n) for sub in tree])] \
            if tree else [()] * n
    kind, values = tree.kind, tree.values
    if kind == "s":
        return list(values)
    if kind == "a":
        if values.ndim == 1:  # 0-d arrays: values[i] would be a scalar
            return [values[i, ...] for i in range(n)]
        return list(values)
    return values


def encode(elements: list, failures: tuple = ()):
    """What a worker puts in the object store for a block: ``Columns`` when its elements
    stack exactly, else the list."""
    if not failures and len(elements) > 1:
        tree = _column(elements)
            # One list column is the list again: no gain in wrapping it.
        if tree is not None and not (type(tree) is Leaf and tree.kind == "l"):
            return Columns(tree, len(elements))
    return elements


def decode(payload) -> list:
    return payload.elements() if type(payload) is Columns else payload


def nbytes(payload, elements: list) -> int:
    """The block's bytes: exact for stacked blocks, from a sample of the elements else."""
    if type(payload) is Columns:
        return _tree_bytes(payload.tree)
    if not elements:
        return 0
    step = max(1, len(elements) // 8)
    sample = elements[::step]
    return sum(element_bytes(e) for e in sample) * len(elements) // len(sample)


def _tree_bytes(tree) -> int:
    if type(tree) is dict:
        return sum(_tree_bytes(sub) for sub in tree.values())
    if type(tree) is tuple:
        return sum(_tree_bytes(sub) for sub in tree)
    if tree.kind == "l":
        return sum(element_bytes(v) for v in tree.values)
    return tree.values.nbytes


def element_bytes(element) -> int:
    """A cheap size estimate: the arrays' and strings' bytes of a pytree."""
    if isinstance(element, dict):
        return sum(element_bytes(v) for v in element.values())
    if isinstance(element, (tuple, list)):
        return sum(element_bytes(v) for v in element)
    if isinstance(element, (bytes, str)):
        return len(element)
    if isinstance(element, Failure):
        return 64
    return getattr(element, "nbytes", 8)


CODECS = ("lz4", "zstd")


def _codec(name: str):
    feature = f"jdata.service compression={name!r}"
    if name == "lz4":
        lz4_frame = require("lz4.frame", feature)
        return lz4_frame.compress, lz4_frame.decompress
    zstandard = require("zstandard", feature)
    return zstandard.ZstdCompressor().compress, zstandard.ZstdDecompressor().decompress


def pack(payload, failures: tuple, nbytes: int, compression: str | None):
    """What a worker yields: ``(payload, failures, nbytes)``, or its pickle compressed for
    links between nodes."""
    if compression is None:
        return payload, failures, nbytes
    return _codec(compression)[0](pickle.dumps((payload, failures, nbytes),
                                               protocol=pickle.HIGHEST_PROTOCOL))


def unpack(packed, compression: str | None) -> tuple[list, tuple, int]:
    """``(elements, failure positions, their bytes)`` of what ``pack`` made."""
    payload, failures, nbytes = packed if compression is None else \
        pickle.loads(_codec(compression)[1](packed))
    return decode(payload), failures, nbytes
