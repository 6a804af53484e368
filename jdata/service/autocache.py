"""The autocache role: where a job's elements may be cached, and whether that pays (Cachew).

A pipeline marks one candidate cache point with ``Dataset.autocache()``. For
such a job the service chooses, after profiling, among three modes:

1. **compute**: run the whole pipeline every epoch (no storage);
2. **marker**: cache the elements at the marker (the plan below it, its
   *prefix*) in epoch 1, then read them back and run only the ops above;
3. **output**: cache the pipeline's whole output, and only read it back.

``cache_points`` says which caches are possible: randomness must be drawn
anew each epoch, so a point can be cached only if nothing random
(``shuffle(key)``, ``random_map``...) is below it, and only if its epoch
ends. ``profile`` measures, locally, the seconds per element of computing
each point and of reading it back from the store; ``decide`` estimates each
allowed mode's seconds per output element from that ``Profile`` and picks
the fastest, preferring to store nothing when the gain is within
``TIE``. A forced ``autocache(mode=...)`` skips the choice. The cache itself
is the store of ``_cache_store`` (parts written per split, a manifest when
complete). Nothing here imports Ray: the dispatcher and workers wire it up.

Random ops inside datasets that a UDF builds (``flat_map``, ``interleave``)
are not in the plan, so they cannot be seen here: a marker above them
freezes their draws.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from jdata._constants import INFINITE
from jdata._plan import Node, is_node_collection, walk
from jdata.ops.autocache import MODES, AutocacheNode
from jdata.ops.shuffle import ShuffleNode
from jdata.service import _autocache_profile, _cache_store
from jdata.service._cache_store import load_node as load_node
from jdata.service._cache_store import read_manifest as read_manifest
from jdata.service._cache_store import write_manifest as write_manifest
from jdata.service._cache_store import write_part as write_part

# Within this fraction of the fastest, the mode that stores less wins.
TIE = 0.05


@dataclasses.dataclass(frozen=True)
class Profile:
    """What ``profile`` measured: seconds and encoded bytes per element at each point."""

    compute_sec: float  # the whole plan, per output element
    below_sec: float  # the marker's input (the prefix), per element at the marker
    marker_bytes: float  # mean encoded bytes of an element at the marker
    output_bytes: float  # ... of an output element
    read_marker_sec: float  # reading an element at the marker back from the store
    read_output_sec: float  # ... an output element
    elements: int  # how many elements were sampled at the marker
    # Elements at the marker per output element (e.g. 32 under a batch(32)), from the
    # cardinalities where both are known; the estimates count the marker's per output.
    marker_per_output: float = 1.0
    errors: int = 0  # elements whose UDF failed, skipped

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"Profile: {field.name}={value!r} must be a number >= 0")


@dataclasses.dataclass(frozen=True)
class Decision:
    """The mode to use from epoch 2 on, why, and the estimates it rests on."""

    mode: str  # "compute", "marker" or "output"
    reason: str
    estimates: dict  # allowed mode -> estimated seconds per output element


def find_marker(plan: Node) -> AutocacheNode | None:
    """The plan's ``autocache()`` marker; None if it has none (ValueError if several, as
    ``concatenate``/``zip`` of two marked pipelines give)."""
    markers = {id(n): n for n in walk(plan) if isinstance(n, AutocacheNode)}
    if len(markers) > 1:
        raise ValueError(f"autocache: the pipeline has {len(markers)} autocache() markers "
                         "(from the datasets it combines); keep at most one")
    return next(iter(markers.values()), None)


def cache_points(plan: Node) -> dict:
    """For ``"marker"`` and ``"output"``: the node whose elements that cache would hold
    (the marker's input; the plan), or a sentence saying why it cannot be cached."""
    marker = find_marker(plan)
    if marker is None:
        at_marker = "the pipeline has no autocache() marker"
    else:
        at_marker = _refusal(marker.input, lambda _: "below the marker",
                             "the marker's elements") or marker.input
    at_output = _refusal(plan, _place_in(marker), "the output") or plan
    return {"marker": at_marker, "output": at_output}


def prefixes(plan: Node, marker: AutocacheNode) -> dict:
    """The plans whose elements each cache holds: the marker's input, and the whole plan
    without the marker (so that a forced mode and the service's choice share caches).
    Their fingerprints key the caches: another job with the same prefix hits them."""
    return {"marker": marker.input, "output": replace(plan, marker, marker.input)}


def replace(plan: Node, old: Node, new: Node) -> Node:
    """``plan`` with the node ``old`` (itself, not an equal one) replaced by ``new``."""
    if plan is old:
        return new
    changes = {}
    for field in dataclasses.fields(plan):
        value = getattr(plan, field.name)
        if isinstance(value, Node):
            changed = replace(value, old, new)
        elif is_node_collection(value):
            items = list(value.items() if isinstance(value, dict) else enumerate(value))
            swapped = {k: replace(v, old, new) for k, v in items}
            if all(swapped[k] is v for k, v in items):
                continue
            changed = swapped if isinstance(value, dict) else type(value)(swapped.values())
        else:
            continue
        if changed is not value:
            changes[field.name] = changed
    return dataclasses.replace(plan, **changes) if changes else plan


def _place_in(marker: AutocacheNode | None) -> Callable[[Node], str]:
    """How a reason names where a node of the plan is: below or above the marker."""
    if marker is None:
        return lambda _: "in the pipeline"
    below = {id(n) for n in walk(marker.input)}
    return lambda node: "below the marker" if id(node) in below else "above the marker"


def _refusal(subtree: Node, place: Callable[[Node], str], what: str) -> str | None:
    """Why ``subtree``'s elements cannot be cached, or None if they can (the first reason,
    from the top)."""
    for node in walk(subtree):
        if _draws_each_epoch(node):
            return (f"{node.op_name} {place(node)} draws anew each epoch; caching {what} "
                    "would freeze it")
        # The op that makes the stream endless (repeat(), counter), not those above it.
        if node.cardinality() == INFINITE and all(
                child.cardinality() != INFINITE for child in node.inputs()):
            return (f"{node.op_name} {place(node)} never ends, and caching {what} needs an "
                    "epoch that ends")
    return None


def _draws_each_epoch(node: Node) -> bool:
    # A shuffle that keeps epoch 0's order gives the same elements every epoch.
    if isinstance(node, ShuffleNode) and not node.reshuffle_each_iteration:
        return False
    return node.random


def profile(plan: Node, options, store_dir: str, *, epoch: int = 0) -> Profile:
    """Measures ``plan`` (with a marker) locally: see the module and ``Profile``.

    Writes probe caches to a new directory under ``store_dir`` and deletes it.
    """
    marker = find_marker(plan)
    if marker is None:
        raise ValueError("autocache: profile needs a plan with an autocache() marker")
    below = _autocache_profile.measure(marker.input, options, epoch)
    whole = _autocache_profile.measure(plan, options, epoch)
    name = _autocache_profile.probe_name()
    probe = _cache_store.join(store_dir, name)
    try:
        read_marker, marker_bytes = _autocache_profile.read_back(
            probe, "marker", below.elements, options)
        read_output, output_bytes = _autocache_profile.read_back(
            probe, "output", whole.elements, options)
    finally:
        _cache_store.remove(store_dir, name)
    return Profile(whole.sec_per_element, below.sec_per_element, marker_bytes, output_bytes,
                   read_marker, read_output, len(below.elements),
                   _marker_per_output(plan, marker), below.errors + whole.errors)


def _marker_per_output(plan: Node, marker: AutocacheNode) -> float:
    at_marker, at_output = marker.input.cardinality(), plan.cardinality()
    return at_marker / at_output if at_marker >= 0 and at_output > 0 else 1.0


def allowed_modes(points: dict) -> dict:
    """``cache_points``' result as ``decide`` takes it: mode -> None (allowed) or the
    reason it is not."""
    return {"compute": None, **{mode: None if isinstance(point, Node) else point
                                for mode, point in points.items()}}


def estimates(profile: Profile, allowed: dict) -> dict:
    """Seconds per output element of each allowed mode."""
    per_output = profile.marker_per_output
    above = max(0.0, profile.compute_sec - per_output * profile.below_sec)
    every = {"compute": profile.compute_sec,
             "marker": per_output * profile.read_marker_sec + above,
             "output": profile.read_output_sec}
    # Computing is always possible: it stores nothing.
    return {mode: sec for mode, sec in every.items()
            if mode == "compute" or allowed.get(mode) is None}


def decide(profile: Profile | None, allowed: dict, forced: str | None = None) -> Decision:
    """The fastest allowed mode ("compute" within ``TIE`` of it, then "marker"), or the
    ``forced`` one (a ValueError, with the reason, if it is not allowed). ``profile`` may
    be None when a mode is forced."""
    if forced is not None:
        return _forced(profile, allowed, forced)
    if profile is None:
        raise ValueError("autocache: decide needs a profile unless a mode is forced")
    times = estimates(profile, allowed)
    fastest = min(times.values())
    mode = next(m for m in MODES if m in times and times[m] <= fastest * (1 + TIE))
    return Decision(mode, _reason(mode, times, allowed), times)


def _forced(profile: Profile | None, allowed: dict, forced: str) -> Decision:
    if forced not in MODES:
        raise ValueError(f"autocache: mode={forced!r} is not one of {MODES}")
    if allowed.get(forced) is not None:
        raise ValueError(f"autocache(mode={forced!r}) cannot be followed: {allowed[forced]}")
    times = {} if profile is None else estimates(profile, allowed)
    return Decision(forced, f"forced by autocache(mode={forced!r})", times)


def _reason(mode: str, times: dict, allowed: dict) -> str:
    others = ", ".join(f"{m} {_duration(t)}" for m, t in times.items() if m != mode)
    text = f"{mode}: {_duration(times[mode])} per output element"
    if others:
        text += f" (vs {others}"
        text += f"; within {TIE:.0%} storing less wins)" if mode != _fastest(times) else ")"
    refused = [f"{m}: {why}" for m, why in allowed.items() if why is not None]
    return text + ("; not possible: " + "; ".join(refused) if refused else "")


def _fastest(times: dict) -> str:
    return min(times, key=times.get)


def _duration(seconds: float) -> str:
    if seconds >= 0.1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-4:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"
