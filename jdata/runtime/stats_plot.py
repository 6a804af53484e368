"""``PipelineStats`` drawn: a matplotlib figure (``plot``) and HTML tables (``html``)."""

from __future__ import annotations

import html as _html

import numpy as np

from jdata._extras import require

# The figure's axes, top to bottom, by their y labels (tests read them).
Y_LABELS = ("elements/s", "consumer in next() %", "parallelism", "buffer size", "op")


def new_figure(feature: str, path: str | None, size: tuple[float, float]):
    """A matplotlib figure that leaves the user's backend as it is: pyplot's (shown by the
    user's backend, a notebook's inline one) without ``path``; with one, a bare ``Figure``
    saved by its own canvas, so pyplot's backend and figure list stay as they were."""
    require("matplotlib", feature)
    figures = require("matplotlib.figure", feature)
    if path is None:
        return require("matplotlib.pyplot", feature).figure(figsize=size)
    return figures.Figure(figsize=size)


def plot(stats, path: str | None = None):
    """See ``PipelineStats.plot``."""
    figure = new_figure("PipelineStats.plot", path, (9, 12))
    axes = figure.subplots(5, 1, gridspec_kw={"height_ratios": [1, 1, 1, 1, 1.6]})
    _over_time(stats, axes[0], axes[1])
    _knobs(stats, axes[2], axes[3])
    _ops(stats, axes[4])
    for axis, label in zip(axes, Y_LABELS):
        axis.set_ylabel(label)
    for axis in axes[:3]:
        axis.sharex(axes[3])
    axes[3].set_xlabel("seconds since the iterator started")
    figure.tight_layout()
    if path is not None:
        figure.savefig(path)
    return figure


def _over_time(stats, rate_axis, wait_axis) -> None:
    samples = stats.throughput
    times = np.array([s["time"] for s in samples], dtype=float)
    elements = np.array([s["elements"] for s in samples], dtype=float)
    busy = np.array([s["busy_sec"] for s in samples], dtype=float)
    if len(samples) > 1:
        span = np.maximum(np.diff(times), 1e-9)
        rate_axis.step(times[1:], np.diff(elements) / span, where="pre")
        wait_axis.step(times[1:], 100 * np.clip(np.diff(busy) / span, 0, 1), where="pre")
    rate_axis.set_title("the pipeline's output over time")
    wait_axis.set_ylim(0, 105)


def _knobs(stats, parallel_axis, buffer_axis) -> None:
    stages = sorted({k for s in stats.samples for k in s["knobs"]})
    times = [s["time"] for s in stats.samples]
    for stage in stages:
        for axis, knob in ((parallel_axis, "parallelism"), (buffer_axis, "buffer_size")):
            values = [s["knobs"].get(stage, {}).get(knob, np.nan) for s in stats.samples]
            axis.step(times, values, where="post", label=stage)
    parallel_axis.set_title("jdata autotuner decisions")
    if stages:
        parallel_axis.legend(fontsize="small")


def _ops(stats, axis) -> None:
    ops = stats.ops[::-1]  # the output at the top
    names = [r["op"] for r in ops]
    axis.barh(range(len(ops)), [r["time_sec"] for r in ops])
    axis.set_yticks(range(len(ops)), names, fontsize="small")
    axis.set_xlabel("seconds (each op's own time, summed over its threads)")
    axis.set_title("time per op")


def html(stats) -> str:
    """See ``PipelineStats._repr_html_``."""
    parts = ["<div>"]
    if stats.rows:
        parts.append(_table(stats.stage_cells()))
    if stats.ops:
        parts.append(_table(stats.op_cells()))
    if stats.bottleneck:
        parts.append(f"<p><b>bottleneck:</b> {_html.escape(stats.bottleneck)}</p>")
    parts.append("</div>")
    return "".join(parts)


def _table(cells) -> str:
    head = "".join(f"<th>{_html.escape(c)}</th>" for c in cells[0])
    body = "".join("<tr>" + "".join(f"<td>{_html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in cells[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
