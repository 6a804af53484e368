"""Cedar's planner's decisions (jdata.optimize.cedar), without a pipeline: each property
against a brute-force search of the same model over every cut and worker count."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jdata.optimize import cedar
from jdata.optimize.cedar import OpCost, PlanPins, Resources


def _op(name, sec, bytes_out=0.0, cut=True, cache=False, epoch_bytes=None, outputs=1.0):
    return OpCost(name, sec, bytes_out, outputs, cut, cache, epoch_bytes)


@st.composite
def chains(draw):
    n = draw(st.integers(1, 6))
    random_from = draw(st.integers(0, n))  # ops from here on are random: no cache (nor
    # where the plan cannot hold one)
    ops = []
    for i in range(n):
        ops.append(_op(f"op{i}", draw(st.floats(0, 2e-3)), draw(st.floats(0, 1e6)),
                       cut=draw(st.booleans()), cache=i < random_from and draw(st.booleans()),
                       epoch_bytes=draw(st.one_of(st.none(), st.floats(0, 1e9)))))
    return ops


resources = st.builds(Resources, local_cores=st.sampled_from([1.0, 2.0, 8.0]),
                      demand=st.one_of(st.just(math.inf), st.floats(1.0, 1e5)),
                      max_workers=st.integers(0, 16), worker_cores=st.sampled_from([1.0, 2.0]),
                      cache_bytes=st.sampled_from([0.0, 1e8, 1e10]))


def _work(chain, cache):
    work = [op.sec for op in chain]
    if cache is not None:
        work[:cache + 1] = [0.0] * (cache + 1)
        work[cache] = cedar._read_back(chain[cache])
    return work


def _rate(chain, work, res, cut, workers):
    """The model's elements per second, written out on its own."""
    if cut is None:
        return math.inf if sum(work) <= 0 else res.local_cores / sum(work)
    receive = (res.recv_sec_per_element * chain[cut].outputs
               + res.recv_sec_per_byte * chain[cut].bytes_out)
    tail = sum(work[cut + 1:]) + receive
    prefix = sum(work[:cut + 1])
    local = math.inf if tail <= 0 else res.local_cores / tail
    remote = math.inf if prefix <= 0 else workers * res.worker_cores / prefix
    return min(local, remote)


@settings(max_examples=400, deadline=None)
@given(chains(), resources)
def test_the_plan_meets_the_demand_with_the_fewest_workers_or_makes_the_most(chain, res):
    d = cedar.decide(chain, res)
    work = _work(chain, d.cache)
    demand = res.demand * cedar.HEADROOM
    assert d.rate == pytest.approx(_rate(chain, work, res, d.cut, d.workers))
    plans = [(None, 0)] + [(c, w) for c, op in enumerate(chain) if op.cut and (
        d.cache is None or c < d.cache) for w in range(1, res.max_workers + 1)]
    meeting = [(c, w) for c, w in plans if _rate(chain, work, res, c, w) >= demand]
    if meeting:
        fewest = min(w for _, w in meeting)
        assert d.workers == fewest and d.rate >= demand, (d, fewest)
        if fewest == 0:
            assert d.cut is None
    else:
        best = max(_rate(chain, work, res, c, w) for c, w in plans)
        # Within the 1% the planner leaves for the fewest workers, or local where remote
        # gains too little to be worth a job.
        assert d.rate >= 0.99 * best or (
            d.cut is None and best < d.local_rate * cedar._REMOTE_GAIN), (d, best)
    assert d.cut is None or (chain[d.cut].cut and 1 <= d.workers <= res.max_workers)
    assert d.cut is None or d.cache is None or d.cut < d.cache  # no cache on the workers
    assert (d.cut is None) == (d.workers == 0)


@settings(max_examples=300, deadline=None)
@given(chains(), resources)
def test_a_cache_is_below_every_random_op_fits_and_saves_work(chain, res):
    d = cedar.decide(chain, res)
    if d.cache is None:
        return
    op = chain[d.cache]
    assert op.cache
    assert op.epoch_bytes is not None and op.epoch_bytes <= res.cache_bytes
    saved = sum(o.sec for o in chain[:d.cache + 1]) - cedar._read_back(op)
    assert saved >= cedar._CACHE_MIN_SAVING * sum(o.sec for o in chain) and (
        saved >= cedar._CACHE_MIN_SEC)
    most = 0.0
    for i, other in enumerate(chain):  # no other place saves more, nor alike higher up
        if other.cache and other.epoch_bytes is not None and (
                other.epoch_bytes <= res.cache_bytes):
            theirs = sum(o.sec for o in chain[:i + 1]) - cedar._read_back(other)
            most = max(most, theirs)
            assert theirs <= saved / (1 - cedar._CACHE_TIE) + 1e-15
            assert i <= d.cache or theirs < most * (1 - cedar._CACHE_TIE) + 1e-15 or (
                theirs <= 0.0), (i, theirs, saved)


