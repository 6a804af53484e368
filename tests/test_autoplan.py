"""Cedar's planner applied (``Options(plan=jdata.AUTOTUNE)``, ``jdata._autoplan``), in this
process: the plan is decided from the first iterator, later ones run it, and the elements,
restores included, are those of the pipeline as written. The service's part is in
tests/service/test_autoplan_service.py."""

from __future__ import annotations

import dataclasses
import json
import time

import jax
import numpy as np
import pytest

import jdata
from jdata import _autoplan, _plan, _plantrial
from jdata.ops import index_cache
from jdata.ops.index_cache import IndexCacheNode


def _expensive(x):
    total = 0
    for i in range(3000):  # ~100 us of Python: worth caching
        total += i
    return np.full(16, x, np.float32)


def _kept(x):
    return x[0] % 7 != 3


def _noisy(x, key):
    return x + np.random.default_rng(key).random(x.shape, np.float32)


def _pipeline(options=None):
    # The filter reads in order: a cache under it keeps the reads by index below.
    ds = (jdata.range(200).map(_expensive, num_parallel_calls=2).filter(_kept)
          .shuffle(jax.random.key(1), buffer_size=64).random_map(_noisy, jax.random.key(2))
          .batch(10))
    return ds if options is None else ds.with_options(options)


def _epochs(ds, count):
    return [np.concatenate([np.asarray(b) for b in ds]) for _ in range(count)]


def test_the_plan_caches_below_the_first_random_op_and_the_elements_stay_the_same():
    planned = _pipeline(jdata.Options(plan=jdata.AUTOTUNE))
    assert "not decided yet" in planned.explain()
    got, expected = _epochs(planned, 4), _epochs(_pipeline(), 4)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(got[0], got[1])  # new shuffle and keys each epoch
    text = planned.explain()
    assert "cache: after " in text and "(saves" in text, text  # the highest alike: filters
    assert "Planned (from the next iterator on):" in text and "Cache(" in text
    assert "map(_expensive)+filter(_kept): " in text and "us/element" in text


def test_a_state_of_the_planned_plan_restores_into_it_in_any_dataset():
    planned = _pipeline(jdata.Options(plan=jdata.AUTOTUNE))
    _epochs(planned, 1)  # decides
    it = planned.iterator()  # epoch 1, planned: its cache fills
    head = [next(it) for _ in range(7)]
    state = json.dumps(it.get_state())
    rest = [np.asarray(b) for b in it]
    assert "cache" in json.loads(state)["plan"]
    fresh = _pipeline(jdata.Options(plan=jdata.AUTOTUNE))  # no decision of its own used
    again = [np.asarray(b) for b in fresh.iterator(state)]
    np.testing.assert_array_equal(np.concatenate(again), np.concatenate(rest))
    expected = _epochs(_pipeline(), 2)[1]
    np.testing.assert_array_equal(np.concatenate(head + rest), expected)


def test_pins_fix_the_cache_and_bad_pins_fail_when_the_iterator_is_made():
    ds = _pipeline(jdata.Options(plan=jdata.PlanPins(cache="none")))
    _epochs(ds, 1)
    assert "cache: none (pinned)" in ds.explain()
    ds = _pipeline(jdata.Options(plan=jdata.PlanPins(cache="filter(flag(_kept))")))
    _epochs(ds, 1)
    assert "cache: after filter(flag(_kept)) (pinned)" in ds.explain()
    with pytest.raises(ValueError, match=r"PlanPins\(cut='decode'\): no op of the plan"):
        _pipeline(jdata.Options(plan=jdata.PlanPins(cut="decode"))).iterator()
    with pytest.raises(ValueError, match="none is given: pass Options\\(service=svc\\)"):
        _pipeline(jdata.Options(plan=jdata.PlanPins(workers=2))).iterator()


def test_a_pin_the_planner_cannot_keep_is_said_in_explain_and_the_plan_runs_as_written():
    ds = _pipeline(jdata.Options(plan=jdata.PlanPins(cache="random_map(_noisy)")))
    got = _epochs(ds, 2)
    assert "the planner failed, so the plan runs as written" in ds.explain()
    assert "no cache can go there" in ds.explain()
    for a, b in zip(got, _epochs(_pipeline(), 2)):
        np.testing.assert_array_equal(a, b)


def _full_shuffle(options=None):
    ds = (jdata.range(200).map(_expensive, num_parallel_calls=2).shuffle(jax.random.key(1))
          .random_map(_noisy, jax.random.key(2)))
    return ds if options is None else ds.with_options(options)


