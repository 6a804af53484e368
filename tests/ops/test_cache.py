import pickle

import jax
import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import (add_one_in_place, assert_read_only_write, assert_same_sequence,
                           check_restore_at_every_step, take_list)


def ints(ds, limit=None):
    return [int(x) for x in take_list(ds, limit)]


def counted_squares(n, calls):
    def square(x):
        calls.append(int(x))
        return x * x
    return jdata.range(n).map(square).cache()


def test_doc_example():
    ds = jdata.range(3).map(lambda x: x * x).cache().repeat(2)
    assert [int(x) for x in check_restore_at_every_step(ds)] == [0, 1, 4, 0, 1, 4]


def test_second_pass_reads_from_memory():
    calls = []
    ds = counted_squares(5, calls)
    assert ints(ds) == [0, 1, 4, 9, 16]
    assert calls == [0, 1, 2, 3, 4]
    assert ints(ds) == [0, 1, 4, 9, 16]
    assert ints(ds.repeat(3)) == [0, 1, 4, 9, 16] * 3
    assert calls == [0, 1, 2, 3, 4]


def test_empty_filename_caches_in_memory_as_in_tf_data():
    # tf.data's signature is cache(filename=""): code ported from it may pass "" for memory.
    calls = []
    ds = jdata.range(3).map(lambda x: calls.append(int(x)) or x * x).cache("")
    assert ints(ds.repeat(2)) == [0, 1, 4, 0, 1, 4]
    assert calls == [0, 1, 2]


def test_epochs_of_a_repeat_share_the_cache():
    calls = []
    ds = counted_squares(4, calls).repeat(3)
    assert ints(ds) == [0, 1, 4, 9] * 3
    assert calls == [0, 1, 2, 3]


def test_a_partial_pass_caches_nothing():
    calls = []
    ds = counted_squares(5, calls)
    assert ints(ds, limit=2) == [0, 1]
    assert ints(ds.take(3)) == [0, 1, 4]
    assert calls == [0, 1, 0, 1, 2]
    assert ints(ds) == [0, 1, 4, 9, 16]
    assert len(calls) == 10
    assert ints(ds) == [0, 1, 4, 9, 16]
    assert len(calls) == 10


def test_cache_after_shuffle_repeats_the_first_epoch():
    ds = jdata.range(10).shuffle(jax.random.key(0)).cache().repeat(3)
    out = [int(x) for x in check_restore_at_every_step(ds)]
    assert out[:10] == out[10:20] == out[20:]
    assert sorted(out[:10]) == list(range(10)) and out[:10] != list(range(10))


def test_restore_at_every_step_over_a_sequential_input():
    ds = jdata.range(12).filter(lambda x: x % 3 != 0).cache()
    check_restore_at_every_step(ds, expected=[np.int64(x) for x in range(12) if x % 3])
    check_restore_at_every_step(ds.repeat(2))


def test_state_has_a_constant_shape():
    ds = jdata.range(4).cache().repeat(2)
    it = ds.iterator()
    states = []
    for _ in range(9):
        states.append(_find_cache_state(it.get_state()))
        next(it, None)
    assert {tuple(sorted(s)) for s in states} == {("epoch", "from_cache", "index", "input")}
    # The repeat moves to its second pass (read from the cache) on the fifth element.
    assert [s["from_cache"] for s in states] == [False] * 5 + [True] * 4
    assert [s["index"] for s in states] == [0, 1, 2, 3, 4, 1, 2, 3, 4]
    assert [s["input"] is None for s in states] == [False] * 5 + [True] * 4


def _find_cache_state(state):
    if isinstance(state, dict):
        if "from_cache" in state:
            return state
        for value in state.values():
            found = _find_cache_state(value)
            if found is not None:
                return found
    return None


def _make_shuffled():
    return jdata.range(8).map(lambda x: x + 100).shuffle(jax.random.key(3)).cache().repeat(2)


@pytest.mark.parametrize("step", [0, 3, 8, 11, 16])
def test_restore_from_cache_in_a_fresh_process_refills_exactly(step):
    ds = _make_shuffled()
    full = take_list(ds)
    it = ds.iterator()
    for _ in range(step):
        next(it)
    state = it.get_state()
    # take_list filled the cache; states at steps >= 8 come from the repeat's second
    # epoch, yet the refill must re-read the epoch-0 order that filled the cache.
    assert _find_cache_state(state)["from_cache"] is True
    assert _find_cache_state(state)["epoch"] == 0
    fresh = _make_shuffled()  # a new node: its cache is empty, as in a new process
    assert_same_sequence(take_list_from(fresh.iterator(state)), full[step:])


