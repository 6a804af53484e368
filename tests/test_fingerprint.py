"""Fingerprints: values by content, user code by its code, library code by version, and
a digest unique to the process where a value cannot be hashed."""

import asyncio
import collections
import datetime
import decimal
import enum
import fractions
import functools
import json
import logging
import multiprocessing
import operator
import pathlib
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time

import jax
import numpy as np
import pytest

import jdata
from jdata import _fingerprint, _fingerprint_refs


def _digest(value, shallow=False):
    return _fingerprint.fingerprint_value(value, shallow=shallow)


def _reading(value, how):
    """A UDF that reads ``value`` as a closure value, a default or a global."""
    if how == "closure":
        return lambda x: (x, value)
    if how == "default":
        return lambda x, v=value: (x, v)
    namespace = {"__name__": __name__, "VALUE": value}
    exec("def udf(x):\n    return (x, VALUE)\n", namespace)  # noqa: S102 - a module global
    return namespace["udf"]


class _Slots:
    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k


class _Color(enum.Enum):
    RED = 1
    BLUE = 2


_DIFFERENT_VALUES = {
    "path": (pathlib.Path("a"), pathlib.Path("b")),
    "regex": (re.compile("a"), re.compile("b")),
    "regex flags": (re.compile("a"), re.compile("a", re.IGNORECASE)),
    "itemgetter": (operator.itemgetter(0), operator.itemgetter(1)),
    "attrgetter": (operator.attrgetter("x"), operator.attrgetter("y")),
    "range": (range(3), range(4)),
    "bytearray": (bytearray(b"a"), bytearray(b"b")),
    "slice": (slice(1, 2), slice(1, 3)),
    "memoryview": (memoryview(b"ab"), memoryview(b"ac")),
    "datetime": (datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 2)),
    "decimal": (decimal.Decimal("1.5"), decimal.Decimal("2.5")),
    "fraction": (fractions.Fraction(1, 3), fractions.Fraction(1, 4)),
    "deque": (collections.deque([1, 2]), collections.deque([1, 3])),
    "defaultdict factory": (collections.defaultdict(list), collections.defaultdict(int)),
    "slots": (_Slots(1), _Slots(2)),
    "bound builtin method": ({"a": 1}.get, {"a": 2}.get),
    "jax array": (jax.numpy.arange(3), jax.numpy.arange(1, 4)),
}


@pytest.mark.parametrize("how", ["closure", "default", "global"])
@pytest.mark.parametrize("name", _DIFFERENT_VALUES)
def test_values_without_a_dict_are_hashed_by_value(name, how):
    a, b = _DIFFERENT_VALUES[name]
    assert _digest(_reading(a, how)) != _digest(_reading(b, how))
    assert _digest(_reading(a, how)) == _digest(_reading(a, how))


def test_enum_members_are_told_apart():
    assert _digest(_reading(_Color.RED, "closure")) != _digest(_reading(_Color.BLUE, "closure"))


def _scale_class(call_body, k=2, base="object"):
    """A ``Scale`` class of this module, written anew as a user would edit it."""
    namespace = {"__name__": __name__}
    source = textwrap.dedent(f"""
        class Base:
            pass

        class Scale({base}):
            k = {k}

            def __call__(self, x):
                return {call_body}
    """)
    exec(source, namespace)  # noqa: S102 - a class as a user writes it
    return namespace["Scale"]


@pytest.mark.parametrize("edit", [{"call_body": "x * self.k + 1"}, {"k": 3}, {"base": "Base"}])
def test_a_callable_class_is_hashed_by_its_code(edit):
    original = _scale_class("x * self.k")
    edited = _scale_class(**{"call_body": "x * self.k", **edit})
    assert original.__qualname__ == edited.__qualname__
    assert _digest(original()) != _digest(edited())
    assert _digest(original()) == _digest(_scale_class("x * self.k")())


