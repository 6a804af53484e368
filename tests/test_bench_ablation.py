"""benchmarks/cedar/ablation.py: its levels as pipelines and its table (the runs take
minutes: ``python -m benchmarks.cedar.ablation``)."""

from __future__ import annotations

import types

import numpy as np

import jdata
from benchmarks import steady
from benchmarks.cedar import ablation
from jdata import optimize


def _double(x):
    return x * 2


def _pipeline(data, parallel=-1, engine="auto", repeat=False):
    ds = jdata.from_source(data)
    ds = ds.repeat() if repeat else ds
    return (ds.map(_double, num_parallel_calls=parallel).map(_double, num_parallel_calls=parallel)
            .batch(4).prefetch(jdata.AUTOTUNE).with_options(jdata.Options(engine=engine)))


_MODULE = types.SimpleNamespace(jdata_pipeline=_pipeline, SYSTEMS={})


def test_each_level_is_the_same_pipeline_with_more_of_the_optimizer(monkeypatch):
    data = list(range(12))
    expected = [np.arange(i, i + 4) * 4 for i in range(0, 12, 4)]
    fired, every_rule = {}, optimize.RULES
    for system in ablation.systems():  # each in a process of its own when measured
        monkeypatch.setattr(optimize, "RULES", every_rule)  # the level sets its own
        ds = steady._make(_MODULE, system)(data)
        for got, want in zip(ds, expected, strict=True):
            np.testing.assert_array_equal(got, want)
        fired[system[len(ablation.PREFIX):]] = ds.explain().splitlines()[0]
    assert fired["1 sequential"] == fired["2 + parallelism"] == "Plan (optimizer rules fired: none)"
    assert "map_fusion" not in fired["3 + reordering"]
    assert "map_fusion" in fired["5 + fusion"]


def test_the_table_gives_each_level_against_the_one_before_and_the_first():
    result = steady.Result("w", {}, {})
    for system, rate in zip(ablation.systems(), (10.0, 20.0, 20.0, 30.0), strict=False):
        result.samples[system] = [steady.Sample(0.1, rate)]
    result.errors[ablation.systems()[-1]] = "failed (exit 1): boom"
    lines = ablation.table(result).splitlines()
    assert lines[2].split() == ["1", "sequential", "10.0", "-", "-"]
    assert lines[3].split() == ["2", "+", "parallelism", "20.0", "2.00x", "2.00x"]
    assert lines[5].split() == ["4", "+", "offloading", "30.0", "1.50x", "3.00x"]
    assert lines[6].split()[:3] == ["5", "+", "fusion"] and "boom" in lines[6]
