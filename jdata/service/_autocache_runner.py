"""Autocache on the client: how this epoch of a pipeline with an ``autocache()`` marker
runs, as the dispatcher decides (``Dispatcher.autocache``): as it is ("compute"), or
with the marker's prefix (or the whole plan) read from a cache, written first when the
dispatcher says to put it (a job of its own over the prefix's splits, each written by
a worker as one part of the cache).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings

import cloudpickle

from jdata import _fingerprint, _planner
from jdata._plan import Node
from jdata.service import autocache

_LOGGER = logging.getLogger("jdata")
# Writing a cache logs its progress this often.
_PROGRESS_SEC = 10.0


def plan_for_epoch(node: Node, dnode, options, transport, epoch: int) -> tuple[Node, str]:
    """The plan this epoch runs, and a note for ``it.stats()``."""
    marker = autocache.find_marker(node)
    if marker is None or dnode.cache_put is not None:
        return node, ""
    if dnode.processing_mode == "off" or dnode.sharing or dnode.num_consumers is not None:
        warnings.warn("distribute: autocache() has no effect in a job with processing_mode="
                      "'off', sharing or num_consumers: it computes every epoch", stacklevel=4)
        return node, ""
    allowed = autocache.allowed_modes(autocache.cache_points(node))
    if marker.mode is not None:
        autocache.decide(None, allowed, marker.mode)  # a mode that cannot be: raise now
    prefixes = autocache.prefixes(node, marker)
    keys = {point: _fingerprint.fingerprint(prefixes[point])
            for point in ("marker", "output") if allowed[point] is None}
    whole = _fingerprint.fingerprint(node)
    answer = transport.call("autocache", whole, keys, allowed, marker.mode,
                            [transport.ray.put(cloudpickle.dumps((node, options)))], epoch)
    point = answer["point"]
    note = f"; autocache: {answer['action']}" + (f" at the {point}" if point else "") + \
        f" ({answer['reason']})"
    if answer["action"] == "compute":
        return node, note
    store, key = answer["store"], keys[point]
    if answer["action"] == "put":
        try:
            _put(dnode, prefixes[point], options, transport, store, key, whole, point, epoch)
        except Exception as e:  # an element failed, or cannot be stored: compute, and
            # the error (if it is an element's) comes in its place as without a cache
            why = f"writing the cache of the {point} failed ({type(e).__name__}: {e})"
            transport.call("autocache_failed", whole, why)
            return node, f"; autocache: compute ({why})"
    cached = autocache.load_node(store, key, autocache.read_manifest(store, key))
    return (cached if point == "output" else autocache.replace(node, marker, cached)), note


def _put(dnode, prefix: Node, options, transport, store: str, key: str, whole: str,
         point: str, epoch: int) -> None:
    """Writes the cache of ``prefix`` through the service: a job over its splits whose
    workers write each split as a part; then the manifest that completes it."""
    from jdata.runtime.context import Context

    began = time.perf_counter()
    put = dataclasses.replace(dnode, input=prefix, job_name=None, deterministic=False,
                              cache_put=(store, key))
    ctx = Context(options=options)
    it = _planner.make_iterator(put, ctx, epoch)
    parts, logged = 0, time.monotonic()
    try:
        for _ in it:  # one summary per split: exactly once, so one per part
            parts += 1
            if time.monotonic() - logged > _PROGRESS_SEC:
                logged = time.monotonic()
                _LOGGER.info("autocache: writing the cache of the %s to %s: %d parts, %.0f s",
                             point, store, parts, time.perf_counter() - began)
    finally:
        it.close()
        ctx.stop_tuner()
    manifest = autocache.write_manifest(store, key, parts)
    transport.call("autocache_written", whole, point, {
        "elements": manifest["elements"], "bytes": manifest["bytes"], "parts": parts,
        "seconds": time.perf_counter() - began})
