"""What a UDF declares about itself, so the optimizer may reorder it (Cedar's idea).

``jdata.declare(fn, ...)`` returns a callable that behaves exactly like
``fn`` and carries ``Traits``. The optimizer trusts declarations: a wrong
one can change outputs, so declare only what holds for every element.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Callable, Generic, ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


@dataclasses.dataclass(frozen=True)
class Traits:
    """What a UDF does.

    Attributes:
      pointwise: each output value is computed from the input value at the
        same position alone, and the shape is kept (a dtype conversion,
        normalization, brightness): it commutes with selections.
      selection: the output picks, and may reorder, input values without
        computing on them (a crop, a flip, a slice, a transpose).
      reads: the fields of a dict element the UDF reads (``None``: any).
      writes: the fields of a dict element it changes; every other field
        passes through unchanged (``None``: the whole element).
    """

    pointwise: bool = False
    selection: bool = False
    reads: frozenset[str] | None = None
    writes: frozenset[str] | None = None


class Declared(Generic[_P, _R]):
    """``fn`` with its ``Traits`` (picklable, prints as ``fn``; called as ``fn`` is)."""

    def __init__(self, fn: Callable[_P, _R], traits: Traits) -> None:
        self.fn, self.traits = fn, traits
        self.__qualname__ = getattr(fn, "__qualname__", type(fn).__name__)

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return self.fn(*args, **kwargs)


def declare(fn: Callable[_P, _R], *, pointwise: bool = False, selection: bool = False,
            reads: Iterable[str] | None = None,
            writes: Iterable[str] | None = None) -> Declared[_P, _R]:
    """Declares what ``fn`` does, so that the optimizer can reorder it.

    Args:
      fn: the UDF.
      pointwise: each output value depends only on the input value at the
        same position, and the shape is kept (``x.astype(np.float32) / 255``).
      selection: the output only picks input values (a crop or a flip).
      reads: for dict elements, the fields ``fn`` reads.
      writes: for dict elements, the fields ``fn`` changes (others pass through).

    With these, the optimizer moves a shrinking selection (a crop) before
    pointwise maps, and a filter whose fields a map does not write before
    that map, so less data is computed on.

    >>> import numpy as np, jdata
    >>> to_float = jdata.declare(lambda x: x.astype(np.float32) / 255, pointwise=True)
    >>> crop = jdata.declare(lambda x: x[:2, :2], selection=True)
    >>> ds = jdata.from_tensor_slices(np.ones((3, 8, 8), np.uint8)).map(to_float).map(crop)
    >>> ds.explain().splitlines()[0]  # the crop moved first, then the maps fused
    'Plan (optimizer rules fired: reorder, map_fusion)'
    >>> next(iter(ds)).shape
    (2, 2)
    """
    if not callable(fn):
        raise TypeError(f"declare: fn={fn!r} is not callable")
    if pointwise and selection:
        raise ValueError("declare: a UDF cannot be both pointwise and a selection; "
                         "split it into two maps")
    for name, fields in (("reads", reads), ("writes", writes)):
        if fields is not None and (isinstance(fields, (str, bytes))
                                   or not all(isinstance(f, str) for f in fields)):
            raise TypeError(f"declare: {name}={fields!r} must be a list of field names, "
                            "e.g. ['image']")
    return Declared(fn, Traits(pointwise, selection,
                               None if reads is None else frozenset(reads),
                               None if writes is None else frozenset(writes)))


def traits_of(fn: Any) -> Traits | None:
    return fn.traits if isinstance(fn, Declared) else None


def unwrapped(fn: Any) -> Callable[..., Any]:
    """The function a ``declare`` wraps (``fn`` itself if undeclared)."""
    return fn.fn if isinstance(fn, Declared) else fn
