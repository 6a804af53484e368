"""The engine choice's measurement, chunk by chunk (``engine.EngineChooser``): pure, no
threads, no clocks."""

from __future__ import annotations

import pytest

from jdata.runtime import engine


def _decide(running: float, cpu_per_element: float, bytes_per_element: float,
            busy_cores: float | None = None, waited_share: float = 0.9, threads: int = 2):
    """Feeds chunks of elements, each taking ``running`` threads' CPU over 0.1 s of wall
    time while the whole process keeps ``busy_cores`` busy (``running`` and a little for
    the consumer by default), until the chooser decides."""
    busy = running + 0.1 if busy_cores is None else busy_cores
    chooser = engine.EngineChooser(cpu_budget=2)
    for i in range(8):
        start = 0.1 * i
        cpu = running * 0.1
        elements = max(1, round(cpu / cpu_per_element))
        decision = chooser.record((start, start + 0.1, cpu), waited_share * 0.1, threads,
                                  elements, bytes_per_element, (start + 0.1, busy * start))
        if decision is not None:
            return decision
    raise AssertionError("no decision")


def test_a_gil_bound_udf_with_small_outputs_goes_to_processes():
    assert _decide(running=1.0, cpu_per_element=1e-3, bytes_per_element=4_000)[0] == "processes"


def test_a_gil_bound_udf_whose_outputs_cost_more_to_move_than_processes_gain_stays_on_threads():
    # SimCLR's views: 600 KB of float32 each for about 2.5 ms of kernels; in processes they
    # ran at 0.8x their thread speed.
    decision = _decide(running=1.0, cpu_per_element=2.5e-3, bytes_per_element=602_112)
    assert decision[0] == "threads"
    assert "602,112-byte output would take 19% of their time" in decision[1]


def test_a_gil_bound_udf_on_cores_the_process_keeps_busy_stays_on_threads():
    # Few threads at once because the consumer and other stages use the cores, not the
    # GIL: processes would find no idle core to run on.
    decision = _decide(running=0.9, cpu_per_element=1e-3, bytes_per_element=100,
                       busy_cores=1.9)
    assert decision[0] == "threads"
    assert "0.10 of 2 cores idle" in decision[1]
    assert _decide(running=0.9, cpu_per_element=1e-3, bytes_per_element=100,
                   busy_cores=1.0)[0] == "processes"


@pytest.mark.parametrize("bytes_per_element", [0.0, 602_112])
def test_a_udf_that_releases_the_gil_stays_on_threads_whatever_its_outputs(bytes_per_element):
    decision = _decide(running=1.9, cpu_per_element=1e-3, bytes_per_element=bytes_per_element)
    assert decision == ("threads", "1.90 of 2 worker threads ran at once over 4 chunks: "
                                   "the UDF releases the GIL enough for threads")


def test_the_consumer_not_waiting_keeps_threads_before_any_transfer_estimate():
    decision = _decide(running=1.0, cpu_per_element=1e-3, bytes_per_element=0,
                       waited_share=0.05)
    assert decision[0] == "threads" and "not the bottleneck" in decision[1]
