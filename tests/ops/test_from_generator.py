import itertools

import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import add_one_in_place, assert_read_only_write, check_restore_at_every_step


def squares():
    return (i * i for i in range(5))


def test_outputs_spec_and_restore():
    ds = jdata.from_generator(squares)
    check_restore_at_every_step(ds, [np.int64(i * i) for i in range(5)])
    assert ds.element_spec == TensorSpec((), np.int64)
    assert ds.cardinality() == jdata.UNKNOWN


def test_tf_data_doc_example_with_output_signature():
    def gen():
        for i in itertools.count(1):
            yield (i, [1] * i)
    signature = (TensorSpec((), np.int64), TensorSpec((None,), np.int64))
    ds = jdata.from_generator(gen, output_signature=signature)
    assert ds.element_spec == signature
    expected = [(np.int64(i), np.ones(i, np.int64)) for i in (1, 2, 3)]
    check_restore_at_every_step(ds.take(3), expected)
    check_restore_at_every_step(ds, expected, limit=3)


def test_signature_converts_dtypes_and_structures():
    signature = {"x": TensorSpec((2,), np.float32), "s": TensorSpec((), object)}
    ds = jdata.from_generator(lambda: iter([{"x": [1, 2], "s": "a"}]), signature)
    [element] = list(ds)
    assert element["x"].dtype == np.float32 and element["x"].tolist() == [1.0, 2.0]
    assert element["s"] == "a"


VECTOR = TensorSpec((2,), np.int64)


@pytest.mark.parametrize("element, signature, match", [
    ([1, 2, 3], VECTOR, "shape"),
    (7, (VECTOR, VECTOR), "structure"),
    ("text", VECTOR, "invalid literal|could not convert"),
])
def test_elements_that_do_not_match_the_signature(element, signature, match):
    ds = jdata.from_generator(lambda: iter([element]), signature)
    with pytest.raises(jdata.UDFError, match=match) as info:
        list(ds)
    assert info.value.op == "from_generator" and info.value.position == 0


def test_spec_of_the_first_element_without_signature():
    ds = jdata.from_generator(lambda: iter([{"a": np.zeros((2, 3), np.float32), "b": 1.5}]))
    assert ds.element_spec == {"a": TensorSpec((2, 3), np.float32),
                               "b": TensorSpec((), np.float64)}


def test_restore_replays_the_generator():
    calls = []

    def fn():
        calls.append(1)
        return iter(range(10))
    ds = jdata.from_generator(fn)
    it = ds.iterator()
    for _ in range(4):
        next(it)
    state = it.get_state()
    assert state["state"]["produced"] == 4 and len(state["state"]["first"]) == 16
    assert len(calls) == 1
    assert [int(x) for x in ds.iterator(state)] == list(range(4, 10))
    assert len(calls) == 2


def test_each_pass_calls_fn_again():
    calls = []

    def fn():
        calls.append(1)
        return iter(range(3))
    ds = jdata.from_generator(fn).repeat(2)
    assert [int(x) for x in ds] == [0, 1, 2, 0, 1, 2]
    assert len(calls) == 2
    check_restore_at_every_step(ds)


def test_generator_errors_are_udf_errors():
    def gen():
        yield 1
        yield 2
        raise KeyError("broken record")
    ds = jdata.from_generator(gen)
    it = ds.iterator()
    assert [int(next(it)), int(next(it))] == [1, 2]
    with pytest.raises(jdata.UDFError, match="from_generator") as info:
        next(it)
    assert info.value.position == 2 and isinstance(info.value.__cause__, KeyError)
    with pytest.raises(StopIteration):  # a Python generator that raised is finished
        next(it)
    assert [int(x) for x in check_restore_at_every_step(ds.ignore_errors())] == [1, 2]


class Flaky:
    """An iterator (not a generator) that fails on some items and carries on."""

    def __init__(self, n, bad):
        self.i, self.n, self.bad = 0, n, bad

    def __iter__(self):
        return self

    def __next__(self):
        i = self.i
        if i >= self.n:
            raise StopIteration
        self.i += 1
        if i in self.bad:
            raise OSError(f"cannot read record {i}")
        return np.int64(i)


def test_failed_elements_are_skipped_on_replay():
    ds = jdata.from_generator(lambda: Flaky(6, {1, 4})).ignore_errors()
    check_restore_at_every_step(ds, [np.int64(i) for i in (0, 2, 3, 5)])


def test_fn_errors():
    def fn():
        raise RuntimeError("no data")
    with pytest.raises(jdata.UDFError, match="from_generator") as info:
        list(jdata.from_generator(fn))
    assert info.value.position == 0 and isinstance(info.value.__cause__, RuntimeError)
    assert list(jdata.from_generator(fn).ignore_errors()) == []
    with pytest.raises(TypeError, match="from_generator: fn\\(\\) returned a int"):
        list(jdata.from_generator(lambda: 3))


