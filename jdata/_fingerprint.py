"""Stable fingerprints of plans: same pipeline, same digest, in any process.

What trusts a digest: ``cache(filename)`` and ``snapshot`` (a directory written
by a pipeline with the same digest is read back), the service's autocache store
(a cache is found by the digest of the prefix it holds) and named service jobs
(every client of one name must send the same digest). Two pipelines that compute
different elements must therefore never share a digest, and one pipeline must
get the same digest in every process.

Hashed by value, so that an edit changes the digest:

- scalars, strings, bytes, NumPy arrays, containers and plan nodes: by content;
- functions of user code: bytecode, constants, defaults, closure values and the
  globals they read, recursively;
- classes of user code (a callable class's ``__call__``): bases, metaclass and
  every attribute (methods by their code, class attributes by value);
- modules of user code: the attributes that some code in the plan names
  (``mylib.scale(x)`` in a UDF hashes ``mylib.scale``);
- any other object: its pickle reduction (``copyreg``'s table, else
  ``__reduce_ex__(4)``): the callable, its arguments and state, hashed by these
  rules. This covers a ``Path``, a compiled regex, an ``itemgetter``, a
  ``range``, a ``datetime``, a ``Decimal``, an enum member, a ``deque`` and any
  plain object (its class and ``__dict__`` or slots).

Hashed by reference: the modules and classes of the standard library, of
installed distributions (site-packages) and of jdata itself, and the functions
and objects such a module names, are hashed as pickle names them (module and
qualified name) plus the version of their distribution (Python's major.minor
for the standard library): a library's code changes with its version, reading
it would cost milliseconds, and its internals hold caches and handles that cannot
be hashed. ``from random import shuffle`` is a name too, not the state of the
hidden generator. A function a library makes at run time (a closure) is hashed
by value: it holds user values. ``__main__`` and packages installed in editable
mode (outside site-packages) are user code.

Hashed by type alone: the synchronization primitives of ``threading``,
``multiprocessing`` and ``asyncio`` (a lock, an event, a semaphore...).

Unique digests: a value that cannot be hashed with certainty (it has no pickle
reduction, as an open file, a socket or a generator; or its reduction holds the
object itself) is hashed as a token unique to this process and this
object: a random per-process nonce (new in a forked child) and a counter, kept
while the object lives. Guessing (by type, as before) would let two pipelines
that differ in that value share a cache. So the same pipeline object keeps its
digest in this process (later epochs, a second iterator), but no other process
and no rebuilt pipeline shares it: its caches are never reused, and a second
process is refused by a named service job. ``fingerprint_uncertainty`` says why
a digest is unique. (``_fingerprint_refs`` tells library code, synchronization
primitives and tokens apart; this module hashes values.)
"""

from __future__ import annotations

import copy
import copyreg
import dataclasses
import functools
import hashlib
import itertools
import math
import types
from collections import deque

import jax
import numpy as np

from jdata._fingerprint_refs import (
    _NONCE,
    _is_synchronization,
    _library_name,
    _library_version,
    _qualname,
    _token,
)
from jdata._plan import Node


def fingerprint(node: Node) -> str:
    return fingerprint_value(node)


def fingerprint_value(value, shallow: bool = False) -> str:
    """The digest of anything a plan holds (a UDF, a list of them), by content.

    ``shallow`` sums up arrays, strings and containers of more than
    ``_SHALLOW_MAX_ITEMS`` items by their type and size: a digest of the code
    a UDF runs rather than of the data it holds (a vocabulary, a lookup
    table), which takes microseconds instead of up to seconds.

    A value that cannot be hashed with certainty (an open file, a generator) makes
    the digest unique to this process: see the module docstring and
    ``fingerprint_uncertainty``.
    """
    return _Hasher(shallow).run(value).hexdigest()


def fingerprint_uncertainty(value, shallow: bool = False) -> str | None:
    """``None`` if ``fingerprint_value(value, shallow)`` is the same in any process;
    else what makes it unique to this process (the values that cannot be hashed)."""
    hasher = _Hasher(shallow)
    hasher.run(value)
    return "; ".join(hasher.uncertain) or None


_SHALLOW_MAX_ITEMS = 256
_SIZED = (bytes, bytearray, memoryview, str, list, tuple, dict, set, frozenset, deque)
_SCALARS = (bytes, str, bool, int, float, complex, type(None))


