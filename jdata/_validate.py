"""Argument checks shared by the public constructors.

Every message names the op, the argument, the bad value and the fix.
"""

from __future__ import annotations

import math
import numbers
import operator
import warnings
from typing import Any, Literal, overload

import numpy as np

from jdata._constants import AUTOTUNE


def as_int(value: Any) -> int | None:
    """``value`` as a Python int where it is an integer (a NumPy one too: anything with
    ``__index__``), else None; a bool is not taken for one.

    >>> import numpy as np
    >>> as_int(np.int64(3)), as_int(3.0), as_int(True)
    (3, None, None)
    """
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


@overload
def int_arg(value: Any, arg: str, op: str, *, minimum: int | None = None,
            allow_none: Literal[False] = False) -> int: ...
@overload
def int_arg(value: Any, arg: str, op: str, *, minimum: int | None = None,
            allow_none: bool) -> int | None: ...


def int_arg(value: Any, arg: str, op: str, *, minimum: int | None = None,
            allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if hasattr(value, "shape") and getattr(value, "shape", None) == ():
            value = value.item()
            return int_arg(value, arg, op, minimum=minimum, allow_none=allow_none)
        raise TypeError(f"{op}: {arg}={value!r} must be an int")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{op}: {arg}={value} must be >= {minimum}")
    return value


def float_arg(value: Any, arg: str, op: str, low: float | None = None,
              high: float | None = None) -> float:
    """``value`` as a finite float in ``[low, high]``, or a clear error."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.ndarray)):
        raise TypeError(f"{op}: {arg}={value!r} must be a number")
    if isinstance(value, np.ndarray):
        if value.shape != ():
            raise TypeError(f"{op}: {arg} must be one number, got shape {value.shape}")
        value = value.item()
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{op}: {arg}={value} must be finite")
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"in [{low}, {high}]" if low is not None and high is not None else (
            f">= {low}" if low is not None else f"<= {high}")
        raise ValueError(f"{op}: {arg}={value} must be {span}")
    return value


def parallelism(num_parallel_calls, deterministic, op: str):
    """Validates ``num_parallel_calls`` (None, AUTOTUNE or >= 1) and ``deterministic``."""
    if num_parallel_calls is not None and num_parallel_calls != AUTOTUNE:
        int_arg(num_parallel_calls, "num_parallel_calls", op, minimum=1)
    if deterministic is not None and not isinstance(deterministic, bool):
        raise TypeError(f"{op}: deterministic={deterministic!r} must be None, True or False")
    if deterministic is not None and num_parallel_calls is None:
        warnings.warn(f"{op}: deterministic={deterministic} has no effect without "
                      "num_parallel_calls; set num_parallel_calls too", stacklevel=3)
    return num_parallel_calls, deterministic


def bool_arg(value, arg: str, op: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {arg}={value!r} must be True or False")
    return value
