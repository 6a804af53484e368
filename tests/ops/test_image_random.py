"""The counter-based draws of the image kernels (``jdata.ops._image_random``)."""

import collections
import itertools

import numpy as np
import pytest

from jdata.ops import _image_random as draws

KEYS = [np.array([i, 7 * i + 3], np.uint32) for i in range(4000)]


def test_the_same_key_and_stream_give_the_same_draws_and_others_differ():
    key = np.array([1, 2], np.uint32)
    assert draws.uniforms(key, 5) == draws.uniforms(key, 5)
    assert draws.uniforms(key, 3) == draws.uniforms(key, 5)[:3]  # a prefix: counters
    assert draws.uniforms(key, 5, stream=1) != draws.uniforms(key, 5)
    assert draws.uniforms(np.array([1, 3], np.uint32), 5) != draws.uniforms(key, 5)


def test_uniforms_are_uniform_and_uncorrelated_over_keys():
    values = np.array([draws.uniforms(k, 2) for k in KEYS])
    assert ((0 <= values) & (values < 1)).all()
    # Moments of U[0, 1): mean 1/2, variance 1/12; 4000 draws: 6 standard errors.
    assert abs(values.mean() - 0.5) < 6 * np.sqrt(1 / 12 / values.size)
    assert abs(values.var() - 1 / 12) < 0.01
    counts, _ = np.histogram(values[:, 0], bins=10, range=(0, 1))
    chi2 = ((counts - 400) ** 2 / 400).sum()
    assert chi2 < 33.7  # chi-square, 9 degrees of freedom, p = 1e-4
    assert abs(np.corrcoef(values[:, 0], values[:, 1])[0, 1]) < 0.08


def test_below_covers_its_range_evenly():
    counts = collections.Counter(draws.below(draws.words(k, 1)[0], 7) for k in KEYS)
    assert sorted(counts) == list(range(7))
    assert min(counts.values()) > 4000 / 7 * 0.8


def test_permutations_are_permutations_and_all_orders_occur():
    seen = collections.Counter(tuple(draws.permutation(draws.words(k, 1)[0], 4)) for k in KEYS)
    assert set(seen) == set(itertools.permutations(range(4)))
    assert min(seen.values()) > 4000 / 24 * 0.6


@pytest.mark.parametrize("key", [np.zeros(3, np.uint32), np.zeros((), np.uint32)])
def test_a_key_that_is_not_a_raw_pair_is_refused(key):
    with pytest.raises(TypeError, match=r"expected a raw uint32\[2\] key"):
        draws.uniforms(key, 1)


def test_a_permutation_size_out_of_range_is_refused():
    with pytest.raises(ValueError, match="size=13 must be in 1..12"):
        draws.permutation(1, 13)


def test_split_key_gives_distinct_reproducible_raw_keys():
    from jdata.ops import image

    keys = image.split_key(np.array([3, 4], np.uint32), 5)
    assert keys.shape == (5, 2) and keys.dtype == np.uint32
    assert len({tuple(k) for k in keys.tolist()}) == 5
    assert (image.split_key(np.array([3, 4], np.uint32), 5) == keys).all()
    assert (image.split_key(np.array([3, 4], np.uint32), 2) == keys[:2]).all()
    crop = image.random_crop(2, 2)
    x = np.arange(10 * 10, dtype=np.uint8).reshape(10, 10)
    windows = {crop(x, k)[0, 0] for k in image.split_key(np.array([0, 1], np.uint32), 40)}
    assert len(windows) > 10  # the split keys drive a kernel's draws apart
    with pytest.raises(ValueError, match="num"):
        image.split_key(np.array([3, 4], np.uint32), 0)
