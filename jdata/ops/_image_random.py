"""Random numbers for the image kernels, drawn from an element's ``uint32[2]`` key.

A ``random_map`` UDF gets one key per element (per batch, when it maps
batches). A kernel needs a handful of numbers from it (a crop's aspect ratio,
a jitter's four factors and its order), per image of a batch. A NumPy
generator costs tens of microseconds to make; these are counter-based draws
(SplitMix64 over the key and the draw's index, a bijective mixer whose
outputs pass BigCrush) in pure Python integers: about half a microsecond each,
the same on every machine, and independent between streams: ``stream`` tells
apart the images of a batch and the parts of a fused chain.
"""

from __future__ import annotations

import numpy as np

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_UNIT = 2.0 ** -53


def _mix(z: int) -> int:
    """SplitMix64's finalizer: a bijection of 64-bit words that avalanches every bit."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def key_words(key) -> tuple[int, int]:
    """The two uniformly random 32-bit words of a raw ``uint32[2]`` key (``TypeError`` for
    anything else)."""
    words = np.asarray(key, np.uint32).reshape(-1)
    if words.shape != (2,):
        raise TypeError(f"expected a raw uint32[2] key (random_map's), got shape {words.shape}")
    return int(words[0]), int(words[1])


def seed(key) -> int:
    """The key's two 32-bit words as one 64-bit word."""
    first, second = key_words(key)
    return (first << 32) | second


def words(key, count: int, stream: int = 0) -> list[int]:
    """``count`` uniformly random 64-bit words of ``key``'s stream ``stream``."""
    base = _mix((seed(key) + _GOLDEN * (stream + 1)) & _MASK)
    return [_mix((base + _GOLDEN * (i + 1)) & _MASK) for i in range(count)]


def uniforms(key, count: int, stream: int = 0) -> list[float]:
    """``count`` floats uniform in ``[0, 1)`` (53 random bits each) of ``key``'s stream."""
    return [(w >> 11) * _UNIT for w in words(key, count, stream)]


def below(word: int, bound: int) -> int:
    """An int uniform in ``[0, bound)`` from one random 64-bit word (bias below 2**-32 for
    any ``bound`` under 2**32)."""
    return (word * bound) >> 64


def permutation(word: int, size: int) -> list[int]:
    """A random permutation of ``range(size)`` from one 64-bit word (Fisher-Yates on its
    mixed-radix digits; for ``size <= 12`` each order's probability is within 2**-32 of
    ``1 / size!``)."""
    if not 0 < size <= 12:
        raise ValueError(f"permutation: size={size} must be in 1..12")
    order = list(range(size))
    for i in range(size - 1, 0, -1):
        word, j = divmod(word, i + 1)
        order[i], order[j] = order[j], order[i]
    return order