def take_list_from(it):
    with it:
        return list(it)


def test_a_refill_completes_the_new_cache():
    calls = []
    ds = counted_squares(5, calls)
    assert ints(ds) == [0, 1, 4, 9, 16]
    it = ds.iterator()
    next(it), next(it)
    state = it.get_state()
    assert _find_cache_state(state) == {"from_cache": True, "index": 2, "epoch": 0,
                                        "input": None}
    other_calls = []
    other = counted_squares(5, other_calls)
    assert [int(x) for x in take_list_from(other.iterator(state))] == [4, 9, 16]
    assert other_calls == [0, 1, 2, 3, 4]
    assert ints(other) == [0, 1, 4, 9, 16]
    assert other_calls == [0, 1, 2, 3, 4]


def test_restoring_a_filling_state_mid_pass_replays_the_pass_and_fills_the_cache():
    calls = []
    ds = counted_squares(5, calls)
    it = ds.iterator()
    next(it), next(it)
    state = it.get_state()
    assert _find_cache_state(state)["from_cache"] is False
    del calls[:]
    assert [int(x) for x in take_list_from(ds.iterator(state))] == [4, 9, 16]
    assert calls == [0, 1, 2, 3, 4]  # the pass was re-read from its start...
    del calls[:]
    assert ints(ds) == [0, 1, 4, 9, 16]
    assert calls == []  # ...so it filled the cache


def test_a_filling_state_restored_in_a_new_process_repeats_the_cached_epoch():
    # Found by tests/test_restore_fuzz.py: a state saved during the filling
    # pass, restored into a rebuilt pipeline, resumed from the input's state
    # and left the cache empty, so the repeat's second pass re-read the input
    # with epoch 1 (other random draws) instead of repeating the cached pass.
    def make():
        return jdata.range(5).random_map(
            lambda x, k: x + np.random.default_rng(k).integers(100), jax.random.key(3)
        ).cache().repeat(2)

    full = ints(make())
    assert full[:5] == full[5:]
    for step in range(len(full) + 1):
        it = make().iterator()  # never iterated before: its cache is still filling
        for _ in range(step):
            next(it)
        state = it.get_state()
        assert [int(x) for x in take_list_from(make().iterator(state))] == full[step:]


def _fails_on_ones(x):
    if x % 3 == 1:
        raise ValueError(f"fails on {x}")
    return x


def _numbered_with_errors():
    return jdata.range(8).map(_fails_on_ones).cache().enumerate()


def _pairs(it):
    return [(int(i), int(x)) for i, x in take_list_from(it)]


def test_failed_elements_are_not_cached():
    # As in tf.data: the first pass raises, passes over the cache do not, so
    # enumerate (which numbers failures too) numbers them differently.
    ds = _numbered_with_errors().ignore_errors()
    assert _pairs(ds.iterator()) == [(0, 0), (2, 2), (3, 3), (5, 5), (6, 6)]
    assert _pairs(ds.iterator()) == [(0, 0), (1, 2), (2, 3), (3, 5), (4, 6)]
    check_restore_at_every_step(ds)


def test_a_cache_state_restored_in_a_new_process_raises_no_errors():
    # Found by tests/test_restore_fuzz.py: re-reading the input in place of
    # another process's cache raised the failures again (which that cache
    # never raises), so enumerate's numbers shifted, and so did a state
    # saved after the restore.
    ds = _numbered_with_errors().ignore_errors()
    list(ds)  # fills the cache
    expected = [(0, 0), (1, 2), (2, 3), (3, 5), (4, 6)]
    for step in range(len(expected) + 1):
        it = ds.iterator()
        for _ in range(step):
            next(it)
        restored = _numbered_with_errors().ignore_errors().iterator(it.get_state())
        assert _pairs(restored) == expected[step:]
        if step < len(expected):
            restored = _numbered_with_errors().ignore_errors().iterator(it.get_state())
            next(restored)
            again = _numbered_with_errors().ignore_errors().iterator(restored.get_state())
            assert _pairs(again) == expected[step + 1:]


def _outcomes(it) -> list:
    """Elements as pairs and failures as "error", to the end."""
    out = []
    with it:
        while True:
            try:
                i, x = next(it)
            except StopIteration:
                return out
            except jdata.UDFError:
                out.append("error")
                continue
            out.append((int(i), int(x)))


