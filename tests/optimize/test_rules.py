"""Each optimizer rule: the plan it builds, and the same outputs with it on and off."""

from __future__ import annotations

import time

import numpy as np
import pytest

import jdata
from jdata import optimize
from jdata.ops.filter import FilterNode
from jdata.ops.map import MapNode
from jdata.ops.prefetch import InjectedPrefetchNode
from tests.helpers import assert_same_sequence, check_restore_at_every_step, plan_ops, take_list

OFF = jdata.Options(optimize=False)


def _optimized(ds: jdata.Dataset):
    return optimize.optimize(ds._node, ds.options)


def _same_with_and_without(ds: jdata.Dataset) -> list:
    on = take_list(ds)
    assert_same_sequence(on, take_list(ds.with_options(OFF)))
    return on


@pytest.mark.parametrize("make", [
    lambda ds: ds.take(-1), lambda ds: ds.skip(0), lambda ds: ds.repeat(1),
    lambda ds: ds.prefetch(0)])
def test_noop_elimination_removes_ops_that_change_nothing(make):
    ds = make(jdata.range(10).map(lambda x: x + 1))
    result = _optimized(ds)
    assert plan_ops(result.plan) == ["map", "range"]
    assert [f.rule for f in result.fired] == ["noop_elimination"]
    _same_with_and_without(ds)


def test_noop_elimination_keeps_ops_that_do_something():
    ds = jdata.range(10).take(3).skip(1).repeat(2)
    assert _optimized(ds).fired == ()
    assert [int(x) for x in _same_with_and_without(ds)] == [1, 2, 1, 2]


def test_map_fusion_makes_one_map_with_the_same_outputs_and_state():
    ds = (jdata.range(12).map(lambda x: (x, x * 2)).map(lambda a, b: {"a": a, "b": b + 1})
          .map(lambda d: d["a"] + d["b"]))
    result = _optimized(ds)
    assert plan_ops(result.plan) == ["map", "range"]
    assert [f.rule for f in result.fired] == ["map_fusion"]
    expected = [x + 2 * x + 1 for x in range(12)]
    assert [int(x) for x in _same_with_and_without(ds)] == expected
    check_restore_at_every_step(ds)


def test_map_fusion_reports_errors_like_the_unfused_maps():
    def fail_on_4(x):
        if x == 4:
            raise ValueError("four")
        return x

    for ds in (jdata.range(8).map(fail_on_4).map(lambda x: x + 1),
               jdata.range(8).map(lambda x: x + 1).map(fail_on_4)):
        errors = []
        for variant in (ds, ds.with_options(OFF)):
            with pytest.raises(jdata.UDFError) as info:
                list(variant)
            errors.append((info.value.op, info.value.position, type(info.value.__cause__)))
        assert errors[0] == errors[1]
        assert _same_with_and_without(ds.ignore_errors())


def test_map_fusion_leaves_maps_that_differ_in_parallelism_or_vectorize():
    different = jdata.range(4).map(abs, num_parallel_calls=2).map(abs)
    assert "map_fusion" not in [f.rule for f in _optimized(different).fired]
    mixed = jdata.range(4).map(abs, vectorize=True).map(abs)
    assert "map_fusion" not in [f.rule for f in _optimized(mixed).fired]
    parallel = jdata.range(40).map(lambda x: x * 3, num_parallel_calls=2).map(
        lambda x: x - 1, num_parallel_calls=2)
    assert "map_fusion" in [f.rule for f in _optimized(parallel).fired]
    _same_with_and_without(parallel)


def test_filter_fusion_makes_one_filter_with_the_same_outputs():
    ds = jdata.range(30).filter(lambda x: x % 2 == 0).filter(lambda x: x % 3 == 0)
    result = _optimized(ds)
    assert plan_ops(result.plan) == ["filter", "range"]
    assert isinstance(result.plan, FilterNode)
    assert [int(x) for x in _same_with_and_without(ds)] == [0, 6, 12, 18, 24]
    check_restore_at_every_step(ds)


def test_filter_fusion_checks_the_first_predicate_result():
    ds = jdata.range(3).filter(lambda x: x).filter(lambda x: x > 0)  # an int, not a bool
    with pytest.raises(jdata.UDFError, match="predicate returned a int64"):
        list(ds)


def test_inject_prefetch_only_for_batches_or_parallel_work():
    batched = jdata.range(10).batch(2)
    plan = _optimized(batched).plan
    assert isinstance(plan, InjectedPrefetchNode)
    assert _optimized(jdata.range(10).map(abs)).fired == ()
    assert _optimized(batched.prefetch(3)).fired == ()
    assert _optimized(batched.with_options(jdata.Options(autotune=False))).fired == ()
    _same_with_and_without(batched)


