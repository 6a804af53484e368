"""ops/index_cache: the cache read by index that Cedar's planner places under ops that read
by index."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest

import jdata
from jdata import _planner
from jdata.ops import index_cache
from jdata.ops.index_cache import IndexCacheNode
from jdata.runtime.context import Context


def _cached(count=20):
    calls = []

    def f(x):
        calls.append(int(x))
        return np.full(3, x)

    node = IndexCacheNode(jdata.range(count).map(f)._node)
    index_cache.keep(node)
    return node, calls


def _reader(node):
    return _planner.make_reader(node, Context(jdata.Options()), 0)


def test_positions_read_in_any_order_are_kept_and_read_back_without_the_input():
    node, calls = _cached()
    order = np.random.default_rng(0).permutation(20)
    first = {int(i): _reader(node)[int(i)] for i in order}
    assert sorted(calls) == list(range(20)) and index_cache.filled(node) == 20
    again = _reader(node)
    for i in range(20):
        np.testing.assert_array_equal(again[i], first[i])
    assert len(calls) == 20  # the second reader never made an input reader
    assert node.random_access() and node.cardinality() == 20 and str(node) == "Cache(by index)"


def test_elements_are_read_only_and_handed_out_in_new_containers():
    node = IndexCacheNode(jdata.range(3).map(lambda x: {"x": np.full(3, x)})._node)
    index_cache.keep(node)
    reader = _reader(node)
    a = reader[1]
    with pytest.raises(ValueError, match="read-only"):
        a["x"][0] = 7
    a["y"] = 1
    assert reader[1] is not a and list(reader[1]) == ["x"]


def test_threads_fill_one_store():
    node, calls = _cached(200)
    readers = [_reader(node) for _ in range(4)]
    threads = [threading.Thread(target=lambda r=r, k=k: [r[i] for i in range(k, 200, 4)])
               for k, r in enumerate(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert index_cache.filled(node) == 200 and sorted(calls) == list(range(200))


def _read_in_child(node, queue):
    reader = _reader(node)
    queue.put((index_cache.filled(node), int(reader[5][0])))


# A forked child, as the process engine's workers are; it reads the cache alone (no JAX).
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_another_process_reads_through_and_fills_nothing():
    node, _ = _cached()
    _reader(node)[2]
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(node, queue))
    child.start()
    filled_there, value = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0 and value == 5
    assert filled_there == 1  # the parent's one position, inherited: the child added none
    assert index_cache.filled(node) == 1


def test_without_a_store_it_reads_through():
    calls = []
    node = IndexCacheNode(jdata.range(5).map(lambda x: calls.append(1) or x)._node)
    reader = _reader(node)
    assert [int(reader[i]) for i in (4, 4)] == [4, 4] and len(calls) == 2
    assert index_cache.filled(node) == 0
