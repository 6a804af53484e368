"""Stable fingerprints of plans: same pipeline, same digest, in any process.

UDFs are hashed by their code (bytecode, constants, names), their closure
values, defaults and the globals they read, recursively; values by content.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import types

import numpy as np

from jdata._plan import Node


def fingerprint(node: Node) -> str:
    return fingerprint_value(node)


def fingerprint_value(value, shallow: bool = False) -> str:
    """The digest of anything a plan holds (a UDF, a list of them), by content.

    ``shallow`` sums up arrays, strings and containers of more than
    ``_SHALLOW_MAX_ITEMS`` items by their type and size: a digest of the code
    a UDF runs rather than of the data it holds (a vocabulary, a lookup
    table), which takes microseconds instead of up to seconds.
    """
    h = hashlib.sha256()
    _Hasher(h, shallow).value(value)
    return h.hexdigest()


_SHALLOW_MAX_ITEMS = 256
_SIZED = (bytes, str, list, tuple, dict, set, frozenset)


def _items(v) -> int:
    if isinstance(v, _SIZED):
        return len(v)
    return v.size if isinstance(v, np.ndarray) else 0


class _Hasher:
    def __init__(self, h, shallow: bool = False):
        self._h = h
        self._shallow = shallow
        self._seen: set[int] = set()

    def _put(self, *parts) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else str(part).encode()
            self._h.update(len(data).to_bytes(8, "little"))
            self._h.update(data)

    def value(self, v) -> None:
        if self._shallow and _items(v) > _SHALLOW_MAX_ITEMS:
            self._put("large", type(v).__qualname__, getattr(v, "shape", None) or len(v))
        elif isinstance(v, bytes):  # raw: repr of a large record costs 10x its hashing
            self._put("bytes", v)
        elif isinstance(v, str):
            self._put("str", v.encode("utf-8", "surrogatepass"))
        elif v is None or isinstance(v, (bool, int, float, complex)):
            self._put(type(v).__name__, repr(v))
        elif isinstance(v, (np.ndarray, np.generic)):
            arr = np.asarray(v)
            if arr.dtype == object:
                self._put("objarray", arr.shape)
                for item in arr.ravel():
                    self.value(item)
            else:
                self._put("ndarray", arr.dtype.str, arr.shape, np.ascontiguousarray(arr).tobytes())
        elif isinstance(v, Node):
            self._node(v)
        elif isinstance(v, (list, tuple)):
            self._put(type(v).__qualname__, len(v))
            for item in v:
                self.value(item)
        elif isinstance(v, (set, frozenset)):
            self._put(type(v).__name__, len(v))
            for item in sorted(v, key=repr):
                self.value(item)
        elif isinstance(v, dict):
            self._put("dict", len(v))
            for k, item in v.items():
                self.value(k)
                self.value(item)
        elif isinstance(v, (type, types.BuiltinFunctionType, types.ModuleType)):
            self._put(type(v).__name__, getattr(v, "__module__", ""), _qualname(v))
        elif self._enter(v):
            self._object(v)

    def _enter(self, v) -> bool:
        # Recursive structures (a function calling itself) are hashed once.
        if id(v) in self._seen:
            self._put("seen", _qualname(v))
            return False
        self._seen.add(id(v))
        return True

    def _node(self, node: Node) -> None:
        self._put("node", type(node).__qualname__)
        for field in dataclasses.fields(node):
            self._put(field.name)
            self.value(getattr(node, field.name))

    def _object(self, v) -> None:
        dataset_node = getattr(v, "_node", None)
        if isinstance(dataset_node, Node):  # a Dataset captured by a UDF
            self._node(dataset_node)
        elif isinstance(v, types.FunctionType):
            self._function(v)
        elif isinstance(v, types.MethodType):
            self._put("method")
            self.value(v.__func__)
            self.value(v.__self__)
        elif isinstance(v, functools.partial):
            self._put("partial")
            self.value(v.func)
            self.value(v.args)
            self.value(v.keywords)
        elif isinstance(v, types.CodeType):
            self._code(v)
        elif hasattr(v, "__wrapped__"):  # jax.jit and functools.wraps wrappers
            self._put("wrapped", type(v).__qualname__)
            self.value(v.__wrapped__)
        elif dataclasses.is_dataclass(v):
            self._put("dataclass", type(v).__module__, type(v).__qualname__)
            for field in dataclasses.fields(v):
                self.value(getattr(v, field.name))
        elif hasattr(v, "__dict__"):
            self._put("object", type(v).__module__, type(v).__qualname__)
            self.value(dict(sorted(vars(v).items())))
        else:
            # No repr: it may hold a memory address, which differs across processes.
            self._put("opaque", type(v).__module__, type(v).__qualname__)

    def _function(self, fn: types.FunctionType) -> None:
        self._put("function", fn.__module__, fn.__qualname__)
        self._code(fn.__code__)
        self.value(fn.__defaults__)
        self.value(fn.__kwdefaults__)
        for cell in fn.__closure__ or ():
            try:
                self.value(cell.cell_contents)
            except ValueError:  # an empty cell
                self._put("empty-cell")
        for name in _global_names(fn.__code__):
            if name in fn.__globals__:
                self._put("global", name)
                self.value(fn.__globals__[name])

    def _code(self, code: types.CodeType) -> None:
        self._put("code", code.co_code, code.co_names, code.co_varnames, code.co_argcount)
        for const in code.co_consts:
            self.value(const)


def _global_names(code: types.CodeType):
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def _qualname(v) -> str:
    return getattr(v, "__qualname__", None) or getattr(v, "__name__", None) or type(v).__qualname__