def test_inject_prefetch_option_turns_off_that_prefetch_alone():
    ds = jdata.range(40).map(lambda x: x + 1).map(lambda x: x * 2).batch(4)
    off = ds.with_options(jdata.Options(inject_prefetch=False))
    fired = [f.rule for f in _optimized(off).fired]
    assert "inject_prefetch" not in fired and "map_fusion" in fired
    assert "inject_prefetch" in [f.rule for f in _optimized(ds).fired]
    assert [b.tolist() for b in off] == [b.tolist() for b in ds]
    with pytest.raises(TypeError, match="inject_prefetch"):
        jdata.Options(inject_prefetch=None)


def _busy(x, iterations=300):
    total = 0
    for i in range(iterations):
        total += i
    return x


def test_the_injected_prefetch_gets_a_buffer_when_the_consumer_has_work():
    # The pipeline's share of a step (about 1.5 ms of 3.5 ms) is well over the
    # autotuner's 10% threshold for a change, on a fast machine or a loaded one.
    with jdata.range(4000).map(lambda x: _busy(x, 2000)).batch(32).iterator() as it:
        batches = 0
        for _ in it:
            time.sleep(0.002)  # the training step, which releases the GIL
            batches += 1
        prefetch = it.stats().rows[0]
    assert batches == 125
    assert prefetch["stage"] == "prefetch" and prefetch["buffer_size"] > 0


def test_the_injected_prefetch_stays_synchronous_for_an_idle_consumer():
    with jdata.range(20_000).map(_busy).batch(32).iterator() as it:
        total = sum(int(np.sum(b)) for b in it)
        prefetch = it.stats().rows[0]
    assert total == sum(range(20_000))
    assert prefetch["buffer_size"] == 0  # a thread handoff would only cost


def test_optimize_false_and_explain():
    ds = jdata.range(6).map(abs).map(abs)
    assert "map_fusion" in ds.explain()
    off = ds.with_options(OFF)
    assert off.explain().splitlines()[0] == "Plan (optimizer rules fired: none)"
    assert isinstance(_optimized(off).plan.input, MapNode)


def _generated(n: int) -> jdata.Dataset:
    return jdata.from_generator(lambda: iter(range(n)),
                                output_signature=jdata.TensorSpec((), np.int64))


def test_shard_and_skip_move_below_maps_of_sequential_inputs():
    calls = []

    def counted(x):
        calls.append(int(x))
        return x * 10

    ds = _generated(20).map(counted).map(lambda x: x + 1).skip(3).shard(4, 1)
    result = _optimized(ds)
    assert plan_ops(result.plan) == ["map", "shard", "skip", "from_generator"]  # maps fused
    assert "pushdown" in [f.rule for f in result.fired]
    expected = [x * 10 + 1 for x in range(20)][3:][1::4]
    assert [int(x) for x in take_list(ds)] == expected
    assert sorted(calls) == [x for x in range(20)][3:][1::4]  # dropped ones never mapped
    calls.clear()
    assert [int(x) for x in take_list(ds.with_options(OFF))] == expected
    assert len(calls) == 20  # unoptimized: every element mapped, most dropped


def test_take_moves_below_a_parallel_map_so_nothing_past_it_is_computed():
    calls = []

    def counted(x):
        calls.append(int(x))
        return x * 10

    ds = _generated(1000).map(counted, num_parallel_calls=4).take(5)
    result = _optimized(ds)
    assert plan_ops(result.plan)[-3:] == ["map", "take", "from_generator"]
    assert "pushdown" in [f.rule for f in result.fired]
    assert [int(x) for x in take_list(ds)] == [0, 10, 20, 30, 40]
    assert sorted(calls) == [0, 1, 2, 3, 4]  # a parallel map no longer computes ahead


@pytest.mark.parametrize("between", ["with_options", "prefetch"])
def test_take_moves_below_ops_that_keep_positions_to_reach_the_map(between):
    # A probe: with_options() or prefetch() between a map and a take hid the map from the
    # rule (it looked only at the op right below), so elements past the take were mapped.
    # (An autocache marker stays a barrier: tests/ops/test_autocache.py.)
    calls = []

    def counted(x):
        calls.append(int(x))
        return x * 10

    mapped = _generated(1000).map(counted, num_parallel_calls=4)
    middle = {"with_options": lambda d: d.with_options(jdata.Options(cpu_budget=2)),
              "prefetch": lambda d: d.prefetch(8)}
    ds = middle[between](mapped).take(5)
    result = _optimized(ds)
    assert "pushdown" in [f.rule for f in result.fired]
    assert plan_ops(result.plan)[-3:] == ["map", "take", "from_generator"]
    assert [int(x) for x in take_list(ds)] == [0, 10, 20, 30, 40]
    assert sorted(calls) == [0, 1, 2, 3, 4]