def test_a_state_saved_after_a_failure_while_filling_does_not_fail_again():
    # Found by tests/test_restore_fuzz.py: re-reading the filling pass (in a
    # new process) stopped before the failed element, which failed again.
    it = _numbered_with_errors().iterator()
    assert [int(v) for v in next(it)] == [0, 0]
    with pytest.raises(jdata.UDFError):
        next(it)
    restored = _numbered_with_errors().iterator(it.get_state())
    assert _outcomes(restored) == [(2, 2), (3, 3), "error", (5, 5), (6, 6), "error"]


def test_restoring_a_filling_state_at_the_start_fills_the_cache():
    calls = []
    ds = counted_squares(3, calls)
    state = ds.iterator().get_state()
    assert [int(x) for x in take_list_from(ds.iterator(state))] == [0, 1, 4]
    assert ints(ds) == [0, 1, 4]
    assert calls == [0, 1, 2]


def test_nodes_still_pickle_without_the_cached_elements():
    ds = jdata.range(4).cache()
    assert ints(ds) == [0, 1, 2, 3]
    copy = pickle.loads(pickle.dumps(ds))
    assert ints(copy) == [0, 1, 2, 3]
    assert len(pickle.dumps(ds)) == len(pickle.dumps(jdata.range(4).cache()))


def test_element_spec_and_cardinality():
    ds = jdata.from_tensor_slices({"a": np.zeros((3, 2), np.float32)}).cache()
    assert ds.element_spec == {"a": TensorSpec((2,), np.float32)}
    assert ds.cardinality() == 3
    assert jdata.range(3).filter(lambda x: x > 0).cache().cardinality() == jdata.UNKNOWN
    assert jdata.range(3).repeat().cache().cardinality() == jdata.INFINITE


def test_a_filename_caches_to_that_directory(tmp_path):
    # The file cache itself is tested in tests/io/test_saved.py.
    directory = tmp_path / "cache"
    assert [int(x) for x in jdata.range(3).cache(str(directory))] == [0, 1, 2]
    assert (directory / "jdata_metadata.json").exists()


def test_an_infinite_input_keeps_nothing_in_memory():
    ds = jdata.range(3).repeat().cache()
    it = ds.iterator()
    assert [int(next(it)) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert it._root._pending is None
    check_restore_at_every_step(ds, limit=7)


def scale(element):
    element["image"] = element["image"] / 255  # replaces a field of its own element
    return element


@pytest.mark.parametrize("parallel", [None, 2])
def test_a_udf_that_replaces_a_field_sees_the_cached_value_every_epoch(parallel):
    # It used to give 1.0, 0.0039, 1.5e-5 over three epochs (tf.data: 1.0 each time).
    ds = jdata.range(1).map(lambda _: {"image": np.float64(255)}).cache().map(
        scale, num_parallel_calls=parallel)
    assert [float(next(iter(ds))["image"]) for _ in range(3)] == [1.0] * 3
    assert [float(e["image"]) for e in ds.repeat(3)] == [1.0] * 3


def test_the_consumer_of_the_filling_pass_cannot_change_what_later_passes_read():
    ds = jdata.range(3).map(lambda i: {"x": np.array([i])}).cache()
    for element in ds:  # the pass that fills the cache
        element.pop("x")
    assert [e["x"].tolist() for e in ds] == [[0], [1], [2]]


@pytest.mark.parametrize("parallel", [None, 2])
def test_an_in_place_write_raises_on_every_pass(parallel):
    ds = jdata.range(2).map(lambda i: np.array([i])).cache()
    writes = ds.map(add_one_in_place, num_parallel_calls=parallel)
    assert_read_only_write(writes)  # a pass that reads the input (and would fill the cache)
    assert [x.tolist() for x in ds] == [[0], [1]]  # this pass fills it
    assert_read_only_write(writes)  # a pass over the cache
    assert [x.tolist() for x in ds] == [[0], [1]]


def test_the_consumer_of_a_restored_filling_pass_cannot_change_the_cache():
    # A state saved while filling the cache re-reads the pass up to its position.
    ds = jdata.range(3).map(lambda i: {"x": np.array([i])}).cache()
    it = ds.iterator()
    next(it)
    restored = ds.iterator(it.get_state())
    for element in restored:
        element.pop("x")
    assert [e["x"].tolist() for e in ds] == [[0], [1], [2]]
