import jax
import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import check_restore_at_every_step, take_list

KEY = jax.random.key(0)


def ints(ds, limit=None):
    return [int(x) for x in take_list(ds, limit)]


def test_full_shuffle_is_a_permutation():
    out = ints(jdata.range(5000).shuffle(KEY))
    assert sorted(out) == list(range(5000))
    assert out != list(range(5000))


def test_full_shuffle_state_is_one_index():
    ds = jdata.range(12).shuffle(KEY)
    check_restore_at_every_step(ds)
    it = ds.iterator()
    for k in range(5):
        assert it.get_state()["state"] == {"index": k}
        next(it)


def test_full_shuffle_of_structures_restores_at_every_step():
    ds = jdata.from_tensor_slices({"x": np.arange(8), "s": list("abcdefgh")}).shuffle(KEY)
    out = check_restore_at_every_step(ds)
    assert sorted(int(e["x"]) for e in out) == list(range(8))
    assert all(e["s"] == "abcdefgh"[int(e["x"])] for e in out)


def test_full_shuffle_after_map_and_batch_stays_random_access():
    ds = jdata.range(10).map(lambda x: x * 10).batch(2).shuffle(KEY)
    out = check_restore_at_every_step(ds)
    assert sorted(b.tolist() for b in out) == [[0, 10], [20, 30], [40, 50], [60, 70], [80, 90]]
    assert ds.iterator().get_state()["state"] == {"index": 0}


def test_tf_data_doc_example_each_epoch_is_a_permutation():
    # tf.data: range(3).shuffle(3, reshuffle_each_iteration=True).repeat(2)
    # -> e.g. [1, 0, 2, 1, 2, 0]
    for buffer_size in (None, 3):
        out = ints(jdata.range(3).shuffle(KEY, buffer_size=buffer_size).repeat(2))
        assert sorted(out[:3]) == [0, 1, 2] and sorted(out[3:]) == [0, 1, 2]


@pytest.mark.parametrize("buffer_size", [None, 4])
def test_same_key_same_order_other_key_other_order(buffer_size):
    def order(key):
        return ints(jdata.range(40).shuffle(key, buffer_size=buffer_size))
    assert order(KEY) == order(jax.random.key(0))
    assert order(KEY) != order(jax.random.key(1))
    # A raw uint32[2] key is the same key as the typed one.
    assert order(KEY) == order(np.asarray(jax.random.key_data(KEY)))


@pytest.mark.parametrize("buffer_size", [None, 4])
def test_epochs_of_repeat_differ_unless_reshuffle_is_off(buffer_size):
    out = ints(jdata.range(20).shuffle(KEY, buffer_size=buffer_size).repeat(3))
    epochs = [out[:20], out[20:40], out[40:]]
    assert all(sorted(e) == list(range(20)) for e in epochs)
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]
    fixed = ints(jdata.range(20).shuffle(KEY, buffer_size=buffer_size,
                                         reshuffle_each_iteration=False).repeat(3))
    assert fixed[:20] == fixed[20:40] == fixed[40:]
    assert fixed[:20] == epochs[0]  # epoch 0 is the same either way


def test_buffer_shuffle_over_random_access_input_stores_indices():
    ds = jdata.range(10).map(lambda x: x * 3).shuffle(KEY, buffer_size=4)
    out = check_restore_at_every_step(ds)
    assert sorted(int(x) for x in out) == [3 * i for i in range(10)]
    it = ds.iterator()
    next(it), next(it)
    state = it.get_state()["state"]
    # The buffer is topped up before each draw: 5 pulled, 2 drawn.
    assert len(state["buffer"]) == 3
    assert all(type(token) is int for token in state["buffer"])
    assert state["input"] == {"index": 5}


def test_buffer_shuffle_over_a_sequential_input_restores_at_every_step():
    ds = jdata.range(20).filter(lambda x: x % 3 != 0).shuffle(KEY, buffer_size=5)
    out = check_restore_at_every_step(ds)
    assert sorted(int(x) for x in out) == [x for x in range(20) if x % 3 != 0]


def test_buffer_shuffle_of_strings_over_a_sequential_input():
    ds = (jdata.from_tensor_slices({"s": list("abcdefg"), "x": np.arange(7.0)})
          .filter(lambda e: e["x"] != 2.0).shuffle(KEY, buffer_size=3))
    out = check_restore_at_every_step(ds)
    assert sorted(e["s"] for e in out) == list("abcdefg".replace("c", ""))


