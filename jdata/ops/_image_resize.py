"""Resampling kernels of ``jdata.ops.image.resize``: tf.image.resize's four methods.

Each method reproduces tf.image.resize (TF 2, ``half_pixel_centers``) on
``float32`` and ``uint8`` images, ``(H, W)``, ``(H, W, C)`` or a batch
``(N, H, W, C)``. ``uint8`` in gives ``uint8`` out, rounded half to even
and saturated (tf returns ``float32`` unrounded); ``float32`` out is not
clipped (bicubic overshoots, as tf's). Measured against TF 2.21 on random
images up to 1000x700 (``tests/ops/test_image_geometry.py`` holds small
fixtures, and checks ``area`` and antialiased ``bicubic`` against their
formulas): ``float32`` (in [0, 1]) within 1e-4 of tf's (float32 sums in
another order, OpenCV's bilinear weights in float32: 6.5e-5 at most seen),
``uint8`` within 1 level of tf's output rounded:

- ``bilinear``: OpenCV's ``INTER_LINEAR`` (the same taps); ``uint8`` in
  OpenCV's fixed point (13% of the pixels a level off). ``antialias=True``:
  ``uint8`` through PIL (fixed point, 5-20% a level off), ``float32`` through
  the band resampler below.
- ``bicubic``: Keys' cubic with ``a = -0.5`` (OpenCV's ``INTER_CUBIC`` uses
  -0.75, so it is not used), taps outside the image dropped and the weights
  renormalized, and without antialiasing the tap phase rounded to 1/1024 as
  tf's table does (``uint8``: under 0.1% of the pixels a level off).
  ``antialias=True`` widens the kernel by the shrink factor (tf's
  ``scale_and_translate`` with ``keyscubic``).
- ``nearest``: the source index ``floor((i + 0.5) * in / out)`` computed in
  ``float32`` as tf does (so ``11.5 * 14/23`` is 6, not 7): exact.
- ``area``: each output pixel the mean of its box, pixels cut by its edges
  weighted by the part inside: the band resampler with those weights
  (OpenCV's ``INTER_AREA`` is tf's only where both axes shrink or both grow,
  and even there takes the wrong pixel where a box edge falls on a pixel
  edge: 203 rows grown to 290, output row 90 is input row 63 alone).

``antialias`` does nothing for ``nearest`` and ``area``, as in tf.

The band resampler: a separable resize is a banded matrix per axis, kept
as a sparse (CSR) matrix of its taps, so each pass is one sparse-dense
product (SciPy's, which releases the GIL) that touches only the taps: every
output row the weighted sum of its few input rows, in tap order, in
``float32`` as tf sums. The width pass is the same on the transposed image.
Matrices are cached per ``(size in, size out, kernel)``.
"""

from __future__ import annotations

import functools

import numpy as np

from jdata._extras import require


def cv2():
    return require("cv2", "jdata.ops.image.resize")


def pil():
    return require("PIL.Image", "jdata.ops.image.resize")


def sparse():
    return require("scipy.sparse", "jdata.ops.image.resize")

METHODS = ("bilinear", "bicubic", "nearest", "area")
_TABLE = 1024  # tf's resize_bicubic rounds the tap phase to 1/1024


