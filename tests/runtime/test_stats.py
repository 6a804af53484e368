"""DatasetIterator.stats(): the table, the data behind it, and the plot."""

from __future__ import annotations

import numpy as np

import jdata


def _work(x):
    return np.full((16,), x, np.float32)


def test_rows_count_elements_per_stage_output_first():
    ds = jdata.range(300).map(_work, num_parallel_calls=2).batch(10).prefetch(3)
    with ds.iterator() as it:
        assert sum(1 for _ in it) == 30
        rows = it.stats().rows
    # Named as explain() names the ops.
    assert [r["stage"] for r in rows] == ["prefetch",
                                         "batch <- map(_work) <- range (by index)"]
    assert [r["elements"] for r in rows] == [30, 30]
    assert rows[1]["parallelism"] == 2 and rows[1]["engine"] == "threads"
    assert rows[0]["buffer_size"] == 3
    assert abs(rows[0]["latency_ms"]) > 0 and rows[1]["latency_ms"] > 0
    for r in rows:
        assert 0.0 <= r["wait_fraction"] <= 1.0 and r["throughput"] > 0


def test_table_shows_every_stage_and_the_engine_reason():
    ds = jdata.range(100).map(_work, num_parallel_calls=2).with_options(
        jdata.Options(engine="processes"))
    with ds.iterator() as it:
        list(it)
        table = str(it.stats())
    header = table.splitlines()[0].split()
    assert header[:3] == ["stage", "elements", "elem/s"]
    assert "options <- map(_work) <- range (by index)" in table
    assert "processes (Options(engine='processes'))" in table


def test_plot_draws_the_tuned_knobs(tmp_path):
    ds = jdata.range(3000).map(_work, num_parallel_calls=jdata.AUTOTUNE).prefetch(
        jdata.AUTOTUNE)
    with ds.iterator() as it:
        list(it)
        stats = it.stats()
    path = tmp_path / "autotune.png"
    figure = stats.plot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [a.get_ylabel() for a in figure.axes] == [
        "elements/s", "consumer in next() %", "parallelism", "buffer size", "op"]


def test_plot_to_a_path_keeps_the_backend_and_draws_every_panel(tmp_path):
    import matplotlib
    import matplotlib.pyplot as plt

    ds = jdata.range(2000).map(_work, num_parallel_calls=2).batch(20)
    with ds.iterator() as it:
        list(it)
        stats = it.stats()
    backend, figures = matplotlib.get_backend(), plt.get_fignums()
    path = tmp_path / "stats.png"
    figure = stats.plot(str(path))
    # The user's backend and pyplot's figures are as they were (no matplotlib.use).
    assert matplotlib.get_backend() == backend and plt.get_fignums() == figures
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rate, wait, _, _, ops = figure.axes
    assert rate.get_title() == "the pipeline's output over time" and rate.lines
    assert wait.get_ylabel() == "consumer in next() %" and wait.lines
    # Time per op: a bar per op, named as explain() and stats().ops name them.
    assert ops.get_title() == "time per op"
    assert [t.get_text() for t in ops.get_yticklabels()] == [r["op"] for r in stats.ops][::-1]
    assert len(ops.patches) == len(stats.ops) == 4  # with the prefetch the optimizer adds


def test_throughput_samples_count_the_output_over_time():
    with jdata.range(3000).map(_work).iterator() as it:
        list(it)
        samples = it.stats().throughput
    assert samples and samples[0]["time"] >= 0
    times = [s["time"] for s in samples]
    elements = [s["elements"] for s in samples]
    assert times == sorted(times) and elements == sorted(elements)
    assert elements[-1] <= 3000
