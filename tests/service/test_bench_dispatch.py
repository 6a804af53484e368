"""The lease-rate benchmark of the dispatcher's state and journal, at a small scale."""

import pytest

from benchmarks import service_dispatch

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow


def test_a_small_job_runs_to_its_end_through_a_worker_loss(tmp_path):
    result = service_dispatch.run(str(tmp_path / "journal.sqlite"), leases=None,
                                  num_splits=2_000, batch=16, clients=3, workers=4)
    assert result["finished"] and result["done"] == 2_000
    # The lost worker's leases were re-issued: more leases than splits.
    assert result["leases"] > 2_000 and result["leases_per_sec"] > 0


def test_the_report_gives_both_rates_and_a_restore_that_matches(tmp_path, capsys):
    result = service_dispatch.report(leases=3_000, num_splits=10**5, directory=str(tmp_path))
    assert result["journaled"]["leases"] >= 3_000 and not result["journaled"]["finished"]
    assert result["state_only"]["done"] == result["journaled"]["done"] > 0
    assert result["restore"]["done"] == result["journaled"]["done"]
    assert result["restore"]["records"] > 2 * result["journaled"]["requests"]
    assert "leases/s journaled" in capsys.readouterr().out
