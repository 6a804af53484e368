import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import (check_blocks_match_per_element, check_restore_at_every_step,
                           use_small_filter_blocks)


def test_tf_data_doc_examples():
    ds = jdata.from_tensor_slices([1, 2, 3])
    assert [int(x) for x in ds.filter(lambda x: x < 3)] == [1, 2]
    assert [int(x) for x in ds.filter(lambda x: np.equal(x, 1))] == [1]


def test_restore_over_a_random_access_input():
    ds = jdata.range(10).filter(lambda x: x % 3 == 0)
    check_restore_at_every_step(ds, [np.int64(x) for x in (0, 3, 6, 9)])


def test_restore_over_a_sequential_input():
    ds = jdata.range(12).filter(lambda x: x % 2 == 0).filter(lambda x: x % 3 != 0)
    check_restore_at_every_step(ds, [np.int64(x) for x in (2, 4, 8, 10)])


def test_tuple_elements_are_unpacked():
    ds = jdata.from_tensor_slices((np.arange(5), np.arange(5) * 10)).filter(lambda a, b: a + b > 30)
    out = check_restore_at_every_step(ds)
    assert [(int(a), int(b)) for a, b in out] == [(3, 30), (4, 40)]


def test_keeps_nothing_or_everything():
    assert check_restore_at_every_step(jdata.range(4).filter(lambda x: False)) == []
    assert len(check_restore_at_every_step(jdata.range(4).filter(lambda x: True))) == 4


def test_accepts_numpy_and_jax_scalar_bools():
    assert len(list(jdata.range(3).filter(lambda x: np.array(x > 0)))) == 2
    assert len(list(jdata.range(3).filter(lambda x: jnp.asarray(x) > 0))) == 2


@pytest.mark.parametrize("predicate", [
    lambda x: x % 2,             # a truthy int, a classic bug
    lambda x: np.array([True]),  # not a scalar
    lambda x: None,
])
def test_non_bool_predicate_results_are_type_errors(predicate):
    with pytest.raises(TypeError, match=r"filter: the predicate returned .*scalar bool"):
        list(jdata.range(3).filter(predicate))


