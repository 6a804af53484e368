import collections

import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import (UDF_PATHS, add_one_in_place, assert_elements_equal,
                           assert_read_only_write, check_restore_at_every_step, map_on, pop_x)

Pair = collections.namedtuple("Pair", ["a", "b"])


def test_tf_data_doc_example_list_becomes_one_array():
    out = check_restore_at_every_step(jdata.from_tensors([1, 2, 3]))
    assert len(out) == 1
    assert_elements_equal(out[0], np.array([1, 2, 3]))


def test_tf_data_doc_example_tuple_with_a_string():
    out = check_restore_at_every_step(jdata.from_tensors(([1, 2, 3], "A")))
    assert len(out) == 1
    assert_elements_equal(out[0], (np.array([1, 2, 3]), "A"))


def test_structures_are_kept():
    element = {"x": np.zeros((2, 3), np.float32), "p": Pair(np.int32(1), b"raw")}
    (out,) = check_restore_at_every_step(jdata.from_tensors(element))
    assert_elements_equal(out, element)
    assert type(out["p"]) is Pair


def test_scalar_becomes_a_numpy_scalar():
    (out,) = list(jdata.from_tensors(7))
    assert type(out) is np.int64 and out == 7
    (out,) = list(jdata.from_tensors(2.5))
    assert type(out) is np.float64


def test_element_spec_and_cardinality():
    ds = jdata.from_tensors({"x": np.zeros((2, 3), np.float32), "s": "abc", "n": 3})
    assert ds.element_spec == {"x": TensorSpec((2, 3), np.float32),
                               "s": TensorSpec((), np.dtype(object)),
                               "n": TensorSpec((), np.int64)}
    assert ds.cardinality() == 1
    assert ds._node.random_access()
    assert [int(x) for x in jdata.from_tensors(4).repeat(3)] == [4, 4, 4]


def test_string_arrays_become_object_arrays():
    (out,) = list(jdata.from_tensors(["a", "bc"]))
    assert out.dtype == object and out.tolist() == ["a", "bc"]


@pytest.mark.parametrize("element, message", [
    (None, "None"), ({"a": None}, "None"), (object(), "object"), ([object(), 1], "list leaf"),
])
def test_bad_elements(element, message):
    with pytest.raises(TypeError, match=f"from_tensors: .*{message}"):
        jdata.from_tensors(element)


@pytest.mark.parametrize("path", UDF_PATHS)
def test_an_in_place_write_raises_instead_of_reaching_the_next_epoch(path):
    # It used to give 1, 2, 3: each epoch saw the last one's write (tf.data: immutable).
    x = np.array([0])
    assert_read_only_write(map_on(jdata.from_tensors(x), add_one_in_place, path).repeat(3))
    assert x.tolist() == [0] and x.flags.writeable


@pytest.mark.parametrize("path", UDF_PATHS)
def test_a_udf_that_pops_from_its_element_leaves_the_next_epoch_intact(path):
    element = {"x": np.array([1]), "y": np.int64(2)}
    ds = map_on(jdata.from_tensors(element), pop_x, path).repeat(3)
    assert [x.tolist() for x in ds] == [[1]] * 3
    assert sorted(element) == ["x", "y"]


def test_each_element_comes_in_new_containers_that_share_the_data():
    x = np.arange(3)
    ds = jdata.from_tensors({"x": x, "pair": Pair(x, b"b")})
    first, second = next(iter(ds)), next(iter(ds))
    assert first is not second and first["pair"] is not second["pair"]
    assert np.shares_memory(first["x"], x) and np.shares_memory(first["pair"].a, x)
