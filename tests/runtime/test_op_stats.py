"""Per-op statistics: every op of explain()'s plan, its elements, time and share of the
consumer's wait, and the bottleneck hint (PipelineStats.ops, .bottleneck, the table, HTML)."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

import jdata
from jdata.runtime import pool

SLOW_SEC = 0.002


def slow_decode(x):
    time.sleep(SLOW_SEC)  # far longer than every other op's work per element
    return np.full((16,), x, np.float32)


def plus_one(x):
    return x + 1


def keep_even(x):
    return x[0] % 2 == 0


def explained_names(ds) -> list[str]:
    """The ``op: ...`` names of the plan that runs, output first."""
    plan = ds.explain().split("\n\n")[0]
    return re.findall(r"  op: (.+?)(?:  engine: .*)?$", plan, re.M)


def test_every_op_of_the_plan_has_a_row_named_as_explain_names_it():
    ds = jdata.range(200).map(slow_decode).map(plus_one).filter(keep_even).batch(8)
    with ds.iterator() as it:
        assert sum(len(b) for b in it) == 100
        stats = it.stats()
    names = [r["op"] for r in stats.ops]
    assert names == explained_names(ds)
    # The fused maps are named by their parts, in the order they apply.
    assert "map(slow_decode)+map(plus_one)" in names
    by_name = {r["op"]: r for r in stats.ops}
    assert by_name["range"]["elements"] == 200
    assert by_name["map(slow_decode)+map(plus_one)"]["elements"] == 200
    assert by_name["filter(keep_even)"]["elements"] == 100
    assert by_name["batch"]["elements"] == 13
    assert by_name["map(slow_decode)+map(plus_one)"]["bytes_per_element"] == 64
    for r in stats.ops:
        assert r["time_sec"] >= 0 and 0 <= r["wait_share"] <= 1
    assert sum(r["wait_share"] for r in stats.ops) == pytest.approx(1.0)


def test_the_slow_sequential_map_is_the_bottleneck_and_the_hint_says_what_to_do():
    ds = jdata.range(150).map(slow_decode).map(plus_one, num_parallel_calls=2).batch(10)
    with ds.iterator() as it:
        list(it)
        stats = it.stats()
    slow = next(r for r in stats.ops if r["op"] == "map(slow_decode)")
    # At least the sleeps (the time is sampled, then extrapolated: not to the microsecond).
    assert slow["time_sec"] > 0.5 * 150 * SLOW_SEC
    assert slow["wait_share"] > 0.5
    assert stats.bottleneck.startswith("`map(slow_decode)` takes ")
    assert "num_parallel_calls=jdata.AUTOTUNE" in stats.bottleneck
    table = stats.table()
    assert f"bottleneck: {stats.bottleneck}" in table
    assert "map(slow_decode)" in table.split("bottleneck:")[0]


def test_ops_inside_a_worker_stage_are_attributed_to_their_own_rows():
    ds = jdata.range(120).map(slow_decode, num_parallel_calls=2).map(plus_one).batch(6)
    with ds.iterator() as it:
        list(it)
        stats = it.stats()
    stage = next(r["stage"] for r in stats.rows if r["stage"].endswith("(by index)"))
    assert stage == "batch <- map(plus_one) <- map(slow_decode) <- range (by index)"
    slow = next(r for r in stats.ops if r["op"] == "map(slow_decode)")
    cheap = next(r for r in stats.ops if r["op"] == "map(plus_one)")
    assert slow["runs_in"] == cheap["runs_in"] == stage
    assert slow["elements"] == cheap["elements"] == 120
    assert slow["time_sec"] > 0.5 * 120 * SLOW_SEC > cheap["time_sec"]
    assert stats.bottleneck.startswith("`map(slow_decode)`")
    assert "num_parallel_calls=2" in stats.bottleneck  # already parallel: raise it


def test_names_are_never_cut():
    def a_decoder_whose_name_is_much_longer_than_forty_eight_characters(x):
        return x

    ds = jdata.range(50).map(a_decoder_whose_name_is_much_longer_than_forty_eight_characters,
                             num_parallel_calls=2).prefetch(2)
    with ds.iterator() as it:
        list(it)
        table = str(it.stats())
    name = "map(a_decoder_whose_name_is_much_longer_than_forty_eight_characters)"
    assert f"{name} <- range (by index)" in table  # the stage
    assert any(line.startswith(name + " ") for line in table.splitlines())  # the op


def test_repeated_names_are_numbered_in_the_order_they_apply():
    ds = jdata.range(10).map(lambda x: x + 1).filter(lambda x: x > 2).map(lambda x: x * 2)
    with ds.iterator() as it:
        list(it)
        names = [r["op"] for r in it.stats().ops]
    assert names == explained_names(ds)
    assert names[-1] == "range" and "map(<lambda>) #1" in names and "map(<lambda>) #2" in names
    assert names.index("map(<lambda>) #2") < names.index("map(<lambda>) #1")  # output first


def test_repr_html_is_an_escaped_table_of_stages_and_ops():
    ds = jdata.range(40).map(lambda x: x + 1, num_parallel_calls=2).prefetch(2)
    with ds.iterator() as it:
        list(it)
        page = it.stats()._repr_html_()
    assert page.count("<table>") == 2
    assert "<th>stage</th>" in page and "<th>op</th>" in page
    assert "map(&lt;lambda&gt;) &lt;- range (by index)" in page
    assert "<lambda>" not in page and "<b>bottleneck:</b>" in page


def _sleepy_job(items):
    time.sleep(0.01)
    return [pool.Outcome(x) for x in items]


def test_a_pool_counts_the_wait_for_the_first_chunk_done_in_completion_order():
    # The wait for cf.wait(FIRST_COMPLETED) was not counted: the engine note said
    # "waited for the UDF only 0%" of a run the consumer spent waiting.
    p = pool.Pool(_sleepy_job, parallelism=2)
    try:
        p.submit([1], [0])
        p.submit([2], [1])
        p.take(deterministic=False)
        p.take(deterministic=False)
        assert p.stats.wait_sec > 0.005  # at least the first chunk's sleep, of 0.01 s
    finally:
        p.shutdown()


def test_the_engine_note_says_how_long_the_consumer_waited_in_completion_order():
    def sleepy(x):
        time.sleep(0.003)
        return x

    options = jdata.Options(cpu_budget=2)
    ds = jdata.range(200).map(sleepy, num_parallel_calls=jdata.AUTOTUNE,
                              deterministic=False).with_options(options)
    with ds.iterator() as it:
        list(it)
        row = next(r for r in it.stats().rows if r["stage"].endswith("(by index)"))
    assert row["wait_fraction"] > 0.3
    assert "not the bottleneck" not in row["engine_reason"]


@pytest.mark.slow
def test_a_stage_on_worker_processes_gives_its_time_to_the_op_that_asked_for_workers():
    ds = jdata.range(60).map(slow_decode, num_parallel_calls=2).map(plus_one).with_options(
        jdata.Options(engine="processes"))
    with ds.iterator() as it:
        assert sum(1 for _ in it) == 60
        stats = it.stats()
    by_name = {r["op"]: r for r in stats.ops}
    # Counted only at the stage's output; timed as one, in the processes.
    assert by_name["options"]["elements"] == 60
    assert by_name["map(slow_decode)"]["elements"] is None
    assert by_name["map(slow_decode)"]["time_sec"] > 0.5 * 60 * SLOW_SEC
    assert by_name["map(plus_one)"]["time_sec"] == 0
    assert stats.bottleneck.startswith("`map(slow_decode)`")
    line = next(x for x in stats.table().splitlines() if x.startswith("map(slow_decode) "))
    assert line.split()[1] == "-"  # not counted
