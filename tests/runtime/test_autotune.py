"""The autotuner's model and search, and its effect on a running pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import jdata
from jdata.runtime import autotune
from jdata.runtime.stats import OpStats

_MB = 1 << 20


def _stage(kind="workers", work=0.01, consumer=0.002, parallelism=1, buffer=2,
           tune_parallelism=True, tune_buffer=False, bytes_per_element=0.0, weight=1.0):
    stats = OpStats(kind, parallelism, buffer, tune_parallelism=tune_parallelism,
                    tune_buffer=tune_buffer, bytes_per_element=bytes_per_element)
    # 100 elements in 100 * consumer seconds of the consumer's own time, no waits.
    return autotune._Stage(stats, 100, 100 * work, 0.0, 100 * consumer, weight)


_NO_LIMIT = 1 << 40


def _tuner(cpu=4):
    return autotune.Autotuner(True, cpu)


def test_empty_probability_is_the_mm1k_formula():
    assert autotune.empty_probability(0.5, 1) == pytest.approx(0.5 / 0.75)
    assert autotune.empty_probability(1.0, 3) == pytest.approx(0.25)
    assert autotune.empty_probability(1e9, 4) == 0.0  # an instant producer
    assert autotune.empty_probability(1e-9, 4) == pytest.approx(1.0)  # a stalled one
    fast_producer = [autotune.empty_probability(2.0, k) for k in (1, 2, 4, 8)]
    assert fast_producer == sorted(fast_producer, reverse=True)  # more buffer, fewer waits
    assert fast_producer[-1] == pytest.approx(1 / 511)


def test_a_slow_stage_gets_workers_up_to_the_cpu_budget():
    stage = _stage(work=0.010, consumer=0.002)  # one worker is 5x too slow
    best = _tuner(cpu=4)._search([stage], _NO_LIMIT)
    assert best[id(stage)][0] == 4


def test_a_stage_faster_than_its_consumer_keeps_one_worker():
    stage = _stage(work=0.001, consumer=0.020)
    best = _tuner(cpu=8)._search([stage], _NO_LIMIT)
    assert best[id(stage)][0] == 1


def test_workers_of_all_stages_share_the_cpu_budget():
    stages = [_stage(work=0.010), _stage(work=0.020)]
    best = _tuner(cpu=3)._search(stages, _NO_LIMIT)
    assert sum(best[id(s)][0] for s in stages) == 3
    assert best[id(stages[1])][0] >= best[id(stages[0])][0]  # the slower one gets more


def test_buffers_never_exceed_the_ram_budget():
    stage = _stage(kind="prefetch", work=0.002, consumer=0.002, parallelism=1, buffer=1,
                   tune_parallelism=False, tune_buffer=True, bytes_per_element=_MB)
    best = _tuner()._search([stage], 5 * _MB)
    assert best[id(stage)][1] == 4  # 8 would be 8 MB
    unlimited = _tuner()._search([stage], _NO_LIMIT)
    assert unlimited[id(stage)][1] > 4


def test_fixed_knobs_are_left_alone():
    stage = _stage(work=0.010, parallelism=3, tune_parallelism=False)
    assert _tuner(cpu=8)._search([stage], _NO_LIMIT)[id(stage)] == (3, 2)


def _python_work(x):
    total = 0
    for i in range(500):
        total += i
    return np.int64(total) + x


def test_a_running_pipeline_is_tuned_within_its_budget_and_reports_its_rounds():
    ds = (jdata.range(4000).map(_python_work, num_parallel_calls=jdata.AUTOTUNE)
          .prefetch(jdata.AUTOTUNE).with_options(jdata.Options(cpu_budget=2,
                                                               engine="threads")))
    with ds.iterator() as it:
        assert [int(x) for x in it] == [int(_python_work(i)) for i in range(4000)]
        stats = it.stats()
    assert stats.autotune
    assert all(row["tuned_parallelism"] for row in stats.rows if row["engine"] != "thread")
    assert all(row["tuned_buffer"] for row in stats.rows if row["engine"] == "thread")
    for sample in stats.samples:
        assert sum(k["parallelism"] for label, k in sample["knobs"].items()
                   if label.startswith("map")) <= 2
    for change in stats.history:
        assert change["new"] != change["old"] and change["new"] >= 1


def test_autotune_false_turns_the_tuner_off():
    ds = (jdata.range(2000).map(_python_work, num_parallel_calls=jdata.AUTOTUNE)
          .prefetch(jdata.AUTOTUNE).with_options(jdata.Options(autotune=False)))
    with ds.iterator() as it:
        list(it)
        stats = it.stats()
        assert it._ctx.autotuner()._thread is None
    assert not stats.autotune and stats.history == [] and stats.samples == []
    assert not any(row["tuned_parallelism"] or row["tuned_buffer"] for row in stats.rows)
    assert "autotuner: off" in stats.table()
