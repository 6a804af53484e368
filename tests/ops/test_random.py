"""jdata.random: tf.data's Dataset.random with an explicit key."""

import json

import jax
import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from jdata._random import element_keys, op_epoch_key, salt
from tests.helpers import check_restore_at_every_step

KEY = jax.random.key(0)


def _ints(ds, n):
    return [int(x) for x in ds.take(n)]


def test_values_are_int64_scalars_below_2_to_the_32():
    ds = jdata.random(KEY)
    values = list(ds.take(5000))
    assert all(isinstance(v, np.int64) for v in values)
    array = np.array(values)
    assert array.min() >= 0 and array.max() < 2**32
    assert len(set(values)) > 4990  # 32-bit values: collisions are rare
    assert 0.45 < array.mean() / 2**32 < 0.55
    assert ds.element_spec == TensorSpec((), np.int64)
    assert ds.cardinality() == jdata.INFINITE


def test_value_t_is_the_first_word_of_position_ts_key():
    expected = element_keys(op_epoch_key(jax.random.key_data(KEY), salt("random"), 0), 0, 2100)
    assert _ints(jdata.random(KEY), 2100) == expected[:, 0].tolist()


def test_a_pure_function_of_the_key():
    assert _ints(jdata.random(KEY), 50) == _ints(jdata.random(jax.random.key(0)), 50)
    assert _ints(jdata.random(KEY), 50) != _ints(jdata.random(jax.random.key(1)), 50)
    raw = np.asarray(jax.random.key_data(KEY))
    assert _ints(jdata.random(raw), 50) == _ints(jdata.random(KEY), 50)


@pytest.mark.parametrize("rerandomize", [None, False])
def test_every_epoch_sees_the_same_values_by_default_as_in_tf_data(rerandomize):
    ds = jdata.random(KEY, rerandomize_each_iteration=rerandomize).take(20)
    first = [int(x) for x in ds]
    assert [int(x) for x in ds] == first
    assert [int(x) for x in ds.repeat(2)] == first + first


def test_rerandomize_each_iteration_gives_each_epoch_new_values():
    ds = jdata.random(KEY, rerandomize_each_iteration=True).take(20)
    first, second = [int(x) for x in ds], [int(x) for x in ds]
    assert first != second
    assert [int(x) for x in jdata.random(KEY, True).take(20).repeat(2)] == first + second


def test_restores_at_every_step_across_blocks():
    check_restore_at_every_step(jdata.random(KEY).skip(1020), limit=10)
    it = jdata.random(KEY).iterator()
    for _ in range(3000):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert state["state"] == {"count": 3000}
    resumed = jdata.random(KEY).iterator(state)
    assert [int(next(resumed)) for _ in range(5)] == _ints(jdata.random(KEY).skip(3000), 5)


def test_a_state_of_another_key_or_a_bad_count_is_refused():
    state = jdata.random(KEY).iterator().get_state()
    with pytest.raises(ValueError, match="another random key"):
        jdata.random(jax.random.key(1)).iterator(state)
    state["state"] = {"count": -1}
    with pytest.raises(ValueError, match="random.*count"):
        jdata.random(KEY).iterator(state)


def test_bad_arguments():
    with pytest.raises(TypeError,
                       match=r"seed=4 is tf.data's.*jdata.random\(jax.random.key\(4\)\)"):
        jdata.random(seed=4)
    with pytest.raises(TypeError, match=r"key=jax.random.key\(4\)"):
        jdata.random(4)
    with pytest.raises(TypeError, match="rerandomize_each_iteration"):
        jdata.random(KEY, rerandomize_each_iteration="yes")