def test_pushdown_moves_nothing_where_no_sequential_map_lies_below():
    # Crossing ops that keep positions pays only on the way to a map: plans without one
    # keep their shape (and explain() names no rule).
    for ds in [_generated(20).with_options(jdata.Options(cpu_budget=2)).take(5),
               jdata.range(20).map(abs).prefetch(2).take(5)]:
        assert "pushdown" not in [f.rule for f in _optimized(ds).fired]


def test_pushdown_leaves_random_access_inputs_and_random_maps_alone():
    assert "pushdown" not in [
        f.rule for f in _optimized(jdata.range(20).map(abs).shard(2, 0)).fired]
    keyed = _generated(20).random_map(lambda x, k: x + k[0] % 3, jax_key()).shard(2, 0)
    assert "pushdown" not in [f.rule for f in _optimized(keyed).fired]
    _same_with_and_without(keyed)


def jax_key():
    import jax

    return jax.random.key(0)


def test_vectorized_maps_fuse_into_one_jitted_function():
    import jax.numpy as jnp

    images = np.arange(100 * 6, dtype=np.float32).reshape(100, 2, 3)
    ds = (jdata.from_tensor_slices(images).map(lambda x: (x * 2.0, x.sum()), vectorize=True)
          .map(lambda x, s: jnp.tanh(x / 100.0) + s, vectorize=True).batch(16))
    result = _optimized(ds)
    fused = result.plan.input.input  # under the injected prefetch and the batch
    assert isinstance(fused, MapNode) and fused.vectorize
    assert plan_ops(result.plan) == ["prefetch", "batch", "map", "from_tensor_slices"]
    on, off = take_list(ds), take_list(ds.with_options(OFF))
    assert len(on) == len(off) == 7
    for a, b in zip(on, off):
        np.testing.assert_allclose(a, b, rtol=1e-6)


AUTO = jdata.Options(auto_vectorize=True)


