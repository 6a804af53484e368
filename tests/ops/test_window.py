import json

import numpy as np
import pytest

import jdata
from jdata import DatasetSpec, TensorSpec
from tests.helpers import (add_one_in_place, assert_read_only_write, check_restore_at_every_step,
                           take_list)


def _windows(ds) -> list[list[int]]:
    return [[int(x) for x in w] for w in check_restore_at_every_step(ds)]


@pytest.mark.parametrize("args, kwargs, expected", [
    # The examples of tf.data's Dataset.window documentation.
    ((3,), {}, [[0, 1, 2], [3, 4, 5], [6]]),
    ((3,), {"drop_remainder": True}, [[0, 1, 2], [3, 4, 5]]),
    ((3,), {"shift": 1, "drop_remainder": True},
     [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6]]),
    ((3,), {"shift": 1, "stride": 2, "drop_remainder": True}, [[0, 2, 4], [1, 3, 5], [2, 4, 6]]),
    ((3, 2, 1, True), {}, [[0, 1, 2], [2, 3, 4], [4, 5, 6]]),
    # Partial windows are emitted while a window starts within the input.
    ((3,), {"shift": 2}, [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]),
    ((3, 1, 2, False), {},
     [[0, 2, 4], [1, 3, 5], [2, 4, 6], [3, 5], [4, 6], [5], [6]]),
    # Gaps between windows are skipped.
    ((2,), {"shift": 3}, [[0, 1], [3, 4], [6]]),
    ((2,), {"shift": 4, "stride": 2}, [[0, 2], [4, 6]]),
    ((2,), {"shift": 5, "stride": 2, "drop_remainder": True}, [[0, 2]]),
    ((8,), {}, [[0, 1, 2, 3, 4, 5, 6]]),
    ((8,), {"drop_remainder": True}, []),
])
def test_windows_over_random_access_and_sequential_inputs(args, kwargs, expected):
    ds = jdata.range(7).window(*args, **kwargs)
    assert _windows(ds) == expected
    assert ds.cardinality() == len(expected)
    sequential = jdata.range(7).filter(lambda x: x >= 0).window(*args, **kwargs)
    assert _windows(sequential) == expected
    assert sequential.cardinality() == jdata.UNKNOWN


def test_random_access_only_without_overlap():
    assert jdata.range(7).window(3)._node.random_access()
    assert jdata.range(7).window(2, shift=4, stride=3)._node.random_access()
    assert not jdata.range(7).window(3, shift=2)._node.random_access()
    assert not jdata.range(7).filter(lambda x: True).window(3)._node.random_access()


def test_overlapping_windows_over_a_random_access_input_save_indices():
    ds = jdata.range(100, 107).map(lambda x: x * 2).window(3, shift=1)
    it = ds.iterator()
    next(it)
    state = it.get_state()["state"]
    assert state["buffer"] == [1, 2]
    assert [int(x) for x in next(ds.iterator(json.loads(json.dumps(it.get_state()))))] == [
        202, 204, 206]


def test_tf_data_doc_example_tuples():
    ds = jdata.from_tensor_slices(([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])).window(2)
    out = check_restore_at_every_step(ds)
    assert [([int(x) for x in a], [int(y) for y in b]) for a, b in out] == [
        ([1, 2], [6, 7]), ([3, 4], [8, 9]), ([5], [10])]


def test_tf_data_doc_example_dicts():
    ds = jdata.from_tensor_slices({"a": [1, 2, 3], "b": [4, 5, 6], "c": [7, 8, 9]}).window(2)
    out = check_restore_at_every_step(ds)
    assert [{k: [int(x) for x in v] for k, v in w.items()} for w in out] == [
        {"a": [1, 2], "b": [4, 5], "c": [7, 8]}, {"a": [3], "b": [6], "c": [9]}]


def test_zip_rebuilds_tuple_and_dict_windows():
    pairs = jdata.from_tensor_slices(([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])).window(2, shift=1)
    ds = pairs.flat_map(lambda a, b: jdata.zip((a, b)).batch(2))
    out = check_restore_at_every_step(ds)
    assert [(a.tolist(), b.tolist()) for a, b in out] == [
        ([1, 2], [6, 7]), ([2, 3], [7, 8]), ([3, 4], [8, 9]), ([4, 5], [9, 10]), ([5], [10])]
    dicts = jdata.from_tensor_slices({"a": [1, 2, 3], "b": [4, 5, 6]}).window(2)
    ds = dicts.flat_map(lambda d: jdata.zip(d).batch(2))
    out = check_restore_at_every_step(ds)
    assert [(d["a"].tolist(), d["b"].tolist()) for d in out] == [([1, 2], [4, 5]), ([3], [6])]


