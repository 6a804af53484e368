import jax
import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import check_restore_at_every_step, take_list

KEY = jax.random.key(0)


def ints(ds, limit=None):
    return [int(x) for x in take_list(ds, limit)]


def constant(value):
    return jdata.from_tensors(np.int64(value)).repeat()


def test_tf_data_doc_example_yields_every_element_once_in_order():
    # tf.data: sample_from_datasets([range(0, 3), range(100, 103)], [0.5, 0.5])
    # -> e.g. [100, 0, 1, 101, 2, 102]
    out = ints(jdata.sample_from_datasets([jdata.range(3), jdata.range(100, 103)],
                                          [0.5, 0.5], key=KEY))
    assert sorted(out) == [0, 1, 2, 100, 101, 102]
    assert [x for x in out if x < 100] == [0, 1, 2]
    assert [x for x in out if x >= 100] == [100, 101, 102]


@pytest.mark.parametrize("weights", [[0.2, 0.8], [0.5, 0.3, 0.2]])
def test_frequencies_follow_the_weights(weights):
    ds = jdata.sample_from_datasets([constant(i) for i in range(len(weights))], weights,
                                    key=KEY)
    counts = np.bincount(ints(ds, limit=2000), minlength=len(weights)) / 2000
    np.testing.assert_allclose(counts, weights, atol=0.04)


def test_exhausted_datasets_are_dropped_and_the_rest_renormalized():
    ds = jdata.sample_from_datasets([jdata.range(5), jdata.range(100, 300)], [0.9, 0.1],
                                    key=KEY)
    out = ints(ds)
    assert sorted(out) == list(range(5)) + list(range(100, 300))
    # With weight 0.9 the small dataset runs out early; the rest all come from the other.
    assert max(i for i, x in enumerate(out) if x < 5) < 30


def test_stop_on_empty_dataset_stops_at_the_first_exhausted_choice():
    ds = jdata.sample_from_datasets([jdata.range(5), jdata.range(100, 300)], [0.5, 0.5],
                                    key=KEY, stop_on_empty_dataset=True)
    out = ints(ds)
    assert [x for x in out if x < 5] == [0, 1, 2, 3, 4]
    tail = [x for x in out if x >= 100]
    assert tail == list(range(100, 100 + len(tail))) and len(tail) < 100


def test_zero_weight_datasets_are_never_drawn():
    ds = jdata.sample_from_datasets([jdata.range(4), constant(7)], [1.0, 0.0], key=KEY)
    assert ints(ds) == [0, 1, 2, 3]


def test_default_weights_are_uniform():
    ds = jdata.sample_from_datasets([constant(0), constant(1)], key=KEY)
    assert 0.45 < np.mean(ints(ds, limit=2000)) < 0.55


def test_randomness_is_a_function_of_the_key_and_epoch():
    def order(key, repeat=1, rerandomize=True):
        return ints(jdata.sample_from_datasets([jdata.range(20), jdata.range(100, 120)],
                                               key=key, rerandomize_each_iteration=rerandomize)
                    .repeat(repeat))
    assert order(KEY) == order(jax.random.key(0))
    assert order(KEY) != order(jax.random.key(1))
    twice = order(KEY, repeat=2)
    assert twice[:40] == order(KEY)
    assert sorted(twice[40:]) == sorted(twice[:40]) and twice[40:] != twice[:40]


@pytest.mark.parametrize("rerandomize", [None, False])
def test_by_default_every_epoch_draws_the_same_order_as_in_tf_data(rerandomize):
    def build():
        return jdata.sample_from_datasets(
            [jdata.range(20), jdata.range(100, 120)], [0.5, 0.5], KEY,
            rerandomize_each_iteration=rerandomize)
    ds = build()
    first = ints(ds)
    assert ints(ds) == first and ints(build().repeat(2)) == first + first
    # The choices stay; datasets that reshuffle still do (tf.data's behaviour too).
    shuffled = jdata.sample_from_datasets(
        [jdata.range(20).shuffle(jax.random.key(5)), jdata.range(100, 120)], [0.5, 0.5], KEY,
        rerandomize_each_iteration=rerandomize)
    a, b = ints(shuffled), ints(shuffled)
    assert [x >= 100 for x in a] == [x >= 100 for x in b] and a != b


