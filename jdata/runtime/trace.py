"""Slices of a ``jax.profiler`` trace, named as ``explain()`` names ops and stages.

Asking whether a trace runs (``enabled``: jaxlib's ``TraceMe.is_enabled``)
costs a native call, so per-element paths ask only where they already time
a call (``jdata.runtime.opstats``); per-chunk paths ask each time.
"""

from __future__ import annotations

from jax.profiler import TraceAnnotation

enabled = TraceAnnotation.is_enabled


def call(name: str, fn, *args):
    """``fn(*args)``, inside a slice ``name`` if a trace runs."""
    return sliced(name, fn, *args) if enabled() else fn(*args)


def sliced(name: str, fn, *args):
    """``fn(*args)`` inside a slice ``name``, for a caller that knows a trace runs."""
    with TraceAnnotation(name):
        return fn(*args)
