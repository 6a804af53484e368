import jax
import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import assert_same_sequence, check_restore_at_every_step, take_list


def _ints(elements) -> list[int]:
    return [int(x) for x in elements]


def test_tf_data_doc_example():
    # tf.data: from_tensor_slices([[1, 2, 3], [4, 5, 6], [7, 8, 9]]).flat_map(from_tensor_slices)
    ds = jdata.from_tensor_slices(np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]]))
    out = check_restore_at_every_step(ds.flat_map(jdata.from_tensor_slices))
    assert _ints(out) == list(range(1, 10))


def test_repeats_each_element():
    ds = jdata.range(1, 4).flat_map(lambda x: jdata.from_tensors(x).repeat(x))
    assert _ints(check_restore_at_every_step(ds)) == [1, 2, 2, 3, 3, 3]


def test_empty_inner_datasets_and_input():
    ds = jdata.range(5).flat_map(lambda x: jdata.range(x % 2 * 2))
    assert _ints(check_restore_at_every_step(ds)) == [0, 1, 0, 1]
    assert take_list(jdata.range(0).flat_map(lambda x: jdata.range(3))) == []
    assert take_list(jdata.range(4).flat_map(lambda x: jdata.range(0))) == []


def test_over_a_sequential_input_with_sequential_inner_datasets():
    ds = jdata.range(6).filter(lambda x: x % 2 == 1).flat_map(
        lambda x: jdata.range(x * 10, x * 10 + 4).filter(lambda y: y % 2 == 0))
    assert _ints(check_restore_at_every_step(ds)) == [10, 12, 30, 32, 50, 52]


def test_nested_flat_maps_restore():
    ds = jdata.range(3).flat_map(
        lambda x: jdata.range(x).flat_map(lambda y: jdata.from_tensors((x, y)).repeat(2)))
    out = check_restore_at_every_step(ds)
    assert [(int(a), int(b)) for a, b in out] == [(1, 0), (1, 0), (2, 0), (2, 0), (2, 1), (2, 1)]


def test_tuple_elements_are_unpacked_and_structures_pass_through():
    ds = jdata.from_tensor_slices(([1, 2], [10, 20])).flat_map(
        lambda a, b: jdata.from_tensor_slices({"a": np.stack([a, a]), "b": np.stack([b, -b])}))
    out = check_restore_at_every_step(ds)
    assert_same_sequence(out, [{"a": np.int64(a), "b": np.int64(b)}
                               for a, b in [(1, 10), (1, -10), (2, 20), (2, -20)]])


def test_flattens_windows():
    ds = jdata.range(7).window(3, shift=2).flat_map(lambda w: w.batch(3))
    assert [b.tolist() for b in check_restore_at_every_step(ds)] == [
        [0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]


def test_element_spec_and_cardinality():
    ds = jdata.range(1, 4).flat_map(lambda x: jdata.range(x).batch(2, drop_remainder=True))
    assert ds.element_spec == TensorSpec((2,), np.int64)
    assert ds.cardinality() == jdata.UNKNOWN


def test_element_spec_of_an_empty_input_is_an_error():
    with pytest.raises(ValueError, match="flat_map.*empty"):
        jdata.range(0).flat_map(lambda x: jdata.range(x)).element_spec


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match="flat_map: fn"):
        jdata.range(3).flat_map(None)


def test_fn_must_return_a_dataset():
    with pytest.raises(TypeError, match="flat_map: .*returned int64.*jdata.Dataset"):
        list(jdata.range(3).flat_map(lambda x: x))


def test_fn_error_is_a_udf_error_and_iteration_continues():
    ds = jdata.range(4).flat_map(lambda x: jdata.range(10 // (int(x) - 1)))
    it = ds.iterator()
    with pytest.raises(jdata.UDFError) as info:
        next(it)  # element 0 gives range(-10): empty; element 1 raises
    assert info.value.op == "flat_map" and info.value.position == 1
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert _ints(it) == list(range(10)) + list(range(5))
    assert _ints(jdata.range(4).flat_map(lambda x: jdata.range(10 // (int(x) - 1)))
                 .ignore_errors()) == list(range(10)) + list(range(5))


def test_random_ops_inside_get_different_keys_per_outer_element():
    key = jax.random.key(0)

    def build():
        return jdata.range(3).flat_map(lambda i: jdata.range(2).random_map(lambda x, k: k, key))

    ds = build()
    out = check_restore_at_every_step(ds)
    assert len({tuple(k.tolist()) for k in out}) == 6
    assert [k.tolist() for k in take_list(build())] == [k.tolist() for k in out]
    # The dataset's next iterator is its next epoch: new keys inside too.
    assert not {tuple(k.tolist()) for k in take_list(ds)} & {tuple(k.tolist()) for k in out}


def test_random_ops_inside_differ_across_epochs_of_a_repeat():
    key = jax.random.key(0)
    ds = jdata.range(2).flat_map(lambda i: jdata.range(1).random_map(lambda x, k: k, key))
    out = [k.tolist() for k in check_restore_at_every_step(ds.repeat(2))]
    assert out[:2] != out[2:]