def test_udf_errors_name_the_op_and_position():
    ds = jdata.range(5).filter(lambda x: 1 // (int(x) - 3) > -5)
    with pytest.raises(jdata.UDFError, match="filter") as info:
        list(ds)
    assert info.value.op == "filter" and info.value.position == 3
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_element_spec_and_cardinality():
    ds = jdata.from_tensor_slices({"x": np.zeros((4, 2), np.float32)}).filter(lambda e: True)
    assert ds.element_spec == {"x": TensorSpec((2,), np.float32)}
    assert ds.cardinality() == jdata.UNKNOWN
    assert jdata.range(3).repeat().filter(lambda x: True).cardinality() == jdata.UNKNOWN
    assert jdata.range(0).filter(lambda x: True).cardinality() == 0


def test_bad_arguments():
    with pytest.raises(TypeError, match="filter: predicate=3 is not callable"):
        jdata.range(3).filter(3)


def test_str():
    def is_even(x):
        return x % 2 == 0
    assert "Filter(predicate=test_str.<locals>.is_even)" in jdata.range(3).filter(is_even).explain()


# The block filter (over a random-access input) against the per-element one.

def fails_on(bad, result=None, exc=ValueError):
    def fn(x):
        if int(x) in bad:
            raise exc(f"bad element {int(x)}")
        return x if result is None else result(x)
    return fn


# name: (dataset, the errors its trace has as (type, op, position)).
BLOCK_CASES = {
    "every_third": (lambda: jdata.range(40).map(lambda x: x * 2).filter(lambda x: x % 3 != 0),
                    []),
    "drops_whole_blocks": (lambda: jdata.range(40).filter(lambda x: x in (1, 30, 31)), []),
    "drops_everything": (lambda: jdata.range(30).filter(lambda x: x > 100), []),
    "predicate_error": (
        lambda: jdata.range(30).filter(fails_on({5, 6, 17}, lambda x: x % 2 == 0)),
        [("UDFError", "filter", 5), ("UDFError", "filter", 6), ("UDFError", "filter", 17)]),
    "predicate_error_in_a_dropped_block": (
        lambda: jdata.range(30).filter(fails_on({12}, lambda x: x < 3)),
        [("UDFError", "filter", 12)]),
    "predicate_stop_iteration": (
        lambda: jdata.range(20).filter(fails_on({6}, lambda x: x > 2, StopIteration)),
        [("UDFError", "filter", 6)]),
    "map_error": (lambda: jdata.range(30).map(fails_on({4, 13})).filter(lambda x: x % 3 != 1),
                  [("UDFError", "map", 4), ("UDFError", "map", 13)]),
    "map_and_predicate_errors": (
        lambda: jdata.range(30).map(fails_on({9})).filter(fails_on({7, 10}, lambda x: x > 1)),
        [("UDFError", "filter", 7), ("UDFError", "map", 9), ("UDFError", "filter", 9)]),
    "invalid_result": (lambda: jdata.range(12).filter(lambda x: x % 2 if x == 7 else x > 2),
                       [("TypeError", None, None)]),
    "predicate_error_batched": (
        lambda: jdata.range(40).filter(fails_on({11, 25}, lambda x: x % 4 != 0)).batch(5),
        [("UDFError", "filter", 11), ("UDFError", "filter", 25)]),
    "map_error_batched_drop_remainder": (
        lambda: jdata.range(40).map(fails_on({20})).filter(lambda x: x % 2 == 0)
        .batch(3, drop_remainder=True), [("UDFError", "map", 20)]),
    "ignore_errors": (
        lambda: jdata.range(40).map(fails_on({3, 20})).filter(fails_on({8, 9, 10}, lambda x:
                                                                       x % 5 != 0))
        .ignore_errors(), []),
    "ignore_errors_batched": (
        lambda: jdata.range(40).filter(fails_on({2, 14, 15}, lambda x: x > 0)).ignore_errors()
        .batch(4), []),
    "take_and_skip": (lambda: jdata.range(40).filter(fails_on({6}, lambda x: x % 3 == 0))
                      .skip(2).take(8), [("UDFError", "filter", 6)]),
    "tuples": (lambda: jdata.from_tensor_slices((np.arange(20), np.arange(20) * 3))
               .filter(lambda a, b: (a + b) % 3 == 0), []),
    "after_a_shuffle": (lambda: jdata.range(25).shuffle(jax.random.key(1))
                        .filter(lambda x: x % 2 == 0), []),
}


@pytest.mark.parametrize("name", sorted(BLOCK_CASES))
def test_block_filter_matches_per_element_filter(name, monkeypatch):
    use_small_filter_blocks(monkeypatch)
    make_ds, expected_errors = BLOCK_CASES[name]
    steps = check_blocks_match_per_element(make_ds, monkeypatch)
    assert [step[1:4] for step, _ in steps if step[0] == "error"] == expected_errors


def test_block_filter_with_ignore_errors_drops_exactly_the_failing_elements(monkeypatch):
    use_small_filter_blocks(monkeypatch)
    ds = (jdata.range(40).map(fails_on({3, 20}))
          .filter(fails_on({8, 9, 10}, lambda x: x % 5 != 0)).ignore_errors())
    expected = [np.int64(x) for x in range(40) if x % 5 and x not in (3, 8, 9, 10, 20)]
    check_restore_at_every_step(ds, expected)


def test_block_filter_with_the_default_blocks_over_a_long_input(monkeypatch):
    def make_ds():
        return (jdata.range(5000).map(fails_on({1500}, lambda x: x * 2))
                .filter(fails_on({4000}, lambda x: x % 3 != 0)).batch(256))
    steps = check_blocks_match_per_element(make_ds, monkeypatch)
    errors = [step[1:4] for step, _ in steps if step[0] == "error"]
    # The filter's position 1999 is element 2000: the map's failing element never reached it.
    assert errors == [("UDFError", "map", 1500), ("UDFError", "filter", 1999)]
    assert list(steps[0][0][1]) == [2 * x for x in range(384) if x % 3]


def test_block_filter_reads_ahead_in_growing_blocks():
    from jdata.ops import filter as filter_op
    seen = []

    def keep(x):
        seen.append(int(x))
        return True

    it = jdata.range(10_000).filter(keep).iterator()
    assert int(next(it)) == 0 and len(seen) == filter_op._MIN_BLOCK
    for _ in range(filter_op._MIN_BLOCK):
        next(it)
    assert len(seen) == 3 * filter_op._MIN_BLOCK  # a block twice as large
    assert seen == list(range(len(seen)))
