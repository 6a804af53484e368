"""The autoscaler's policy, without Ray, against a simulated job: consumers that want D
elements/s and workers that make r each. It settles on ceil(D/r) (Cedar's demand-driven
check on Cachew's policy), follows a change of demand, and stays within its bounds."""

import math

import numpy as np
import pytest

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
