import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from jdata.runtime import blocks
from tests.helpers import (assert_elements_equal, assert_same_sequence,
                           check_restore_at_every_step, take_list)

Point = collections.namedtuple("Point", ["x", "y"])


def test_adds_to_every_element():
    out = check_restore_at_every_step(jdata.range(5).map(lambda x: x + 10))
    assert_same_sequence(out, [np.int64(x + 10) for x in range(5)])


def test_tf_data_doc_example_unpacks_tuples():
    ds = jdata.from_tensor_slices(([1, 2], [3, 4])).map(lambda a, b: a * b)
    assert [int(x) for x in check_restore_at_every_step(ds)] == [3, 8]


def test_tf_data_doc_example_tuple_output():
    # tf.data: dataset.map(lambda x: (x, x * 2)) over range(1, 4) -> (1, 2), (2, 4), (3, 6).
    ds = jdata.range(1, 4).map(lambda x: (x, x * 2))
    assert [(int(a), int(b)) for a, b in ds] == [(1, 2), (2, 4), (3, 6)]


def test_dict_element_is_one_argument():
    ds = jdata.from_tensor_slices({"a": [1, 2], "b": [10, 20]})
    out = list(ds.map(lambda d: {"sum": d["a"] + d["b"]}))
    assert [int(e["sum"]) for e in out] == [11, 22]


def test_namedtuple_element_is_one_argument():
    ds = jdata.from_tensor_slices(Point(np.array([1, 2]), np.array([3, 4])))
    out = list(ds.map(lambda p: p.x * p.y))
    assert [int(x) for x in out] == [3, 8]


def test_nested_tuple_element_unpacks_only_the_outer_tuple():
    ds = jdata.from_tensor_slices(([1, 2], ([3, 4], [5, 6])))
    out = list(ds.map(lambda a, bc: a + bc[0] * bc[1]))
    assert [int(x) for x in out] == [16, 26]


def test_python_scalars_become_numpy():
    out = list(jdata.range(2).map(lambda x: (1, 2.5, True)))
    assert_elements_equal(out[0], (np.int64(1), np.float64(2.5), np.bool_(True)))
    assert isinstance(out[0][0], np.generic)


def test_jax_arrays_become_numpy():
    out = list(jdata.range(3).map(lambda x: jnp.arange(2) + x))
    assert all(type(e) is np.ndarray for e in out)
    assert [e.tolist() for e in out] == [[0, 1], [1, 2], [2, 3]]


def test_none_output_is_a_type_error_naming_map():
    with pytest.raises(TypeError, match="map: the user function returned None"):
        list(jdata.range(3).map(lambda x: None))


def test_unsupported_output_is_a_type_error_naming_map():
    with pytest.raises(TypeError, match="map: .*object"):
        list(jdata.range(3).map(lambda x: object()))


