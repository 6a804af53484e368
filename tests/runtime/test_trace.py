"""Profiler traces: a jax.profiler trace holds a slice per op and per stage, named as
explain() and stats() name them; with no trace, the hot path does not ask for one."""

from __future__ import annotations

import gzip
import json
import pathlib

import jax
import numpy as np

import jdata
from jdata.runtime import trace


def decode(x):
    return np.full((8,), x, np.float32)


def keep(x):
    return x[0] % 3 != 0


def _slice_names(directory: pathlib.Path) -> set[str]:
    """The names of the events in the trace.json.gz the profiler wrote under ``directory``."""
    files = list(directory.rglob("*.trace.json.gz"))
    assert files, f"no trace written under {directory}: {list(directory.rglob('*'))}"
    names = set()
    for path in files:
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        names.update(e.get("name", "") for e in events)
    return names


def test_a_trace_holds_a_slice_per_op_and_per_stage(tmp_path):
    ds = (jdata.range(400).map(decode).filter(keep).batch(16)
          .map(lambda b: b * 2, num_parallel_calls=2).prefetch(2))
    with jax.profiler.trace(str(tmp_path)), ds.iterator() as it:
        assert sum(len(b) for b in it) == 266
        stats = it.stats()
    names = _slice_names(tmp_path)
    ops = [r["op"] for r in stats.ops]
    assert {"map(decode)", "filter(keep)", "batch", "map(<lambda>)", "prefetch",
            "range"} <= set(ops)
    assert set(ops) <= names  # every op, by the name explain() gives it
    assert {r["stage"] for r in stats.rows} <= names  # and every stage


def test_ops_inside_a_worker_stage_have_slices_on_the_workers(tmp_path):
    ds = jdata.range(64).map(decode, num_parallel_calls=2).batch(8)
    with jax.profiler.trace(str(tmp_path)), ds.iterator() as it:
        list(it)
    names = _slice_names(tmp_path)
    assert {"map(decode)", "batch", "range", "batch <- map(decode) <- range (by index)"} <= names


def test_without_a_trace_elements_do_not_ask_for_one(monkeypatch):
    asked = []
    real = trace.enabled
    monkeypatch.setattr(trace, "enabled", lambda: asked.append(1) or real())
    n = 20_000
    with jdata.range(n).map(lambda x: x + 1).iterator() as it:  # a call per element per op
        assert sum(1 for _ in it) == n
    # Of the 2n calls of the map's and the range's readers, only the sampled ones ask:
    # each op's first 16, then about one call in 32.
    assert 0 < len(asked) < 2 * n / 8
