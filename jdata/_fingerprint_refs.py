"""What a fingerprint hashes by reference, by type or by token, not by value
(``_fingerprint``'s rules): library code by name and version, synchronization
primitives by type, and values that cannot be hashed by a token unique to this
process and object.
"""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import os
import sys
import sysconfig
import threading
import types
import weakref

# Synchronization primitives, by the module and name of their exact type (a subclass may
# hold values: it is hashed by its reduction, where these are its parts). Hashed by type
# alone: their state (held or not, set or not, a count, waiters, an event loop) is about
# when threads run, never about the values a UDF returns; and a module-level lock
# guarding a cache, a counter or a call that is not thread-safe is common in UDFs. A
# digest unique to the process would refuse other trainer processes a named service job
# and never reuse a cache. By name, so that multiprocessing.synchronize and asyncio need
# not be imported; ``_thread.lock`` is not named in its module.
_SYNCHRONIZATION_TYPES = {
    "_thread": frozenset({"lock", "RLock"}),
    "threading": frozenset({"Event", "Condition", "Semaphore", "BoundedSemaphore", "Barrier"}),
    **dict.fromkeys(("multiprocessing.synchronize", "asyncio.locks"), frozenset(
        {"Lock", "RLock", "Event", "Condition", "Semaphore", "BoundedSemaphore", "Barrier"})),
}


def _is_synchronization(v) -> bool:
    cls = type(v)
    return cls.__qualname__ in _SYNCHRONIZATION_TYPES.get(cls.__module__, ()) and \
        _library_version(cls.__module__) == _PYTHON  # not a user's module of that name


def _qualname(v) -> str:
    return getattr(v, "__qualname__", None) or getattr(v, "__name__", None) or type(v).__qualname__


def _library_name(v) -> tuple[str, str, str] | None:
    """``(module, name, version)`` when ``v`` is what a library module names (as pickle
    would name it), else ``None``."""
    self_ = getattr(v, "__self__", None)
    if isinstance(v, (types.BuiltinMethodType, types.MethodType)) and self_ is not None \
            and not isinstance(self_, types.ModuleType):
        # A method of a library's hidden instance, as ``from random import shuffle`` or
        # ``numpy.random.uniform`` give: by name, not by the generator's state.
        module, name = type(self_).__module__, getattr(v, "__name__", None)
    else:
        module, name = getattr(v, "__module__", None), _qualname(v)
    version = _library_version(module) if isinstance(module, str) else None
    if version is None or not isinstance(name, str):
        return None
    target = sys.modules.get(module)
    for part in name.split("."):
        target = getattr(target, part, None)
    return (module, name, version) if target is v else None


def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(os.path.realpath(paths[key]) + os.sep for key in ("stdlib", "platstdlib"))


_STDLIB_DIRS = _stdlib_dirs()
_PYTHON = f"{sys.implementation.name} {sys.version_info.major}.{sys.version_info.minor}"
_INSTALLED_DIRS = frozenset({"site-packages", "dist-packages"})


@functools.cache
def _library_version(module_name: str | None) -> str | None:
    """What says which code a library module runs: its distribution and version; ``None``
    for user code, which is hashed by value."""
    top = (module_name or "").partition(".")[0]
    if top == "__main__":  # the program run, even where a library runs it (python -m)
        return None
    module = sys.modules.get(module_name) or sys.modules.get(top)
    path = getattr(module, "__file__", None) or ""
    # A user's module named as the standard library's (a test.py) lives elsewhere.
    if (top in sys.stdlib_module_names or top in sys.builtin_module_names) and \
            (not path or os.path.realpath(path).startswith(_STDLIB_DIRS)):
        return _PYTHON
    # jdata's own code, in an editable install too: its ops are hashed as plan nodes,
    # and its modules hold locks and caches.
    if top == "jdata" or _INSTALLED_DIRS.intersection(path.split(os.sep)):
        return f"{top} {_distribution_version(top)}"
    return None


@functools.cache
def _distribution_version(top: str) -> str:
    try:
        return importlib.metadata.version(top)  # most distributions are named as they import
    except (importlib.metadata.PackageNotFoundError, ValueError):
        pass
    names = sorted(set(_packages_distributions().get(top, ())))
    versions = []
    for name in names:
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(name)
    return ", ".join(versions) or str(getattr(sys.modules.get(top), "__version__", "unknown"))


# Scans every installed distribution (a quarter of a second): only for an import name
# that is not a distribution's (yaml, sklearn, a namespace package).
_packages_distributions = functools.cache(importlib.metadata.packages_distributions)


# The token of a value that cannot be hashed: unique to this process (a fork gets a new
# nonce) and to the object, for as long as it lives (a weak reference forgets it, so its
# id, reused by a later object, gets a new token).
_NONCE = [os.urandom(16)]
_TOKENS: dict[int, tuple] = {}
_TOKENS_LOCK = threading.RLock()  # a weak reference's callback may run while it is held
_NEXT_TOKEN = itertools.count()


def _after_fork() -> None:
    global _TOKENS_LOCK
    _NONCE[0] = os.urandom(16)
    _TOKENS_LOCK = threading.RLock()  # another thread of the parent may have held it


os.register_at_fork(after_in_child=_after_fork)


def _token(v) -> int:
    with _TOKENS_LOCK:
        entry = _TOKENS.get(id(v))
        if entry is not None and entry[0]() is v:
            return entry[1]
        token = next(_NEXT_TOKEN)
        try:
            ref = weakref.ref(v, functools.partial(_forget, id(v)))
        except TypeError:  # cannot be watched: kept alive, so its id stays its own
            ref = functools.partial(_identity, v)
        _TOKENS[id(v)] = (ref, token)
        return token


def _forget(key: int, ref) -> None:
    with _TOKENS_LOCK:
        entry = _TOKENS.get(key)
        if entry is not None and entry[0] is ref:
            del _TOKENS[key]


def _identity(v):
    return v