def test_a_cache_under_a_full_shuffle_is_read_by_index_and_the_elements_stay_the_same():
    planned = _full_shuffle(jdata.Options(plan=jdata.AUTOTUNE))
    got, expected = _epochs(planned, 3), _epochs(_full_shuffle(), 3)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    text = planned.explain()
    assert "cache: after map(_expensive)" in text and "Cache(by index)" in text, text
    cached = [n for n in _plan.walk(planned._placed[next(iter(planned._placed))])
              if isinstance(n, IndexCacheNode)]
    assert len(cached) == 1 and index_cache.filled(cached[0]) == 200  # epoch 1 filled it
    it = planned.iterator()  # from the cache; a state restores by index
    head = [np.asarray(next(it)) for _ in range(50)]
    rest = [np.asarray(x) for x in planned.iterator(it.get_state())]
    np.testing.assert_array_equal(np.concatenate(head + rest), _epochs(_full_shuffle(), 4)[3])


def test_cheap_pipelines_get_no_cache():
    # 5,000 elements: the first calls' warm-up (all timed) is a small part of the profile.
    ds = jdata.range(5000).map(lambda x: x + 1).with_options(jdata.Options(plan=jdata.AUTOTUNE))
    assert [int(x) for x in ds] == list(range(1, 5001))
    assert [int(x) for x in ds] == list(range(1, 5001))
    assert "cache: none" in ds.explain()


@pytest.mark.parametrize("kwargs, error, match", [
    ({"plan": 3}, ValueError, "must be None, jdata.AUTOTUNE or jdata.PlanPins"),
    ({"plan": True}, ValueError, "must be None, jdata.AUTOTUNE"),
    ({"service": "127.0.0.1:6379"}, TypeError, "must be what jdata.service.start()"),
])
def test_bad_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        jdata.Options(**kwargs)


@pytest.mark.parametrize("kwargs, error", [({"workers": -1}, ValueError),
                                           ({"workers": 1.5}, ValueError),
                                           ({"cut": 3}, TypeError), ({"cache": ""}, TypeError)])
def test_bad_pins(kwargs, error):
    with pytest.raises(error, match="PlanPins"):
        jdata.PlanPins(**kwargs)


def test_the_main_chain_is_the_ops_down_to_the_first_with_other_than_one_input():
    ds = jdata.zip((jdata.range(3), jdata.range(3))).map(lambda a, b: a + b).batch(2)
    chain = _autoplan.main_chain(ds._node)
    assert [n.op_name for n in chain] == ["zip", "map", "batch"]


def test_a_plan_the_planner_leaves_as_it_is_keeps_its_nodes_and_their_cache():
    calls = []

    def counted(x):
        calls.append(int(x))
        return x * 2

    # The planner decides and changes nothing (a pin: what it measures of 50 elements is
    # mostly the first calls' warm-up).
    ds = (jdata.range(50).map(counted).cache()
          .with_options(jdata.Options(plan=jdata.PlanPins(cache="none"))))
    for _ in range(3):
        assert [int(x) for x in ds] == list(range(0, 100, 2))
    assert "cache: none (pinned)" in ds.explain() and "Cedar's plan (profiled" in ds.explain()
    assert sorted(calls) == list(range(50))  # the first epoch's cache served the others


def _inflated(x):
    return np.repeat(x, 64)  # 64x the bytes, for nothing


def _fused(options=None, n=300):
    # One random_map when optimized (random_map_fusion): decode, inflate, noise.
    ds = (jdata.range(n).map(_expensive, num_parallel_calls=2)
          .map(_inflated, num_parallel_calls=2)
          .random_map(_noisy, jax.random.key(3), num_parallel_calls=2).batch(10))
    return ds if options is None else ds.with_options(options)


def test_a_cache_goes_inside_a_fused_op_after_the_part_worth_keeping_within_the_ram_budget():
    # One epoch after _expensive is 300 x 64 B; after _inflated 64x that, over half the budget.
    options = jdata.Options(plan=jdata.AUTOTUNE, ram_budget=2 * 300 * 64 * 16)
    planned = _fused(options)
    optimized = planned.explain().split("\n\n")[0]
    assert "op: map(_expensive)+map(_inflated)+random_map(_noisy)" in optimized
    got, expected = _epochs(planned, 3), _epochs(_fused(), 3)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    text = planned.explain()
    assert "cache: after map(_expensive) (saves" in text, text
    assert "map(_inflated): " in text and "random_map(_noisy): " in text  # timed part by part
    placed = text.split("Planned (from the next iterator on):")[1]
    assert "op: map(_inflated)+random_map(_noisy)" in placed and "Cache(" in placed
    assert placed.index("Cache(") < placed.index("op: map(_expensive)")


def test_a_cache_inside_a_fused_op_is_filled_once_and_read_back():
    decoded = []

    def counted(x):
        decoded.append(int(x))
        return _expensive(x)

    ds = (jdata.range(300).map(counted, num_parallel_calls=2)
          .random_map(_noisy, jax.random.key(3), num_parallel_calls=2).batch(10)
          .with_options(jdata.Options(plan=jdata.PlanPins(cache="map(counted)"))))
    reference = (jdata.range(300).map(_expensive).random_map(_noisy, jax.random.key(3))
                 .batch(10))
    for a, b in zip(_epochs(ds, 4), _epochs(reference, 4)):
        np.testing.assert_array_equal(a, b)
    assert "cache: after map(counted) (pinned)" in ds.explain()
    # The first epoch was profiled, the second filled the cache, the others read it.
    assert sorted(decoded) == sorted(list(range(300)) * 2)


