import jax
import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import check_restore_at_every_step, take_list


def _ints(elements) -> list[int]:
    return [int(x) for x in elements]


def test_tf_data_doc_example():
    ds = jdata.range(1, 6).interleave(lambda x: jdata.from_tensors(x).repeat(6),
                                      cycle_length=2, block_length=4)
    out = check_restore_at_every_step(ds)
    assert "".join(str(x) for x in _ints(out)) == "111122221122333344443344555555"


def test_tf_data_doc_example_block_length_1():
    # tf.data: range(1, 6).interleave(lambda x: from_tensors(x).repeat(3), cycle_length=3)
    ds = jdata.range(1, 6).interleave(lambda x: jdata.from_tensors(x).repeat(3), cycle_length=3)
    assert _ints(check_restore_at_every_step(ds)) == [1, 2, 3, 1, 2, 3, 1, 2, 3,
                                                      4, 5, 4, 5, 4, 5]


def test_inner_datasets_of_different_lengths():
    # slot 0 <- 1: [0] ends; slot 1 <- 2: 0 1; slot 0 <- 3: 0 1; slot 1 ends; slot 0: 2, ends;
    # slot 1 <- 4: 0 1; slot 0 <- 5: 0 1; slot 1: 2 3; slot 0: 2 3; slot 1 ends; slot 0: 4.
    ds = jdata.range(1, 6).interleave(lambda x: jdata.range(x), cycle_length=2, block_length=2)
    assert _ints(check_restore_at_every_step(ds)) == [0, 0, 1, 0, 1, 2, 0, 1, 0, 1, 2, 3, 2, 3, 4]


def test_empty_inner_datasets_are_skipped():
    ds = jdata.range(6).interleave(lambda x: jdata.range(x * 10, x * 10 + x % 2 * 2),
                                   cycle_length=2)
    assert _ints(check_restore_at_every_step(ds)) == [10, 11, 30, 31, 50, 51]


def test_empty_input():
    assert take_list(jdata.range(0).interleave(lambda x: jdata.range(3), cycle_length=2)) == []


def test_cycle_longer_than_the_input():
    ds = jdata.range(3).interleave(lambda x: jdata.range(x, x + 2), cycle_length=5)
    assert _ints(check_restore_at_every_step(ds)) == [0, 1, 2, 1, 2, 3]


def test_default_cycle_length_is_8():
    ds = jdata.range(10).interleave(lambda x: jdata.from_tensors(x).repeat(2))
    assert _ints(ds) == [*range(8), *range(8), 8, 9, 8, 9]


def test_over_a_sequential_input():
    ds = jdata.range(1, 7).filter(lambda x: x != 3).interleave(
        lambda x: jdata.from_tensors(x).repeat(x % 3 + 1), cycle_length=2, block_length=2)
    # 1 x2, 2 x3, 4 x2, 5 x3, 6 x1; an exhausted slot costs the cycle a turn.
    assert _ints(check_restore_at_every_step(ds)) == [1, 1, 2, 2, 2, 4, 4, 5, 5, 5, 6]


def test_restores_sequential_inner_datasets_mid_cycle():
    ds = jdata.range(4).interleave(
        lambda x: jdata.range(10 * x, 10 * x + 5).filter(lambda y: y % 2 == 0),
        cycle_length=3, block_length=2)
    assert _ints(check_restore_at_every_step(ds)) == [0, 2, 10, 12, 20, 22, 4, 14, 24, 30, 32,
                                                      34]


def test_restores_nested_interleaves():
    inner = lambda x: jdata.range(3).interleave(  # noqa: E731
        lambda y: jdata.from_tensors(x * 10 + y).repeat(2), cycle_length=2)
    ds = jdata.range(1, 3).interleave(inner, cycle_length=2, block_length=3)
    assert _ints(check_restore_at_every_step(ds)) == [10, 11, 10, 20, 21, 20, 11, 12, 12, 21,
                                                      22, 22]


def test_structured_elements():
    ds = jdata.from_tensor_slices({"a": [1, 2], "b": [10, 20]}).interleave(
        lambda d: jdata.from_tensors((d["a"], d["b"])).repeat(2), cycle_length=2)
    out = check_restore_at_every_step(ds)
    assert [(int(a), int(b)) for a, b in out] == [(1, 10), (2, 20), (1, 10), (2, 20)]


def test_tuple_elements_are_unpacked():
    ds = jdata.from_tensor_slices(([1, 2], [3, 4])).interleave(
        lambda a, b: jdata.range(a, b + 1), cycle_length=2)
    assert _ints(ds) == [1, 2, 2, 3, 3, 4]


