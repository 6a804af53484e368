"""The block protocol: ``read_block``, ``next_many`` and ``udf.call_block``."""

import numpy as np
import pytest

import jdata
from jdata import _tree
from jdata.ops.range import RangeNode, _RangeReader
from jdata.runtime import udf
from jdata.runtime.iterator import IndexIterator, Iterator, read_block, read_each
from tests.helpers import assert_same_sequence, check_blocks_match_per_element


def fails_on(bad, exc=ValueError):
    def fn(x):
        if int(x) in bad:
            raise exc(f"bad element {int(x)}")
        return x * 2
    return fn


class _Squares:
    """A reader without ``read_block``; index 4 fails."""

    def __len__(self):
        return 7

    def __getitem__(self, index):
        if index == 4:
            raise KeyError(index)
        return np.int64(index * index)


def _map_reader(fn, n=10):
    from jdata.ops.map import MapNode, _MapReader
    return _MapReader(MapNode(jdata.range(n)._node, fn), None, 0)


def test_read_block_of_a_reader_without_it_stops_at_the_failing_index():
    elements, error = read_block(_Squares(), 1, 7)
    assert elements == [1, 4, 9] and isinstance(error, KeyError)
    assert read_block(_Squares(), 5, 7) == ([25, 36], None)
    assert read_block(_Squares(), 3, 3) == ([], None)


@pytest.mark.parametrize("lo,hi", [(0, 10), (2, 9), (5, 6), (4, 4)])
def test_range_and_map_blocks_equal_their_elements(lo, hi):
    reader = _map_reader(lambda x: x + 1)
    elements, error = read_block(reader, lo, hi)
    assert error is None
    assert_same_sequence(elements, [reader[i] for i in range(lo, hi)])
    range_block, _ = read_block(_RangeReader(RangeNode(3, 33, 3), None, 0), lo, hi)
    assert [type(e) for e in range_block] == [np.int64] * (hi - lo)
    assert [int(e) for e in range_block] == list(range(3, 33, 3))[lo:hi]


def test_map_block_stops_at_the_failing_element_with_its_position():
    elements, error = read_block(_map_reader(fails_on({6})), 3, 9)
    assert [int(e) for e in elements] == [6, 8, 10]
    assert isinstance(error, jdata.UDFError)
    assert (error.op, error.position) == ("map", 6)
    assert isinstance(error.__cause__, ValueError) and "bad element 6" in str(error.__cause__)


def test_map_block_reports_an_invalid_output_before_a_later_udf_error():
    fn = fails_on({7})
    elements, error = read_block(_map_reader(lambda x: None if x == 5 else fn(x)), 2, 9)
    assert len(elements) == 3 and isinstance(error, TypeError)
    assert "returned None" in str(error)


def test_map_block_normalizes_python_scalars():
    elements, error = read_block(_map_reader(lambda x: int(x) * 2), 0, 3)
    assert error is None and elements == [0, 2, 4]
    assert all(type(e) is np.int64 for e in elements)
    assert not isinstance(elements, _tree.Leaves) or all(
        isinstance(e, np.generic) for e in elements)


def test_call_block_unpacks_exact_tuples_only():
    def fn(*args):
        return len(args)
    point = type("P", (tuple,), {})((1, 2, 3))
    elements = [(1, 2), point, np.int64(0), (1, 2, 3)]
    assert udf.call_block(fn, elements, "map", 0) == ([2, 1, 1, 3], None)
    assert udf.call_block(fn, [(1, 2), (3, 4, 5)], "map", 0) == ([2, 3], None)
    assert udf.call_block(fn, _tree.Leaves([np.int64(1)]), "map", 0) == ([1], None)


def test_call_block_error_position_counts_from_the_first_position():
    outputs, error = udf.call_block(fails_on({12}), [np.int64(i) for i in range(10, 15)],
                                    "filter", 100)
    assert [int(o) for o in outputs] == [20, 22]
    assert (error.op, error.position) == ("filter", 102)
    assert isinstance(error.__cause__, ValueError)


def test_read_each_is_the_default():
    assert read_each(_Squares(), 0, 3) == ([0, 1, 4], None)