def test_udf_error_has_op_position_and_cause():
    ds = jdata.from_tensor_slices([1, 1, 0, 1]).map(lambda x: 1 // int(x))
    it = ds.iterator()
    assert [int(next(it)), int(next(it))] == [1, 1]
    with pytest.raises(jdata.UDFError, match="position 2") as info:
        next(it)
    assert info.value.op == "map" and info.value.position == 2
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert int(next(it)) == 1  # the iterator moved past the failing element


def test_udf_error_over_sequential_input_counts_input_positions():
    ds = jdata.range(10).filter(lambda x: x % 2 == 0).map(lambda x: 1 // (int(x) - 4))
    it = ds.iterator()
    next(it), next(it)
    with pytest.raises(jdata.UDFError) as info:
        next(it)
    assert info.value.position == 2  # the third element of map's input (x == 4)
    assert int(next(it)) == 0


def test_element_spec():
    ds = jdata.range(10).map(lambda x: (x, np.float32(x), np.zeros((2, 3), np.uint8)))
    assert ds.element_spec == (TensorSpec((), np.int64), TensorSpec((), np.float32),
                               TensorSpec((2, 3), np.uint8))
    assert jdata.range(3).map(lambda x: {"s": "abc"}).element_spec == {
        "s": TensorSpec((), np.dtype(object))}


def test_unknown_dims_propagate_through_map_after_batch():
    ds = jdata.range(10).batch(4).map(lambda b: {"b": b * 2, "sum": b.sum()})
    assert ds.element_spec == {"b": TensorSpec((None,), np.int64),
                               "sum": TensorSpec((), np.int64)}
    fixed = jdata.range(10).batch(4, drop_remainder=True).map(lambda b: b * 2)
    assert fixed.element_spec == TensorSpec((4,), np.int64)


def test_cardinality_is_preserved():
    assert jdata.range(10).map(lambda x: x).cardinality() == 10
    assert jdata.range(10).repeat().map(lambda x: x).cardinality() == jdata.INFINITE
    filtered = jdata.range(10).filter(lambda x: x > 3).map(lambda x: x)
    assert filtered.cardinality() == jdata.UNKNOWN
    assert jdata.range(10).map(lambda x: x, vectorize=True).cardinality() == 10


def test_random_access_is_preserved_so_a_full_shuffle_is_allowed():
    ds = jdata.range(20).map(lambda x: x * 3)
    assert ds._node.random_access()
    assert not jdata.range(20).filter(lambda x: x > 2).map(lambda x: x)._node.random_access()
    shuffled = [int(x) for x in ds.shuffle(jax.random.key(0))]
    assert sorted(shuffled) == [x * 3 for x in range(20)]
    assert shuffled != sorted(shuffled)


@pytest.mark.parametrize("kwargs, error, arg", [
    ({"fn": 3}, TypeError, "fn"),
    ({"fn": lambda x: x, "num_parallel_calls": 0}, ValueError, "num_parallel_calls"),
    ({"fn": lambda x: x, "num_parallel_calls": 1.5}, TypeError, "num_parallel_calls"),
    ({"fn": lambda x: x, "num_parallel_calls": 2, "deterministic": 1}, TypeError,
     "deterministic"),
    ({"fn": lambda x: x, "vectorize": 1}, TypeError, "vectorize"),
])
def test_bad_arguments(kwargs, error, arg):
    with pytest.raises(error, match=f"map: {arg}="):
        jdata.range(3).map(**kwargs)


def test_deterministic_without_parallelism_warns():
    with pytest.warns(UserWarning, match="no effect"):
        jdata.range(3).map(lambda x: x, deterministic=True)


def test_restore_over_random_access_input():
    ds = jdata.from_tensor_slices({"x": np.arange(6), "s": list("abcdef")}).map(
        lambda e: (e["s"], e["x"] ** 2))
    out = check_restore_at_every_step(ds)
    assert [(s, int(v)) for s, v in out] == [(c, i * i) for i, c in enumerate("abcdef")]


def test_restore_over_sequential_input():
    ds = jdata.range(12).filter(lambda x: x % 3 != 0).map(lambda x: x * 10)
    out = check_restore_at_every_step(ds)
    assert [int(x) for x in out] == [x * 10 for x in range(12) if x % 3]


def test_restore_inside_repeat():
    ds = jdata.range(3).map(lambda x: x + 1).repeat(2)
    assert [int(x) for x in check_restore_at_every_step(ds)] == [1, 2, 3, 1, 2, 3]


# ---------------------------------------------------------------------- vectorize=True


def _per_element(elements, fn):
    """What calling ``jax.jit(fn)`` on each element gives, in NumPy."""
    jitted = jax.jit(fn)
    out = []
    for e in elements:
        result = jitted(*e) if type(e) is tuple else jitted(e)
        out.append(jax.tree_util.tree_map(np.asarray, result))
    return out


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 4 elements, so short inputs cross several block boundaries."""
    monkeypatch.setattr(blocks, "BLOCK_SIZE", 4)


def _jnp(fn):
    """``fn`` on JAX arrays, so that the element-wise path computes with JAX too."""
    def wrapped(*args):
        return fn(*jax.tree_util.tree_map(jnp.asarray, args))
    return wrapped


FUNCTIONS = {
    "affine": (lambda: jdata.range(11), lambda x: x * 3 + 1),
    "float": (lambda: jdata.range(11), lambda x: jnp.sin(x * 0.25) * 2.0 + jnp.exp(-x)),
    "tuple_in": (lambda: jdata.from_tensor_slices((np.arange(9), np.arange(9) * 2.5)),
                 lambda a, b: a * b),
    "dict_out": (lambda: jdata.range(10),
                 lambda x: {"x": x, "sq": x * x, "v": jnp.stack([x, -x]).astype(jnp.float32)}),
    "dict_in": (lambda: jdata.from_tensor_slices({"a": np.arange(7.0), "b": np.ones((7, 3))}),
                lambda d: (d["b"] * d["a"], jnp.sum(d["b"]))),
    "namedtuple_in": (lambda: jdata.from_tensor_slices(Point(np.arange(6), np.arange(6) + 1)),
                      lambda p: p.x - p.y),
    "vector_rows": (lambda: jdata.from_tensor_slices(np.arange(30.0).reshape(10, 3)),
                    lambda v: jnp.cumsum(v) / (1.0 + jnp.max(v))),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("block", ["small", "default"])
def test_vectorize_equals_per_element(name, block, monkeypatch):
    if block == "small":
        monkeypatch.setattr(blocks, "BLOCK_SIZE", 4)
    make, fn = FUNCTIONS[name]
    expected = _per_element(take_list(make()), fn)
    vectorized = take_list(make().map(_jnp(fn), vectorize=True))
    assert_same_sequence(vectorized, expected)
    assert_same_sequence(vectorized, take_list(make().map(_jnp(fn), vectorize=False)))


def test_vectorize_equals_jit_per_element_where_jit_simplifies():
    # jit turns x / 3.0 into a multiplication, so eager calls differ in the last bit.
    fn = lambda x: jnp.sin(x / 3.0)  # noqa: E731
    vectorized = take_list(jdata.range(100).map(fn, vectorize=True))
    assert_same_sequence(vectorized, _per_element(take_list(jdata.range(100)), fn))


def test_vectorize_length_not_a_multiple_of_the_block():
    n = 2 * blocks.BLOCK_SIZE + 5
    fn = lambda x: (x * 2, jnp.cos(x * 1.0))  # noqa: E731
    out = take_list(jdata.range(n).map(fn, vectorize=True))
    assert len(out) == n
    assert_same_sequence(out, _per_element(take_list(jdata.range(n)), fn))


def test_vectorize_element_spec_follows_jax_dtypes():
    ds = jdata.range(10).map(lambda x: {"a": x * 2, "b": x / 2}, vectorize=True)
    assert ds.element_spec == {"a": TensorSpec((), np.int32), "b": TensorSpec((), np.float32)}
    assert list(ds)[3]["a"].dtype == np.int32


def test_vectorize_handles_elements_of_different_shapes(small_blocks):
    # batch() without drop_remainder makes a shorter last element.
    ds = jdata.range(10).batch(3).map(lambda b: b * 2 + 1, vectorize=True)
    assert [b.tolist() for b in check_restore_at_every_step(ds)] == [
        [1, 3, 5], [7, 9, 11], [13, 15, 17], [19]]
    assert ds.element_spec == TensorSpec((None,), np.int32)


@pytest.mark.parametrize("input_kind", ["random_access", "sequential"])
def test_vectorize_restore_at_every_step(small_blocks, input_kind):
    ds = jdata.from_tensor_slices((np.arange(11), np.arange(11) * 0.5))
    if input_kind == "sequential":
        ds = ds.filter(lambda a, b: a != 5)
    assert ds._node.random_access() == (input_kind == "random_access")
    fn = lambda a, b: {"p": a * b, "a": a}  # noqa: E731
    expected = _per_element(take_list(ds), fn)
    check_restore_at_every_step(ds.map(fn, vectorize=True), expected)


def test_vectorize_restore_with_the_default_block():
    n = blocks.BLOCK_SIZE + 3
    ds = jdata.range(n).filter(lambda x: x % 7 != 3).map(lambda x: x - 1, vectorize=True)
    out = check_restore_at_every_step(ds)
    assert [int(x) for x in out] == [x - 1 for x in range(n) if x % 7 != 3]


def test_vectorize_jumps_give_the_same_elements(small_blocks):
    # A full shuffle reads out of order: each read must still give element i.
    from jdata import _planner
    from jdata.runtime.context import Context

    ds = jdata.range(20).map(lambda x: jnp.sqrt(x * 1.0), vectorize=True)
    expected = take_list(ds)
    reader = _planner.make_reader(ds._node, Context(), 0)
    order = np.random.default_rng(0).permutation(20).tolist() + [0, 1, 2, 19, 7]
    for i in order:
        assert_elements_equal(reader[i], expected[i], f"index {i}: ")
    with pytest.raises(IndexError):
        reader[20]


def test_vectorize_shuffled_is_a_permutation():
    ds = jdata.range(100).map(lambda x: x * 2, vectorize=True).shuffle(jax.random.key(3))
    assert sorted(int(x) for x in ds) == [x * 2 for x in range(100)]


def test_vectorize_compiles_once_per_node(small_blocks):
    traces = []

    def fn(x):
        traces.append(1)
        return x + 1

    ds = jdata.range(10).map(fn, vectorize=True)
    assert [int(x) for x in ds] == list(range(1, 11))
    it = ds.iterator()
    next(it), next(it)
    assert [int(x) for x in ds.iterator(it.get_state())] == list(range(3, 11))
    assert [int(x) for x in ds.filter(lambda x: True).map(lambda x: x)] == list(range(1, 11))
    assert len(traces) == 1


def test_vectorize_udf_error_at_each_position(small_blocks):
    ds = jdata.range(6).map(lambda x: int(x), vectorize=True)  # int() of a tracer fails
    it = ds.iterator()
    for position in range(6):
        with pytest.raises(jdata.UDFError) as info:
            next(it)
        assert info.value.op == "map" and info.value.position == position
        assert info.value.__cause__ is not None
    with pytest.raises(StopIteration):
        next(it)


def test_vectorize_none_output_is_a_type_error():
    with pytest.raises(TypeError, match="map: the user function returned None"):
        list(jdata.range(3).prefetch(1).map(lambda x: None, vectorize=True))


def test_vectorize_keeps_upstream_errors_in_order(small_blocks):
    # An upstream failure is raised after the elements before it, at its place.
    upstream = jdata.range(10).map(lambda x: 1 // (int(x) - 5))
    for ds in (upstream, upstream.filter(lambda x: True)):
        it = ds.map(lambda x: x * 2, vectorize=True).iterator()
        got = [int(next(it)) for _ in range(5)]
        assert got == [2 * (1 // (x - 5)) for x in range(5)]
        with pytest.raises(jdata.UDFError) as info:
            next(it)
        assert info.value.op == "map" and info.value.position == 5
        assert [int(x) for x in it] == [2 * (1 // (x - 5)) for x in range(6, 10)]


def test_vectorize_restore_around_an_upstream_error(small_blocks):
    ds = jdata.range(10).map(lambda x: 1 // (int(x) - 5)).filter(lambda x: True).map(
        lambda x: x + 1, vectorize=True)
    it = ds.iterator()
    for _ in range(5):
        next(it)
    state = it.get_state()
    restored = ds.iterator(state)
    with pytest.raises(jdata.UDFError):
        next(restored)
    assert [int(x) for x in restored] == [1 // (x - 5) + 1 for x in range(6, 10)]


def test_vectorize_with_ignore_errors_drops_exactly_the_failing_elements(small_blocks):
    upstream = jdata.range(10).map(lambda x: 1 // (int(x) - 5))
    ds = upstream.map(lambda x: x * 2, vectorize=True).ignore_errors()
    assert [int(x) for x in check_restore_at_every_step(ds)] == [
        2 * (1 // (x - 5)) for x in range(10) if x != 5]
    failing = jdata.range(6).map(lambda x: int(x), vectorize=True).ignore_errors()
    assert list(failing) == []


def test_a_udf_returning_a_dataset_points_to_flat_map_and_interleave():
    with pytest.raises(TypeError) as info:
        list(jdata.range(3).map(lambda x: jdata.range(x)))
    message = str(info.value)
    assert "returned a jdata.Dataset" in message and "np.asarray" not in message
    assert "flat_map(fn)" in message and "interleave(fn)" in message
