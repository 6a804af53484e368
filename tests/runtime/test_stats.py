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
    assert [r["stage"] for r in rows] == ["Prefetch(buffer_size=3)",
                                         "batch <- map <- range (by index)"]
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
    assert "map <- range (by index)" in table
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
    assert [a.get_ylabel() for a in figure.axes] == ["parallelism", "buffer size"]
