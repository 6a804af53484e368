"""The feed benchmark's measurement, run on jdata only (the peers are bench extras)."""

import time

import pytest

from benchmarks import feed, nlp

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow

_SLOW_BATCH_SEC = 0.1  # far longer than the model's step, so the loop mostly waits


def _slow(batch):
    time.sleep(_SLOW_BATCH_SEC)
    return batch


def test_jdata_feeds_the_step_and_reports_a_wait_fraction():
    data = feed.prepare(0.01)
    result = feed.measure(feed.SYSTEMS["jdata"], data)
    assert 0.0 <= result.wait_fraction < 1.0
    assert result.steps_per_sec > 0 and result.alone_batches_per_sec > 0


def test_a_pipeline_slower_than_the_step_is_mostly_wait():
    data = feed.prepare(0.01)
    result = feed.measure(
        lambda d: nlp.jdata_pipeline((d.texts, d.vocab)).map(_slow), data)
    assert result.wait_fraction > 0.5
    assert result.alone_batches_per_sec < 1 / _SLOW_BATCH_SEC
