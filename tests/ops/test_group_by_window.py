import jax
import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import check_restore_at_every_step, pop_x, take_list


def _lists(batches) -> list[list[int]]:
    return [b.tolist() for b in batches]


def test_tf_data_doc_example():
    ds = jdata.range(10).group_by_window(
        key_func=lambda x: x % 2, reduce_func=lambda key, w: w.batch(5), window_size=5)
    assert _lists(check_restore_at_every_step(ds)) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]


def test_full_windows_then_the_rest_in_key_order():
    ds = jdata.range(10).group_by_window(
        key_func=lambda x: x % 2, reduce_func=lambda key, w: w.batch(3), window_size=3)
    assert _lists(check_restore_at_every_step(ds)) == [[0, 2, 4], [1, 3, 5], [6, 8], [7, 9]]


def test_remaining_groups_are_reduced_in_ascending_key_order():
    ds = jdata.range(7).group_by_window(
        key_func=lambda x: 1 - x % 3, reduce_func=lambda key, w: w.batch(10), window_size=10)
    assert _lists(check_restore_at_every_step(ds)) == [[2, 5], [1, 4], [0, 3, 6]]


def test_window_size_func_per_key():
    ds = jdata.range(10).group_by_window(
        key_func=lambda x: x % 3, reduce_func=lambda key, w: w.map(lambda x: x * 10 + key),
        window_size_func=lambda key: key + 1)
    # key 0 windows of 1, key 1 windows of 2, key 2 windows of 3.
    assert [int(x) for x in check_restore_at_every_step(ds)] == [
        0, 30, 11, 41, 60, 22, 52, 82, 90, 71]


def test_reduce_func_gets_an_int64_key_and_a_window_dataset():
    seen = []

    def reduce_func(key, window):
        seen.append((type(key), window.cardinality()))
        return window.batch(2)

    list(jdata.range(3).group_by_window(lambda x: x // 2, reduce_func, window_size=2))
    assert seen == [(np.int64, 2), (np.int64, 1)]


def test_reduced_dataset_is_drained_before_more_input_is_read():
    pulled = []

    def key_func(x):
        pulled.append(int(x))
        return x % 2

    ds = jdata.range(6).group_by_window(key_func, lambda key, w: w, window_size=2)
    it = ds.iterator()
    assert int(next(it)) == 0 and pulled == [0, 1, 2]
    assert int(next(it)) == 2 and pulled == [0, 1, 2]
    assert int(next(it)) == 1 and pulled == [0, 1, 2, 3]


def test_restores_mid_reduce_output_over_sequential_input():
    ds = jdata.range(12).filter(lambda x: x % 4 != 3).group_by_window(
        key_func=lambda x: x % 2, reduce_func=lambda key, w: w.map(lambda x: x + 100 * key),
        window_size=3)
    assert [int(x) for x in check_restore_at_every_step(ds)] == [
        0, 2, 4, 101, 105, 109, 6, 8, 10]


def test_restores_reduce_outputs_that_are_nested_pipelines():
    ds = jdata.range(9).group_by_window(
        key_func=lambda x: x % 3,
        reduce_func=lambda key, w: w.filter(lambda x: x != 4).flat_map(
            lambda x: jdata.from_tensors(x).repeat(2)),
        window_size=2)
    assert [int(x) for x in check_restore_at_every_step(ds)] == [
        0, 0, 3, 3, 1, 1, 2, 2, 5, 5, 6, 6, 7, 7, 8, 8]


def test_inside_a_nested_dataset():
    ds = jdata.range(2, 4).flat_map(lambda n: jdata.range(n * 2).group_by_window(
        lambda x: x % n, lambda key, w: w.batch(2), window_size=2))
    assert _lists(check_restore_at_every_step(ds)) == [[0, 2], [1, 3], [0, 3], [1, 4], [2, 5]]


def test_state_holds_indices_over_a_random_access_input():
    ds = jdata.range(100, 110).map(lambda x: x * 2).group_by_window(
        lambda x: x % 3, lambda key, w: w.batch(5), window_size=5)
    it = ds.iterator()
    next(it)  # no group fills up: key 0 is reduced at the end, keys 1 and 2 wait
    state = it.get_state()["state"]
    assert [key for key, _ in state["groups"]] == [1, 2]
    assert all(isinstance(t, int) for _, tokens in state["groups"] for t in tokens)
    assert all(isinstance(t, int) for t in state["reduction"]["window"])


def test_element_spec_and_cardinality():
    ds = jdata.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.batch(3), window_size=3)
    assert ds.element_spec == TensorSpec((None,), np.int64)
    assert ds.cardinality() == jdata.UNKNOWN
    ds = jdata.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.map(lambda x: (x, k)),
                                         window_size=3)
    assert ds.element_spec == (TensorSpec((), np.int64), TensorSpec((), np.int64))