def test_buffer_shuffle_over_an_infinite_input():
    ds = jdata.range(5).repeat().shuffle(KEY, buffer_size=3)
    check_restore_at_every_step(ds, limit=12)
    assert ds.cardinality() == jdata.INFINITE


def test_buffer_never_emits_an_element_before_it_can_be_in_the_buffer():
    n, buffer_size = 30, 4
    for seed in range(100):
        out = ints(jdata.range(n).shuffle(jax.random.key(seed), buffer_size=buffer_size))
        assert sorted(out) == list(range(n))
        assert all(x < t + buffer_size for t, x in enumerate(out)), (seed, out)


def test_buffer_of_one_keeps_the_order():
    assert ints(jdata.range(6).shuffle(KEY, buffer_size=1)) == list(range(6))


def test_draws_are_roughly_uniform():
    firsts = [ints(jdata.range(4).shuffle(jax.random.key(s), buffer_size=8))[0]
              for s in range(400)]
    counts = np.bincount(firsts, minlength=4)
    assert counts.min() > 60, counts
    full_firsts = [ints(jdata.range(4).shuffle(jax.random.key(s)), limit=1)[0]
                   for s in range(400)]
    assert np.bincount(full_firsts, minlength=4).min() > 60


@pytest.mark.parametrize("sequential", [False, True])
def test_a_failing_element_is_skipped_and_the_buffer_kept(sequential):
    ds = jdata.range(8).map(lambda x: 10 // (int(x) - 5))
    if sequential:  # the error comes while filling the buffer, not when emitting
        ds = ds.filter(lambda x: True)
    ds = ds.shuffle(KEY, buffer_size=3)
    out, errors = [], 0
    it = ds.iterator()
    while True:
        try:
            out.append(int(next(it)))
        except jdata.UDFError:
            errors += 1
        except StopIteration:
            break
    assert errors == 1
    assert sorted(out) == sorted(10 // (x - 5) for x in range(8) if x != 5)


def test_element_spec_and_cardinality():
    ds = jdata.from_tensor_slices((np.zeros((6, 2), np.float32), np.arange(6)))
    spec = (TensorSpec((2,), np.float32), TensorSpec((), np.int64))
    assert ds.shuffle(KEY).element_spec == spec
    assert ds.shuffle(KEY, buffer_size=2).element_spec == spec
    assert ds.shuffle(KEY).cardinality() == 6
    assert ds.shuffle(KEY, buffer_size=2).cardinality() == 6
    assert jdata.range(9).filter(lambda x: x > 2).shuffle(
        KEY, buffer_size=2).cardinality() == jdata.UNKNOWN


def test_empty_input():
    assert ints(jdata.range(0).shuffle(KEY)) == []
    assert ints(jdata.range(0).shuffle(KEY, buffer_size=3)) == []


def test_int_seed_points_to_jax_random_key():
    with pytest.raises(TypeError, match=r"jax\.random\.key"):
        jdata.range(3).shuffle(0)
    with pytest.raises(TypeError, match=r"jax\.random\.key"):
        jdata.range(3).shuffle(None)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"buffer_size": 0}, ValueError, "buffer_size"),
    ({"buffer_size": -1}, ValueError, "buffer_size"),
    ({"buffer_size": 2.5}, TypeError, "buffer_size"),
    ({"reshuffle_each_iteration": 1}, TypeError, "reshuffle_each_iteration"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        jdata.range(3).shuffle(KEY, **kwargs)


def test_full_shuffle_of_a_sequential_input_asks_for_a_buffer():
    with pytest.raises(ValueError, match="buffer_size"):
        jdata.range(3).filter(lambda x: x > 0).shuffle(KEY)


def test_plan_prints_the_buffer():
    assert "Shuffle(buffer_size=full" in jdata.range(3).shuffle(KEY).explain()
    assert "Shuffle(buffer_size=2" in jdata.range(3).shuffle(KEY, buffer_size=2).explain()


def _records(n):
    return jdata.from_generator(lambda: (bytes([i % 251]) * 8 for i in range(n)))


def test_per_element_bookkeeping_never_encodes_the_buffer(monkeypatch):
    # Asynchronous stages record their input's position before every element; with a
    # shuffle buffer that record was the whole buffer, encoded: O(buffer) per element
    # (a flax WMT pipeline ran 53x slower than tf.data). Now it is O(1), and the
    # buffer is encoded only when get_state() asks.
    from jdata.runtime import state_codec, tap

    encoded = []
    real_encode = state_codec.encode
    monkeypatch.setattr(state_codec, "encode", lambda e: encoded.append(1) or real_encode(e))
    index_lists = []
    real_tap_encode = tap.Tap.encode
    monkeypatch.setattr(tap.Tap, "encode",
                        lambda self, tokens: index_lists.append(1) or real_tap_encode(self, tokens))
    for source, encodes in ((_records(3000), 1), (jdata.range(3000), 0)):
        ds = source.shuffle(jax.random.key(1), 1000).map(
            lambda x: x, num_parallel_calls=2).prefetch(4)
        with ds.iterator() as it:
            for _ in range(1500):  # the buffer is full: the input is at 2500 of 3000
                next(it)
            assert encoded == [] and index_lists == []
            state = it.get_state()
        # Once, for get_state: the buffer's records, or its indices as they are. (Saved
        # between a draw and the next top-up, the buffer holds 999.)
        buffer = _find(state, "buffer")
        assert len(index_lists) == 1 and len(encoded) == encodes * len(buffer)
        assert len(buffer) >= 999
        index_lists.clear()
        encoded.clear()


@pytest.mark.parametrize("source", [_records, jdata.range])
def test_journaled_buffer_restores_at_every_step_under_async_stages(source):
    # 120 elements through a buffer of 7: the journal copies the buffer many times.
    ds = source(120).shuffle(jax.random.key(2), 7).map(
        lambda x: x, num_parallel_calls=2).prefetch(3)
    full = check_restore_at_every_step(ds)
    assert len(full) == 120


def _find(tree, key):
    """The value of ``key`` in the nested dicts of ``tree`` (depth first), or None."""
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        return next((v for v in map(lambda c: _find(c, key), tree.values()) if v is not None),
                    None)
    return None


# tf.data's shuffle(buffer_size, seed=None) puts the buffer size first. Following a
# generic "pass key=jax.random.key(1024)" hint would silently make a full shuffle.
TF_STYLE_CALLS = {
    "shuffle(1024)": ((1024,), {}, "1024", "seed"),
    "shuffle(1024, 42)": ((1024, 42), {}, "1024", "42"),
    "shuffle(buffer_size=1024, seed=0)": ((), {"buffer_size": 1024, "seed": 0}, "1024", "0"),
    "shuffle(buffer_size=1024)": ((), {"buffer_size": 1024}, "1024", "seed"),
    "shuffle(1024, seed=5)": ((1024,), {"seed": 5}, "1024", "5"),
    "shuffle(1000, key=k)": ((1000,), {"key": KEY}, "1000", "seed"),
    "shuffle(np.int64(64))": ((np.int64(64),), {}, "64", "seed"),
}


@pytest.mark.parametrize("call", TF_STYLE_CALLS)
def test_tf_data_argument_order_gets_the_jdata_spelling(call):
    args, kwargs, size, seed = TF_STYLE_CALLS[call]
    with pytest.raises(TypeError) as info:
        jdata.range(10).shuffle(*args, **kwargs)
    message = str(info.value)
    assert f"ds.shuffle(jax.random.key({seed}), buffer_size={size})" in message
    assert f"shuffle({size}, seed={seed}) is a buffer shuffle of {size} elements" in message
    assert "full shuffle" in message  # what the key-only spelling would do instead
    assert f"key=jax.random.key({size})" not in message


def test_a_key_with_tf_datas_seed_too_is_refused():
    with pytest.raises(TypeError, match=r"ds.shuffle\(jax.random.key\(3\), buffer_size=16\)"):
        jdata.range(10).shuffle(KEY, 16, seed=3)


def test_unrelated_bad_arguments_keep_pythons_message():
    with pytest.raises(TypeError, match="shuffle: .*unexpected keyword argument 'bogus'"):
        jdata.range(10).shuffle(KEY, bogus=3)


def test_reshuffle_each_iteration_none_is_tf_datas_default():
    ds = jdata.range(10).shuffle(KEY, buffer_size=4, reshuffle_each_iteration=None)
    first, second = [int(x) for x in ds], [int(x) for x in ds]
    assert first != second and sorted(first) == sorted(second)
