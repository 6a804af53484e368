"""The feature specs of ``jdata.io.parse_example``: ``tf.io``'s, validated when built.

Frozen dataclasses, so specs pickle (``functools.partial(parse_example,
features=spec)`` runs in worker processes), hash and compare by value: each
argument is normalized (shape a tuple of ints, dtype its name, default_value
nested tuples of Python values).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from jdata.io._example_outputs import NUMPY_DTYPES

_DTYPES = {"int64": "int64", "float32": "float32", "string": "string", "bytes": "string",
           np.int64: "int64", np.float32: "float32", bytes: "string", np.bytes_: "string"}
_DTYPE_HELP = ("use np.int64, np.float32 or bytes (TensorFlow's tf.int64, tf.float32 and "
               "tf.string), the only types a tf.train.Feature holds")


def _dtype(dtype: Any, spec: str) -> str:
    if dtype is str:
        raise TypeError(f"{spec}: dtype=str: string features hold bytes, which are not "
                        "always UTF-8 text; use dtype=bytes (and .decode() what is text)")
    if isinstance(dtype, np.dtype):
        name = dtype.name if dtype.name in ("int64", "float32") else None
    elif type(dtype).__module__.startswith("tensorflow"):  # tf.int64 and friends
        name = _DTYPES.get(getattr(dtype, "name", None))
    else:
        name = _DTYPES.get(dtype) if isinstance(dtype, (str, type)) else None
    if name is None:
        raise TypeError(f"{spec}: dtype={dtype!r} is not supported; {_DTYPE_HELP}")
    return name


def _shape(shape: Any, spec: str) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)  # as TF reads FixedLenFeature(3, ...)
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"{spec}: shape={shape!r} must be a list or tuple of sizes, "
                        "e.g. [] for one value or [2, 3]")
    for size in shape:
        if size is None or (isinstance(size, numbers.Integral) and size < 0):
            hint = ("a FixedLenSequenceFeature reads a first dimension of any length, a "
                    "VarLenFeature a list of any length" if spec == "FixedLenFeature" else
                    "a FixedLenSequenceFeature's shape is that of one element, its "
                    "number of elements varies")
            raise ValueError(f"{spec}: shape={shape!r}: every size must be known and >= 0; "
                             f"{hint}")
        if isinstance(size, bool) or not isinstance(size, numbers.Integral):
            raise TypeError(f"{spec}: shape={shape!r} must hold ints")
    return tuple(int(size) for size in shape)


def _values(value: Any, dtype: str, spec: str) -> np.ndarray[Any, Any]:
    """``value`` (a value, or nested lists of them) as an array of ``dtype``."""
    if dtype == "string":
        found = np.array(value, dtype=object)
        flat = [v.encode() if isinstance(v, str) else v for v in found.reshape(-1)]
        if not all(isinstance(v, bytes) for v in flat):
            raise TypeError(f"{spec}: default_value={value!r} must hold bytes (str is "
                            "encoded as UTF-8) for a bytes feature")
        out = np.empty(len(flat), object)
        out[:] = flat
        return out.reshape(found.shape)
    found = np.asarray(value)
    kinds = "iu" if dtype == "int64" else "iuf"
    if found.dtype.kind not in kinds or (found.dtype.kind == "u" and found.size
                                         and found.max() > np.iinfo(np.int64).max):
        what = "integers that fit int64" if dtype == "int64" else "numbers"
        raise TypeError(f"{spec}: default_value={value!r} must hold {what} for a {dtype} "
                        "feature")
    return found.astype(NUMPY_DTYPES[dtype])


def _frozen(value: Any) -> Any:
    """Nested lists as nested tuples: a spec stays hashable and compares by value."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


@dataclasses.dataclass(frozen=True)
class FixedLenFeature:
    """A feature of exactly ``math.prod(shape)`` values, as ``tf.io.FixedLenFeature``.

    Parsed into an array of shape ``[batch, *shape]`` (``shape`` for one
    record): int64, float32, or an object array of ``bytes``. A record
    lacking the feature gets ``default_value`` (any nesting holding the
    shape's number of values), or is an error if there is none.

    Args:
      shape: the shape of one record's value: ``[]`` for a single value.
      dtype: ``np.int64``, ``np.float32`` or ``bytes`` (also ``"int64"``,
        ``"float32"``, ``"string"`` and TF's dtypes). Kept as its name.
      default_value: the value of records that lack the feature.
    """

    shape: tuple[int, ...]
    dtype: str
    default_value: object = None

    if TYPE_CHECKING:  # what the constructor takes; the fields hold it normalized
        def __init__(self, shape: int | Sequence[int], dtype: Any,
                     default_value: object = None) -> None: ...

    def __post_init__(self) -> None:
        spec = type(self).__name__
        shape, dtype = _shape(self.shape, spec), _dtype(self.dtype, spec)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        if self.default_value is not None:
            default = _values(self.default_value, dtype, spec)
            if default.size != math.prod(shape):
                raise ValueError(
                    f"{spec}: default_value={self.default_value!r} has {default.size} "
                    f"values, but shape {shape} holds {math.prod(shape)}; pass that many "
                    f"(np.full({shape}, value) repeats one value)")
            object.__setattr__(self, "default_value", _frozen(default.reshape(shape).tolist()))


@dataclasses.dataclass(frozen=True)
class VarLenFeature:
    """A feature of any number of values, as ``tf.io.VarLenFeature``: parsed into a
    ``jdata.io.SparseTensor`` (TF's index layout). ``dtype`` as ``FixedLenFeature``'s."""

    dtype: str

    if TYPE_CHECKING:  # what the constructor takes; the field holds its name
        def __init__(self, dtype: Any) -> None: ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", _dtype(self.dtype, type(self).__name__))


@dataclasses.dataclass(frozen=True)
class FixedLenSequenceFeature:
    """A sequence of elements of ``shape``, as ``tf.io.FixedLenSequenceFeature``.

    In a ``SequenceExample``'s feature lists (``parse_sequence_example``),
    each step is one element; in an ``Example`` (``parse_example``, which
    needs ``allow_missing=True``) the values are cut into elements. Parsed into
    ``[batch, longest, *shape]``, shorter records padded with
    ``default_value`` (0 or ``b""`` if ``None``; feature lists always pad so).

    Args:
      shape: the shape of one element.
      dtype: as ``FixedLenFeature``'s.
      allow_missing: whether a record may lack the feature (read as no elements).
      default_value: one value, the padding of ``parse_example``.
    """

    shape: tuple[int, ...]
    dtype: str
    allow_missing: bool = False
    default_value: object = None

    if TYPE_CHECKING:  # what the constructor takes; the fields hold it normalized
        def __init__(self, shape: int | Sequence[int], dtype: Any, allow_missing: bool = False,
                     default_value: object = None) -> None: ...

    def __post_init__(self) -> None:
        spec = type(self).__name__
        shape, dtype = _shape(self.shape, spec), _dtype(self.dtype, spec)
        if math.prod(shape) == 0:
            raise ValueError(f"{spec}: shape={shape} holds no values, so no number of steps "
                             "could be read from a record; give every size >= 1")
        if not isinstance(self.allow_missing, bool):
            raise TypeError(f"{spec}: allow_missing={self.allow_missing!r} must be True or "
                            "False")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        if self.default_value is not None:
            default = _values(self.default_value, dtype, spec)
            if default.size != 1:
                raise ValueError(f"{spec}: default_value={self.default_value!r} must be one "
                                 "value: the padding of shorter records")
            object.__setattr__(self, "default_value", default.reshape(()).item())