def test_window_dataset_has_the_input_spec():
    specs = []

    def reduce_func(key, window):
        specs.append(window.element_spec)
        return window

    list(jdata.range(5).batch(2).group_by_window(lambda x: 0, reduce_func, window_size=2))
    assert specs == [TensorSpec((None,), np.int64)] * 2


@pytest.mark.parametrize("kwargs, error, match", [
    ({}, ValueError, "exactly one of window_size and window_size_func"),
    ({"window_size": 2, "window_size_func": lambda k: 2}, ValueError, "exactly one"),
    ({"window_size": 0}, ValueError, "window_size"),
    ({"window_size": 1.5}, TypeError, "window_size"),
    ({"window_size_func": 3}, TypeError, "window_size_func"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=f"group_by_window.*{match}"):
        jdata.range(3).group_by_window(lambda x: x, lambda k, w: w, **kwargs)


def test_functions_must_be_callable():
    with pytest.raises(TypeError, match="group_by_window: key_func"):
        jdata.range(3).group_by_window(1, lambda k, w: w, window_size=2)
    with pytest.raises(TypeError, match="group_by_window: reduce_func"):
        jdata.range(3).group_by_window(lambda x: x, "w", window_size=2)


@pytest.mark.parametrize("key_func", [
    lambda x: 1.5, lambda x: np.array([1, 2]), lambda x: True, lambda x: "a",
    lambda x: np.float32(1),
])
def test_key_must_be_an_integer_scalar(key_func):
    ds = jdata.range(3).group_by_window(key_func, lambda k, w: w, window_size=2)
    with pytest.raises(TypeError, match="group_by_window: key_func must return an integer"):
        list(ds)


def test_integer_keys_of_any_kind_are_accepted():
    ds = jdata.range(4).group_by_window(lambda x: np.array(x % 2, np.uint8),
                                       lambda k, w: w.batch(2), window_size=2)
    assert _lists(ds) == [[0, 2], [1, 3]]


def test_window_size_func_results_are_checked():
    with pytest.raises(ValueError, match="group_by_window: window_size_func returned 0"):
        list(jdata.range(3).group_by_window(lambda x: x, lambda k, w: w,
                                            window_size_func=lambda k: 0))
    with pytest.raises(TypeError, match="group_by_window: window_size_func must return"):
        list(jdata.range(3).group_by_window(lambda x: x, lambda k, w: w,
                                            window_size_func=lambda k: 2.0))


def test_reduce_func_must_return_a_dataset():
    with pytest.raises(TypeError, match="group_by_window: .*jdata.Dataset"):
        list(jdata.range(3).group_by_window(lambda x: x, lambda k, w: k, window_size=1))


def test_key_func_error_skips_the_element():
    ds = jdata.range(6).group_by_window(lambda x: 1 // (int(x) % 3), lambda k, w: w.batch(2),
                                       window_size=2)
    it = ds.iterator()
    with pytest.raises(jdata.UDFError) as info:
        next(it)
    assert info.value.op == "group_by_window" and info.value.position == 0
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert _lists(take_list(ds.ignore_errors())) == [[1, 4], [2, 5]]


def test_reduce_func_error_skips_the_window():
    def reduce_func(key, window):
        if key == 1:
            raise RuntimeError("bad window")
        return window.batch(2)

    ds = jdata.range(6).group_by_window(lambda x: x % 2, reduce_func, window_size=2)
    with pytest.raises(jdata.UDFError, match="group_by_window.*RuntimeError"):
        list(ds)
    assert _lists(take_list(ds.ignore_errors())) == [[0, 2], [4]]


def test_random_ops_in_reduced_datasets_differ_per_window_and_repeat_exactly():
    key = jax.random.key(1)

    def build():
        return jdata.range(6).group_by_window(
            lambda x: x % 2, lambda k, w: w.random_map(lambda x, kk: kk, key), window_size=3)

    ds = build()
    out = check_restore_at_every_step(ds)
    assert len({tuple(k.tolist()) for k in out}) == 6
    assert [k.tolist() for k in take_list(build())] == [k.tolist() for k in out]
    assert not {tuple(k.tolist()) for k in take_list(ds)} & {tuple(k.tolist()) for k in out}


def test_a_group_read_twice_gives_its_elements_twice():
    # reduce_func's dataset reads the group's elements twice; the first read's UDF
    # takes "x" out of each.
    ds = jdata.range(4).map(lambda i: {"x": np.array([i]), "k": np.int64(i % 2)})
    ds = ds.group_by_window(lambda d: d["k"],
                            lambda key, group: group.map(pop_x).concatenate(group.map(pop_x)),
                            window_size=2)
    assert [int(x[0]) for x in ds] == [0, 2, 0, 2, 1, 3, 1, 3]