def test_auto_vectorize_vectorizes_udfs_that_trace_to_the_same_outputs():
    import jax.numpy as jnp

    images = np.random.default_rng(0).random((70, 4, 4), dtype=np.float32)
    ds = (jdata.from_tensor_slices(images).map(lambda x: jnp.flip(x, 0) * 2.0 + 1.0)
          .batch(8).with_options(AUTO))
    result = _optimized(ds)
    assert "auto_vectorize" in [f.rule for f in result.fired]
    assert any(isinstance(n, MapNode) and n.vectorize for n in _walk(result.plan))
    on, off = take_list(ds), take_list(ds.with_options(OFF))
    for a, b in zip(on, off, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def _walk(node):
    yield node
    for child in node.inputs():
        yield from _walk(child)


def test_auto_vectorize_leaves_udfs_that_do_not_trace_or_change_dtypes():
    untraceable = jdata.range(10).map(lambda x: x + 1 if x > 3 else x).with_options(AUTO)
    int64_math = jdata.range(10).map(lambda x: x * 2).with_options(AUTO)  # JAX: int32
    strings = jdata.from_tensor_slices(np.array([b"a", b"b"])).map(lambda s: s).with_options(AUTO)
    for ds in (untraceable, int64_math, strings):
        assert "auto_vectorize" not in [f.rule for f in _optimized(ds).fired]
        _same_with_and_without(ds)
    assert "auto_vectorize" not in [f.rule for f in _optimized(
        jdata.range(10).map(lambda x: x * 2.0)).fired]  # off by default


def test_a_parallel_map_and_its_filter_fuse_so_the_predicate_runs_on_the_workers():
    import threading

    callers = set()

    def costly_predicate(a, b):
        callers.add(threading.current_thread() is threading.main_thread())
        return a % 3 != 0

    ds = (jdata.range(200).map(lambda x: (x, x * 2), num_parallel_calls=2)
          .filter(costly_predicate))
    result = _optimized(ds)
    assert plan_ops(result.plan) == ["prefetch", "map", "filter", "map", "range"]
    assert "map_filter_fusion" in [f.rule for f in result.fired]
    got = [(int(a), int(b)) for a, b in take_list(ds)]
    assert got == [(x, 2 * x) for x in range(200) if x % 3 != 0]
    assert callers == {False}  # never on the consumer's thread
    callers.clear()
    _same_with_and_without(ds)
    assert True in callers  # unfused, the consumer's thread calls it


def test_map_filter_fusion_reports_predicate_errors_as_the_filter_did():
    def failing(x):
        if x == 7:
            raise ValueError("seven")
        return x % 2 == 0

    def not_a_bool(x):
        return x % 2

    def until_error(ds):
        out = []
        try:
            for x in ds:
                out.append(int(x))
        except (jdata.UDFError, TypeError) as e:
            cause = e.__cause__ if isinstance(e, jdata.UDFError) else e
            return out, type(e).__name__, getattr(e, "op", None), str(cause)
        raise AssertionError("no error")

    for predicate in (failing, not_a_bool):
        ds = jdata.range(20).map(lambda x: x + 0, num_parallel_calls=2).filter(predicate)
        assert "map_filter_fusion" in [f.rule for f in _optimized(ds).fired]
        assert until_error(ds) == until_error(ds.with_options(OFF))
    with pytest.raises(jdata.UDFError) as raised:
        take_list(jdata.range(20).map(lambda x: x + 0, num_parallel_calls=2).filter(failing))
    assert (raised.value.op, raised.value.position) == ("filter", 7)
    assert isinstance(raised.value.__cause__, ValueError)


def test_repeat_forever_of_a_random_access_input_reads_by_index():
    import jax

    ds = jdata.range(5).shuffle(jax.random.key(0)).repeat().batch(3).take(7)
    result = _optimized(ds)
    assert "repeat_by_index" in [f.rule for f in result.fired]
    assert "Repeat(forever, by index)" in ds.explain()
    batches = _same_with_and_without(ds)
    # Every pass is a fresh permutation of the 5 elements; batches span passes.
    flat = np.concatenate(batches).tolist()
    passes = [flat[i:i + 5] for i in range(0, 20, 5)]
    assert all(sorted(p) == [0, 1, 2, 3, 4] for p in passes)
    assert len({tuple(p) for p in passes}) > 1
    check_restore_at_every_step(ds)
    empty = jdata.range(0).repeat()
    assert "repeat_by_index" in [f.rule for f in _optimized(empty).fired]
    assert take_list(empty) == []


def test_repeat_by_index_keeps_one_process_pool_for_every_pass():
    import os

    ds = (jdata.range(6).map(lambda x: np.int64(os.getpid()), num_parallel_calls=2)
          .repeat().take(30).with_options(jdata.Options(engine="processes")))
    pids = {int(p) for p in take_list(ds)}
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2  # unfused, each of the 5 passes started its own workers


def test_a_parallel_map_fuses_into_its_batch_over_a_sequential_input():
    ds = _generated(23).map(lambda x: x * 10, num_parallel_calls=2).batch(5)
    result = _optimized(ds)
    assert plan_ops(result.plan) == ["prefetch", "map_batch", "from_generator"]
    assert "map_batch_fusion" in [f.rule for f in result.fired]
    assert type(result.plan.input).__name__ == "MapBatchNode"
    batches = _same_with_and_without(ds)
    assert [b.tolist() for b in batches][-1] == [200, 210, 220]
    check_restore_at_every_step(ds)
    dropped = _generated(23).map(lambda x: x * 10, num_parallel_calls=2).batch(5, True)
    assert len(_same_with_and_without(dropped)) == 4
    # Over a random-access input the batches are computed by index already.
    assert "map_batch_fusion" not in [
        f.rule for f in _optimized(jdata.range(9).map(abs, num_parallel_calls=2).batch(3)).fired]


def test_map_batch_fusion_runs_the_map_in_worker_processes():
    import os

    ds = (_generated(12).map(lambda x: np.int64(os.getpid()), num_parallel_calls=2).batch(4)
          .with_options(jdata.Options(engine="processes")))
    assert "map_batch_fusion" in [f.rule for f in _optimized(ds).fired]
    pids = {int(p) for b in take_list(ds) for p in b}
    assert pids and os.getpid() not in pids


def test_map_batch_fusion_keeps_errors_of_a_dropped_remainder_and_skips_ignore_errors():
    def fails_at_21(x):
        if x == 21:
            raise ValueError("21")
        return x

    ds = _generated(23).map(fails_at_21, num_parallel_calls=2).batch(5, drop_remainder=True)
    assert "map_batch_fusion" in [f.rule for f in _optimized(ds).fired]
    for options in (None, OFF):
        run = ds if options is None else ds.with_options(options)
        with pytest.raises(jdata.UDFError) as raised:
            take_list(run)
        assert (raised.value.op, raised.value.position) == ("map", 21)
    ignoring = _generated(23).map(fails_at_21, num_parallel_calls=2).batch(5).ignore_errors()
    assert "map_batch_fusion" not in [f.rule for f in _optimized(ignoring).fired]
    _same_with_and_without(ignoring)
