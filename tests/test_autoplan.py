"""Cedar's planner applied (``Options(plan=jdata.AUTOTUNE)``, ``jdata._autoplan``), in this
process: the plan is decided from the first iterator, later ones run it, and the elements,
restores included, are those of the pipeline as written. The service's part is in
tests/service/test_autoplan_service.py."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import jdata
from jdata import _autoplan, _plan
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
    assert "cache: after map(_expensive)" in text, text
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
