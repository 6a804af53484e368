"""The parts of fused UDFs timed while Cedar's planner profiles (``jdata.runtime.part_times``):
what the planner reads to cache between the ops fused into one call."""

from __future__ import annotations

import time

import numpy as np

from jdata.optimize.map_fusion import _Composed
from jdata.optimize.rewrite import Chain
from jdata.runtime import part_times


def _busy(x):
    end = time.perf_counter() + 1e-3
    while time.perf_counter() < end:
        pass
    return np.zeros(100, np.float32) + x


def _grow(x):
    return np.repeat(x, 3)


def _noise(x, key):
    return x + np.float32(key[0])


def _calls(fn, count, *args):
    for i in range(count):
        fn(np.float32(i), *args)


def test_nothing_is_timed_outside_a_profile():
    chain = Chain(((_busy, False), (_grow, False)))
    _calls(chain, 3 * part_times.EVERY, np.zeros((0, 2), np.uint32))
    assert not part_times.sampled()
    assert part_times.shares(chain) is None


def test_a_chain_times_each_part_and_the_bytes_it_puts_out():
    chain = Chain(((_busy, False), (_grow, False), (_noise, True)))
    key = np.array([[0, 7]], np.uint32)
    with part_times.profiling():
        _calls(chain, 8 * part_times.EVERY, key)
    shares = part_times.shares(chain)
    assert shares is not None and len(shares) == 3
    assert [size for _, size in shares] == [400.0, 1200.0, 1200.0]
    assert abs(sum(share for share, _ in shares) - 1.0) < 1e-9
    assert shares[0][0] > 0.5  # 1 ms of the call's work is _busy's
    assert not part_times.sampled()  # the profile ended with the block


def test_fused_maps_inside_a_chain_are_timed_too():
    # Both count calls on one clock: an even period would only ever time the outer chain.
    inner = _Composed(_busy, _grow)
    chain = Chain(((inner, False), (_noise, True)))
    key = np.array([[0, 7]], np.uint32)
    with part_times.profiling():
        _calls(chain, 16 * part_times.EVERY, key)
    assert part_times.shares(chain) is not None
    inner_shares = part_times.shares(inner)
    assert inner_shares is not None
    assert [size for _, size in inner_shares] == [400.0, 1200.0]


def test_too_few_timed_calls_say_nothing():
    composed = _Composed(_grow, _grow)
    with part_times.profiling():
        _calls(composed, part_times.EVERY)  # at most two timed
    assert part_times.shares(composed) is None
