"""The record format of ``save``, ``cache(filename)`` and ``snapshot``: one element per
record, without pickle (loading a directory never runs code from it).

A record is the element's leaves in order, each tagged: ``a`` a NumPy array
(dtype, shape, C-order bytes), ``s`` a NumPy scalar (the same, 0-d), ``o``
an object array of ``bytes``/``str`` items, ``b`` bytes, ``u`` a UTF-8
string. The element's structure (dicts, tuples, lists, namedtuples) is
described once, as JSON, in the directory's metadata.
"""

from __future__ import annotations

import collections
import keyword
import math
import struct
import sys

import numpy as np

_COUNT = struct.Struct("<I")
_LEN = struct.Struct("<Q")


def describe(element):
    """The element's structure as JSON-able data (``None`` for a leaf)."""
    if isinstance(element, dict):
        if not all(isinstance(k, str) for k in element):
            raise TypeError(f"dict keys must be str to be saved, not {list(element)[:5]}")
        return {"dict": [[k, describe(v)] for k, v in element.items()]}
    if isinstance(element, tuple) and hasattr(element, "_fields"):
        cls = type(element)
        return {"namedtuple": [f"{cls.__module__}:{cls.__qualname__}", list(element._fields),
                               [describe(v) for v in element]]}
    if isinstance(element, tuple):
        return {"tuple": [describe(v) for v in element]}
    if isinstance(element, list):
        return {"list": [describe(v) for v in element]}
    return None


def _leaves(element, out: list) -> list:
    if isinstance(element, dict):
        for v in element.values():
            _leaves(v, out)
    elif isinstance(element, (tuple, list)):
        for v in element:
            _leaves(v, out)
    else:
        out.append(element)
    return out


def leaf_count(structure) -> int:
    """How many leaves an element of ``structure`` has; ``ValueError`` if ``structure`` is
    not one that ``describe`` gives (a metadata file written by hand, or damaged)."""
    if structure is None:
        return 1
    if isinstance(structure, dict) and len(structure) == 1:
        (kind, body), = structure.items()
        subs = _substructures(kind, body)
        if subs is not None:
            return sum(map(leaf_count, subs))
    raise ValueError(f"{str(structure)[:80]} is not an element structure")


def _substructures(kind: str, body) -> list | None:
    """The structures inside one of kind ``kind``, or None if ``body`` is malformed."""
    if not isinstance(body, list):
        return None
    if kind in ("tuple", "list"):
        return body
    if kind == "dict" and all(isinstance(item, list) and len(item) == 2
                              and isinstance(item[0], str) for item in body):
        return [sub for _, sub in body]
    if kind == "namedtuple" and len(body) == 3:
        name, fields, subs = body
        if (isinstance(name, str) and isinstance(fields, list) and isinstance(subs, list)
                and len(fields) == len(subs) and all(_is_field(f) for f in fields)):
            return subs
    return None


def _is_field(name) -> bool:
    return (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
            and not name.startswith("_"))


class Rebuilder:
    """Elements of one structure from their leaves (namedtuple types made once)."""

    def __init__(self, structure):
        self._structure = structure
        self._types: dict = {}

    def __call__(self, leaves: list):
        return self._build(self._structure, iter(leaves))

    def _build(self, s, leaves):
        if s is None:
            return next(leaves)
        (kind, body), = s.items()
        if kind == "dict":
            return {k: self._build(sub, leaves) for k, sub in body}
        if kind == "tuple":
            return tuple(self._build(sub, leaves) for sub in body)
        if kind == "list":
            return [self._build(sub, leaves) for sub in body]
        name, fields, subs = body
        cls = self._types.get((name, tuple(fields)))
        if cls is None:
            cls = self._types[(name, tuple(fields))] = _namedtuple(name, fields)
        return cls(*(self._build(sub, leaves) for sub in subs))


def _namedtuple(name: str, fields: list):
    """The saved namedtuple class if it can be imported (same fields), else a new one.

    Importing a module named by the metadata runs no code from the directory."""
    module_name, _, qualname = name.partition(":")
    module = sys.modules.get(module_name)
    cls = module
    for part in qualname.split("."):
        cls = getattr(cls, part, None)
    if isinstance(cls, type) and issubclass(cls, tuple) and list(
            getattr(cls, "_fields", ())) == list(fields):
        return cls
    typename = qualname.rsplit(".", 1)[-1]
    return collections.namedtuple(typename if _is_field(typename) else "Element", fields)


def encode(element) -> bytes:
    leaves = _leaves(element, [])
    parts = [_COUNT.pack(len(leaves))]
    for leaf in leaves:
        _encode_leaf(leaf, parts)
    return b"".join(parts)


