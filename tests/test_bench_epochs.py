"""The short-epoch harness, at a tiny scale, on jdata and the plain loop (the peers are
bench extras)."""

import pytest

from benchmarks import epochs, overhead

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow


def test_each_system_runs_its_epochs_in_a_fresh_process_and_is_tabled_against_the_plain_loop():
    result = epochs.run("overhead", [epochs.PLAIN, "jdata", "no such system"], rounds=2,
                        epochs=3, scale=0.005, log=lambda line: None)
    assert set(result.samples) == {epochs.PLAIN, "jdata"}
    assert all(len(runs) == 2 for runs in result.samples.values())
    # overhead keeps 2x % 3 != 0: 666 of the 1,000 integers, in every epoch of every system.
    assert {s.items for runs in result.samples.values() for s in runs} == {666}
    assert all(len(s.epoch_sec) == 3 and min(s.epoch_sec) > 0
               for runs in result.samples.values() for s in runs)
    assert "no such system" in result.errors and "KeyError" in result.errors["no such system"]
    text = epochs.table(result)
    assert "3 epochs of 666 items" in text and "no such system" in text
    rate = result.median("jdata", "items_per_sec") / result.median(epochs.PLAIN, "items_per_sec")
    assert f"{rate:7.2f}x" in text


def test_the_plain_loop_a_generator_is_made_again_for_each_epoch():
    sample = epochs.measure(overhead, epochs.PLAIN, overhead.prepare(0.002), 4)
    assert sample.items == 266 and len(sample.epoch_sec) == 4


def test_the_figures_of_a_sample():
    sample = epochs.Sample([4.0, 1.0, 3.0, 2.0], 10)
    assert sample.first == 4.0 and sample.later_median == 2.0
    assert sample.worst_ratio == 1.5
    assert sample.items_per_sec == 4.0  # 40 items in 10 s
