"""Statistics of a running pipeline, as users read them: ``DatasetIterator.stats()``.

Every asynchronous stage (a parallel ``map``/``random_map``/``batch``/
``interleave``, a random-access subtree run by index on workers, a
``prefetch``) keeps an ``OpStats``, updated per chunk or per element on the
thread that already does the work, never with a lock. Synchronous ops run
inside those stages, so their cost is part of the stage's latency; timing
them one by one would add a timer per element per op, which is the overhead
jdata exists to avoid.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from jdata._extras import require


@dataclasses.dataclass(eq=False)  # compared by identity: a stage, not a value
class OpStats:
    """Counters of one asynchronous stage (mutated by its iterator)."""

    kind: str  # "workers" (a pool of threads or processes) or "prefetch"
    parallelism: int = 1
    buffer_size: int = 0  # prefetch: elements; workers: chunks in flight per worker
    label: str = ""
    tune_parallelism: bool = False
    tune_buffer: bool = False
    engine: str = "threads"
    engine_reason: str = ""
    elements: int = 0
    busy_sec: float = 0.0  # time producing elements, summed over workers
    wait_sec: float = 0.0  # time the consumer waited for an element
    buffered: int = 0  # elements ready or in flight
    bytes_per_element: float = 0.0
    held_bytes: int = 0  # what the stage holds now, against the process's memory budget
    started: float = dataclasses.field(default_factory=time.perf_counter)

    def record_bytes(self, element: Any) -> None:
        """Folds one sampled element's size into the running average."""
        size = element_bytes(element)
        old = self.bytes_per_element
        self.bytes_per_element = size if old == 0 else 0.9 * old + 0.1 * size


def element_bytes(element: Any) -> int:
    from jdata import _tree

    total = 0
    for leaf in _tree.leaves(element):
        if isinstance(leaf, (np.ndarray, np.generic)):
            total += leaf.nbytes
        elif isinstance(leaf, (bytes, str)):
            total += len(leaf)
        else:  # a Python scalar inside an op, before normalization
            total += 8
    return total


_COLUMNS = ("stage", "elements", "elem/s", "latency ms", "parallel", "buffer", "wait %",
            "engine")


class PipelineStats:
    """Per-stage statistics and the autotuner's decisions, at one moment.

    ``rows``: one dict per stage (output stage first) with ``stage``,
    ``elements``, ``throughput`` (elements/s since the stage started),
    ``latency_ms`` (time to produce one element on one worker),
    ``parallelism``, ``buffer_size``, ``buffered``, ``wait_fraction`` (of
    the consumer's time spent waiting for this stage), ``engine``,
    ``engine_reason``, and ``tuned_parallelism``/``tuned_buffer`` (whether
    the autotuner owns that knob). ``dropped``: per ``ignore_errors`` op,
    ``udf_errors`` and ``unreadable_records`` skipped so far, and
    ``unread_bytes``: bytes of files skipped unread after unreadable records
    whose damage hid the rest of their file (see ``jdata.DataError``). ``history``:
    the autotuner's changes, as dicts with ``time`` (seconds since the
    iterator started), ``stage``, ``knob``, ``old``, ``new`` and
    ``predicted_wait_ms`` (the model's expected wait per output element
    after the change). ``samples``: the knob values
    after every optimization round, for plotting.
    """

    def __init__(self, rows: list[dict], history: list[dict], samples: list[dict],
                 autotune: bool, dropped: list[dict] | None = None):
        self.rows, self.history, self.samples, self.autotune = rows, history, samples, autotune
        self.dropped = dropped or []

    @staticmethod
    def build(stats: list[OpStats], history: list[dict], samples: list[dict],
              autotune: bool, dropped: list[dict] | None = None) -> PipelineStats:
        now = time.perf_counter()
        rows = []
        for s in reversed(stats):  # stages register inputs first
            elapsed = max(now - s.started, 1e-9)
            rows.append({
                "stage": s.label, "elements": s.elements, "throughput": s.elements / elapsed,
                "latency_ms": 1e3 * s.busy_sec / s.elements if s.elements else 0.0,
                "parallelism": s.parallelism, "buffer_size": s.buffer_size,
                "buffered": s.buffered, "wait_fraction": min(1.0, s.wait_sec / elapsed),
                "engine": s.engine if s.kind == "workers" else "thread",
                "engine_reason": s.engine_reason,
                "tuned_parallelism": s.tune_parallelism, "tuned_buffer": s.tune_buffer})
        return PipelineStats(rows, list(history), list(samples), autotune, dropped)

    def table(self) -> str:
        """The rows as an aligned text table, then the engine reasons and the tuning."""
        cells = [_COLUMNS]
        for r in self.rows:
            p_mark = "*" if r["tuned_parallelism"] else ""
            b_mark = "*" if r["tuned_buffer"] else ""
            cells.append((r["stage"][:48], str(r["elements"]), f"{r['throughput']:,.0f}",
                          f"{r['latency_ms']:.3f}", f"{r['parallelism']}{p_mark}",
                          f"{r['buffered']}/{r['buffer_size']}{b_mark}",
                          f"{100 * r['wait_fraction']:.1f}", r["engine"]))
        widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        for r in self.rows:
            if r["engine_reason"]:
                lines.append(f"engine of {r['stage'][:48]}: {r['engine']} ({r['engine_reason']})")
        for d in self.dropped:
            lost = (f"; {d['unread_bytes']:,} bytes of files skipped unread after them"
                    if d["unread_bytes"] else "")
            lines.append(f"{d['stage']}: dropped {d['udf_errors'] + d['unreadable_records']} "
                         f"elements ({d['unreadable_records']} unreadable records, "
                         f"{d['udf_errors']} UDF errors){lost}")
        tuned = "on" if self.autotune else "off (Options(autotune=False))"
        lines.append(f"autotuner: {tuned}; * = tuned; {len(self.history)} changes")
        for h in self.history[-5:]:
            lines.append(f"  t={h['time']:.2f}s {h['stage'][:40]} {h['knob']} "
                         f"{h['old']} -> {h['new']}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def plot(self, path: str | None = None):
        """Plots each tuned knob over time (matplotlib, the ``plot`` extra).

        Returns the figure; with ``path``, also saves it there.
        """
        matplotlib = require("matplotlib", "PipelineStats.plot")
        if path is not None:
            matplotlib.use("Agg")
        plt = require("matplotlib.pyplot", "PipelineStats.plot")
        figure, axes = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
        stages = sorted({k for s in self.samples for k in s["knobs"]})
        times = [s["time"] for s in self.samples]
        for stage in stages:
            for axis, knob in zip(axes, ("parallelism", "buffer_size")):
                values = [s["knobs"].get(stage, {}).get(knob, np.nan) for s in self.samples]
                axis.step(times, values, where="post", label=stage[:40])
        axes[0].set_ylabel("parallelism")
        axes[1].set_ylabel("buffer size")
        axes[1].set_xlabel("seconds since the iterator started")
        axes[0].set_title("jdata autotuner decisions")
        if stages:
            axes[0].legend(fontsize="small")
        figure.tight_layout()
        if path is not None:
            figure.savefig(path)
        return figure
