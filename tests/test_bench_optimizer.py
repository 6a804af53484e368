"""The optimizer benchmark's vectorize part runs and compares real outputs."""

from benchmarks import optimizer


def test_vectorized_augmentation_matches_per_element_outputs():
    ratio, difference = optimizer.vectorize(scale=0.02, repeats=1)
    assert difference < 1e-5  # jit(vmap) equals per-element up to float rounding
    assert ratio > 0
