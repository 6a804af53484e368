"""tf.image's saturation and hue kernels, through OpenCV's float32 RGB <-> HSV conversions.

tf converts each pixel to HSV, scales the saturation (clipped to [0, 1]) or
turns the hue (wrapped), and converts back. Here OpenCV's ``cvtColor``
converts blocks of a batch's rows (SIMD, the GIL released; a block stays in
cache), and OpenCV's ``transform`` adjusts the S and H planes of a block of
one image (NumPy, of a block of several small ones, each row with its
image's factor): three or four passes over each block, no Python per pixel. On ``[0, 1]`` images the
results are within 3e-6 of tf's (OpenCV divides by ``v + FLT_EPSILON`` for
the saturation, and rounds otherwise); a ``uint8`` image takes tf's float
route, so it is within one level of tf's (a float32 rounding can cross a
truncation's boundary; none does on the test fixtures).
Float images outside ``[0, 1]`` are not clipped, as tf does not, but there
the two conversions' HSV differ (tf's saturation is 0 where max < 0).
"""

from __future__ import annotations

import numpy as np

from jdata.ops._image_color import BLOCK_PIXELS, clip_unit, to_float, to_uint8
from jdata.ops._image_udfs import cv2


def _through_hsv(x: np.ndarray, factors: np.ndarray | None = None,
                 turns: np.ndarray | None = None, out: np.ndarray | None = None,
                 clip: bool = False) -> np.ndarray:
    """The RGB batch view ``x`` through HSV, each image's saturation times its ``factors``
    value (clipped to 1) and its hue turned by its ``turns`` value (degrees), and back, in
    ``x``'s dtype (tf's float route for ``uint8``), into ``out`` if given (it may be
    ``x``); ``clip``: float results clipped to [0, 1] (in cache, for color_jitter)."""
    n, height, width, _ = x.shape
    rows = x.reshape(n * height, width, 3)
    out = np.empty(x.shape, x.dtype) if out is None else out
    out_rows = out.reshape(rows.shape)
    step = max(1, BLOCK_PIXELS // width)
    factors = np.ones(n, np.float32) if factors is None else np.asarray(factors, np.float32)
    turns = np.zeros(n, np.float32) if turns is None else np.asarray(turns, np.float32)
    for top in range(0, n * height, step):
        block = rows[top:top + step]
        block = to_float(block) if x.dtype == np.uint8 else np.ascontiguousarray(block)
        hsv = cv2().cvtColor(block, cv2().COLOR_RGB2HSV)
        first, last = top // height, (top + len(block) - 1) // height
        if first == last:  # rows of one image: one factor, one turn
            _adjust(hsv, float(factors[first]), float(turns[first]))
        else:  # a block of several small images
            images = np.arange(top, top + len(block)) // height
            _adjust_rows(hsv, factors[images, None], turns[images, None])
        if x.dtype == np.uint8:
            out_rows[top:top + step] = to_uint8(cv2().cvtColor(hsv, cv2().COLOR_HSV2RGB))
            continue
        cv2().cvtColor(hsv, cv2().COLOR_HSV2RGB, dst=out_rows[top:top + step])
        if clip:
            clip_unit(out_rows[top:top + step])
    return out


# OpenCV's per-channel bound for ``min``: the saturation's 1, the hue and value unbounded.
_SATURATION_BOUND = (np.inf, 1.0, np.inf, np.inf)


def _adjust(hsv: np.ndarray, factor: float, turn: float) -> None:
    """Saturation times ``factor`` (clipped to 1), hue plus ``turn``, in one SIMD pass of
    OpenCV's ``transform`` (twice as fast as NumPy's passes over the strided planes; the
    same floats: the other terms are zeros and ones)."""
    matrix = np.array([[1, 0, 0, turn], [0, factor, 0, 0], [0, 0, 1, 0]], np.float32)
    cv2().transform(hsv, matrix, dst=hsv)
    if factor > 1:  # OpenCV's saturation is never negative
        cv2().min(hsv, _SATURATION_BOUND, dst=hsv)


def _adjust_rows(hsv: np.ndarray, factors: np.ndarray, turns: np.ndarray) -> None:
    """``_adjust`` with a factor and a turn for each row, ``(rows, 1)``."""
    s = hsv[..., 1]
    s *= factors
    if (factors > 1).any():
        np.minimum(s, np.float32(1), out=s)
    hsv[..., 0] += turns


def _degrees(deltas: np.ndarray) -> np.ndarray:
    # OpenCV's HSV -> RGB wraps hues of [360, 720) but not negative ones: turn forward.
    return np.mod(deltas, 1.0) * 360


def saturation(x: np.ndarray, factors: np.ndarray, **into) -> np.ndarray:
    """tf.image.adjust_saturation, one factor per image of the RGB batch view ``x``
    (``into``: ``_through_hsv``'s ``out`` and ``clip``)."""
    return _through_hsv(x, factors=factors, **into)


def hue(x: np.ndarray, deltas: np.ndarray, **into) -> np.ndarray:
    """tf.image.adjust_hue, one delta (in turns, [-1, 1]) per image of the RGB batch view."""
    return _through_hsv(x, turns=_degrees(deltas), **into)


def saturation_hue(x: np.ndarray, factors: np.ndarray, deltas: np.ndarray,
                   **into) -> np.ndarray:
    """``adjust_saturation`` then ``adjust_hue`` in one round trip through HSV (the hue
    turn keeps the saturation, so this is both, without rounding to RGB between them)."""
    return _through_hsv(x, factors=factors, turns=_degrees(deltas), **into)