def _keys(t: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel with a = -0.5 (tf's ``keyscubic``)."""
    t = np.abs(t)
    near = (1.5 * t - 2.5) * t * t + 1
    far = ((-0.5 * t + 2.5) * t - 4) * t + 2
    return np.where(t < 1, near, np.where(t < 2, far, 0.0))


def _triangle(t: np.ndarray) -> np.ndarray:
    return np.maximum(0.0, 1 - np.abs(t))


def _box_taps(n_in: int, n_out: int):
    """tf's resize_area: output ``i`` averages input ``[i * s, (i + 1) * s)``, ``s = in / out``,
    the pixels its edges cut weighted by the part inside."""
    scale = n_in / n_out
    low = np.arange(n_out) * scale
    index = np.floor(low)[:, None].astype(np.int64) + np.arange(int(np.ceil(scale)) + 1)
    inside = np.minimum(index + 1, low[:, None] + scale) - np.maximum(index, low[:, None])
    return np.clip(index, 0, n_in - 1), np.where(index < n_in, np.maximum(inside, 0), 0) / scale


def _weights(n_in: int, n_out: int, kernel: str, antialias: bool):
    """``(index, weight)``, both ``(n_out, taps)``: tf's sample positions and weights."""
    if kernel == "area":
        return _box_taps(n_in, n_out)
    radius, fn = (2.0, _keys) if kernel == "bicubic" else (1.0, _triangle)
    scale = np.float32(n_in) / np.float32(n_out)
    stretch = max(float(scale), 1.0) if antialias else 1.0
    # tf computes the position in float32: (i + 0.5) * scale - 0.5.
    centers = ((np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale
               - np.float32(0.5)).astype(np.float64)
    if kernel == "bicubic" and not antialias:
        floor = np.floor(centers)
        phase = np.rint((centers - floor).astype(np.float32) * np.float32(_TABLE)) / _TABLE
        centers = floor + phase
    first = np.floor(centers - radius * stretch) + 1
    count = int(np.ceil(2 * radius * stretch)) + 1
    index = first[:, None].astype(np.int64) + np.arange(count)
    weight = fn((index - centers[:, None]) / stretch)
    weight[(index < 0) | (index >= n_in)] = 0  # outside the image: dropped, then renormalized
    weight /= weight.sum(axis=1, keepdims=True)
    return np.clip(index, 0, n_in - 1), weight


def _matrix(index: np.ndarray, weight: np.ndarray, n_in: int):
    """The ``(n_out, n_in)`` resampling matrix, as ``float32`` CSR: the taps that weigh."""
    # A row's taps inside the image are distinct; those outside (clipped onto the edge
    # pixel) weigh 0 and are left out, so no two entries of a row share a column.
    weighs = weight != 0
    rows = np.broadcast_to(np.arange(len(index))[:, None], index.shape)
    return sparse().csr_array((weight[weighs].astype(np.float32),
                               (rows[weighs], index[weighs])), shape=(len(index), n_in))


# Random crops resize from many sizes: one entry per (input size, output size) pair.
@functools.lru_cache(maxsize=1024)
def _axis(n_in: int, n_out: int, kernel: str, antialias: bool):
    return _matrix(*_weights(n_in, n_out, kernel, antialias), n_in)


def _transposed(x: np.ndarray) -> np.ndarray:
    return cv2().transpose(x) if x.shape[2] <= 4 else np.ascontiguousarray(x.transpose(1, 0, 2))


def _separable(x: np.ndarray, row_matrix, col_matrix) -> np.ndarray:
    """``x`` (H, W, C) float32 resampled by the band resampler: the rows, then the columns
    (on the transposed image); ``None`` leaves that axis as it is."""
    rows, cols, channels = x.shape
    if row_matrix is not None:
        rows = row_matrix.shape[0]
        x = (row_matrix @ x.reshape(x.shape[0], -1)).reshape(rows, cols, channels)
    if col_matrix is not None:
        flipped = _transposed(np.ascontiguousarray(x))
        cols = col_matrix.shape[0]
        x = _transposed((col_matrix @ flipped.reshape(flipped.shape[0], -1))
                        .reshape(cols, rows, channels))
    return x.reshape(rows, cols, channels)


def _resampled(x: np.ndarray, height: int, width: int, kernel: str, antialias: bool):
    rows, cols = x.shape[:2]
    return _separable(x.astype(np.float32, copy=False),
                      _axis(rows, height, kernel, antialias) if rows != height else None,
                      _axis(cols, width, kernel, antialias) if cols != width else None)


def _nearest_index(n_in: int, n_out: int) -> np.ndarray:
    scale = np.float32(n_in) / np.float32(n_out)
    position = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale
    return np.minimum(np.floor(position).astype(np.int64), n_in - 1)


def _opencv(x: np.ndarray, height: int, width: int, flag: int) -> np.ndarray:
    if x.shape[2] > 4:  # OpenCV takes at most 4 channels
        return np.stack([_opencv(x[..., c:c + 1], height, width, flag)[..., 0]
                         for c in range(x.shape[2])], axis=-1)
    out = cv2().resize(x, (width, height), interpolation=flag)
    return out.reshape(height, width, x.shape[2])  # OpenCV drops a last axis of 1


def _to_uint8(x: np.ndarray) -> np.ndarray:
    """Rounded half to even and saturated (OpenCV's conversion: 8x NumPy's rint and clip)."""
    rows = np.ascontiguousarray(x).reshape(x.shape[0], -1)
    return cv2().add(rows, 0.0, dtype=cv2().CV_8U).reshape(x.shape)


def resize_image(x: np.ndarray, height: int, width: int, method: str,
                 antialias: bool) -> np.ndarray:
    """One ``(H, W, C)`` ``uint8`` or ``float32`` image resized to ``height x width``."""
    if method == "nearest":
        rows, cols = _nearest_index(x.shape[0], height), _nearest_index(x.shape[1], width)
        return x.take(rows, axis=0).take(cols, axis=1)  # twice as fast as x[rows][:, cols]
    if method == "bilinear" and not antialias:
        return _opencv(x, height, width, cv2().INTER_LINEAR)
    if method == "bilinear" and x.dtype == np.uint8:
        return _pil_triangle(x, height, width)
    out = _resampled(x, height, width, method, antialias)
    return _to_uint8(out) if x.dtype == np.uint8 else out


def _pil_triangle(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """PIL's antialiased bilinear on ``uint8``: tf's ``triangle`` kernel, in fixed point."""
    Image = pil()
    if x.shape[2] == 3:
        return np.asarray(Image.fromarray(x).resize((width, height), Image.Resampling.BILINEAR))
    planes = [np.asarray(Image.fromarray(np.ascontiguousarray(x[..., c])).resize(
        (width, height), Image.Resampling.BILINEAR)) for c in range(x.shape[2])]
    return np.stack(planes, axis=-1)
