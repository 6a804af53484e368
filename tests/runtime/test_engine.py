"""The engine choice's measurement, chunk by chunk (``engine.EngineChooser``), and the
trial of processes where its model doubts (``engine.EngineTrial``): pure, no threads, no
clocks; and the clock of waits for a core (``engine.delay_clock``) on a machine kept busy."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jdata.runtime import engine


def _decide(running: float, cpu_per_element: float, bytes_per_element: float,
            busy_cores: float | None = None, waited_share: float = 0.9, threads: int = 2,
            queued: float = 0.0):
    """Feeds chunks of elements, each taking ``running`` threads' CPU over 0.1 s of wall
    time while the whole process keeps ``busy_cores`` busy (``running`` and a little for
    the consumer by default) and ``queued`` of its threads wait for a core, until the
    chooser decides."""
    busy = running + 0.1 if busy_cores is None else busy_cores
    now = [0.0]
    chooser = engine.EngineChooser(cpu_budget=2, delays=lambda: (now[0], queued * now[0]))
    for i in range(20):
        start = 0.1 * i
        now[0] = start + 0.1
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
    assert "602,112-byte output would take 6% of their time" in decision[1]


def test_outputs_that_would_take_most_of_a_process_time_to_move_keep_threads_untried():
    decision = _decide(running=1.0, cpu_per_element=1e-4, bytes_per_element=4_000_000)
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


def test_threads_kept_from_their_cores_by_their_own_process_are_tried_on_processes():
    # SimCLR's pair on 2 cores: 1.2 of 2 threads ran at once and 0.92 waited for a core
    # (OpenCV's pool, the GIL's handoffs): 350-440 pairs/s on threads, 540 on processes.
    # Its pairs' move: 4% of a process's time (8 ms of CPU a pair on threads).
    decision = _decide(running=1.2, cpu_per_element=8e-3, bytes_per_element=1_204_224,
                       busy_cores=1.7, queued=0.92)
    assert decision[0] == "trial"
    assert decision[1].startswith("1.20 of 2 worker threads ran at once (and 0.92 waited for "
                                  "a core) over 5 chunks; modelled, processes would run it")
    # Nearly all the threads on their cores, or cores to spare: threads, untried.
    assert _decide(running=1.7, cpu_per_element=3e-3, bytes_per_element=1_204_224,
                   busy_cores=1.9, queued=0.5)[1].endswith("releases the GIL enough for threads")
    assert _decide(running=1.2, cpu_per_element=3e-3, bytes_per_element=1_204_224,
                   busy_cores=1.3, queued=0.3)[1].endswith("releases the GIL enough for threads")


def test_a_trial_skips_each_workers_first_chunks():
    # A fresh worker's second chunk still pays for its first: a heap that grows (1.9 s
    # where later ones took 0.2 s on a VM backing memory on first touch).
    trial = engine.EngineTrial(100, "the doubt")
    trial.start(1, workers=3)
    for taken in range(1 + 3 * engine._TRIAL_WARMUP_CHUNKS):
        assert trial.record(taken * 10.0, 10) is None  # absurdly slow, and ignored
    # the clock starts at the first chunk counted; then 4 chunks of 20 over 0.4 s
    decisions = [trial.record(100 + 0.1 * k, 20) for k in range(engine._TRIAL_CHUNKS + 1)]
    assert decisions[:-1] == [None] * engine._TRIAL_CHUNKS
    assert decisions[-1][0] == "processes" and "tried: 200 elements/s" in decisions[-1][1]


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


def test_a_trial_cut_short_goes_on_in_the_next_iterator_from_what_it_measured():
    # Epochs shorter than a trial: each measured anew, and never decided.
    key = "test_engine: a paused trial's key"
    trial = engine.EngineTrial(100, "the doubt", key)
    trial.start(0)
    for taken in range(engine._TRIAL_WARMUP_CHUNKS):
        assert trial.record(4 + taken * 1e-6, 10_000) is None  # warm-up: skipped
    for taken in range(3):  # one take starts the clock, 2 chunks of 10 over 0.2 s: too few
        assert trial.record(5 + 0.1 * taken, 10) is None
    trial.pause()
    assert engine._decision(key) is None
    resumed = engine.resume_trial(key)
    assert resumed is trial and engine.resume_trial(key) is None  # one iterator takes it
    resumed.start(1)
    assert resumed.record(100.0, 10_000) is None  # in flight on threads: skipped
    for taken in range(engine._TRIAL_WARMUP_CHUNKS):
        assert resumed.record(100.001 + taken * 1e-6, 10_000) is None  # warm-up: skipped
    # The time between the iterators (95 s) does not count: 2 + 2 chunks of 10 over 0.4 s.
    decisions = [resumed.record(200 + 0.1 * k, 10) for k in range(3)]
    assert decisions[:2] == [None, None]
    assert decisions[2] == ("threads", "the doubt; tried: 100 elements/s on worker "
                                       "processes against 100 on threads")
    assert engine._decision(key) == decisions[2]


def test_a_trial_without_a_key_is_not_resumed():
    trial = engine.EngineTrial(100, "the doubt")
    trial.pause()
    assert engine.resume_trial(None) is None


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
    assert f"over {engine._IDLE_CONSUMER_WINDOWS} windows" in decision[1]


def test_a_consumer_busy_only_at_first_does_not_keep_threads():
    # Cedar's ASR: the first window found the consumer busy with its first batch (17% of
    # the time waiting), and that one window kept threads, at half the processes' speed.
    chooser = engine.EngineChooser(cpu_budget=2)
    decisions = []
    for i in range(30):
        start = 0.1 * i
        waited = 0.017 if i < 6 else 0.09
        decisions.append(chooser.record((start, start + 0.1, 0.1), waited, 2, 100, 100,
                                        (start + 0.1, 1.1 * start)))
        if decisions[-1] is not None:
            break
    assert decisions[-1] == ("processes", "1.00 of 2 worker threads ran at once over 4 "
                                          "chunks: the UDF holds the GIL"), decisions


def test_a_udf_that_mostly_waits_for_io_stays_on_threads():
    decision = _decide(running=0.2, cpu_per_element=1e-3, bytes_per_element=100)
    assert decision == ("threads", "0.20 of 2 worker threads ran at once over 4 chunks: "
                                   "the UDF mostly waits (I/O), which threads overlap")


def test_threads_waiting_for_a_core_are_contention_not_io():
    # Cedar's ASR while another process kept both cores busy: 0.26 threads on CPU read as
    # I/O and kept threads, a decision every later iterator inherited. Threads waiting for a
    # core would have run: the UDF holds the GIL.
    decision = _decide(running=0.26, cpu_per_element=1e-3, bytes_per_element=100,
                       busy_cores=0.4, queued=1.2)
    assert decision == ("processes", "0.26 of 2 worker threads ran at once (and 1.20 waited "
                                     "for a core) over 4 chunks: the UDF holds the GIL")
    # Where no thread waited for a core, the same reading is I/O.
    assert _decide(running=0.26, cpu_per_element=1e-3, bytes_per_element=100,
                   busy_cores=0.4)[1].endswith("the UDF mostly waits (I/O), which threads overlap")


def test_a_sleeping_udf_with_a_few_waits_for_a_core_is_io():
    # A CI run's reading of time.sleep(0.002) per element: its few waits for a core (the
    # consumer's among them) moved it to processes, "the UDF holds the GIL".
    decision = _decide(running=0.11, cpu_per_element=1e-4, bytes_per_element=100,
                       busy_cores=0.3, queued=0.24)
    assert decision == ("threads", "0.11 of 2 worker threads ran at once (and 0.24 waited "
                                   "for a core) over 4 chunks: the UDF mostly waits (I/O), "
                                   "which threads overlap")


def test_a_few_milliseconds_that_read_as_waiting_do_not_keep_threads():
    # A CI run: a GIL-bound UDF's first 8 chunks of 2 ms read 0.12 on CPU and 0.26 waiting
    # for a core (another process's burst), as a sleeping UDF reads, and kept threads.
    chooser = engine.EngineChooser(cpu_budget=2)
    decisions, start = [], 0.0
    for i in range(40):
        seconds, running = (0.002, 0.12) if i < 10 else (0.05, 1.0)
        decisions.append(chooser.record((start, start + seconds, running * seconds),
                                        0.9 * seconds, 2, 10, 100,
                                        (start + seconds, 1.1 * (start + seconds))))
        start += seconds
        if decisions[-1] is not None:
            break
    assert decisions[-1][0] == "processes", decisions
    assert decisions[-1][1].endswith("the UDF holds the GIL")
    # Read for long enough, the same reading is a UDF that waits.
    assert _decide(running=0.12, cpu_per_element=1e-4, bytes_per_element=100,
                   busy_cores=0.3)[1].endswith("the UDF mostly waits (I/O), which threads overlap")


def test_the_delay_clock_counts_the_waits_for_a_core_of_a_busy_machine():
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(2 * (os.cpu_count() or 1))]
    try:
        wall0, delay0 = engine.delay_clock()
        deadline = time.perf_counter() + 60
        while True:  # this thread, runnable throughout, waits for a core among the hogs
            sum(range(100_000))
            wall, delay = engine.delay_clock()
            if delay - delay0 > 0.05 or wall > deadline:
                break
        assert delay - delay0 > 0.05, "no wait for a core with every core busy"
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