def test_of_places_that_save_alike_the_cache_goes_highest():
    # A deterministic pipeline: after the batch saves what after the map does, and the
    # batch's stacking runs no more.
    chain = [_op("read", 1e-5, 100, cache=True, epoch_bytes=1e4),
             _op("embed", 1e-3, 6e4, cache=True, epoch_bytes=6e6),
             _op("batch", 1e-5, 6e4, cache=True, epoch_bytes=6e6),
             _op("prefetch", 0.0, 6e4, cache=True, epoch_bytes=6e6)]
    d = cedar.decide(chain, Resources(local_cores=2, cache_bytes=1e9))
    assert chain[d.cache].name == "prefetch", d.reasons


def test_local_capacity_that_meets_the_demand_uses_no_service():
    chain = [_op("read", 1e-4), _op("decode", 1e-3)]
    d = cedar.decide(chain, Resources(local_cores=2, demand=1000, max_workers=8))
    assert (d.cut, d.workers) == (None, 0)
    assert "meets the demand 1,000/s" in d.reasons[1]


def test_demand_past_local_capacity_takes_the_fewest_workers_at_the_cheapest_cut():
    # Cedar's CV: all but the cheap tail remote; 1.1 x 5,000/s at 1 ms a worker: 6.
    chain = [_op("read", 0.0, 1e5), _op("decode", 1e-3, 6e5), _op("normalize", 1e-5, 6e5)]
    d = cedar.decide(chain, Resources(local_cores=2, demand=5000, max_workers=16,
                                      recv_sec_per_byte=0.0, recv_sec_per_element=0.0))
    assert d.workers == 6 and chain[d.cut].name in ("decode", "normalize")
    assert d.rate >= 5000 * cedar.HEADROOM


def test_an_expensive_transfer_keeps_the_work_local():
    chain = [_op("read", 1e-4, 1e9)]  # a GB an element: receiving costs a second
    d = cedar.decide(chain, Resources(local_cores=1, demand=1e5, max_workers=8))
    assert d.cut is None and "not over" in d.reasons[1]


def test_an_inflating_prefix_is_not_cached_where_it_does_not_fit():
    # ASR-like: the spectrograms are 20 times the audio, and do not fit; the audio does,
    # but reading it saves almost nothing.
    chain = [_op("read", 1e-5, 1e4, cache=True, epoch_bytes=1e8),
             _op("spectrogram", 2e-3, 2e5, cache=True, epoch_bytes=2e9),
             _op("mask", 1e-4, 2e5)]
    d = cedar.decide(chain, Resources(local_cores=2, cache_bytes=1e9))
    assert d.cache is None and "after read, saves 8.0 us of 2,110.0 us" in d.reasons[0]
    d = cedar.decide(chain, Resources(local_cores=2, cache_bytes=4e9))
    assert d.cache == 1 and "after spectrogram" in d.reasons[0]


def test_pins_fix_their_decisions_and_bad_pins_name_the_ops():
    chain = [_op("read", 1e-3, 10, cache=True, epoch_bytes=1e3), _op("flip", 1e-3, 10)]
    d = cedar.decide(chain, Resources(local_cores=1, demand=1e4, max_workers=4),
                     PlanPins(cut="read", workers=3, cache="none"))
    assert (d.cut, d.workers, d.cache) == (0, 3, None)
    assert "pinned" in d.reasons[0] and "pinned" in d.reasons[1]
    d = cedar.decide(chain, Resources(local_cores=1, demand=1e4, max_workers=4),
                     PlanPins(cut="local"))
    assert (d.cut, d.workers) == (None, 0)
    with pytest.raises(ValueError, match="no op of the plan is named so; the ops: read, flip"):
        cedar.decide(chain, Resources(local_cores=1), PlanPins(cut="decode"))
    with pytest.raises(ValueError, match="no cache can go there: a random op"):
        cedar.decide(chain, Resources(local_cores=1), PlanPins(cache="flip"))
    not_cuttable = [_op("read", 1e-3, cut=False)]
    with pytest.raises(ValueError, match="cannot run read"):
        cedar.decide(not_cuttable, Resources(local_cores=1, max_workers=2), PlanPins(cut="read"))


@pytest.mark.parametrize("kwargs, match", [
    ({"local_cores": 0}, "cores must be > 0"), ({"local_cores": 1, "demand": 0}, "demand"),
    ({"local_cores": 1, "max_workers": -1}, "max_workers")])
def test_bad_resources(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Resources(**kwargs)
