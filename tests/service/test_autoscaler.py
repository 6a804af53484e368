"""The autoscaler's policy, without Ray, against a simulated job: consumers that want D
elements/s and workers that make r each. It settles on ceil(D/r) (Cedar's demand-driven
check on Cachew's policy), follows a change of demand, and stays within its bounds."""

import math

import numpy as np
import pytest

import jdata
from jdata.service import autoscaler
from jdata.service.autoscaler import Policy, Sample

INTERVALS_PER_MINUTE = 12  # a sample every 5 s


def _sample(n, demand, rate, noise=0.0, rng=None):
    throughput = min(demand, n * rate)
    jitter = 1.0 + (rng.uniform(-noise, noise) if rng is not None else 0.0)
    return Sample(workers=n, batch_sec=jitter / throughput, demand=demand, capacity=rate,
                  queue_fill=max(0.0, 1.0 - demand / (n * rate)))


def _run(policy, n, demand, rate, intervals, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    counts, reasons = [], []
    for _ in range(intervals):
        decision = policy.observe(_sample(n, demand, rate, noise, rng))
        n = decision.workers
        counts.append(n)
        reasons.append(decision.reason)
    return counts, reasons


@pytest.mark.parametrize("ratio", [1, 3, 6, 2.5, 5.2])
@pytest.mark.parametrize("start", [1, 4, 12])
def test_it_settles_on_the_workers_the_demand_needs_within_a_minute(ratio, start):
    rate = 100.0
    counts, reasons = _run(Policy(max_workers=32), start, ratio * rate, rate,
                           INTERVALS_PER_MINUTE)
    need = math.ceil(ratio)
    settled = counts[-3:]
    assert len(set(settled)) == 1 and abs(settled[0] - need) <= 1, (counts, reasons)
    assert "estimate" in reasons[0]


def test_with_noisy_batch_times_it_stays_within_one_of_the_need():
    counts, _ = _run(Policy(max_workers=32), 1, 600.0, 100.0, 3 * INTERVALS_PER_MINUTE,
                     noise=0.02, seed=3)
    assert all(abs(n - 6) <= 1 for n in counts[-INTERVALS_PER_MINUTE:])


def test_when_demand_halves_it_scales_down_within_a_minute():
    policy = Policy(max_workers=32)
    counts, _ = _run(policy, 1, 600.0, 100.0, INTERVALS_PER_MINUTE)
    assert abs(counts[-1] - 6) <= 1 and policy.phase == "converged"
    counts, reasons = _run(policy, counts[-1], 300.0, 100.0, INTERVALS_PER_MINUTE)
    assert abs(counts[-1] - 3) <= 1 and len(set(counts[-3:])) == 1
    assert any(r.startswith("re-triggered: batch time") for r in reasons), reasons


def test_steps_are_bounded_and_counts_stay_within_min_and_max():
    policy = Policy(min_workers=2, max_workers=10, max_step=3)
    counts, reasons = _run(policy, 2, 5000.0, 100.0, INTERVALS_PER_MINUTE)
    assert all(2 <= n <= 10 for n in counts)
    assert all(abs(b - a) <= 3 for a, b in zip([2] + counts, counts))
    assert counts[-1] == 10 and "a step of at most 3" in reasons[0]
    low, _ = _run(Policy(min_workers=2, max_workers=10), 5, 10.0, 100.0, INTERVALS_PER_MINUTE)
    assert low[-1] == 2


def test_a_converged_job_stays_put_and_every_decision_says_why():
    policy = Policy()
    counts, reasons = _run(policy, 3, 300.0, 100.0, 3 * INTERVALS_PER_MINUTE)
    assert counts[-INTERVALS_PER_MINUTE:] == [counts[-1]] * INTERVALS_PER_MINUTE
    assert all(reasons) and reasons[-1] == "steady"


def test_no_measurement_keeps_the_count():
    policy = Policy(min_workers=1)
    assert policy.observe(Sample(3, 0.0, 0.0, 0.0)).workers == 3
    assert policy.observe(Sample(0, 1.0, 10.0, 1.0)).workers == 1


@pytest.mark.parametrize("kwargs", [{"min_workers": 0}, {"min_workers": 5, "max_workers": 4},
                                    {"max_step": 0}])
def test_bad_bounds(kwargs):
    with pytest.raises(ValueError, match="autoscaler"):
        Policy(**kwargs)


def test_the_thresholds_are_cachews():
    assert (autoscaler.UP_GAIN, autoscaler.DOWN_LOSS, autoscaler.RETRIGGER) == (0.07, 0.03, 1.5)


def _client(t, elements, waited, buffered=0, capacity=100):
    return {"time": t, "elements": elements, "consumer_wait_sec": waited,
            "buffered": buffered, "capacity": capacity}


def test_measure_turns_counters_into_batch_time_demand_and_capacity():
    # 400 elements in 4 s, 2 of them waiting: 10 ms a batch, 200/s wanted.
    clients = [(_client(10.0, 100, 1.0), _client(14.0, 500, 3.0, buffered=25))]
    producers = [({"elements": 0, "active_sec": 0.0}, {"elements": 300, "active_sec": 3.0}),
                 ({"elements": 50, "active_sec": 1.0}, {"elements": 150, "active_sec": 2.0})]
    s = autoscaler.measure(2, clients, producers)
    assert s.workers == 2 and s.batch_sec == pytest.approx(0.01)
    assert s.demand == pytest.approx(200.0) and s.capacity == pytest.approx(100.0)
    assert s.queue_fill == pytest.approx(0.25)
    # Shared jobs' windows produce outside reads: their busy time stands in.
    shared = [({"elements": 0, "busy_sec": 0.0}, {"elements": 80, "busy_sec": 2.0})]
    assert autoscaler.measure(1, clients, shared).capacity == pytest.approx(40.0)
    idle = autoscaler.measure(1, [(_client(0, 5, 0), _client(4, 5, 0))], [])
    assert idle.batch_sec == 0.0 and idle.demand == 0.0 and idle.capacity == 0.0


def test_the_driver_samples_only_steady_intervals_and_keeps_its_decisions():
    driver = autoscaler.Driver(Policy(max_workers=8), sample_sec=4.0, settle_sec=1.0)
    workers = {"w": {"elements": 0, "active_sec": 0.0}}

    def tick(now, elements, steady=True, n=1):
        made = {"w": {"elements": elements, "active_sec": now}}
        return driver.tick(now, n, steady, {"c": _client(now, elements, now / 2)}, made)

    assert driver.tick(0.0, 1, True, {}, workers) is None  # settling
    assert tick(1.0, 0) is None  # the interval starts
    assert tick(3.0, 200) is None  # not 4 s yet
    decision = tick(5.0, 400)  # 100/s, waiting half the time: 200/s wanted, 100/s made
    assert decision is not None and decision.workers == 2 and decision.phase == "up"
    assert [h["target"] for h in driver.history] == [2]
    # The count changes: nothing is sampled until it is steady again and settled.
    assert tick(6.0, 500, steady=False, n=2) is None
    assert tick(6.5, 550, n=2) is None and tick(7.5, 650, n=2) is None
    assert tick(10.0, 900, n=2) is None  # 2.5 s of sample so far
    probe = tick(11.6, 1050, n=2)
    assert probe.workers == 3 and "probing up from 2" in probe.reason
    assert len(driver.history) == 2
    # An idle interval (no element consumed) decides nothing worth keeping.
    assert tick(12.0, 1050, n=3) is None and tick(13.0, 1050, n=3) is None
    idle = tick(17.5, 1050, n=3)
    assert idle.workers == 3 and "no measurement" in idle.reason and len(driver.history) == 2


def test_a_probe_whose_worker_never_starts_turns_down_rather_than_asking_forever():
    policy = Policy(max_workers=8)
    # Demand for 4, but the cluster holds only 2: every sample shows 2 workers.
    decisions = [policy.observe(_sample(2, 400.0, 100.0)) for _ in range(6)]
    assert decisions[0].workers == 4  # the estimate
    assert any("no room in the cluster" in d.reason for d in decisions), decisions
    assert policy.phase in ("down", "converging", "converged")


class _Members:
    """The dispatcher's membership as ``Scaling`` sees it: one worker, none starting."""

    def starting(self) -> dict:
        return {}

    def add(self) -> None:
        pass

    def cancel_starting(self, count: int, newest_first: bool = True) -> None:
        pass

    def lose(self, worker_id: str) -> None:
        pass


def test_decisions_are_timed_from_the_services_start_not_the_machines(monkeypatch):
    # The history said "3308.6 s" in a 17 s run: the monotonic clock's reading, the
    # machine's uptime.
    import types

    from jdata.service import _ray, _scaling

    _ray.ray_module()  # Scaling imports Ray: after the loopback switch, as the service does
    clock = [3300.0]  # seconds of uptime when the service starts
    monkeypatch.setattr(_scaling, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    scaling = _scaling.Scaling(_Members(), lambda: ["w"], dict, jdata.AUTOTUNE, 1.0, 4)
    for t, elements in ((1.0, 0), (2.0, 0), (7.0, 400)):
        clock[0] = 3300.0 + t
        scaling.tick({"c": _client(t, elements, t / 2)},
                     {"w": {"elements": elements, "active_sec": t}})
    (decision,) = scaling.status().decisions
    assert decision.time == 7.0
