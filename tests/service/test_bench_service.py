"""The data service's benchmark (issue 13's targets), every part at a tiny scale."""

import pytest

from benchmarks import service, service_cachew, service_failure, service_sharing
from jdata.service import _ray

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
# Ray starts its processes with fork+exec while JAX's threads run: JAX warns, harmlessly.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]


@pytest.fixture(scope="module")
def result():
    ray = _ray.ray_module()
    assert not ray.is_initialized(), "another test left a Ray running"
    # The node removal's 3-node cluster is left out: tests/service/test_multinode.py and
    # the chaos run (benchmarks/service_chaos.py) remove nodes.
    out = service.report(scale=0.05, rounds=1, counts=(1, 2), warmup_sec=0.05, measure_sec=0.2,
                         sleep_sec=0.002, node_removal=False)
    assert not ray.is_initialized()  # the benchmark stopped the Ray it started
    return out


def test_scale_out_gives_a_rate_and_ratios_per_worker_count(result):
    rates = result["scale_out"]
    assert list(rates) == [1, 2]
    assert rates[1]["of_linear"] == 1.0  # the base of the linear ratio
    # At this scale a window holds a split or two: the rates are positive, not yet steady.
    assert all(r["elements_per_sec"] > 0 and r["of_ideal"] > 0 for r in rates.values())
    assert rates[2]["of_linear"] == pytest.approx(
        rates[2]["elements_per_sec"] / (2 * rates[1]["elements_per_sec"]))


def test_transfer_gives_the_service_and_ray_alone(result):
    rates = result["transfer"]
    assert set(rates) == {"service", "ray stream", "ray put/get"}
    assert all(gbps > 0 for gbps in rates.values())


def test_overhead_gives_first_batch_times_and_rates_local_and_through_the_service(result):
    runs = result["overhead"]
    assert list(runs) == ["local", "service 1w", "service 2w", "batch above, 1w"]
    assert all(0 < first < 60 and rate > 0 for first, rate in runs.values())


def test_both_kills_deliver_every_element_once_in_the_local_order(result):
    worker, dispatcher = result["failure"]["worker"], result["failure"]["dispatcher"]
    for run in (worker, dispatcher):
        assert run["elements"] == 500 and run["exactly_once"] and run["same_order"]
        assert 0 <= run["next_element_s"] <= run["stall_s"] < 60
    assert 0 < worker["replacement_up_s"] < 60  # the dispatcher replaced the killed worker
    assert 0 < dispatcher["dispatcher_back_s"] < 60  # and Ray restarted the dispatcher


def test_sharing_gives_each_jobs_rate_and_the_workers_cpu():
    ray = _ray.ray_module()
    assert not ray.is_initialized(), "another test left a Ray running"
    out = service_sharing.report(rounds=1, warmup_sec=0.3, measure_sec=0.7, steps=40)
    assert not ray.is_initialized()
    assert len(out["alone"]["rates"]) == 1 and len(out["shared"]["rates"]) == 4
    assert all(r > 0 for name in ("alone", "shared", "unshared") for r in out[name]["rates"])
    assert out["alone"]["cpu_per_sec"] > 0 and out["cpu_ratio"] > 0
    # Four jobs without sharing compute four streams: each gets a share of one worker.
    assert sum(out["unshared"]["rates"]) < 1.5 * out["unshared"]["computed_per_sec"]
    coordinated = out["coordinated"]
    assert coordinated["coordinated"]["spread"] == 0  # a round's batches: one bucket batch
    assert coordinated["uncoordinated"]["spread"] > 0 and coordinated["ratio"] > 0
    assert coordinated["faults"]["lock_step"]


def test_the_dispatchers_lease_rate_is_in_the_report(result):
    assert result["dispatch"]["journaled"]["leases"] >= 1000
    assert result["dispatch"]["journaled"]["leases_per_sec"] > 0


@pytest.mark.parametrize("got, message", [
    ([1, 2, 2], "1 elements missing, 1 extra or repeated"),
    ([1, 2], "1 elements missing, 0 extra"),
    ([1, 3, 2], "not in the local order from 1 on"),
])
def test_the_exactly_once_check_fails_on_a_lost_repeated_or_moved_element(got, message):
    service_failure.check_exactly_once([1, 2, 3], [1, 2, 3])
    with pytest.raises(AssertionError, match=message):
        service_failure.check_exactly_once(got, [1, 2, 3])


def test_the_cachew_benchmark_runs_its_parts_at_a_tiny_scale():
    ray = _ray.ray_module()
    assert not ray.is_initialized(), "another test left a Ray running"
    auto = service_cachew.report(ratios=(2,), run_sec=5.0, rate_sec=1.0)
    run, = auto["runs"]
    assert auto["rate"] > 0 and run["need"] == 2 and len(run["trace"]) >= 5
    assert run["in_order"] and run["elements"] > 0  # the halving part ran, nothing lost
    cached = service_cachew.report_autocache(rounds=1, n=48)
    assert not ray.is_initialized()
    for name in ("read", "before", "after", "grow"):
        medians = cached[name]["medians"]
        assert set(medians) == {"compute", "marker", "output", "auto"}
        assert all(seconds > 0 for seconds in medians.values())
        assert cached[name]["chosen"][0] in (None, "compute", "marker", "output")  # None: profiling
    assert (cached["second_job"]["state"], cached["second_job"]["mode"]) == ("get", "marker")
