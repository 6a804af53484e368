import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from jdata.ops import scan as scan_op
from tests.helpers import (add_one_in_place, assert_same_sequence, check_restore_at_every_step,
                           take_list)


def ints(ds):
    return [int(x) for x in take_list(ds)]


def test_tf_data_doc_example():
    ds = jdata.range(10).scan(np.int64(0), lambda state, i: (state + i, state + i))
    out = check_restore_at_every_step(ds)
    assert [int(x) for x in out] == [0, 1, 3, 6, 10, 15, 21, 28, 36, 45]


def test_tuple_elements_are_not_unpacked():
    ds = jdata.from_tensor_slices((np.arange(4), np.arange(10, 14))).scan(
        np.int64(0), lambda s, pair: (s + pair[0] * pair[1], s))
    assert ints(ds) == [0, 0, 11, 35]


def test_structured_state_and_outputs_over_a_sequential_input():
    def step(state, x):
        new = {"sum": state["sum"] + x, "tag": state["tag"] + "x"}
        return new, (new["sum"], new["tag"])
    ds = jdata.range(8).filter(lambda x: x % 3 != 0).scan({"sum": np.int64(0), "tag": ""}, step)
    expected = [(np.int64(s), "x" * (i + 1)) for i, s in enumerate([1, 3, 7, 12, 19])]
    assert_same_sequence(check_restore_at_every_step(ds), expected)


def test_state_shapes_may_change():
    ds = jdata.range(5).scan(np.zeros(0, np.int64),
                             lambda s, x: (np.append(s, x), s.sum()))
    assert [int(x) for x in check_restore_at_every_step(ds)] == [0, 0, 1, 3, 6]


def test_python_values_are_converted():
    ds = jdata.range(4).scan(0, lambda s, x: (s + 1, float(s)))
    out = check_restore_at_every_step(ds)
    assert [float(x) for x in out] == [0.0, 1.0, 2.0, 3.0]
    assert ds.element_spec == TensorSpec((), np.float64)


def test_element_spec_and_cardinality():
    ds = jdata.range(6).scan(np.int64(0), lambda s, x: (s + x, (s, np.zeros(3, np.float32))))
    assert ds.element_spec == (TensorSpec((), np.int64), TensorSpec((3,), np.float32))
    assert ds.cardinality() == 6
    assert jdata.range(3).repeat().scan(np.int64(0), lambda s, x: (s, x)).cardinality() == (
        jdata.INFINITE)


def test_must_return_a_pair():
    with pytest.raises(TypeError, match="scan.*pair"):
        list(jdata.range(3).scan(np.int64(0), lambda s, x: s + x))
    with pytest.raises(TypeError, match="scan.*pair"):
        list(jdata.range(3).scan(np.int64(0), lambda s, x: (s, x, x)))


def test_new_state_must_keep_structure_and_dtypes():
    with pytest.raises(TypeError, match="scan.*structure"):
        list(jdata.range(3).scan(np.int64(0), lambda s, x: ((s, s), x)))
    with pytest.raises(TypeError, match="scan.*dtype float64.*int64"):
        list(jdata.range(3).scan(np.int64(0), lambda s, x: (s / 2, x)))


def test_udf_errors_name_scan_and_the_position():
    def step(s, x):
        if x == 2:
            raise KeyError("boom")
        return s + x, s
    it = jdata.range(4).scan(np.int64(0), step).iterator()
    assert [int(next(it)), int(next(it))] == [0, 0]
    with pytest.raises(jdata.UDFError, match="scan.*position 2") as info:
        next(it)
    assert isinstance(info.value.__cause__, KeyError)
    assert int(next(it)) == 1  # the iterator moved past the failing element


def test_bad_arguments():
    with pytest.raises(TypeError, match="initial_state"):
        jdata.range(3).scan(None, lambda s, x: (s, x))
    with pytest.raises(TypeError, match="scan_func"):
        jdata.range(3).scan(np.int64(0), 3)
    with pytest.raises(TypeError, match="scan"):
        jdata.range(3).scan(object(), lambda s, x: (s, x))


# ------------------------------------------------------------------------- reduce

def test_reduce_tf_data_doc_examples():
    assert int(jdata.range(5).reduce(np.int64(0), lambda x, _: x + 1)) == 5
    assert int(jdata.range(5).reduce(np.int64(0), lambda x, y: x + y)) == 10


def test_reduce_structured_state_and_empty_input():
    out = jdata.range(1, 5).reduce({"sum": np.int64(0), "prod": np.int64(1)},
                                   lambda s, x: {"sum": s["sum"] + x, "prod": s["prod"] * x})
    assert {k: int(v) for k, v in out.items()} == {"sum": 10, "prod": 24}
    assert int(jdata.range(0).reduce(np.int64(7), lambda s, x: s + x)) == 7


def test_reduce_checks_the_state():
    with pytest.raises(TypeError, match="reduce.*dtype"):
        jdata.range(3).reduce(np.int64(0), lambda s, x: s * 0.5)
    with pytest.raises(TypeError, match="reduce.*structure"):
        jdata.range(3).reduce(np.int64(0), lambda s, x: (s, x))


def test_reduce_errors_name_reduce_and_the_position():
    with pytest.raises(jdata.UDFError, match="reduce.*position 3") as info:
        jdata.range(5).reduce(np.int64(0), lambda s, x: s + 10 // (int(x) - 3))
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(TypeError, match="reduce_func"):
        jdata.range(3).reduce(np.int64(0), None)


class _ClosingSpy:
    def __init__(self, it):
        self.it, self.closed = it, False

    def __iter__(self):
        return iter(self.it)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True
        self.it.close()


@pytest.mark.parametrize("fail", [False, True])
def test_reduce_closes_the_iterator(fail):
    spy = _ClosingSpy(jdata.range(4).iterator())

    def add(s, x):
        if fail and x == 2:
            raise ValueError("no")
        return s + x
    if fail:
        with pytest.raises(jdata.UDFError):
            scan_op.reduce(spy, np.int64(0), add)
    else:
        assert int(scan_op.reduce(spy, np.int64(0), add)) == 6
    assert spy.closed


def test_every_pass_starts_from_the_initial_state():
    def count(state, x):
        state["n"] = state["n"] + 1  # replaces a field of the state it was given
        return state, state["n"]

    ds = jdata.range(3).scan({"n": np.int64(0)}, count)
    assert ints(ds) == [1, 2, 3]
    assert ints(ds) == [1, 2, 3]
    assert ints(ds.repeat(2)) == [1, 2, 3] * 2


def test_an_in_place_write_to_the_initial_state_raises():
    initial = np.zeros(2)
    with pytest.raises(jdata.UDFError, match="read-only"):
        list(jdata.range(3).scan(initial, lambda s, x: (add_one_in_place(s), x)))
    with pytest.raises(jdata.UDFError, match="read-only"):
        jdata.range(3).reduce(initial, lambda s, x: add_one_in_place(s))
    assert not initial.any() and initial.flags.writeable