def test_flattening_windows_restores_inside_windows():
    ds = jdata.range(7).filter(lambda x: x != 3).window(3, shift=2).flat_map(lambda w: w)
    assert [int(x) for x in check_restore_at_every_step(ds)] == [0, 1, 2, 2, 4, 5, 5, 6]


def test_windows_inside_nested_datasets():
    ds = jdata.range(1, 3).flat_map(
        lambda n: jdata.range(n * 4).window(3, shift=2).flat_map(lambda w: w.batch(3)))
    out = check_restore_at_every_step(ds)
    assert [b.tolist() for b in out] == [[0, 1, 2], [2, 3], [0, 1, 2], [2, 3, 4], [4, 5, 6],
                                         [6, 7]]


def test_window_datasets_can_be_iterated_again():
    window = next(iter(jdata.range(5).window(3)))
    assert [int(x) for x in window] == [int(x) for x in window] == [0, 1, 2]
    assert window.cardinality() == 3


def test_element_spec():
    assert jdata.range(7).window(3).element_spec == DatasetSpec(TensorSpec((), np.int64))
    ds = jdata.from_tensor_slices({"a": np.zeros((4, 2)), "s": ["a", "b", "c", "d"]}).window(2)
    assert ds.element_spec == {"a": DatasetSpec(TensorSpec((2,), np.float64)),
                               "s": DatasetSpec(TensorSpec((), object))}
    batches = jdata.range(7).batch(3).window(2)
    assert batches.element_spec == DatasetSpec(TensorSpec((None,), np.int64))
    window = next(iter(batches.skip(1)))
    assert window.element_spec == TensorSpec((None,), np.int64)
    assert [b.tolist() for b in window] == [[6]]


def test_cardinality():
    assert jdata.range(10).window(3).cardinality() == 4
    assert jdata.range(10).window(3, drop_remainder=True).cardinality() == 3
    assert jdata.range(10).window(3, shift=1, drop_remainder=True).cardinality() == 8
    assert jdata.range(10).window(3, shift=1, stride=3, drop_remainder=True).cardinality() == 4
    assert jdata.range(2).window(3, drop_remainder=True).cardinality() == 0
    assert jdata.range(10).repeat().window(3).cardinality() == jdata.INFINITE


@pytest.mark.parametrize("kwargs, error, match", [
    ({"size": 0}, ValueError, "size"),
    ({"size": 2.0}, TypeError, "size"),
    ({"size": 2, "shift": 0}, ValueError, "shift"),
    ({"size": 2, "stride": 0}, ValueError, "stride"),
    ({"size": 2, "drop_remainder": None}, TypeError, "drop_remainder"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=f"window.*{match}"):
        jdata.range(3).window(**kwargs)


def _fails_at_2(x):
    if x == 2:
        raise RuntimeError("bad element")
    return x


@pytest.mark.parametrize("make", [
    lambda: jdata.range(6).map(_fails_at_2),
    lambda: jdata.range(6).filter(lambda x: True).map(_fails_at_2),
])
def test_upstream_errors_propagate_and_ignore_errors_continues(make):
    with pytest.raises(jdata.UDFError, match="map.*position 2"):
        list(make().window(2, shift=1))
    out = take_list(make().window(2, shift=1).ignore_errors())
    assert [[int(x) for x in w] for w in out] == [[0, 1], [1, 3], [3, 4], [4, 5], [5]]


@pytest.mark.parametrize("make", [
    lambda: jdata.range(6).map(_fails_at_2),
    lambda: jdata.range(6).filter(lambda x: True).map(_fails_at_2),
])
def test_errors_of_skipped_elements_are_ignored(make):
    assert _windows(make().window(1, shift=3)) == [[0], [3]]


def test_a_write_to_an_element_of_one_window_raises_instead_of_reaching_the_next():
    # Overlapping windows share elements; a window is read again by each of its iterators.
    ds = jdata.range(3).map(lambda i: np.array([i])).window(2, shift=1, drop_remainder=True)
    assert_read_only_write(ds.flat_map(lambda w: w.map(add_one_in_place)))
    assert [[x.tolist() for x in w] for w in ds] == [[[0], [1]], [[1], [2]]]