def _encode_array(tag: bytes, array: np.ndarray, parts: list) -> None:
    dtype = array.dtype.str.encode()
    parts += [tag, bytes([len(dtype)]), dtype, bytes([array.ndim]),
              struct.pack(f"<{array.ndim}Q", *array.shape)]
    data = np.ascontiguousarray(array).tobytes()
    parts += [_LEN.pack(len(data)), data]


def _encode_leaf(leaf, parts: list) -> None:
    if isinstance(leaf, bytes):
        parts += [b"b", _LEN.pack(len(leaf)), leaf]
    elif isinstance(leaf, str):
        data = leaf.encode()
        parts += [b"u", _LEN.pack(len(data)), data]
    elif isinstance(leaf, np.ndarray) and leaf.dtype == object:
        parts += [b"o", bytes([leaf.ndim]), struct.pack(f"<{leaf.ndim}Q", *leaf.shape)]
        for item in leaf.ravel():
            if not isinstance(item, (bytes, str)):
                raise TypeError(f"an object array holds {type(item).__name__}; only bytes "
                                "and str items can be saved")
            _encode_leaf(item, parts)
    elif isinstance(leaf, np.ndarray):
        _encode_array(b"a", leaf, parts)
    elif isinstance(leaf, np.generic):
        _encode_array(b"s", np.asarray(leaf), parts)
    else:
        raise TypeError(f"a leaf of type {type(leaf).__name__} cannot be saved; leaves are "
                        "NumPy arrays and scalars, bytes and str")


def decode_leaves(data: bytes, expected: int | None = None) -> list:
    """The leaves of a record; ``expected``: how many its structure has.

    A record is untrusted: nothing it says (a count, a shape, a length) makes
    this allocate more than the record's own size, and a record that does not
    hold exactly its leaves is a ``ValueError``.
    """
    view = memoryview(data)
    (count,), offset = _COUNT.unpack_from(view, 0), _COUNT.size
    if expected is not None and count != expected:
        raise ValueError(f"the record holds {count} leaves; its structure has {expected}")
    leaves = []
    for _ in range(count):
        leaf, offset = _decode_leaf(view, offset)
        leaves.append(leaf)
    if offset != len(view):
        raise ValueError(f"{len(view) - offset} bytes left after the element")
    return leaves


def _decode_leaf(view: memoryview, offset: int):
    tag = bytes(view[offset:offset + 1])
    offset += 1
    if tag in (b"b", b"u"):
        (n,) = _LEN.unpack_from(view, offset)
        data = _take(view, offset + _LEN.size, n)
        return (data if tag == b"b" else data.decode()), offset + _LEN.size + n
    if tag in (b"a", b"s"):
        n = view[offset]
        dtype = np.dtype(bytes(view[offset + 1:offset + 1 + n]).decode())
        shape, offset = _shape(view, offset + 1 + n)
        (size,) = _LEN.unpack_from(view, offset)
        offset += _LEN.size
        if dtype.hasobject or size != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"an array of {dtype} {shape} cannot hold {size} bytes")
        _check_holds(view, offset, size)
        array = np.frombuffer(view[offset:offset + size], dtype).reshape(shape).copy()
        return (array[()] if tag == b"s" else array), offset + size
    if tag == b"o":
        shape, offset = _shape(view, offset)
        count = math.prod(shape)
        # Each item takes at least a tag and a length: a shape cannot outgrow the record.
        if count * (1 + _LEN.size) > len(view) - offset:
            raise ValueError(f"an object array of shape {shape} cannot fit in the "
                             f"{len(view) - offset} bytes left of the record")
        items = np.empty(count, dtype=object)
        for i in range(count):
            items[i], offset = _decode_leaf(view, offset)
        return items.reshape(shape), offset
    raise ValueError(f"unknown leaf tag {tag!r}")


def _shape(view: memoryview, offset: int) -> tuple[tuple, int]:
    ndim = view[offset]
    return struct.unpack_from(f"<{ndim}Q", view, offset + 1), offset + 1 + 8 * ndim


def _check_holds(view: memoryview, offset: int, n: int) -> None:
    if offset + n > len(view):
        raise ValueError(f"the record is truncated: it has no {n} bytes at byte {offset} "
                         f"(it has {len(view)})")


def _take(view: memoryview, offset: int, n: int) -> bytes:
    """``n`` bytes of the record from ``offset``, as a new ``bytes``."""
    _check_holds(view, offset, n)
    return bytes(view[offset:offset + n])


class Decoder:
    """Record bytes -> element, for ``load`` (picklable: the structure is data)."""

    def __init__(self, structure):
        self.structure = structure
        self._leaves = leaf_count(structure)
        self._rebuild = Rebuilder(structure)
        self.__qualname__ = "decode"

    def __call__(self, data: bytes):
        return self._rebuild(decode_leaves(data, self._leaves))

    def __reduce__(self):
        return Decoder, (self.structure,)
