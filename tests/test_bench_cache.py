"""benchmarks/cedar/cache.py: what its planned run reads of the planner's decision, and its
table (the runs themselves take minutes: ``python -m benchmarks.cedar.cache``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import jdata
from benchmarks.cedar import cache


def _decode(x):
    end = time.perf_counter() + 200e-6
    while time.perf_counter() < end:
        pass
    return np.full(8, x, np.float32)


def _noise(x, key):
    return x + np.random.default_rng(key).random(8, np.float32)


def test_the_planned_run_reads_the_chosen_place_and_the_places_it_chose_among():
    import jax

    ds = (jdata.range(400).map(_decode, num_parallel_calls=2)
          .random_map(_noise, jax.random.key(0), num_parallel_calls=2).batch(8)
          .with_options(jdata.Options(plan=jdata.AUTOTUNE)))
    assert len(list(ds)) == 50
    chosen, places = cache._decision(ds)
    assert places == ["range", "map(_decode)"]  # inside the fused random_map
    assert chosen == "map(_decode)"


def test_the_table_sets_the_chosen_place_against_the_best():
    def run(rate, chosen=None, places=()):
        return cache.Run([1.0, 1.0, 1.0, 100 / rate, 100 / rate], 100, chosen, list(places))

    planned = [run(190.0, "map(a)", ["map(a)", "map(b)"]), run(170.0, "map(a)"),
               run(200.0, "none")]
    table = cache.Table("w", {cache.PLANNED: planned, cache.NONE: [run(100.0)],
                              "map(a)": [run(195.0), run(150.0), run(196.0)],
                              "map(b)": [run(200.0)]}, {"map(c)": "failed (exit 1): boom"})
    assert table.chosen == "map(a)"  # in most rounds
    assert table.best() == ("map(b)", pytest.approx(200.0))
    text = "\n".join(table.lines())
    assert "median of 3 rounds" in text and "<- planner" in text.splitlines()[3]
    assert "chose map(a) (2 of 3 rounds); best map(b); planned 0.95x the best" in text
    assert "the chosen place pinned: 0.98x the best" in text
    assert "map(c)" in text and "boom" in text


def test_a_run_reads_the_epochs_after_the_cache_filled():
    run = cache.Run([5.0, 3.0, 4.0, 1.0, 2.0, 1.0], 10)
    assert run.items_per_sec == pytest.approx(10.0)  # the median of epochs 4 on
