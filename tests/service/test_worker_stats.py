"""Shares of time in ``svc.status()``, from the counters the workers and clients report,
without Ray: a worker's ``busy`` (the share of the time it made blocks, at most 1) and
``load`` (how many at once), a job's ``wait_fraction`` (the share its clients waited)."""

from __future__ import annotations

import types

import pytest

from jdata.runtime.stats import OpStats
from jdata.service import _dispatcher_stats, _waits, worker


@pytest.fixture
def clock(monkeypatch):
    """The worker's monotonic clock, set by the test."""
    now = [1000.0]
    monkeypatch.setattr(worker, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    return now


def _status(stats: worker.WorkerStats, samples: list) -> object:
    """The dispatcher's status of a worker whose counters it read at ``samples``."""
    seen = _dispatcher_stats.Stats()
    for counters in samples:
        seen.worker_seen("w", worker.WorkerInfo("w", 1, "node", counters, {}))
    return seen.worker_status("w", "running")


def test_two_reads_producing_side_by_side_are_all_the_time_busy_at_a_load_of_two(clock):
    # It said "155% busy": the seconds of blocks made side by side, summed over threads.
    stats = worker.WorkerStats()
    first = stats.snapshot()
    with stats.producing(), stats.producing():
        clock[0] += 10.0
    for _ in range(2):
        stats.add(100, 1000, 10.0)
    status = _status(stats, [first, stats.snapshot()])
    assert status.busy == pytest.approx(1.0)
    assert status.load == pytest.approx(2.0)


def test_a_block_begun_before_the_window_counts_only_its_time_within(clock):
    # A block's seconds were added when it was done: a block of 8 s finished 3 s into
    # the window counted 8 s there.
    stats = worker.WorkerStats()
    with stats.producing():
        clock[0] += 5.0
        first = stats.snapshot()
        clock[0] += 3.0
    stats.add(100, 1000, 8.0)
    clock[0] += 7.0
    status = _status(stats, [first, stats.snapshot()])
    assert status.busy == pytest.approx(0.3)
    assert status.load == pytest.approx(0.3)
    assert "30% busy" in str(_with_worker(status))


def _with_worker(status):
    from jdata.service._status import ProcessInfo, ServiceStatus

    return ServiceStatus(ProcessInfo(1, "node", 0), [status], [])


def test_a_clients_wait_is_reported_as_it_passes_not_when_it_ends(monkeypatch):
    # A wait was counted when it ended: one of 8 s, ended 2 s after a report, made the
    # next report's interval of 2 s hold 8 s of waiting (a wait_fraction of 400%).
    now = [100.0]
    monkeypatch.setattr(_waits, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    stats, seen = OpStats("workers"), _dispatcher_stats.Recent()

    def report():
        at, waited = _waits.waited(stats)
        seen.add("client", {"time": at, "wait_sec": waited})

    with _waits.waiting(stats):
        now[0] += 6.0
        report()
        now[0] += 1.0
    now[0] += 1.0
    report()
    assert seen.rate("client", "wait_sec", clock="time") == pytest.approx(0.5)
    assert stats.wait_sec == pytest.approx(7.0)  # it.stats() counts the same waits
