"""The optimizer benchmark's vectorize part runs and compares real outputs."""
import pytest

from benchmarks import optimizer

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow


def test_vectorized_augmentation_matches_per_element_outputs():
    ratio, difference = optimizer.vectorize(scale=0.02, repeats=1)
    assert difference < 1e-5  # jit(vmap) equals per-element up to float rounding
    assert ratio > 0


def test_cv_with_a_vectorized_jnp_normalize_matches_the_numpy_pipeline():
    result = optimizer.cv_vectorized(scale=0.07, repeats=1)
    assert result["difference"] < 1e-4  # the same crops, normalized by XLA instead of NumPy
    assert result["per_element"] > 0 and result["numpy"] > 0