def test_element_spec_and_cardinality():
    ds = jdata.range(3).interleave(lambda x: jdata.range(x).batch(2), cycle_length=2)
    assert ds.element_spec == TensorSpec((None,), np.int64)
    assert ds.cardinality() == jdata.UNKNOWN


def test_block_length_none_means_one_as_in_tf_data():
    # tf.data's signature is interleave(map_func, cycle_length=None, block_length=None, ...),
    # and code that forwards a config (the TF Model Garden's InputReader) passes None.
    ds = jdata.range(1, 4).interleave(lambda x: jdata.from_tensors(x).repeat(2),
                                      cycle_length=2, block_length=None)
    assert _ints(ds) == [1, 2, 1, 2, 3, 3]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"cycle_length": 0}, ValueError, "cycle_length"),
    ({"cycle_length": 1.5}, TypeError, "cycle_length"),
    ({"block_length": 0}, ValueError, "block_length"),
    ({"num_parallel_calls": 0}, ValueError, "num_parallel_calls"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=f"interleave.*{match}"):
        jdata.range(3).interleave(lambda x: jdata.range(x), **kwargs)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match="interleave: fn"):
        jdata.range(3).interleave(3)


def test_fn_must_return_a_dataset():
    with pytest.raises(TypeError, match="interleave: .*returned list.*jdata.Dataset"):
        list(jdata.range(3).interleave(lambda x: [x]))


def test_fn_error_is_a_udf_error_and_iteration_continues():
    ds = jdata.range(4).interleave(
        lambda x: jdata.from_tensors(np.int64(10 // (int(x) - 2))).repeat(2), cycle_length=1)
    it = ds.iterator()
    assert _ints([next(it), next(it), next(it), next(it)]) == [-5, -5, -10, -10]
    with pytest.raises(jdata.UDFError) as info:
        next(it)
    assert info.value.op == "interleave" and info.value.position == 2
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert _ints(it) == [10, 10]


def test_inner_udf_error_propagates_and_ignore_errors_skips_it():
    fn = lambda x: jdata.range(3).map(lambda y: 1 // (int(y) - int(x)))  # noqa: E731
    with pytest.raises(jdata.UDFError, match="map"):
        list(jdata.range(2).interleave(fn, cycle_length=2))
    ds = jdata.range(2).interleave(fn, cycle_length=2).ignore_errors()
    # an inner error does not move the cycle on: slot 0 gives 1 after its error.
    assert _ints(ds) == [1, -1, 0, 1]


def test_num_parallel_calls_does_not_change_the_output():
    fn = lambda x: jdata.range(x)  # noqa: E731
    expected = _ints(jdata.range(6).interleave(fn, cycle_length=3))
    ds = jdata.range(6).interleave(fn, cycle_length=3, num_parallel_calls=jdata.AUTOTUNE,
                                   deterministic=True)
    assert _ints(check_restore_at_every_step(ds)) == expected


def test_random_ops_inside_get_keys_per_outer_element():
    key = jax.random.key(3)

    def build():
        return jdata.range(3).interleave(
            lambda i: jdata.range(2).random_map(lambda x, k: k, key), cycle_length=2)

    ds = build()
    out = check_restore_at_every_step(ds)
    keys = {tuple(k.tolist()) for k in out}
    assert len(keys) == 6
    assert [k.tolist() for k in take_list(build())] == [k.tolist() for k in out]
    assert not {tuple(k.tolist()) for k in take_list(ds)} & keys


def _outcomes(it, limit=None):
    """Elements as ints and errors as ("error", position), until the end."""
    out = []
    while limit is None or len(out) < limit:
        try:
            out.append(int(next(it)))
        except StopIteration:
            return out
        except jdata.UDFError as e:
            out.append(("error", e.position))
    return out


def test_parallel_slots_hand_over_chunks_with_errors_in_order_and_exact_restores():
    # Inner datasets longer than a chunk (64), failing now and then: the parallel cycle
    # gives the sequential cycle's elements and errors, and every state restores exactly.
    def inner(x):
        def checked(y):
            if int(y) % 37 == int(x):
                raise ValueError(f"{int(x)}/{int(y)}")
            return y * 10 + x

        n = 150 + 7 * int(x)
        return jdata.from_generator(lambda: iter(range(n))).map(checked)

    def ds(threads):
        return jdata.range(3).interleave(inner, cycle_length=2, block_length=3,
                                         num_parallel_calls=threads)

    expected = _outcomes(ds(None).iterator())
    assert sum(isinstance(o, tuple) for o in expected) >= 10
    assert _outcomes(ds(2).iterator()) == expected
    for k in list(range(0, 80, 7)) + [len(expected) - 1]:
        it = ds(2).iterator()
        head = _outcomes(it, k)
        state = it.get_state()
        assert head + _outcomes(ds(2).iterator(state)) == expected
        assert head + _outcomes(it) == expected
