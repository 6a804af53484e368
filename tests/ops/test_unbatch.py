import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import assert_same_sequence, check_restore_at_every_step, take_list


def test_doc_example():
    ds = jdata.range(5).batch(2).unbatch()
    assert [int(x) for x in check_restore_at_every_step(ds)] == [0, 1, 2, 3, 4]


def test_tf_data_doc_example_with_batches_of_different_sizes():
    # tf.data: [[1, 2, 3], [1, 2], [1, 2, 3, 4]] unbatched -> [1, 2, 3, 1, 2, 1, 2, 3, 4]
    ds = jdata.from_tensor_slices([3, 2, 4]).map(lambda n: np.arange(1, n + 1)).unbatch()
    out = check_restore_at_every_step(ds)
    assert [int(x) for x in out] == [1, 2, 3, 1, 2, 1, 2, 3, 4]


def test_structures_and_strings_round_trip():
    rows = {"x": np.arange(10).reshape(5, 2), "s": np.array(list("abcde"), dtype=object)}
    ds = jdata.from_tensor_slices(rows).batch(2).unbatch()
    expected = take_list(jdata.from_tensor_slices(rows))
    assert_same_sequence(check_restore_at_every_step(ds), expected)


def test_over_a_sequential_input():
    ds = jdata.range(20).filter(lambda x: x % 3 == 0).batch(3).unbatch()
    out = check_restore_at_every_step(ds)
    assert [int(x) for x in out] == [0, 3, 6, 9, 12, 15, 18]


def test_state_over_a_random_access_input_is_an_index_and_offset():
    it = jdata.range(7).batch(3).unbatch().iterator()
    states = []
    for _ in range(7):
        next(it)
        states.append(it.get_state()["state"])
    assert states == [{"input": {"index": 0}, "offset": 1}, {"input": {"index": 0}, "offset": 2},
                      {"input": {"index": 1}, "offset": 0}, {"input": {"index": 1}, "offset": 1},
                      {"input": {"index": 1}, "offset": 2}, {"input": {"index": 2}, "offset": 0},
                      {"input": {"index": 3}, "offset": 0}]


def test_empty_batches_are_skipped():
    ds = jdata.from_tensor_slices([0, 2, 0, 0, 1, 0]).map(lambda n: np.full(n, n)).unbatch()
    assert [int(x) for x in check_restore_at_every_step(ds)] == [2, 2, 1]


def test_leaves_must_have_the_same_leading_size():
    ds = jdata.from_tensors((np.zeros(3), np.zeros(2))).unbatch()
    with pytest.raises(ValueError, match="unbatch.*leading dimensions"):
        list(ds)


def test_scalars_cannot_be_unbatched():
    ds = jdata.range(3).unbatch()
    with pytest.raises(ValueError, match="scalar"):
        ds.element_spec
    with pytest.raises(ValueError, match="unbatch.*scalar"):
        list(ds)


def test_element_spec():
    assert jdata.range(8).batch(4).unbatch().element_spec == TensorSpec((), np.int64)
    ds = jdata.from_tensors({"a": np.zeros((5, 2, 3), np.float32), "s": np.array(["x"] * 5)})
    assert ds.unbatch().element_spec == {"a": TensorSpec((2, 3), np.float32),
                                         "s": TensorSpec((), np.dtype(object))}


def test_cardinality_uses_a_fixed_batch_size():
    assert jdata.range(10).batch(2, drop_remainder=True).unbatch().cardinality() == 10
    assert jdata.from_tensor_slices(np.zeros((4, 3, 2))).unbatch().cardinality() == 12
    assert jdata.range(10).batch(3).unbatch().cardinality() == jdata.UNKNOWN
    assert jdata.range(10).filter(lambda x: x > 0).batch(
        2, drop_remainder=True).unbatch().cardinality() == jdata.UNKNOWN
    assert jdata.range(4).batch(2, drop_remainder=True).repeat().unbatch().cardinality() == (
        jdata.INFINITE)
    assert jdata.range(0).batch(2).unbatch().cardinality() == 0
    # Sizes that static facts fix stay exact, with UDFs upstream too.
    assert jdata.range(10).batch(4, drop_remainder=True).unbatch().cardinality() == 8
    assert jdata.range(10).map(lambda x: x).batch(
        4, drop_remainder=True).unbatch().cardinality() == 8
    assert jdata.from_tensors(np.zeros((3, 2))).repeat(5).unbatch().cardinality() == 15


def test_cardinality_never_rests_on_an_inferred_spec():
    # 6 batches: the first 4 (those the spec is inferred from) of 3 rows, then 2. The
    # count used to be 18 rows, where iteration gives 16.
    ds = jdata.range(6).map(lambda i: np.zeros(3 if i < 4 else 2)).unbatch()
    assert ds.cardinality() == jdata.UNKNOWN
    with pytest.raises(TypeError, match="unknown"):
        len(ds)
    assert len(list(ds)) == 16
    source = jdata.from_source([np.zeros(3)] * 4 + [np.zeros(2)] * 2)  # a spec from 4 records
    assert source.unbatch().cardinality() == jdata.UNKNOWN
