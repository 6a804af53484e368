"""Calling user-defined functions the way tf.data does."""

from __future__ import annotations

from itertools import starmap

from jdata import _tree
from jdata._errors import UDFError, udf_error


def check_callable(fn, arg: str, op: str) -> None:
    if not callable(fn):
        raise TypeError(f"{op}: {arg}={fn!r} is not callable; pass a function, e.g. lambda x: x")


def call(fn, element, op: str, position: int, *extra):
    """Calls ``fn`` on an element, unpacking tuples into positional arguments.

    Only exact tuples are unpacked (not namedtuples), as in tf.data. Extra
    arguments (e.g. ``random_map``'s key) follow the element. Exceptions are
    re-raised as ``UDFError`` naming the op and position, original chained (a
    ``DecodeError`` as a ``DataError``: the element's data is at fault).
    """
    try:
        if type(element) is tuple:
            return fn(*element, *extra)
        return fn(element, *extra)
    except Exception as e:
        raise udf_error(op, position, e) from e


def call_unpacked(fn, element):
    """``fn`` on an element with tf.data's tuple unpacking, exceptions let through (for
    composed UDFs, whose callers report the errors)."""
    return fn(*element) if type(element) is tuple else fn(element)


def call_block(fn, elements: list, op: str, position: int) -> tuple[list, UDFError | None]:
    """``call`` on each element in one tight loop, ``position`` being the first's.

    Returns ``(outputs, None)``, or the outputs before the first element that
    raised and that element's ``UDFError`` (original chained), unraised.
    """
    outputs: list = []
    types = [] if type(elements) is _tree.Leaves else list(map(type, elements))
    try:
        if not types or types.count(types[0]) == len(types):  # one type, one calling convention
            outputs.extend(starmap(fn, elements) if types and types[0] is tuple
                           else map(fn, elements))
        # Mixed types, or map() ended quietly where fn raised StopIteration (which
        # then raises again here, to be reported like any other error).
        for e in elements[len(outputs):]:
            outputs.append(call_unpacked(fn, e))
    except Exception as e:
        return outputs, _chained(op, position + len(outputs), e)
    return outputs, None


def _chained(op: str, position: int, cause: Exception) -> UDFError:
    # Raised here, as ``call`` raises it, for the same ``__cause__``, context and traceback.
    try:
        raise udf_error(op, position, cause) from cause
    except UDFError as error:
        return error