def _items(v) -> int:
    """How many items ``v`` holds, for ``shallow``: sized builtins and arrays of any
    library (NumPy, JAX, a torch tensor in a model's state)."""
    if isinstance(v, _SIZED):
        return len(v)
    shape = getattr(v, "shape", None) if hasattr(v, "dtype") else None
    if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
        return math.prod(shape)
    return 0


class _Hasher:
    def __init__(self, shallow: bool = False):
        self._h = hashlib.sha256()
        self._shallow = shallow
        # By id, holding the object: a temporary (a reduction's part) keeps its id
        # to itself for the whole run.
        self._seen: dict[int, object] = {}
        self._names: set[str] = set()  # every name the code hashed so far reads
        self._modules: dict[str, types.ModuleType] = {}  # user modules reached
        self._where: list[str] = []  # the functions being hashed, for messages
        self.uncertain: list[str] = []

    def run(self, value):
        self.value(value)
        self._module_attributes()
        return self._h

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
            self._array(np.asarray(v))
        elif isinstance(v, Node):
            self._node(v)
        elif isinstance(v, tuple) or type(v) in (list, dict):
            self._container(v)
        elif isinstance(v, (set, frozenset)):
            self._set(v)
        elif isinstance(v, type):
            self._class(v)
        elif isinstance(v, types.ModuleType):
            self._module(v)
        elif (named := _library_name(v)) is not None:
            self._put("library", *named)
        elif self._enter(v):
            self._object(v)

    def _enter(self, v) -> bool:
        # Recursive structures (a function calling itself) are hashed once.
        if id(v) in self._seen:
            self._put("seen", _qualname(v))
            return False
        self._seen[id(v)] = v
        return True

    def _array(self, arr: np.ndarray) -> None:
        if arr.dtype == object:
            self._put("objarray", arr.shape)
            for item in arr.ravel():
                self.value(item)
        else:
            self._put("ndarray", arr.dtype.str, arr.shape, np.ascontiguousarray(arr).tobytes())

    def _node(self, node: Node) -> None:
        self._put("node", type(node).__qualname__)
        for field in dataclasses.fields(node):
            self._put(field.name)
            self.value(getattr(node, field.name))

    def _container(self, v) -> None:
        self._put(type(v).__qualname__, len(v))
        for item in (itertools.chain.from_iterable(v.items()) if type(v) is dict else v):
            self.value(item)

    def _set(self, v) -> None:
        # Item digests, sorted: a set's order follows hashes, which for most objects
        # are addresses, another in each process.
        self._put(type(v).__name__, len(v))
        for digest in sorted(self._item_digest(item) for item in v):
            self._put(digest)

    def _item_digest(self, item) -> bytes:
        sub = copy.copy(self)  # shares what the run collects: names, modules, uncertainty
        sub._h = hashlib.sha256()
        if not isinstance(item, _SCALARS):  # an item must not depend on its siblings' order
            sub._seen = dict(self._seen)
        sub.value(item)
        return sub._h.digest()

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
            self.value((v.func, v.args, v.keywords))
        elif isinstance(v, types.CodeType):
            self._code(v)
        else:
            self._data_object(v)

    def _data_object(self, v) -> None:
        if isinstance(v, property):  # pickle refuses descriptors of user classes' code
            self._put("property")
            self.value((v.fget, v.fset, v.fdel))
        elif isinstance(v, functools.cached_property):  # by its function, not its lock
            self._put("cached_property", v.attrname)
            self.value(v.func)
        elif hasattr(v, "__wrapped__"):  # jax.jit wrappers, staticmethod, lru_cache
            self._put("wrapped")
            self.value((type(v), v.__wrapped__))
        elif isinstance(v, jax.Device):  # pickle refuses it; shardings and meshes hold them
            self._put("device", v.platform, v.device_kind, v.id, v.process_index)
        elif isinstance(v, memoryview):
            self._put("memoryview", v.format, v.shape, v.tobytes())
        elif isinstance(v, types.MappingProxyType):  # a class's __dict__, a read-only view
            self._put("mappingproxy")
            self.value(dict(v))
        elif _is_synchronization(v):
            self._put("synchronization")
            self.value(type(v))
        else:
            self._reduced(v)

    def _function(self, fn: types.FunctionType) -> None:
        self._put("function", fn.__module__, fn.__qualname__)
        self._code(fn.__code__)
        self._where.append(fn.__qualname__)
        self.value(fn.__defaults__)
        self.value(fn.__kwdefaults__)
        for cell in fn.__closure__ or ():
            try:
                self.value(cell.cell_contents)
            except ValueError:  # an empty cell
                self._put("empty-cell")
        for name in dict.fromkeys(_global_names(fn.__code__)):
            if name in fn.__globals__:
                self._put("global", name)
                self.value(fn.__globals__[name])
        self._where.pop()

    def _code(self, code: types.CodeType) -> None:
        self._names.update(code.co_names)
        self._put("code", code.co_code, code.co_names, code.co_varnames, code.co_freevars,
                  code.co_cellvars, code.co_argcount, code.co_posonlyargcount,
                  code.co_kwonlyargcount, code.co_flags, code.co_exceptiontable)
        for const in code.co_consts:
            self.value(const)

    def _class(self, cls: type) -> None:
        version = _library_version(cls.__module__)
        if version is not None:
            self._put("class", cls.__module__, cls.__qualname__, version)
        elif self._enter(cls):
            self._put("class", cls.__module__, cls.__qualname__)
            self.value(cls.__bases__)
            self.value(type(cls))
            attributes = vars(cls)
            for name in sorted(attributes):
                attr = attributes[name]
                if name not in _CLASS_BOOKKEEPING and not isinstance(attr, _SLOT_DESCRIPTORS):
                    self._put("attribute", name)
                    self.value(attr)

    def _module(self, module: types.ModuleType) -> None:
        version = _library_version(module.__name__)
        self._put("module", module.__name__, version or "")
        if version is None:
            self._modules.setdefault(module.__name__, module)

    def _module_attributes(self) -> None:
        # After everything else: which attributes of a module the plan reads is known
        # once all its code is hashed (code hashed later may name another one), and the
        # attributes' own code may name more: repeat until no attribute is new.
        done: set[tuple[str, str]] = set()
        while pending := self._unread_attributes(done):
            for name, attr in pending:
                done.add((name, attr))
                self._put("module-attribute", name, attr)
                self.value(vars(self._modules[name])[attr])

    def _unread_attributes(self, done: set) -> list[tuple[str, str]]:
        """(module, attribute) of user modules reached, for attributes that code names."""
        return sorted((name, attr) for name, module in self._modules.items()
                      for attr in vars(module).keys() & self._names if (name, attr) not in done)

    def _reduced(self, v) -> None:
        try:
            reducer = copyreg.dispatch_table.get(type(v))
            reduced = reducer(v) if reducer is not None else v.__reduce_ex__(4)
        except Exception as e:  # noqa: BLE001 - pickle refuses it: a file, a generator
            self._uncertain(v, f"it has no pickle reduction ({type(e).__name__}: {e})")
            return
        if isinstance(reduced, str):  # pickled as a global, by its name
            module = getattr(v, "__module__", None) or type(v).__module__
            self._put("global", module, reduced, _library_version(module) or "")
        elif not isinstance(reduced, tuple) or not 2 <= len(reduced) <= 6:
            self._uncertain(v, f"its pickle reduction is not a tuple: {type(reduced).__name__}")
        elif _holds_itself(v, reduced):
            self._uncertain(v, "its pickle reduction holds the object itself")
        else:
            self._put("reduced", len(reduced))
            for index, part in enumerate(reduced):
                self.value(_settled(index, part))

    def _uncertain(self, v, why: str) -> None:
        where = f" (read by {self._where[-1]})" if self._where else ""
        self.uncertain.append(f"{type(v).__module__}.{type(v).__qualname__}{where}: {why}")
        self._put("uncertain", _NONCE[0], _token(v))


# Kept by the class machinery rather than written as the class's code: slots' and
# __dict__'s descriptors, ABCs' registry caches (which cannot be pickled), the
# docstring (which changes no behaviour).
_CLASS_BOOKKEEPING = frozenset({"__dict__", "__weakref__", "__module__", "__qualname__",
                                "__doc__", "_abc_impl"})
_SLOT_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType)


def _global_names(code: types.CodeType):
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def _settled(index: int, part):
    """A reduction's part as it is hashed: state dicts sorted (attributes set in another
    order are the same state), list and dict items (iterators) listed."""
    if index == 2 and isinstance(part, dict) and all(isinstance(k, str) for k in part):
        return dict(sorted(part.items()))
    if index in (3, 4) and part is not None:
        return list(part)
    return part


def _holds_itself(v, reduced: tuple) -> bool:
    # Hashing ``v`` inside its own reduction would only say "seen": its content is lost.
    args = reduced[1] if isinstance(reduced[1], tuple) else ()
    return getattr(reduced[0], "__self__", None) is v or any(a is v for a in (*args, *reduced[2:3]))


