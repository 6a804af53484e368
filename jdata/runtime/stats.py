"""Statistics of a running pipeline, as users read them: ``DatasetIterator.stats()``.

Every asynchronous stage (a parallel ``map``/``random_map``/``batch``/
``interleave``, a random-access subtree run by index on workers, a
``prefetch``) keeps an ``OpStats``, updated per chunk or per element on the
thread that already does the work, never with a lock. Every op, synchronous
ones too, is counted by ``jdata.runtime.opstats`` (exact elements, sampled
times, so that no op pays a timer per element) and summarized per op by
``jdata._opsummary``; ``PipelineStats`` holds both, and draws them
through ``jdata.runtime.stats_plot``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np



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
    cpu_sec: float = 0.0  # of which on CPU (worker threads; 0 where not measured)
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
_OP_COLUMNS = ("op", "elements", "time s", "us/elem", "bytes/elem", "wait %", "runs in")


class PipelineStats:
    """Per-stage and per-op statistics and the autotuner's decisions, at one moment.

    ``rows``: one dict per stage (output stage first) with ``stage``,
    ``elements``, ``throughput`` (elements/s since the stage started),
    ``latency_ms`` (time to produce one element on one worker),
    ``parallelism``, ``buffer_size``, ``buffered``, ``wait_fraction`` (of
    the consumer's time spent waiting for this stage), ``engine``,
    ``engine_reason``, and ``tuned_parallelism``/``tuned_buffer`` (whether
    the autotuner owns that knob). ``ops``: one dict per op of the plan
    (output first, named as ``explain()`` names them) with ``op``,
    ``elements`` (exact; None for an op inside worker processes, which
    a stage on ``engine="processes"`` times as one, or on the service's
    workers, above a ``distribute``), ``time_sec`` (the op's own time, its inputs' left
    out, summed over the threads that ran it; sampled), ``bytes_per_element``
    and ``bytes`` (sampled sizes), ``wait_share`` (its part of the time the
    consumer spent in ``next()``) and ``runs_in`` (the stage whose threads
    run it, or the consumer's thread). ``bottleneck``: a one-line hint naming
    the op with the largest ``wait_share`` and what to do about it, or None.
    ``dropped``: per ``ignore_errors`` op,
    ``udf_errors`` and ``unreadable_records`` (``DataError``: records of
    files, and elements a function could not decode) skipped so far, and
    ``unread_bytes``: bytes of files skipped unread after unreadable records
    whose damage hid the rest of their file (see ``jdata.DataError``). ``history``:
    the autotuner's changes, as dicts with ``time`` (seconds since the
    iterator started), ``stage``, ``knob``, ``old``, ``new`` and
    ``predicted_wait_ms`` (the model's expected wait per output element
    after the change). ``samples``: the knob values
    after every optimization round, for plotting. ``throughput``: the
    output's ``elements`` and the consumer's ``busy_sec`` (time in
    ``next()``) over ``time``, for plotting.
    """

    def __init__(self, rows: list[dict], history: list[dict], samples: list[dict],
                 autotune: bool, dropped: list[dict] | None = None,
                 ops: list[dict] | None = None, bottleneck: str | None = None,
                 throughput: list[dict] | None = None):
        self.rows, self.history, self.samples, self.autotune = rows, history, samples, autotune
        self.dropped = dropped or []
        self.ops, self.bottleneck = ops or [], bottleneck
        self.throughput = throughput or []

    @staticmethod
    def build(stats: list[OpStats], history: list[dict], samples: list[dict],
              autotune: bool, dropped: list[dict] | None = None,
              ops: list[dict] | None = None, bottleneck: str | None = None,
              throughput: list[dict] | None = None) -> PipelineStats:
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
        return PipelineStats(rows, list(history), list(samples), autotune, dropped, ops,
                             bottleneck, list(throughput or ()))

    def stage_cells(self) -> list[tuple[str, ...]]:
        """The stage table's cells, the header first (``table`` and ``_repr_html_``)."""
        cells = [_COLUMNS]
        for r in self.rows:
            p_mark = "*" if r["tuned_parallelism"] else ""
            b_mark = "*" if r["tuned_buffer"] else ""
            cells.append((r["stage"], str(r["elements"]), f"{r['throughput']:,.0f}",
                          f"{r['latency_ms']:.3f}", f"{r['parallelism']}{p_mark}",
                          f"{r['buffered']}/{r['buffer_size']}{b_mark}",
                          f"{100 * r['wait_fraction']:.1f}", r["engine"]))
        return cells

    def op_cells(self) -> list[tuple[str, ...]]:
        """The op table's cells, the header first."""
        cells = [_OP_COLUMNS]
        for r in self.ops:
            per = 1e6 * r["time_sec"] / r["elements"] if r["elements"] else 0.0
            elements = "-" if r["elements"] is None else str(r["elements"])
            cells.append((r["op"], elements, f"{r['time_sec']:.3f}", f"{per:.1f}",
                          f"{r['bytes_per_element']:,.0f}", f"{100 * r['wait_share']:.1f}",
                          r["runs_in"]))
        return cells

    def table(self) -> str:
        """The stages, the ops and the bottleneck as aligned text, then the engine reasons
        and the tuning. Names are never cut: they are the names ``explain()`` prints."""
        lines = _aligned(self.stage_cells()) if self.rows else []
        for r in self.rows:
            if r["engine_reason"]:
                lines.append(f"engine of {r['stage']}: {r['engine']} ({r['engine_reason']})")
        if self.ops:
            lines += [""] + _aligned(self.op_cells())
        if self.bottleneck:
            lines.append(f"bottleneck: {self.bottleneck}")
        for d in self.dropped:
            lost = (f"; {d['unread_bytes']:,} bytes of files skipped unread after them"
                    if d["unread_bytes"] else "")
            lines.append(f"{d['stage']}: dropped {d['udf_errors'] + d['unreadable_records']} "
                         f"elements ({d['unreadable_records']} unreadable records, "
                         f"{d['udf_errors']} UDF errors){lost}")
        tuned = "on" if self.autotune else "off (Options(autotune=False))"
        lines.append(f"autotuner: {tuned}; * = tuned; {len(self.history)} changes")
        for h in self.history[-5:]:
            lines.append(f"  t={h['time']:.2f}s {h['stage']} {h['knob']} "
                         f"{h['old']} -> {h['new']}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        """The stage and op tables as HTML, for notebooks (every name escaped)."""
        from jdata.runtime import stats_plot

        return stats_plot.html(self)

    def plot(self, path: str | None = None):
        """Plots throughput and the consumer's wait over time, each op's time, and the tuned
        knobs over time (matplotlib, the ``plot`` extra).

        Returns the ``matplotlib.figure.Figure``; with ``path``, also saves it
        there. It never changes matplotlib's backend: in a notebook the
        figure shows as the cell's result.
        """
        from jdata.runtime import stats_plot

        return stats_plot.plot(self, path)


def _aligned(cells: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
