"""JSON encoding of elements, for the few states that must hold them.

Most states hold indices. Buffers over inputs that are not random access
(a buffer shuffle over a generator, group windows over a filter, ``scan``'s
state, ``unique``'s seen set) hold elements; this codec makes them JSON-able.

A state is untrusted input, so decoding is data only: it never imports,
calls or unpickles anything the state names. The structure types a state
cannot spell safely (namedtuples) are taken from the pipeline itself: the
caller passes a ``template``, an element or spec of the same structure, and a
namedtuple is rebuilt only where the template has one with the same fields.
Anything malformed is a ``ValueError`` naming the op and the state field.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any, Callable

import numpy as np

from jdata.runtime.states import invalid


def encode(element):
    """A JSON-able form of an element (a pytree of NumPy values, bytes and str)."""
    if isinstance(element, np.ndarray):
        if element.dtype == object:
            return {"obj": [encode(v) for v in element.ravel()], "shape": list(element.shape)}
        return {"nd": _b64(np.ascontiguousarray(element).tobytes()),
                "dtype": element.dtype.str, "shape": list(element.shape)}
    if isinstance(element, np.generic):
        return {"np": _b64(element.tobytes()), "dtype": element.dtype.str}
    if isinstance(element, bytes):
        return {"b": _b64(element)}
    if isinstance(element, str):
        return {"s": element}
    if isinstance(element, (bool, int, float)) or element is None:
        return {"py": element}
    if isinstance(element, tuple) and hasattr(element, "_fields"):
        return {"nt": list(element._fields), "v": [encode(v) for v in element]}
    if isinstance(element, tuple):
        return {"t": [encode(v) for v in element]}
    if isinstance(element, list):
        return {"l": [encode(v) for v in element]}
    if isinstance(element, dict):
        return {"d": [[encode(k), encode(v)] for k, v in element.items()]}
    raise TypeError(f"cannot save an element leaf of type {type(element).__name__} in a state")


def decode(data, op: str, field: str, template: Any = None,
           get_template: Callable[[], Any] | None = None):
    """Inverse of ``encode``, for a state field of ``op``.

    ``template`` (or, called only if a namedtuple must be rebuilt,
    ``get_template()``) is an element or element spec of the same structure.
    """
    decoder = _Decoder(op, field, template, get_template)
    try:
        try:
            return decoder.decode(data, decoder.template)
        except _Restart:
            return decoder.decode(data, decoder.template)
    except RecursionError:
        raise invalid(op, field, "is nested too deeply to be an element") from None


class _Decoder:
    def __init__(self, op, field, template, get_template):
        self.op, self.field = op, field
        self.template, self._get_template = template, get_template

    def fail(self, problem: str) -> ValueError:
        return invalid(self.op, self.field, problem)

    def decode(self, data, template):
        if not isinstance(data, dict) or len(data) not in (1, 2, 3):
            raise self.fail(f"{_short(data)} is not an encoded element")
        tag = next(iter(data))
        handler = _HANDLERS.get(tag)
        if handler is None:
            raise self.fail(f"{_short(data)} is not an encoded element")
        return handler(self, data, template)

    def keys(self, data, keys: tuple) -> None:
        if tuple(data) != keys:
            raise self.fail(f"{_short(data)} is not an encoded element")

    def array(self, data, template):
        self.keys(data, ("nd", "dtype", "shape"))
        dtype, shape = self.dtype(data["dtype"]), self.shape(data["shape"])
        raw = self.bytes(data["nd"])
        if len(raw) != math.prod(shape) * dtype.itemsize:
            raise self.fail(f"an array of {dtype} {tuple(shape)} cannot hold {len(raw)} bytes")
        return np.frombuffer(raw, dtype).reshape(shape).copy()

    def scalar(self, data, template):
        self.keys(data, ("np", "dtype"))
        dtype, raw = self.dtype(data["dtype"]), self.bytes(data["np"])
        if len(raw) != dtype.itemsize:
            raise self.fail(f"a {dtype} scalar cannot hold {len(raw)} bytes")
        return np.frombuffer(raw, dtype)[0]

    def objects(self, data, template):
        self.keys(data, ("obj", "shape"))
        shape, items = self.shape(data["shape"]), data["obj"]
        if not isinstance(items, list) or len(items) != math.prod(shape):
            raise self.fail(f"an object array of shape {tuple(shape)} needs "
                            f"{math.prod(shape)} items")
        out = np.empty(len(items), dtype=object)
        for i, item in enumerate(items):
            value = self.decode(item, None)
            if not isinstance(value, (bytes, str)):
                raise self.fail("an object array may hold only bytes and str items")
            out[i] = value
        return out.reshape(shape)

    def raw_bytes(self, data, template):
        self.keys(data, ("b",))
        return self.bytes(data["b"])

    def text(self, data, template):
        self.keys(data, ("s",))
        if not isinstance(data["s"], str):
            raise self.fail(f"{_short(data)} is not an encoded string")
        return data["s"]

    def python(self, data, template):
        self.keys(data, ("py",))
        value = data["py"]
        if value is not None and type(value) not in (bool, int, float):
            raise self.fail(f"{_short(value)} is not a number")
        return value

    def named(self, data, template):
        self.keys(data, ("nt", "v"))
        fields, values = data["nt"], self.items(data["v"])
        if template is None and self._get_template is not None:
            # Only now is the pipeline's structure needed (computing it may run the
            # pipeline's first elements); the decode starts again from the root.
            self.template, self._get_template = self._get_template(), None
            raise _Restart
        if not (isinstance(template, tuple) and list(getattr(template, "_fields", ())) == fields
                and all(isinstance(f, str) for f in fields)):
            raise self.fail(f"holds a namedtuple with fields {_short(fields)} where this "
                            "pipeline's elements have none")
        if len(values) != len(fields):
            raise self.fail(f"a namedtuple of {len(fields)} fields has {len(values)} values")
        return type(template)(*[self.decode(v, t) for v, t in zip(values, template)])

    def sequence(self, data, template):
        if len(data) != 1:
            raise self.fail(f"{_short(data)} is not an encoded element")
        (tag, values), = data.items()
        values = self.items(values)
        kind = tuple if tag == "t" else list
        subs = (template if isinstance(template, (tuple, list)) and len(template) == len(values)
                else [None] * len(values))
        return kind(self.decode(v, t) for v, t in zip(values, subs))

    def mapping(self, data, template):
        self.keys(data, ("d",))
        out = {}
        for pair in self.items(data["d"]):
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.fail(f"{_short(pair)} is not a key-value pair")
            key = self.decode(pair[0], None)
            if not isinstance(key, (str, bytes, int, float, bool)) and key is not None:
                raise self.fail(f"a dict key {_short(key)} is not a str, bytes or number")
            sub = template.get(key) if isinstance(template, dict) else None
            out[key] = self.decode(pair[1], sub)
        return out

    def items(self, values) -> list:
        if not isinstance(values, list):
            raise self.fail(f"{_short(values)} is not a list of encoded elements")
        return values

    def dtype(self, text) -> np.dtype:
        try:
            dtype = np.dtype(text) if isinstance(text, str) else None
        except (TypeError, ValueError, SyntaxError):
            dtype = None
        # Object dtypes would turn the state's bytes into pointers.
        if dtype is None or dtype.hasobject:
            raise self.fail(f"dtype {_short(text)} is not a NumPy dtype of plain values")
        return dtype

    def shape(self, shape) -> list[int]:
        if not (isinstance(shape, list) and len(shape) <= 64
                and all(type(n) is int and n >= 0 for n in shape)):
            raise self.fail(f"shape {_short(shape)} is not a list of sizes")
        return shape

    def bytes(self, text) -> bytes:
        if not isinstance(text, str):
            raise self.fail(f"{_short(text)} is not base64 text")
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise self.fail(f"{_short(text)} is not base64 text") from None


class _Restart(Exception):
    """The decode needs the pipeline's structure: start again with the template."""


_HANDLERS = {"nd": _Decoder.array, "np": _Decoder.scalar, "obj": _Decoder.objects,
             "b": _Decoder.raw_bytes, "s": _Decoder.text, "py": _Decoder.python,
             "nt": _Decoder.named, "t": _Decoder.sequence, "l": _Decoder.sequence,
             "d": _Decoder.mapping}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