def test_a_pinned_cache_inside_a_fused_op_restores_into_a_fresh_dataset():
    options = jdata.Options(plan=jdata.PlanPins(cache="map(_inflated)"))
    planned = _fused(options, n=120)
    _epochs(planned, 1)  # decides
    assert "cache: after map(_inflated) (pinned)" in planned.explain()
    it = planned.iterator()
    head = [np.asarray(next(it)) for _ in range(5)]
    state = json.dumps(it.get_state())
    assert "random_map(cache(map(range())))" in json.loads(state)["plan"]
    rest = [np.asarray(b) for b in it]
    again = [np.asarray(b) for b in _fused(options, n=120).iterator(state)]
    np.testing.assert_array_equal(np.concatenate(again), np.concatenate(rest))
    np.testing.assert_array_equal(np.concatenate(head + rest), _epochs(_fused(n=120), 2)[1])


def test_a_pin_inside_a_fused_op_below_a_random_part_fails():
    ds = _fused(jdata.Options(plan=jdata.PlanPins(cache="random_map(_noisy)")), n=40)
    _epochs(ds, 1)
    assert "no cache can go there" in ds.explain()


def _slow_noisy(x, key):
    end = time.perf_counter() + 60e-6  # an epoch that reads the cache takes 0.1 s or more
    while time.perf_counter() < end:
        pass
    return _noisy(x, key)


def _tried(options=None, n=3000):
    ds = (jdata.range(n).map(_expensive, num_parallel_calls=2)
          .random_map(_slow_noisy, jax.random.key(4), num_parallel_calls=2).batch(10))
    return ds if options is None else ds.with_options(options)


def test_a_cache_the_planner_chose_is_kept_where_the_epoch_reading_it_is_faster():
    planned = _tried(jdata.Options(plan=jdata.AUTOTUNE))
    got, expected = _epochs(planned, 4), _epochs(_tried(), 4)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    # Epoch 2 filled the cache, epoch 3 read it back: ~100 us an element not recomputed.
    assert "cache: after map(_expensive) (saves" in planned.explain()
    assert "; kept (measured: the epoch that read it back made" in planned.explain()


def test_a_cache_on_epochs_too_short_to_measure_stays():
    planned = _fused(jdata.Options(plan=jdata.AUTOTUNE), n=300)
    for a, b in zip(_epochs(planned, 4), _epochs(_fused(n=300), 4)):
        np.testing.assert_array_equal(a, b)
    text = planned.explain()
    assert "cache: after map(" in text and ("too short to measure" in text or (
        # the profiled epoch too short to compare with: no trial
        "kept" not in text)), text


def test_a_cache_that_did_not_pay_goes_and_the_plan_runs_as_written():
    planned = _tried(jdata.Options(plan=jdata.AUTOTUNE), n=3001)  # a pipeline of its own
    _epochs(planned, 1)  # decides
    fingerprint = planned._plan_fingerprint
    placement = _autoplan._PLACEMENTS[fingerprint]
    assert placement.on_trial and placement.cache is not None
    # As if the profiled epoch had made far more than any read of the cache can.
    _autoplan._PLACEMENTS[fingerprint] = dataclasses.replace(placement, rate=1e12)
    got = _epochs(planned, 3)  # fills, reads (judged: it goes), as written
    for a, b in zip(got, _epochs(_tried(n=3001), 4)[1:]):
        np.testing.assert_array_equal(a, b)
    text = planned.explain()
    assert "cache: none (the planner's, after map(" in text and "went: measured" in text
    placed = text.split("Planned (from the next iterator on):")[1]
    assert "Cache(" not in placed
    assert all("Cache" not in type(n).__name__ for p in planned._placed.values()
               for n in _plan.walk(p))  # what the cache held went with it


def test_judging_a_trial_keeps_or_drops_the_cache_and_says_why():
    placement = _autoplan.Placement(("range", "map(f)"), None, 1, 0,
                                    ("cache: after map(f) (saves 1.0 ms)", "cut: none"), (),
                                    100.0, None, (), 1000.0, True)
    kept = _plantrial.judge(placement, 1100.0)
    assert kept.cache == 1 and not kept.on_trial
    assert kept.reasons[0].startswith("cache: after map(f) (saves 1.0 ms); kept (measured")
    gone = _plantrial.judge(placement, 1020.0)  # 2% more: within an epoch's noise
    assert gone.cache is None and gone.cache_part is None and not gone.on_trial
    assert gone.reasons[0] == (
        "cache: none (the planner's, after map(f) (saves 1.0 ms), went: measured: the epoch "
        "that read it back made 1,020 elements/s, the profiled one 1,000 elements/s, not 5% "
        "more)")
    assert gone.reasons[1] == "cut: none"
