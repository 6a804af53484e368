"""benchmarks/cedar/demand.py's table and its reading of explain() (the runs themselves need
a Ray cluster and minutes: ``python -m benchmarks.cedar.demand``)."""

from __future__ import annotations

import jdata
from benchmarks.cedar import demand


def test_the_planned_count_is_read_from_explain():
    ds = jdata.range(40).map(demand._work).with_options(jdata.Options(plan=jdata.AUTOTUNE))
    assert len(list(ds)) == 40
    assert demand._planned_workers(ds.explain()) == 0
    assert demand._planned_workers("  cut: after map(f), 3 remote workers (1,000/s: ...)") == 3
    assert demand._planned_workers("  cut: after map(f), 1 remote worker (500/s: ...)") == 1


def test_the_table_sets_the_plan_against_the_fewest_workers_that_meet_each_rate():
    rows = [{"rate": 100.0, "planned": 0, "planned_wait": 0.01, "pinned": {0: 0.0, 1: 0.01},
             "reason": []},
            {"rate": 600.0, "planned": 2, "planned_wait": 0.02,
             "pinned": {0: 0.3, 1: 0.1, 2: 0.02}, "reason": []},
            {"rate": 900.0, "planned": 2, "planned_wait": 0.2,
             "pinned": {0: 0.5, 1: 0.4, 2: 0.2}, "reason": []}]
    text = demand.table(rows)
    lines = text.splitlines()
    assert lines[2].split()[:4] == ["100", "0", "1%", "0"]
    assert lines[3].split()[:4] == ["600", "2", "2%", "2"]
    assert lines[4].split()[:4] == ["900", "2", "20%", "none"]
    assert "within 1 worker of the fewest that meet: 2 of 3" in text
    assert "0 workers at the lowest rate: yes" in text