_MYLIB = "def scale(x):\n    return x * 2\n\n\ndef unused(x):\n    return x\n"
_UDFS = textwrap.dedent("""
    import operator
    import pathlib
    import re
    import threading

    import jdata

    import fp_mylib


    class Scale:
        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return x * self.k


    def uses_mylib(x):
        return fp_mylib.scale(x)


    LOCK = threading.Lock()
    NUMBERS = (n for n in range(3))


    def locked(x):
        with LOCK:
            return x


    def reads_numbers(x):
        return x if NUMBERS else None


    def pipeline():
        root, pattern, first = pathlib.Path("data"), re.compile("[0-9]+"), operator.itemgetter(0)
        steps, chosen = range(3), frozenset({uses_mylib, Scale})  # a set of code
        return (jdata.range(10).map(uses_mylib).map(Scale(3))
                .map(lambda x: (x, str(root), pattern.pattern, len(steps)))
                .map(first).filter(lambda x: len(chosen) == 2))


    def locked_pipeline():
        return jdata.range(3).map(locked)


    def generator_pipeline():
        return jdata.range(3).map(reads_numbers)
""")


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    """``fp_mylib`` and ``fp_udfs``: user code in files, importable here and in a child."""
    (tmp_path / "fp_mylib.py").write_text(_MYLIB)
    (tmp_path / "fp_udfs.py").write_text(_UDFS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("fp_mylib", "fp_udfs"):
        sys.modules.pop(name, None)


def test_a_function_called_through_a_user_module_is_hashed_by_its_code(user_modules):
    import fp_mylib
    import fp_udfs

    before = _digest(fp_udfs.uses_mylib)
    exec("def unused(x):\n    return x + 1\n", vars(fp_mylib))  # noqa: S102 - an edit
    assert _digest(fp_udfs.uses_mylib) == before  # the UDF does not name it
    exec("def scale(x):\n    return x * 3\n", vars(fp_mylib))  # noqa: S102
    assert _digest(fp_udfs.uses_mylib) != before


def test_library_code_is_hashed_by_name_and_version():
    version = _fingerprint_refs._library_version
    assert version("numpy") == f"numpy {np.__version__}"
    assert version("numpy.random") == version("numpy")
    assert version("json") == version("builtins") == \
        f"{sys.implementation.name} {sys.version_info.major}.{sys.version_info.minor}"
    assert version("jdata._plan").startswith("jdata ")
    assert version(__name__) is None and version("__main__") is None
    assert _fingerprint_refs._library_name(json.dumps) == ("json", "dumps", version("json"))
    assert _fingerprint_refs._library_name(_scale_class("x")) is None


def test_library_singletons_are_hashed_by_name_not_state():
    from random import random, shuffle

    from numpy.random import uniform

    udf = lambda x: (uniform(), random(), shuffle([x]))
    before = _digest(udf)
    udf(1)  # draws: the hidden generators' states change
    assert _digest(udf) == before
    assert _fingerprint.fingerprint_uncertainty(udf) is None


class _HoldsItself:
    def __reduce__(self):
        return (_identity, (self,))


def _identity(v):
    return v


_UNHASHABLE = {
    "generator": lambda: (x for x in range(3)),
    "open file": lambda: open(__file__),  # noqa: SIM115 - closed by the tests
    "socket": socket.socket,
    "reduction holding itself": _HoldsItself,
}


@pytest.mark.parametrize("name", _UNHASHABLE)
def test_values_that_cannot_be_hashed_make_the_digest_unique(name):
    make = _UNHASHABLE[name]
    one, other = make(), make()
    try:
        udf = _reading(one, "closure")
        assert _digest(udf) != _digest(_reading(other, "closure"))
        assert _digest(udf) == _digest(udf)  # but stable in this process
    finally:
        for value in (one, other):
            getattr(value, "close", lambda: None)()


@pytest.mark.parametrize("name", _UNHASHABLE)
def test_uncertainty_names_what_cannot_be_hashed(name):
    value = _UNHASHABLE[name]()
    try:
        why = _fingerprint.fingerprint_uncertainty(jdata.range(3).map(_reading(value, "closure")))
        assert why is not None and "_reading.<locals>.<lambda>" in why
    finally:
        getattr(value, "close", lambda: None)()


def test_a_token_is_not_reused_by_a_later_object_at_the_same_address():
    digests, addresses = set(), set()
    for _ in range(200):
        generator = (x for x in range(3))
        addresses.add(id(generator))
        digests.add(_digest(_reading(generator, "closure")))
        del generator  # the UDF holding it is gone too: its address is free again
    assert len(addresses) < 200  # CPython reuses addresses; the digests are all new
    assert len(digests) == 200


class _Unwatchable:
    """No pickle reduction and no weak reference (slots without ``__weakref__``)."""

    __slots__ = ("k",)

    def __reduce_ex__(self, protocol):
        raise TypeError("cannot pickle _Unwatchable")


def test_a_value_that_cannot_be_weakly_referenced_keeps_its_token():
    digests, addresses = set(), set()
    for _ in range(50):
        value = _Unwatchable()
        addresses.add(id(value))
        digest = _digest(_reading(value, "closure"))
        assert _digest(_reading(value, "closure")) == digest
        digests.add(digest)
        del value  # kept alive by its token: no later object gets its address
    assert len(addresses) == len(digests) == 50
    why = _fingerprint.fingerprint_uncertainty(_reading(_Unwatchable(), "closure"))
    assert "_Unwatchable" in why


_SYNCHRONIZATION = {
    "lock": threading.Lock, "rlock": threading.RLock, "event": threading.Event,
    "condition": threading.Condition, "semaphore": threading.Semaphore,
    "bounded semaphore": threading.BoundedSemaphore, "barrier": lambda: threading.Barrier(2),
    "multiprocessing lock": lambda: multiprocessing.get_context("spawn").Lock(),
    "multiprocessing event": lambda: multiprocessing.get_context("spawn").Event(),
    "asyncio lock": asyncio.Lock, "asyncio event": asyncio.Event,
    "asyncio semaphore": asyncio.Semaphore,
}


def _hold(primitive) -> None:
    """Acquires or sets ``primitive`` (an asyncio one in a loop), as a running UDF would."""
    acquire = getattr(primitive, "acquire", None) or getattr(primitive, "set", None)
    if asyncio.iscoroutinefunction(acquire):
        asyncio.run(acquire())
    elif acquire is not None:
        acquire()


@pytest.mark.parametrize("how", ["closure", "global"])
@pytest.mark.parametrize("name", _SYNCHRONIZATION)
def test_synchronization_primitives_are_hashed_by_type(name, how):
    make = _SYNCHRONIZATION[name]
    one, other = make(), make()
    _hold(other)  # its state is about scheduling: the same digest
    udf = _reading(one, how)
    assert _fingerprint.fingerprint_uncertainty(udf) is None
    assert _digest(udf) == _digest(_reading(other, how))
    assert _digest(udf) != _digest(_reading(None, how))


def test_synchronization_primitives_of_other_types_differ():
    lock, rlock = threading.Lock(), threading.RLock()
    assert _digest(_reading(lock, "closure")) != _digest(_reading(rlock, "closure"))
    assert _digest(_reading(threading.Semaphore(), "closure")) != \
        _digest(_reading(threading.BoundedSemaphore(), "closure"))


class _Guarded:
    def __init__(self, k):
        self.k, self.lock, self.ready = k, threading.Lock(), threading.Event()


def test_a_user_object_holding_a_lock_is_hashed_by_its_other_values():
    assert _fingerprint.fingerprint_uncertainty(_Guarded(1)) is None
    assert _digest(_Guarded(1)) == _digest(_Guarded(1))
    assert _digest(_Guarded(1)) != _digest(_Guarded(2))


@functools.lru_cache
def _cached(x):
    return x


class _Config:
    """A user class with descriptors: none of them makes a digest unique."""

    limit = 3

    @property
    def doubled(self):
        return self.limit * 2

    @functools.cached_property
    def tripled(self):
        return self.limit * 3

    @staticmethod
    def clip(x):
        return min(x, _Config.limit)


@pytest.mark.parametrize("value", [
    logging.getLogger("jdata.test"), logging.getLogger(), _Config(), _Color.RED, _cached,
    jax.jit(lambda x: x + 1), jax.numpy.add, np.add, np.random.default_rng(0),
    collections.OrderedDict(a=1), collections.Counter("ab"), jdata.declare(abs, pointwise=True),
    jdata.range(3).map(lambda x: x + 1), jdata, object(), Ellipsis, int | None,
    jax.sharding.SingleDeviceSharding(jax.devices()[0])],
    ids=lambda value: type(value).__name__)
def test_common_values_are_hashed_with_certainty(value):
    udf = lambda x: (jdata.range(x), value)  # reads the jdata module, too
    assert _fingerprint.fingerprint_uncertainty(udf) is None


def _summing(table, array):
    return lambda x: table[x] + array[x]


def test_shallow_digests_sum_up_large_data_quickly():
    table, array = list(range(10**6)), np.arange(10**6)
    began = time.perf_counter()
    digest = _digest(_summing(table, array), shallow=True)
    assert time.perf_counter() - began < 1.0  # microseconds, in fact
    # Same types and sizes, other content: the same shallow digest (the same code) ...
    other = _summing([x + 1 for x in table], array + 1)
    assert _digest(other, shallow=True) == digest
    assert _digest(_summing(table[:1000], array + 1)) != \
        _digest(_summing(table[:1000], array))  # not so deep ones
    # ... other sizes, another digest.
    assert _digest(_summing(table[:-1], array), shallow=True) != digest
    assert _digest(_summing(table, array[:-1]), shallow=True) != digest
    # Arrays of other libraries too: a JAX array is not copied to the host to be hashed.
    assert _digest(_summing(table, jax.numpy.zeros(10**6)), shallow=True) == \
        _digest(_summing(table, jax.numpy.ones(10**6)), shallow=True)


_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import fp_udfs
    print(fp_udfs.pipeline().fingerprint(), fp_udfs.locked_pipeline().fingerprint(),
          fp_udfs.generator_pipeline().fingerprint())
""")


def test_the_same_pipeline_has_the_same_digest_in_another_process(user_modules):
    import fp_udfs

    child = subprocess.run([sys.executable, "-c", _CHILD, str(user_modules)], check=True,
                           capture_output=True, text=True, timeout=120).stdout.split()
    assert child[0] == fp_udfs.pipeline().fingerprint()
    # A module-level lock is hashed by its type: the same digest in both processes.
    assert child[1] == fp_udfs.locked_pipeline().fingerprint()
    assert _fingerprint.fingerprint_uncertainty(fp_udfs.locked_pipeline()._node) is None
    # Not certain (the UDF reads a generator): never the same digest in two processes.
    assert child[2] != fp_udfs.generator_pipeline().fingerprint()
    assert fp_udfs.generator_pipeline().fingerprint() == \
        fp_udfs.generator_pipeline().fingerprint()
    assert _fingerprint.fingerprint_uncertainty(fp_udfs.pipeline()._node) is None
    assert "builtins.generator (read by reads_numbers)" in \
        _fingerprint.fingerprint_uncertainty(fp_udfs.generator_pipeline()._node)


_FORKED = textwrap.dedent("""
    import os
    from jdata import _fingerprint
    numbers = (n for n in range(3))
    uncertain, certain = (lambda x: (x, numbers)), (lambda x: x + 1)
    digests = [_fingerprint.fingerprint_value(f) for f in (uncertain, certain)]
    read, write = os.pipe()
    if os.fork() == 0:
        forked = [_fingerprint.fingerprint_value(f) for f in (uncertain, certain)]
        os.write(write, " ".join(forked).encode())
        os._exit(0)
    os.wait()
    forked = os.read(read, 1000).decode().split()
    print(forked[0] != digests[0], forked[1] == digests[1])
""")


def test_a_forked_process_does_not_share_uncertain_digests():
    out = subprocess.run([sys.executable, "-c", _FORKED], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    assert out.split() == ["True", "True"]
