"""Thread-parallel iterators: same elements as sequential, exact restore, no leaks."""

import json
import threading

import jax
import numpy as np
import pytest

import jdata
from jdata import _planner
from jdata.runtime.context import Context
from jdata.runtime.parallel import ParallelIndexIterator, ParallelMapIterator
from tests.helpers import assert_same_sequence

KEY = jax.random.key(7)


def _reader_factory(ds):
    return lambda epoch: _planner.make_reader(ds._node, Context(), epoch)


def _shuffled_augmented(n=300):
    # Readers with caches (permutation blocks, key blocks): each thread needs its own.
    return (jdata.range(n).shuffle(KEY)
            .random_map(lambda x, k: x * 1000 + k[0] % 1000, jax.random.key(1)))


def _drain(it) -> list:
    return [x for x in it]


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_index_iterator_matches_the_sequential_run(parallelism):
    ds = _shuffled_augmented()
    it = ParallelIndexIterator(_reader_factory(ds), parallelism)
    assert_same_sequence(_drain(it), list(ds))
    it.close()


def test_index_iterator_restores_at_every_step():
    ds = _shuffled_augmented(40)
    expected = list(ds)
    it = ParallelIndexIterator(_reader_factory(ds), 3)
    for step in range(len(expected) + 1):
        state = json.loads(json.dumps(it.get_state()))
        assert state == {"index": step}
        other = ParallelIndexIterator(_reader_factory(ds), 2)
        other.set_state(state)
        assert_same_sequence(_drain(other), expected[step:])
        other.close()
        if step < len(expected):
            assert next(it) == expected[step]
    it.close()


def test_completion_order_restores_to_exactly_the_rest():
    ds = jdata.range(200).map(lambda x: x * 2)
    expected = {int(x) for x in ds}
    it = ParallelIndexIterator(_reader_factory(ds), 4, deterministic=False)
    seen = [int(next(it)) for _ in range(77)]
    state = json.loads(json.dumps(it.get_state()))
    assert state["index"] <= 77 and all(i >= state["index"] for i in state["done"])
    rest = ParallelIndexIterator(_reader_factory(ds), 2, deterministic=False)
    rest.set_state(state)
    remaining = [int(x) for x in rest]
    assert sorted(seen + remaining) == sorted(expected)
    it.close()
    rest.close()


def _fails_on_multiples_of_seven(x):
    if x % 7 == 0:
        raise ValueError("seven")
    return x


@pytest.mark.parametrize("kind", ["index", "map"])
def test_errors_arrive_at_their_elements_turn_and_iteration_goes_on(kind):
    base = jdata.range(30)
    if kind == "index":
        it = ParallelIndexIterator(_reader_factory(base.map(_fails_on_multiples_of_seven)), 3)
    else:
        source = _planner.make_iterator(base.filter(lambda x: True)._node, Context(), 0)
        it = ParallelMapIterator(source, lambda x, _: _fails_on_multiples_of_seven(x), 3)
    out = []
    for _ in range(30):
        try:
            out.append(int(next(it)))
        except jdata.UDFError as e:
            assert isinstance(e.__cause__, ValueError)
            out.append("error")
        except ValueError:
            out.append("error")
    assert out == ["error" if i % 7 == 0 else i for i in range(30)]
    with pytest.raises(StopIteration):
        next(it)
    it.close()


def _sequential_input(n):
    ds = jdata.range(n).filter(lambda x: x % 3 != 0)
    return lambda: _planner.make_iterator(ds._node, Context(), 0)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_map_iterator_matches_and_restores_at_every_step(parallelism):
    make_input = _sequential_input(40)
    expected = [int(x) * 10 for x in jdata.range(40).filter(lambda x: x % 3 != 0)]

    def build():
        return ParallelMapIterator(make_input(), lambda x, pos: int(x) * 10, parallelism)

    it = build()
    for step in range(len(expected) + 1):
        state = json.loads(json.dumps(it.get_state()))
        other = build()
        other.set_state(state)
        assert _drain(other) == expected[step:]
        other.close()
        if step < len(expected):
            assert next(it) == expected[step]
    it.close()


def test_map_iterator_completion_order_restores_to_exactly_the_rest():
    make_input = _sequential_input(300)
    expected = sorted(int(x) for x in jdata.range(300).filter(lambda x: x % 3 != 0))
    it = ParallelMapIterator(make_input(), lambda x, pos: int(x), 4, deterministic=False)
    seen = [next(it) for _ in range(101)]
    rest = ParallelMapIterator(make_input(), lambda x, pos: int(x), 2, deterministic=False)
    rest.set_state(json.loads(json.dumps(it.get_state())))
    assert sorted(seen + _drain(rest)) == expected
    it.close()
    rest.close()


def test_close_stops_every_worker_thread():
    before = set(threading.enumerate())
    it = ParallelIndexIterator(_reader_factory(jdata.range(10_000).map(lambda x: x + 1)), 4)
    next(it)
    workers = [t for t in threading.enumerate() if t not in before]
    assert workers, "the pool started no thread"
    it.close()
    for t in workers:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in workers)


def test_chunks_grow_for_cheap_functions():
    it = ParallelIndexIterator(_reader_factory(jdata.range(5000)), 2)
    values = np.array([int(x) for x in it])
    assert np.array_equal(values, np.arange(5000))
    assert it._pool.sizer.size() > 8  # cheap elements are handed out many at a time
    it.close()


def _prefetched(n=30, buffer_size=4):
    from jdata.runtime.prefetch import PrefetchIterator
    ds = jdata.range(n).filter(lambda x: x % 4 != 1).map(lambda x: x * 3)
    return PrefetchIterator(_planner.make_iterator(ds._node, Context(), 0), buffer_size), [
        int(x) for x in ds]


@pytest.mark.parametrize("buffer_size", [1, 4])
def test_prefetch_matches_and_restores_at_every_step(buffer_size):
    it, expected = _prefetched(buffer_size=buffer_size)
    for step in range(len(expected) + 1):
        state = json.loads(json.dumps(it.get_state()))
        other, _ = _prefetched(buffer_size=2)
        other.set_state(state)
        assert [int(x) for x in other] == expected[step:]
        other.close()
        if step < len(expected):
            assert int(next(it)) == expected[step]
    with pytest.raises(StopIteration):
        next(it)
    it.close()


def test_prefetch_delivers_errors_in_order_and_continues():
    from jdata.runtime.prefetch import PrefetchIterator
    ds = jdata.range(10).map(_fails_on_multiples_of_seven)
    it = PrefetchIterator(_planner.make_iterator(ds._node, Context(), 0), 3)
    out = []
    for _ in range(10):
        try:
            out.append(int(next(it)))
        except jdata.UDFError:
            out.append("error")
    assert out == ["error", 1, 2, 3, 4, 5, 6, "error", 8, 9]
    it.close()


def test_prefetch_close_stops_its_thread():
    it, _ = _prefetched(n=10_000, buffer_size=8)
    next(it)
    thread = it._thread
    it.close()
    assert not thread.is_alive()
