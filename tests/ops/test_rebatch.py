import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import assert_same_sequence, check_restore_at_every_step, take_list


def lists(ds):
    return [b.tolist() for b in take_list(ds)]


def test_doc_examples():
    out = check_restore_at_every_step(jdata.range(7).batch(3).rebatch(2))
    assert [b.tolist() for b in out] == [[0, 1], [2, 3], [4, 5], [6]]
    out = check_restore_at_every_step(jdata.range(6).batch(6).rebatch([1, 2]))
    assert [b.tolist() for b in out] == [[0], [1, 2], [3], [4, 5]]


def test_tf_data_doc_examples():
    assert lists(jdata.range(8).batch(4).rebatch(batch_size=2)) == [[0, 1], [2, 3], [4, 5],
                                                                     [6, 7]]
    assert lists(jdata.range(16).batch(4).rebatch(batch_size=[2, 1, 1])) == [
        [0, 1], [2], [3], [4, 5], [6], [7], [8, 9], [10], [11], [12, 13], [14], [15]]


def test_drop_remainder():
    assert lists(jdata.range(7).batch(3).rebatch(2, drop_remainder=True)) == [
        [0, 1], [2, 3], [4, 5]]
    assert lists(jdata.range(8).batch(3).rebatch([2, 3], drop_remainder=True)) == [
        [0, 1], [2, 3, 4], [5, 6]]
    assert lists(jdata.range(8).batch(3).rebatch([2, 3])) == [[0, 1], [2, 3, 4], [5, 6], [7]]


@pytest.mark.parametrize("sizes", [1, 2, 5, [3, 1], [4, 2, 7]])
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_same_as_unbatch_then_batch_over_uneven_batches(sizes, drop_remainder):
    ds = jdata.from_tensor_slices([3, 0, 5, 1, 4, 2]).map(lambda n: np.arange(n) + 10 * n)
    out = lists(ds.rebatch(sizes, drop_remainder))
    rows = [int(x) for x in take_list(ds.unbatch())]
    cycle = sizes if isinstance(sizes, list) else [sizes]
    expected, k = [], 0
    while rows:
        size = cycle[k % len(cycle)]
        if drop_remainder and len(rows) < size:
            break
        expected.append(rows[:size])
        rows, k = rows[size:], k + 1
    assert out == expected


def test_structures_and_strings():
    tensors = {"x": np.arange(14).reshape(7, 2), "s": np.array(list("abcdefg"), dtype=object)}
    ds = jdata.from_tensor_slices(tensors).batch(3).rebatch([2, 4])
    expected = [{k: v[a:b] for k, v in tensors.items()} for a, b in [(0, 2), (2, 6), (6, 7)]]
    assert_same_sequence(check_restore_at_every_step(ds), expected)


def test_restore_at_every_step_over_a_sequential_input():
    ds = jdata.range(30).filter(lambda x: x % 4 != 0).batch(4).rebatch([3, 5])
    out = check_restore_at_every_step(ds)
    assert [len(b) for b in out] == [3, 5, 3, 5, 3, 3]
    assert np.concatenate(out).tolist() == [x for x in range(30) if x % 4]


def test_state_is_the_row_stream_and_the_next_size():
    it = jdata.range(6).batch(4).rebatch([3, 1]).iterator()
    next(it)
    assert it.get_state()["state"] == {"rows": {"input": {"index": 0}, "offset": 3},
                                       "size_index": 1}


def test_rows_of_different_shapes_cannot_join():
    ds = jdata.from_tensor_slices([1, 2]).map(lambda n: np.zeros((1, n))).rebatch(2)
    with pytest.raises(ValueError, match="rebatch.*shapes"):
        list(ds)


def test_element_spec():
    assert jdata.range(8).batch(4).rebatch(2).element_spec == TensorSpec((None,), np.int64)
    assert jdata.range(8).batch(4).rebatch(2, drop_remainder=True).element_spec == TensorSpec(
        (2,), np.int64)
    assert jdata.range(8).batch(4).rebatch([1, 2], drop_remainder=True).element_spec == (
        TensorSpec((None,), np.int64))
    ds = jdata.from_tensors({"a": np.zeros((4, 3), np.float32)}).rebatch(2, True)
    assert ds.element_spec == {"a": TensorSpec((2, 3), np.float32)}


def test_element_spec_knows_sizes_that_divide_the_input_batches():
    # tf.data: range(12).batch(6, drop_remainder=True).rebatch(size).element_spec.shape
    # is (2,) for 2, (3,) for 3 and [3, 3], (None,) for 4 and [1, 3].
    six = jdata.range(12).batch(6, drop_remainder=True)
    assert six.rebatch(2).element_spec == TensorSpec((2,), np.int64)
    assert six.rebatch([3, 3]).element_spec == TensorSpec((3,), np.int64)
    assert six.rebatch(4).element_spec == TensorSpec((None,), np.int64)
    assert six.rebatch([1, 3]).element_spec == TensorSpec((None,), np.int64)
    assert [b.tolist() for b in six.rebatch(3)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_cardinality():
    assert jdata.range(16).batch(4, drop_remainder=True).rebatch([2, 1, 1]).cardinality() == 12
    seven = jdata.from_tensors(np.arange(7))
    assert seven.rebatch(2).cardinality() == 4
    assert seven.rebatch(2, drop_remainder=True).cardinality() == 3
    assert seven.rebatch([2, 3]).cardinality() == 3
    assert seven.rebatch([2, 3], drop_remainder=True).cardinality() == 3
    assert seven.rebatch([4, 4], drop_remainder=True).cardinality() == 1
    assert seven.repeat().rebatch(2).cardinality() == jdata.INFINITE
    assert jdata.range(7).batch(3).rebatch(2).cardinality() == jdata.UNKNOWN
    fixed = jdata.range(16).map(lambda x: x).batch(4, drop_remainder=True)
    assert fixed.rebatch(2).cardinality() == 8 and fixed.rebatch(2).unbatch().cardinality() == 16
    assert fixed.rebatch(3).unbatch().cardinality() == jdata.UNKNOWN  # batches of 3, 1, 3...
    for sizes in ([2, 3], [4, 4], 3):
        for drop in (False, True):
            assert seven.rebatch(sizes, drop).cardinality() == len(
                lists(seven.rebatch(sizes, drop)))


@pytest.mark.parametrize("kwargs, error", [
    ({"batch_size": 0}, ValueError), ({"batch_size": []}, ValueError),
    ({"batch_size": [2, 0]}, ValueError), ({"batch_size": 2.5}, TypeError),
    ({"batch_size": 2, "drop_remainder": "no"}, TypeError),
])
def test_bad_arguments(kwargs, error):
    with pytest.raises(error, match="rebatch"):
        jdata.range(4).batch(2).rebatch(**kwargs)


def test_cardinality_never_rests_on_an_inferred_spec():
    # 6 batches: the first 4 (those the spec is inferred from) of 3 rows, then 2; the
    # count used to be 9 batches of 2 (18 rows), where iteration gives 8 (16 rows).
    ds = jdata.range(6).map(lambda i: np.zeros(3 if i < 4 else 2)).rebatch(2)
    assert ds.cardinality() == jdata.UNKNOWN
    with pytest.raises(TypeError, match="unknown"):
        len(ds)
    assert len(list(ds)) == 8
