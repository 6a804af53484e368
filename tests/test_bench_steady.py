"""The steady-state harness, at a tiny scale, on jdata and the plain loop (the peers are
bench extras)."""

import itertools

import pytest

from benchmarks import cv, nlp, overhead, steady

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow


def test_each_system_is_measured_in_a_fresh_process_and_tabled_against_the_plain_loop():
    result = steady.run("overhead", [steady.PLAIN, "jdata", "no such system"], rounds=2,
                        warmup=0.1, seconds=0.3, scale=0.05, log=lambda line: None)
    assert set(result.samples) == {steady.PLAIN, "jdata"}
    assert all(len(runs) == 2 for runs in result.samples.values())
    assert all(s.items_per_sec > 0 and 0 <= s.first_batch_sec < 60
               for runs in result.samples.values() for s in runs)
    assert "no such system" in result.errors and "KeyError" in result.errors["no such system"]
    text = steady.table(result)
    assert "x plain" in text and "no such system" in text
    assert f"{result.steady('jdata') / result.steady(steady.PLAIN):7.2f}x" in text


@pytest.mark.parametrize("module", [overhead, nlp, cv])
def test_the_streams_are_infinite_and_the_plain_loop_does_the_same_work(module):
    data = module.prepare(0.01 if module is not overhead else 0.002)
    n = module.items(data)
    plain = list(module.plain_loop(data))
    # overhead keeps 2x % 3 != 0: the x that are not multiples of 3.
    assert sum(len(b) for b in plain) == (n if module is not overhead else 266)
    ours = list(module.jdata_pipeline(data))
    assert [b.shape for b in ours] == [b.shape for b in plain]
    if module is not cv:  # cv's random crops differ: jdata draws them from its keys
        assert all((a == b).all() for a, b in zip(ours, plain))
    forever = itertools.islice(iter(module.jdata_pipeline(data, repeat=True)), 3 * len(plain))
    assert sum(len(b) for b in forever) > 2 * sum(len(b) for b in plain)
    looped = itertools.islice(module.plain_loop(data, repeat=True), 3 * len(plain))
    assert sum(len(b) for b in looped) == 3 * sum(len(b) for b in plain)


def test_forever_cycles_the_indices_without_end():
    assert list(itertools.islice(steady.Forever(3), 8)) == [0, 1, 2, 0, 1, 2, 0, 1]
