"""The device-prefetch benchmark's three ways of feeding the step run (tiny sizes, CPU)."""
import pytest

from benchmarks import device_prefetch

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow


def test_measure_runs_every_way_and_reports_ratios(monkeypatch):
    for name, value in (("BATCH", 8), ("PIXELS", 48), ("HIDDEN", 16), ("LAYERS", 2),
                        ("TILE", 2)):
        monkeypatch.setattr(device_prefetch, name, value)
    result = device_prefetch.measure(steps=3, warmup=1)
    for mode in ("blocking", "async"):
        row = result[mode]
        assert row["ideal_ms"] > 0 and row["prefetch2_ms"] > 0 and row["prefetch0_ms"] > 0
        assert row["prefetch2_vs_ideal"] == row["prefetch2_ms"] / row["ideal_ms"]
    assert result["batch_mb"] == 8 * 48 / 1e6
