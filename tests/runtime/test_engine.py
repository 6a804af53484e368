"""The engine choice's measurement, chunk by chunk (``engine.EngineChooser``), and the
trial of processes where its model doubts (``engine.EngineTrial``): pure, no threads, no
clocks."""

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
    for i in range(20):
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


def test_a_gil_bound_udf_whose_outputs_cost_much_to_move_is_tried_on_processes():
    # SimCLR's views: 600 KB of float32 each for about 2.5 ms of kernels; in processes they
    # ran at 0.8x their thread speed. The model doubts, so processes are tried.
    decision = _decide(running=1.0, cpu_per_element=2.5e-3, bytes_per_element=602_112)
    assert decision[0] == "trial"
    assert "602,112-byte output would take 19% of their time" in decision[1]


def test_outputs_that_would_take_most_of_a_process_time_to_move_keep_threads_untried():
    decision = _decide(running=1.0, cpu_per_element=1e-4, bytes_per_element=602_112)
    assert decision[0] == "threads"
    assert "processes would run it only" in decision[1]


def test_a_gil_bound_udf_on_cores_the_process_keeps_busy_is_tried_on_processes():
    # Few threads at once because the consumer and other stages use the cores, or because
    # the UDF's native thread pools do (NumPy's BLAS): the model cannot tell, a trial can.
    decision = _decide(running=0.9, cpu_per_element=1e-3, bytes_per_element=100,
                       busy_cores=1.9)
    assert decision[0] == "trial"
    assert "0.10 of 2 cores idle" in decision[1]
    assert _decide(running=0.9, cpu_per_element=1e-3, bytes_per_element=100,
                   busy_cores=1.0)[0] == "processes"


def test_a_trial_waits_for_the_threads_rate_to_be_measured():
    chooser = engine.EngineChooser(cpu_budget=2)
    decisions = []
    for i in range(20):
        start = 0.05 * i
        decisions.append(chooser.record((start, start + 0.05, 0.045), 0.045, 2, 10, 100,
                                        (start + 0.05, 1.9 * start)))
    # the warm-up chunk, the chunk that starts the clock, then 4 chunks and 0.3 s: 6 chunks
    assert [i for i, d in enumerate(decisions) if d is not None][0] == 7, decisions
    assert decisions[7][0] == "trial"
    assert chooser.threads_rate == pytest.approx(6 * 10 / 0.3)


def _trial(threads_rate: float, rate: float, in_flight: int = 3) -> tuple[tuple, int]:
    """Feeds a trial chunks of 10 elements at ``rate`` until it decides: the decision and
    the chunks it took."""
    trial = engine.EngineTrial(threads_rate, "the doubt")
    trial.start(in_flight)
    for taken in range(1, 100):
        decision = trial.record(taken * 10 / rate, 10)
        if decision is not None:
            return decision, taken
    raise AssertionError("no decision")


def test_a_trial_keeps_processes_that_deliver_more():
    decision, _ = _trial(threads_rate=100, rate=200)
    assert decision == ("processes", "the UDF holds the GIL (the doubt); tried: 200 elements/s"
                                     " on worker processes against 100 on threads")


@pytest.mark.parametrize("rate", [50, 100, 109])
def test_a_trial_goes_back_to_threads_unless_processes_deliver_a_tenth_more(rate):
    decision, _ = _trial(threads_rate=100, rate=rate)
    assert decision[0] == "threads" and decision[1].startswith("the doubt; tried: ")


def test_a_trial_skips_the_chunks_in_flight_and_the_first_on_processes():
    # Those chunks were computed on threads, or by processes still importing: never timed.
    trial = engine.EngineTrial(100, "the doubt")
    trial.start(3)
    skipped = 3 + engine._TRIAL_WARMUP_CHUNKS
    for taken in range(skipped):
        assert trial.record(taken * 1e-6, 10_000) is None  # absurdly fast, and ignored
    decisions = [trial.record(1 + 0.2 * k, 10) for k in range(engine._TRIAL_CHUNKS + 1)]
    # the clock starts at the first chunk counted; 4 chunks of 10 elements over 0.8 s
    assert decisions[:-1] == [None] * engine._TRIAL_CHUNKS
    assert decisions[-1][0] == "threads" and "tried: 50 elements/s" in decisions[-1][1]


def test_a_trial_remembers_its_decision_for_later_iterators():
    key = "test_engine: a trial's key"
    trial = engine.EngineTrial(100, "the doubt", key)
    trial.start(0)
    decision = None
    for taken in range(1, 100):
        decision = decision or trial.record(taken * 0.05, 10)
    assert engine._decision(key) == decision and decision[0] == "processes"


@pytest.mark.parametrize("bytes_per_element", [0.0, 602_112])
def test_a_udf_that_releases_the_gil_stays_on_threads_whatever_its_outputs(bytes_per_element):
    decision = _decide(running=1.9, cpu_per_element=1e-3, bytes_per_element=bytes_per_element)
    assert decision == ("threads", "1.90 of 2 worker threads ran at once over 4 chunks: "
                                   "the UDF releases the GIL enough for threads")


def test_the_consumer_not_waiting_keeps_threads_before_any_transfer_estimate():
    decision = _decide(running=1.0, cpu_per_element=1e-3, bytes_per_element=0,
                       waited_share=0.05)
    assert decision[0] == "threads" and "not the bottleneck" in decision[1]