def test_rerandomize_each_iteration_draws_anew_per_iterator():
    ds = jdata.sample_from_datasets([jdata.range(20), jdata.range(100, 120)], [0.5, 0.5], KEY,
                                    rerandomize_each_iteration=True)
    first, second = ints(ds), ints(ds)
    assert first != second and sorted(first) == sorted(second)
    with pytest.raises(TypeError, match="rerandomize_each_iteration"):
        jdata.sample_from_datasets([jdata.range(2)], key=KEY, rerandomize_each_iteration=1)


def test_tf_datas_seed_argument_shows_the_key_spelling():
    with pytest.raises(TypeError, match=r"seed=3 is tf.data's.*key=jax.random.key\(3\)"):
        jdata.sample_from_datasets([jdata.range(2), jdata.range(3)], [0.5, 0.5], seed=3)
    with pytest.raises(TypeError, match=r"key=jax.random.key\(7\)"):
        jdata.sample_from_datasets([jdata.range(2), jdata.range(3)], [0.5, 0.5], 7)


@pytest.mark.parametrize("stop_on_empty_dataset", [False, True])
def test_restore_at_every_step_over_random_access_inputs(stop_on_empty_dataset):
    ds = jdata.sample_from_datasets([jdata.range(4), jdata.range(10, 16), jdata.range(20, 23)],
                                    [0.5, 0.3, 0.2], key=KEY,
                                    stop_on_empty_dataset=stop_on_empty_dataset)
    out = check_restore_at_every_step(ds)
    assert len(out) > 0


def test_restore_at_every_step_over_sequential_inputs():
    ds = jdata.sample_from_datasets(
        [jdata.range(10).filter(lambda x: x % 2 == 0), jdata.range(10, 20).shuffle(
            KEY, buffer_size=3)], [0.4, 0.6], key=jax.random.key(5))
    out = check_restore_at_every_step(ds)
    assert sorted(int(x) for x in out) == [0, 2, 4, 6, 8] + list(range(10, 20))


def test_restore_over_infinite_inputs():
    ds = jdata.sample_from_datasets([constant(0), jdata.range(3).repeat()], key=KEY)
    check_restore_at_every_step(ds, limit=15)


def test_element_spec_merges_the_inputs():
    a = jdata.from_tensor_slices(np.zeros((3, 2), np.float32))
    b = jdata.from_tensor_slices(np.zeros((3, 4), np.float32))
    ds = jdata.sample_from_datasets([a, b], key=KEY)
    assert ds.element_spec == TensorSpec((None,), np.float32)
    assert jdata.sample_from_datasets([a, a], key=KEY).element_spec == TensorSpec(
        (2,), np.float32)


def test_cardinality():
    assert jdata.sample_from_datasets([jdata.range(3), jdata.range(4)],
                                      key=KEY).cardinality() == jdata.UNKNOWN
    assert jdata.sample_from_datasets([constant(0), jdata.range(4)],
                                      key=KEY).cardinality() == jdata.UNKNOWN
    assert jdata.sample_from_datasets([constant(0), constant(1)],
                                      key=KEY).cardinality() == jdata.INFINITE


def test_int_seed_points_to_jax_random_key():
    with pytest.raises(TypeError, match=r"jax\.random\.key"):
        jdata.sample_from_datasets([jdata.range(3)], [1.0], key=0)
    with pytest.raises(TypeError, match=r"jax\.random\.key"):
        jdata.sample_from_datasets([jdata.range(3)], [1.0])


@pytest.mark.parametrize("weights", [[1.0], [0.5, 0.5, 0.0], [-0.5, 1.5], [0.0, 0.0],
                                     [float("nan"), 1.0], [[0.5, 0.5]]])
def test_bad_weights(weights):
    with pytest.raises(ValueError, match="weights"):
        jdata.sample_from_datasets([jdata.range(3), jdata.range(3)], weights, key=KEY)


def test_bad_datasets():
    with pytest.raises(TypeError, match="datasets"):
        jdata.sample_from_datasets([], key=KEY)
    with pytest.raises(TypeError, match=r"datasets\[1\]"):
        jdata.sample_from_datasets([jdata.range(3), [1, 2]], key=KEY)
    with pytest.raises(TypeError, match="stop_on_empty_dataset"):
        jdata.sample_from_datasets([jdata.range(3)], key=KEY, stop_on_empty_dataset="yes")
