import collections

import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import (UDF_PATHS, add_one_in_place, assert_read_only_write,
                           assert_same_sequence, check_restore_at_every_step, map_on)

Pair = collections.namedtuple("Pair", ["a", "b"])


def test_tf_data_doc_example_list():
    out = check_restore_at_every_step(jdata.from_tensor_slices([1, 2, 3]))
    assert_same_sequence(out, [np.int64(1), np.int64(2), np.int64(3)])


def test_tf_data_doc_example_tuple_of_lists():
    out = check_restore_at_every_step(jdata.from_tensor_slices(([1, 2], [3, 4], [5, 6])))
    assert [tuple(int(v) for v in e) for e in out] == [(1, 3, 5), (2, 4, 6)]


def test_tf_data_doc_example_two_dimensional_component():
    ds = jdata.from_tensor_slices(([1, 2], [[3, 4], [5, 6]]))
    out = check_restore_at_every_step(ds)
    assert_same_sequence(out, [(np.int64(1), np.array([3, 4])), (np.int64(2), np.array([5, 6]))])


def test_tf_data_doc_example_dict():
    out = check_restore_at_every_step(jdata.from_tensor_slices({"a": [1, 2], "b": [3, 4]}))
    assert [{k: int(v) for k, v in e.items()} for e in out] == [{"a": 1, "b": 3},
                                                                {"a": 2, "b": 4}]


def test_tf_data_doc_example_features_and_labels():
    features, labels = [[1, 3], [2, 1], [3, 3]], ["A", "B", "A"]
    out = check_restore_at_every_step(jdata.from_tensor_slices((features, labels)))
    assert [(f.tolist(), s) for f, s in out] == [([1, 3], "A"), ([2, 1], "B"), ([3, 3], "A")]


def test_strings_become_str_leaves_and_bytes_stay_bytes():
    out = list(jdata.from_tensor_slices(["ab", "c"]))
    assert out == ["ab", "c"] and all(type(s) is str for s in out)
    raw = list(jdata.from_tensor_slices([b"x", b"yz"]))
    assert raw == [b"x", b"yz"] and all(type(s) is bytes for s in raw)


def test_namedtuple_structure_is_kept():
    out = check_restore_at_every_step(
        jdata.from_tensor_slices(Pair(np.arange(3), np.arange(3) * 2.0)))
    assert all(type(e) is Pair for e in out)
    assert [(int(e.a), float(e.b)) for e in out] == [(0, 0.0), (1, 2.0), (2, 4.0)]


def test_rows_of_a_matrix():
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = check_restore_at_every_step(jdata.from_tensor_slices(data))
    assert_same_sequence(out, list(data))


def test_element_spec_and_cardinality():
    ds = jdata.from_tensor_slices({"x": np.zeros((5, 2, 3), np.uint8), "s": list("abcde"),
                                   "n": np.arange(5, dtype=np.int32)})
    assert ds.element_spec == {"x": TensorSpec((2, 3), np.uint8),
                               "s": TensorSpec((), np.dtype(object)),
                               "n": TensorSpec((), np.int32)}
    assert ds.cardinality() == 5
    assert ds._node.random_access()


def test_empty_leading_dimension_is_an_empty_dataset():
    ds = jdata.from_tensor_slices(np.zeros((0, 3)))
    assert ds.cardinality() == 0 and list(ds) == []
    assert ds.element_spec == TensorSpec((3,), np.float64)


@pytest.mark.parametrize("tensors, error, message", [
    (([1, 2], [1, 2, 3]), ValueError, "different lengths"),
    ({"a": np.zeros(2), "b": np.zeros((3, 1))}, ValueError, "different lengths"),
    (5, ValueError, "rank >= 1"),
    ((np.zeros(2), 3), ValueError, "rank >= 1"),
    ("abc", ValueError, "rank >= 1"),
    ((), ValueError, "no leaves"),
    ([None, 1], TypeError, "from_tensor_slices"),
    (None, TypeError, "None"),
])
def test_bad_tensors(tensors, error, message):
    with pytest.raises(error, match=message):
        jdata.from_tensor_slices(tensors)


def test_restore_after_map_and_skip_of_rows():
    ds = jdata.from_tensor_slices((np.arange(6), list("abcdef"))).map(lambda i, s: s * int(i))
    assert check_restore_at_every_step(ds) == ["", "b", "cc", "ddd", "eeee", "fffff"]


@pytest.mark.parametrize("path", UDF_PATHS)
def test_an_in_place_write_raises_and_leaves_the_tensors_intact(path):
    # Rows are views of the tensors: a write used to reach the next epoch.
    x = np.zeros((2, 2))
    tensors = {"x": x, "s": np.array(["a", "b"])}
    assert_read_only_write(map_on(jdata.from_tensor_slices(tensors),
                                  lambda e: add_one_in_place(e["x"]), path).repeat(2))
    assert not x.any() and x.flags.writeable
    row = next(iter(jdata.from_tensor_slices(tensors)))
    assert np.shares_memory(row["x"], x)  # no copies


@pytest.mark.parametrize("tensors", [
    [jdata.range(2), jdata.range(3)], (jdata.range(2),), {"a": jdata.range(2)}, jdata.range(2)])
def test_datasets_are_not_tensors_and_the_error_names_from_source(tensors):
    with pytest.raises(TypeError, match=r"jdata.from_source\(\[ds1, ds2\]\).*sample_from_datasets"):
        jdata.from_tensor_slices(tensors)
    with pytest.raises(TypeError, match="from_tensors: .*from_source"):
        jdata.from_tensors(tensors)


def test_the_suggested_dataset_of_datasets_reads_them():
    ds = jdata.from_source([jdata.range(3), jdata.range(10, 12)]).interleave(
        lambda d: d, cycle_length=2)
    assert [int(x) for x in ds] == [0, 10, 1, 11, 2]


def test_bytes_and_str_keep_trailing_nuls():
    # NumPy's fixed-width strings would drop them: a serialized record would lose bytes.
    records = [b"a\x00", b"\x08\x00\x00", b"\x00", b""]
    assert list(jdata.from_tensor_slices(records)) == records
    assert list(jdata.from_tensor_slices({"r": records})) == [{"r": r} for r in records]
    rows = [r.tolist() for r in jdata.from_tensor_slices([["x\x00", "y"], ["z", "\x00"]])]
    assert rows == [["x\x00", "y"], ["z", "\x00"]]
    assert jdata.from_tensors([b"a\x00", b"b"]).get_single_element().tolist() == [b"a\x00", b"b"]
