"""Measurements for ``autocache.profile``: a point's seconds per element, computed and read
back from the cache store.

A point is computed by a normal pipeline iterator, reading on while the
count doubles (1, 2, 4...) until a read takes ``_READ_SEC``, its input
ends, or the samples reach ``_MAX_ELEMENTS`` or ``_MAX_SAMPLE_BYTES``: so a
cheap pipeline is measured over many elements, an expensive one over a few,
and both in about ``_READ_SEC``. Its start-up (threads, worker processes)
counts, spread over the elements read, as it does over a part. The
samples are then written to a probe cache beside the real ones and read
back through the ``LoadNode`` the service would read, decoding included.
"""

from __future__ import annotations

import time
import uuid
from typing import NamedTuple

from jdata import _planner
from jdata._errors import UDFError
from jdata._plan import Node
from jdata.runtime.context import Context
from jdata.runtime.stats import element_bytes
from jdata.service import _cache_store

_READ_SEC = 0.25
_MAX_ELEMENTS = 65_536
_MAX_SAMPLE_BYTES = 64 << 20


class Sample(NamedTuple):
    """A point's measured compute time, and the elements it produced (failed ones skipped)."""

    sec_per_element: float
    elements: list
    errors: int


def measure(node: Node, options, epoch: int) -> Sample:
    """Reads ``node`` from its start as the service would compute it (see the module)."""
    ctx = Context(options)
    it = _planner.make_iterator(node, ctx, epoch)
    elements, errors, nbytes, checkpoint = [], 0, 0, 1
    began = time.perf_counter()
    try:
        while len(elements) < _MAX_ELEMENTS and nbytes < _MAX_SAMPLE_BYTES:
            try:
                element = next(it)
            except StopIteration:
                break
            except UDFError:  # the iterator is past the failing element; skip it
                errors += 1
                continue
            elements.append(element)
            nbytes += element_bytes(element)
            if len(elements) == checkpoint:
                if time.perf_counter() - began >= _READ_SEC:
                    break
                checkpoint *= 2
        seconds = time.perf_counter() - began
    finally:
        it.close()
        ctx.stop_tuner()
    outcomes = len(elements) + errors
    return Sample(seconds / outcomes if outcomes else 0.0, elements, errors)


def probe_name() -> str:
    """A new name for a probe store under a store directory (one per profile)."""
    return f"autocache-probe-{uuid.uuid4().hex}"


def read_back(store: str, fp: str, elements: list, options) -> tuple:
    """``(seconds, encoded bytes)`` per element of ``elements`` written to ``store`` as the
    cache ``fp`` and read back."""
    if not elements:
        return 0.0, 0.0
    summary = _cache_store.write_part(store, fp, 0, elements)
    manifest = _cache_store.write_manifest(store, fp, 1)
    ctx = Context(options)
    began = time.perf_counter()
    it = _planner.make_iterator(_cache_store.load_node(store, fp, manifest), ctx, 0)
    try:
        count = sum(1 for _ in it)
        seconds = time.perf_counter() - began
    finally:
        it.close()
        ctx.stop_tuner()
    return seconds / max(count, 1), summary["bytes"] / summary["records"]
