import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import assert_same_sequence, check_restore_at_every_step


def test_batches_with_remainder():
    out = check_restore_at_every_step(jdata.range(7).batch(3))
    assert [b.tolist() for b in out] == [[0, 1, 2], [3, 4, 5], [6]]


def test_drop_remainder():
    out = check_restore_at_every_step(jdata.range(7).batch(3, drop_remainder=True))
    assert [b.tolist() for b in out] == [[0, 1, 2], [3, 4, 5]]


def test_batches_structures_and_strings():
    ds = jdata.from_tensor_slices({"x": np.arange(4), "s": ["a", "b", "c", "d"]}).batch(2)
    out = check_restore_at_every_step(ds)
    assert out[0]["x"].tolist() == [0, 1]
    assert out[1]["s"].dtype == object and out[1]["s"].tolist() == ["c", "d"]


def test_batches_over_a_sequential_input():
    ds = jdata.range(10).filter(lambda x: x % 2 == 0).batch(2)
    out = check_restore_at_every_step(ds)
    assert [b.tolist() for b in out] == [[0, 2], [4, 6], [8]]


def test_element_spec_and_cardinality():
    assert jdata.range(10).batch(4).element_spec == TensorSpec((None,), np.int64)
    assert jdata.range(10).batch(4, drop_remainder=True).element_spec == TensorSpec((4,), np.int64)
    assert jdata.range(10).batch(4).cardinality() == 3
    assert jdata.range(10).batch(4, drop_remainder=True).cardinality() == 2
    assert jdata.range(10).repeat().batch(4).cardinality() == jdata.INFINITE


def test_mismatched_shapes_point_to_padded_batch():
    ds = jdata.range(1, 4).map(lambda n: np.zeros(n)).batch(3)
    with pytest.raises(ValueError, match="padded_batch"):
        list(ds)


@pytest.mark.parametrize("kwargs, error", [
    ({"batch_size": 0}, ValueError), ({"batch_size": -3}, ValueError),
    ({"batch_size": 2.5}, TypeError), ({"batch_size": 2, "drop_remainder": 1}, TypeError),
    ({"batch_size": 2, "num_parallel_calls": 0}, ValueError),
])
def test_bad_arguments(kwargs, error):
    with pytest.raises(error, match="batch"):
        jdata.range(3).batch(**kwargs)


def test_same_as_uninterrupted_after_map():
    ds = jdata.range(9).map(lambda x: (x, x * x)).batch(4)
    expected = [(np.arange(0, 4), np.arange(0, 4) ** 2), (np.arange(4, 8), np.arange(4, 8) ** 2),
                (np.arange(8, 9), np.arange(8, 9) ** 2)]
    assert_same_sequence(check_restore_at_every_step(ds), expected)


def test_batches_of_dicts_and_tuples_stack_field_by_field_and_reject_mismatches():
    rows = [{"id": np.int64(i), "name": f"r{i}", "pos": (np.float32(i), np.zeros(2) + i)}
            for i in range(5)]
    (batch,) = [b for b in jdata.from_generator(lambda: iter(rows)).batch(5)]
    assert batch["id"].tolist() == [0, 1, 2, 3, 4] and batch["id"].dtype == np.int64
    assert batch["name"].dtype == object and batch["name"][3] == "r3"
    assert batch["pos"][0].dtype == np.float32 and batch["pos"][1].shape == (5, 2)
    nested = [{"a": np.int64(1)}, {"a": {"b": np.int64(2)}}]
    with pytest.raises(ValueError, match="same structure"):
        next(iter(jdata.from_generator(lambda: iter(nested)).batch(2)))
    mixed = [{"a": np.int64(1)}, {"a": "text"}]
    with pytest.raises(ValueError, match="cannot stack"):
        next(iter(jdata.from_generator(lambda: iter(mixed)).batch(2)))