def test_close_closes_the_generator():
    closed = []

    def gen():
        try:
            yield from range(10)
        finally:
            closed.append(True)
    it = jdata.from_generator(gen).iterator()
    next(it)
    it.close()
    assert closed == [True]


def test_bad_arguments():
    with pytest.raises(TypeError, match="from_generator: fn="):
        jdata.from_generator(squares())
    with pytest.raises(TypeError, match="from_generator: output_signature="):
        jdata.from_generator(squares, output_signature=(np.int64, np.float32))


@pytest.mark.parametrize("signature", [None, {"x": TensorSpec((1,), np.int64)}])
def test_an_in_place_write_raises_and_leaves_what_the_generator_yields_intact(signature):
    records = [{"x": np.array([i])} for i in range(3)]  # yielded again on every pass
    ds = jdata.from_generator(lambda: iter(records), output_signature=signature)
    assert_read_only_write(ds.map(lambda e: add_one_in_place(e["x"])).repeat(2))
    assert [e["x"].tolist() for e in records] == [[0], [1], [2]]


def test_args_are_passed_to_fn_on_every_pass_as_tf_data_does():
    calls = []

    def rows(n, scale, names):
        calls.append((n, scale, names))
        yield from (scale * i for i in range(int(n)))

    ds = jdata.from_generator(rows, args=(3, 10, ["a", "b"]))
    assert [int(x) for x in ds] == [0, 10, 20]
    n, scale, names = calls[-1]
    assert isinstance(n, np.int64) and isinstance(names, np.ndarray)
    assert names.tolist() == ["a", "b"] and not names.flags.writeable
    it = ds.iterator()
    next(it)
    assert [int(x) for x in ds.iterator(it.get_state())] == [10, 20]
    assert jdata.from_generator(rows, args=[2, 1, []]).cardinality() == jdata.UNKNOWN


def test_args_that_are_not_a_tuple_show_the_fix():
    with pytest.raises(TypeError, match=r"args=5 must be a tuple.*args=\(5,\)"):
        jdata.from_generator(lambda n: range(n), args=5)


def _shared_stream(n):
    """A non-re-entrant fn: each call's generator goes on over one shared iterator, as a
    generator around ``jraph.dynamically_batch(iter(graphs))`` does."""
    shared = iter(range(n))

    def fn():
        yield from shared
    return fn


def test_element_spec_of_a_non_reentrant_generator_loses_no_element():
    ds = jdata.from_generator(_shared_stream(10))
    assert ds.element_spec == TensorSpec((), np.int64)
    assert [int(x) for x in ds] == list(range(10))


def test_probes_of_downstream_ops_lose_no_element_either():
    ds = jdata.from_generator(_shared_stream(9)).map(lambda x: x * 10).batch(2)
    assert ds.element_spec == TensorSpec((None,), np.int64)
    assert [x.tolist() for x in ds] == [[0, 10], [20, 30], [40, 50], [60, 70], [80]]


def test_a_probe_that_reads_the_whole_stream_hands_all_of_it_on():
    ds = jdata.from_generator(_shared_stream(2)).map(lambda x: x + 1)
    assert ds.element_spec == TensorSpec((), np.int64)
    assert [int(x) for x in ds] == [1, 2]


def test_the_probe_pass_is_adopted_once_and_fn_called_once_per_pass():
    calls = []

    def fn():
        calls.append(1)
        return iter(range(3))
    ds = jdata.from_generator(fn)
    assert ds.element_spec == TensorSpec((), np.int64)
    assert [int(x) for x in ds] == [0, 1, 2] and len(calls) == 1
    assert [int(x) for x in ds] == [0, 1, 2] and len(calls) == 2


def test_restoring_a_non_reentrant_generator_is_refused_not_skipped():
    ds = jdata.from_generator(_shared_stream(20), output_signature=TensorSpec((), np.int64))
    it = ds.iterator()
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    state = it.get_state()
    restored = ds.iterator(state)
    with pytest.raises(ValueError, match="from_generator: cannot restore to position 3: fn"):
        next(restored)


def test_a_replayable_generator_restores_exactly_in_a_new_iterator():
    ds = jdata.from_generator(lambda: iter(range(6)))
    it = ds.iterator()
    [next(it) for _ in range(2)]
    assert [int(x) for x in ds.iterator(it.get_state())] == [2, 3, 4, 5]


def test_states_without_the_first_digest_still_restore_and_bad_ones_fail():
    ds = jdata.from_generator(lambda: iter(range(4)))
    it = ds.iterator()
    next(it)
    state = it.get_state()
    state["state"] = {"produced": 1}
    assert [int(x) for x in ds.iterator(state)] == [1, 2, 3]
    state["state"] = {"produced": 1, "first": 7}
    with pytest.raises(ValueError, match="state field 'first'"):
        ds.iterator(state)