def test_a_stop_iteration_is_an_error_at_its_element_not_an_end():
    class Stops(_Squares):
        def __getitem__(self, index):
            if index == 3:
                raise StopIteration
            return super().__getitem__(index)

    elements, error = read_each(Stops(), 0, 6)
    assert elements == [0, 1, 4] and isinstance(error, StopIteration)
    outputs, error = udf.call_block(fails_on({2}, StopIteration), [np.int64(i) for i in range(5)],
                                    "map", 10)
    assert len(outputs) == 2 and error.position == 12
    assert isinstance(error.__cause__, StopIteration)


def test_default_next_many_pulls_with_next():
    class Countdown(Iterator):
        def __init__(self):
            self.left = 5

        def __next__(self):
            if not self.left:
                raise StopIteration
            self.left -= 1
            return self.left

    it = Countdown()
    assert it.next_many(3) == [4, 3, 2] and it.next_many(3) == [1, 0] and it.next_many(3) == []


def test_an_index_iterators_next_many_reads_a_block_and_loses_nothing_at_an_error():
    it = IndexIterator(_Squares())  # index 4 raises KeyError
    assert it.next_many(3) == [0, 1, 4]
    assert it.next_many(10) == [9]  # up to the failing index
    with pytest.raises(KeyError):
        it.next_many(10)
    assert it.index == 5 and it.next_many(10) == [25, 36] and it.next_many(10) == []


def test_an_index_iterators_next_many_leaves_an_os_error_to_be_read_again():
    class Flaky(_Squares):
        down = True

        def __getitem__(self, index):
            if index == 2 and self.down:
                raise OSError("gone for now")
            return np.int64(index)

    reader = Flaky()
    it = IndexIterator(reader)
    assert it.next_many(5) == [0, 1]
    with pytest.raises(OSError):
        it.next_many(5)
    assert it.index == 2
    reader.down = False
    assert it.next_many(3) == [2, 3, 4]


# name: (dataset, the errors its trace has as (type, op, position)).
PIPELINES = {
    "map": (lambda: jdata.range(20).map(fails_on(set())), []),
    "map_error": (lambda: jdata.range(20).map(fails_on({3, 9, 10})),
                  [("UDFError", "map", 3), ("UDFError", "map", 9), ("UDFError", "map", 10)]),
    "batch": (lambda: jdata.range(23).map(fails_on(set())).batch(5), []),
    "stop_iteration": (lambda: jdata.range(12).map(fails_on({4}, StopIteration)).batch(3),
                       [("UDFError", "map", 4)]),
    "batch_error": (lambda: jdata.range(23).map(fails_on({7, 8, 19})).batch(5),
                    [("UDFError", "map", 7), ("UDFError", "map", 19)]),
    "batch_drop_remainder": (
        lambda: jdata.range(23).map(fails_on({12})).batch(5, drop_remainder=True),
        [("UDFError", "map", 12)]),
    "batch_ignore_errors": (
        lambda: jdata.range(23).map(fails_on({7, 8, 19})).ignore_errors().batch(5), []),
    "take_skip": (lambda: jdata.range(30).map(fails_on({2, 25})).skip(4).take(25).batch(6),
                  [("UDFError", "map", 25)]),
    "tuples": (lambda: jdata.zip((jdata.range(12), jdata.range(12).map(fails_on({5}))))
               .map(lambda a, b: a + b).batch(4), [("UDFError", "map", 5)]),
    "mixed_output": (lambda: jdata.range(9).map(
        lambda x: {"x": x} if x % 4 == 0 else {"x": int(x) * 10}).batch(3), []),
    "invalid_output": (lambda: jdata.range(9).map(lambda x: None if x == 4 else x).batch(4),
                       [("TypeError", None, None)]),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_block_paths_match_per_element(name, monkeypatch):
    make_ds, expected_errors = PIPELINES[name]
    steps = check_blocks_match_per_element(make_ds, monkeypatch)
    assert any(step[0] == "element" for step, _ in steps)
    assert [step[1:4] for step, _ in steps if step[0] == "error"] == expected_errors
