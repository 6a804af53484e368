import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from jdata.runtime import state_codec
from tests.helpers import check_restore_at_every_step, take_list


def test_tf_data_doc_example():
    ds = jdata.from_tensor_slices([1, 37, 2, 37, 2, 1]).unique()
    out = [int(x) for x in check_restore_at_every_step(ds)]
    assert out == [1, 37, 2]
    assert sorted(out) == [1, 2, 37]


def test_keeps_first_occurrences_in_order():
    ds = jdata.from_tensor_slices(np.array([5, 5, 0, 9, 0, 5, 7], np.int32)).unique()
    out = take_list(ds)
    assert [int(x) for x in out] == [5, 0, 9, 7]
    assert all(x.dtype == np.int32 for x in out)


@pytest.mark.parametrize("values", [["b", "a", "b", "c", "a"], [b"b", b"a", b"b", b"c", b"a"]])
def test_strings_and_bytes(values):
    ds = jdata.from_tensor_slices(values).unique()
    assert check_restore_at_every_step(ds) == values[:2] + values[3:4]


def test_over_a_sequential_input():
    ds = jdata.range(30).filter(lambda x: x % 4 != 0).map(lambda x: x % 7).unique()
    assert [int(x) for x in check_restore_at_every_step(ds)] == [1, 2, 3, 5, 6, 0, 4]


def test_over_an_infinite_input():
    ds = jdata.range(4).repeat().unique()
    assert [int(x) for x in take_list(ds.take(4))] == [0, 1, 2, 3]
    assert ds.cardinality() == jdata.UNKNOWN


def test_state_holds_the_seen_set_sorted():
    ds = jdata.from_tensor_slices([3, 1, 3, 2]).unique()
    it = ds.iterator()
    for _ in range(3):
        next(it)
    seen = [state_codec.decode(k, "unique", "seen") for k in it.get_state()["state"]["seen"]]
    assert seen == [1, 2, 3]


def test_element_spec_and_cardinality():
    ds = jdata.from_tensor_slices(["x", "y"]).unique()
    assert ds.element_spec == TensorSpec((), np.dtype(object))
    assert jdata.range(5).unique().element_spec == TensorSpec((), np.int64)
    assert jdata.range(5).unique().cardinality() == jdata.UNKNOWN
    assert jdata.range(0).unique().cardinality() == 0


@pytest.mark.parametrize("tensors", [
    np.arange(3.0), np.zeros((3, 2), np.int64), (np.arange(3), np.arange(3)),
    {"x": np.arange(3)}, np.array([True, False]),
])
def test_unsupported_elements_fail_at_construction(tensors):
    with pytest.raises(TypeError, match="unique.*integer scalars or strings"):
        jdata.from_tensor_slices(tensors).unique()


def test_udf_outputs_are_checked_at_iteration_without_running_udfs_at_construction():
    calls = []

    def to_float(x):
        calls.append(int(x))
        return x * 0.5
    ds = jdata.range(3).map(to_float).unique()
    assert calls == []
    with pytest.raises(TypeError, match="unique.*got float64"):
        list(ds)
