"""The Nth iterator of a dataset is epoch N of ``ds.repeat()`` (tf.data reshuffles per iterator)."""

import json
import pickle

import jax
import numpy as np
import pytest

import jdata
from tests.helpers import assert_same_sequence, take_list

KEY, KEY2 = jax.random.key(7), jax.random.key(8)
N = 12


def _ints(elements) -> list:
    return [int(x) for x in elements]


def _noise(x, k):
    return x * 1000 + np.random.default_rng(k).integers(1000)


PIPELINES = {
    "full_shuffle": lambda: jdata.range(N).shuffle(KEY),
    "buffer_shuffle": lambda: jdata.range(N).shuffle(KEY, buffer_size=4),
    "random_map": lambda: jdata.range(N).random_map(_noise, KEY2),
    "parallel_random_map": lambda: jdata.range(N).random_map(
        _noise, KEY2, num_parallel_calls=2).prefetch(2),
    "process_engine": lambda: jdata.range(N).random_map(
        _noise, KEY2, num_parallel_calls=2).with_options(jdata.Options(engine="processes")),
    "shuffle_batch": lambda: jdata.range(N).shuffle(KEY).batch(5),
    "sample": lambda: jdata.sample_from_datasets(
        [jdata.range(N).shuffle(KEY), jdata.range(100, 100 + N).shuffle(KEY2)], [0.5, 0.5],
        jax.random.key(3)),
}


@pytest.mark.parametrize("name", PIPELINES)
def test_each_iterator_is_the_next_epoch_of_a_repeat(name):
    build = PIPELINES[name]
    ds = build()
    epochs = [take_list(ds) for _ in range(3)]
    plain = [[np.asarray(e).tolist() for e in epoch] for epoch in epochs]
    assert plain[0] != plain[1] and plain[1] != plain[2]
    repeated = take_list(build().repeat(3))
    assert_same_sequence(epochs[0] + epochs[1] + epochs[2], repeated)
    # A pure function of (key, N): a rebuilt dataset (a fresh process) sees the same epochs.
    again = build()
    for epoch in epochs:
        assert_same_sequence(take_list(again), epoch)


def test_epochs_reshuffle_and_keep_every_element():
    ds = jdata.range(N).shuffle(KEY)
    orders = [_ints(ds) for _ in range(4)]
    assert all(sorted(order) == list(range(N)) for order in orders)
    assert len({tuple(order) for order in orders}) == 4


def test_reshuffle_each_iteration_false_keeps_the_first_order():
    for buffer_size in (None, 4):
        ds = jdata.range(N).shuffle(KEY, buffer_size=buffer_size, reshuffle_each_iteration=False)
        first = _ints(ds)
        assert first != list(range(N))
        assert _ints(ds) == first and _ints(ds) == first


def test_the_state_records_the_epoch_and_a_new_process_resumes_it():
    ds = jdata.range(N).shuffle(KEY)
    _ints(ds)
    it = ds.iterator()
    assert it.epoch == 1
    head = [int(next(it)) for _ in range(5)]
    state = json.loads(json.dumps(it.get_state()))
    assert state["epoch"] == 1
    rest = _ints(it)

    fresh = jdata.range(N).shuffle(KEY)  # as in a restarted process: its count is at 0
    resumed = fresh.iterator(state)
    assert resumed.epoch == 1 and _ints(resumed) == rest
    # The training loop goes on with the epoch after the restored one.
    expected = take_list(jdata.range(N).shuffle(KEY).repeat(3))[2 * N:]
    assert _ints(fresh) == _ints(expected)
    assert sorted(head + rest) == list(range(N))


def test_set_state_moves_an_iterator_to_the_states_epoch():
    ds = jdata.range(N).shuffle(KEY)
    it0 = ds.iterator()
    next(it0)
    state = it0.get_state()
    rest = _ints(it0)
    later = ds.iterator()
    assert later.epoch == 1
    next(later)
    later.set_state(state)
    assert later.epoch == 0 and _ints(later) == rest
    assert ds.iterator().epoch == 1  # the epoch after the restored one


def test_a_rejected_state_leaves_the_iterator_as_it_was():
    ds = jdata.range(N).shuffle(KEY)
    state = ds.iterator().get_state()
    it = ds.iterator()
    expected = _ints(jdata.range(N).shuffle(KEY).repeat(2))[N:]
    first = int(next(it))
    bad = dict(state, state={"index": -3})
    with pytest.raises(ValueError):
        it.set_state(bad)
    assert it.epoch == 1 and [first] + _ints(it) == expected


@pytest.mark.parametrize("epoch", [-1, 2**62 + 1, "1", 1.0, None, True])
def test_a_crafted_epoch_is_refused(epoch):
    ds = jdata.range(N).shuffle(KEY)
    state = dict(ds.iterator().get_state(), epoch=epoch)
    with pytest.raises(ValueError, match="iterator.*epoch"):
        ds.iterator(state)


def test_version_2_states_restore_at_epoch_0():
    ds = jdata.range(N).shuffle(KEY)
    it = ds.iterator()
    next(it)
    state = it.get_state()
    rest = _ints(it)
    old = {k: v for k, v in state.items() if k != "epoch"}
    old["version"] = 2
    for _ in range(3):
        _ints(ds)
    restored = ds.iterator(old)
    assert restored.epoch == 0 and _ints(restored) == rest


def test_probing_runs_no_epoch():
    ds = jdata.range(N).shuffle(KEY).map(lambda x: x + 1).batch(4)
    first = take_list(jdata.range(N).shuffle(KEY).map(lambda x: x + 1).batch(4))
    assert ds.element_spec.shape == (None,)
    assert ds.cardinality() == 3 and len(ds) == 3
    assert "shuffle" in ds.explain()
    assert_same_sequence(take_list(ds), first)


def test_reduce_and_get_single_element_are_passes_too():
    ds = jdata.range(N).shuffle(KEY)
    assert int(ds.reduce(np.int64(0), lambda s, x: s + x)) == sum(range(N))
    assert ds.iterator().epoch == 1
    one = jdata.range(N).shuffle(KEY).take(1)
    firsts = [int(one.get_single_element()) for _ in range(6)]
    assert len(set(firsts)) > 1  # each pass draws a new order


def test_a_pickled_dataset_starts_at_epoch_0():
    ds = jdata.range(N).shuffle(KEY)
    first = _ints(ds)
    _ints(ds)
    copy = pickle.loads(pickle.dumps(ds))
    assert _ints(copy) == first
    assert ds.iterator().epoch == 2


def test_datasets_derived_from_a_dataset_count_their_own_iterators():
    base = jdata.range(N).shuffle(KEY)
    _ints(base)
    derived = base.map(lambda x: x)
    assert _ints(derived) == _ints(jdata.range(N).shuffle(KEY))
