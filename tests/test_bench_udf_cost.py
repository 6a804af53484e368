"""The UDF-cost sweep's harness, at a tiny scale."""

import statistics
import time

import pytest

from benchmarks import udf_cost

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow


def test_each_cost_is_measured_for_each_system_in_fresh_processes_and_tabled():
    result = udf_cost.run(costs=[1, 50], systems=("plain", "jdata", "nope"), rounds=2,
                          warmup=0.05, seconds=0.2, log=lambda line: None)
    assert set(result) == {1, 50}
    for runs in result.values():
        assert len(runs["plain"]) == len(runs["jdata"]) == 2
        assert all(rate > 0 for rate in runs["plain"] + runs["jdata"])
        assert "KeyError" in runs["nope"]
    text = udf_cost.table(result)
    ratio = statistics.median(result[50]["jdata"]) / statistics.median(result[50]["plain"])
    assert f"{ratio:11.2f}x" in text


def test_the_udf_holds_the_thread_for_its_cost_and_returns_its_input():
    udf = udf_cost.spin(0.002)
    start = time.perf_counter()
    assert [udf(i) for i in range(10)] == list(range(10))
    assert time.perf_counter() - start >= 0.02


def test_both_streams_give_batches_of_the_same_elements():
    plain, ours = udf_cost.stream("plain", 0.0), udf_cost.stream("jdata", 0.0)
    try:
        for _ in range(3):
            assert [int(x) for x in next(ours)] == next(plain)
    finally:
        ours.close()
