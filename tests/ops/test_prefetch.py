import numpy as np
import pytest

import jdata
from jdata import TensorSpec
from tests.helpers import check_restore_at_every_step


@pytest.mark.parametrize("buffer_size", [0, 1, 2, 10, jdata.AUTOTUNE])
def test_outputs_are_unchanged(buffer_size):
    # tf.data's example: range(3).prefetch(2) -> [0, 1, 2].
    out = check_restore_at_every_step(jdata.range(3).prefetch(buffer_size))
    assert [int(x) for x in out] == [0, 1, 2]


def test_restore_after_map_and_batch():
    ds = jdata.range(7).map(lambda x: {"x": x, "y": x * 2}).batch(3).prefetch(2)
    out = check_restore_at_every_step(ds)
    assert [b["y"].tolist() for b in out] == [[0, 2, 4], [6, 8, 10], [12]]


def test_restore_over_sequential_input():
    ds = jdata.range(10).filter(lambda x: x % 3 == 0).prefetch(1).map(lambda x: x + 1)
    assert [int(x) for x in check_restore_at_every_step(ds)] == [1, 4, 7, 10]


def test_element_spec_and_cardinality():
    ds = jdata.range(10).batch(4).prefetch(2)
    assert ds.element_spec == TensorSpec((None,), np.int64)
    assert ds.cardinality() == 3
    assert jdata.range(3).repeat().prefetch(1).cardinality() == jdata.INFINITE


@pytest.mark.parametrize("buffer_size, error", [
    (-2, ValueError), (1.5, TypeError), ("2", TypeError), (None, TypeError),
])
def test_bad_arguments(buffer_size, error):
    with pytest.raises(error, match="prefetch: buffer_size="):
        jdata.range(3).prefetch(buffer_size)


def _busy_work(x, iterations=2000):
    total = 0
    for i in range(iterations):
        total += i
    return x


def _prefetch_row(it) -> dict:
    return next(r for r in it.stats().rows if r["stage"].startswith("prefetch"))


def test_autotune_prefetch_over_a_parallel_stage_starts_synchronous():
    # The parallel stage computes ahead on its own workers: with an idle consumer a
    # thread handoff per batch only costs (5% of the nlp benchmark's throughput).
    ds = jdata.range(3000).map(_busy_work, num_parallel_calls=2).batch(30).prefetch(
        jdata.AUTOTUNE)
    with ds.iterator() as it:
        assert sum(int(b.sum()) for b in it) == sum(range(3000))
        stats = it.stats()
        # The autotuner may give it a buffer later (a loaded machine can make one pay):
        # what it started with is the first change's old value, or what it has now.
        changes = [h for h in stats.history
                   if h["stage"] == "prefetch" and h["knob"] == "buffer_size"]
        started = changes[0]["old"] if changes else _prefetch_row(it)["buffer_size"]
        assert started == 0
    with ds.prefetch(3).iterator() as it:  # a number is a buffer of that size
        next(it)
        assert _prefetch_row(it)["buffer_size"] == 3


def test_autotune_prefetch_over_a_parallel_stage_restores_exactly():
    ds = jdata.range(40).map(_busy_work, num_parallel_calls=2).batch(4).prefetch(
        jdata.AUTOTUNE)
    check_restore_at_every_step(ds, [np.arange(i, i + 4) for i in range(0, 40, 4)])
