"""Color kernels of ``jdata.ops.image``: tf.image's dtype conversion, brightness, contrast,
grayscale (saturation and hue are in ``_image_hsv``, color_jitter in ``_image_jitter``).

Every kernel takes an image ``(H, W[, C])`` or a batch ``(N, H, W, C)``,
``uint8`` or ``float32``, and returns the input's shape (grayscale: one
channel, or three kept) and dtype. On ``uint8``, tf.image converts to
float (``x * float32(1 / 255)``), computes, and converts back as
``convert_image_dtype(saturate=True)``: ``trunc(clip(y * 255.5, 0, 255))``;
these kernels give its pixels:

- ``adjust_brightness`` (``x + delta``): a 256-entry table per image, built
  with tf's float32 arithmetic: the same pixels as tf.
- ``adjust_contrast`` (``(x - mean) * factor + mean``, the mean per image and
  channel): on ``uint8`` a table per image and channel: within one level of
  tf's (its float32 mean is a sum in another order), on ``float32`` within
  1e-6. Float images are not clipped (tf does not clip them).
- ``rgb_to_grayscale``: tf's weights (0.2989, 0.5870, 0.1140) in one OpenCV
  ``transform`` pass; ``keep_channels`` copies the gray value to all three
  channels (SimCLR's ``to_grayscale``).
- ``convert_image_dtype``: tf's: ints to floats times ``1 / max``, floats to
  ints times ``max + 0.5`` truncated (clipped first with ``saturate``;
  without, out-of-range values wrap as NumPy's cast does, where tf's C++ cast
  is undefined), ints to ints by a power-of-two shift (``uint8`` 255 is
  ``uint16`` 65280, as tf's).

Differences from tf.image: a random kernel on a batch draws for each image
(tf.image draws once per call, for the whole batch).
"""

from __future__ import annotations

import numpy as np

from jdata.ops import _image_random as draws
from jdata.ops._image_udfs import cv2

# tf's uint8 -> float32 scale (a float32 product, not a division) and float -> uint8 one.
TO_FLOAT = np.float32(1 / 255)
TO_UINT8 = np.float32(255.5)
GRAY_WEIGHTS = (0.2989, 0.5870, 0.1140)
_DTYPES = {np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.float32), np.dtype(np.float64)}
_LEVELS = np.arange(256, dtype=np.float32) * TO_FLOAT
# Pixels a blocked kernel takes at a time: a block's arrays stay in the core's cache (a whole
# 500x375 float image's do not; in blocks the HSV round trip is about twice as fast).
BLOCK_PIXELS = 32768


def batch_view(image, op: str, channels: int | None = None) -> np.ndarray:
    """``image`` as an ``(N, H, W, C)`` ``uint8`` or ``float32`` view, checked."""
    x = np.asarray(image)
    if x.dtype not in (np.uint8, np.float32):
        raise TypeError(f"{op}: expected a uint8 or float32 image, got dtype {x.dtype}; "
                        "convert it first, e.g. with image.convert_image_dtype(np.float32)")
    if x.ndim not in (2, 3, 4) or 0 in x.shape:
        raise ValueError(f"{op}: expected an image (height, width[, channels]) or a batch "
                         f"(n, height, width, channels), got shape {x.shape}")
    view = x.reshape(1, *x.shape, 1) if x.ndim == 2 else x.reshape(-1, *x.shape[-3:])
    if channels is not None and view.shape[-1] != channels:
        raise ValueError(f"{op}: expected {channels} (RGB) channels, got shape {x.shape}")
    return view


def per_image(key, count: int, values: int, stream: int) -> np.ndarray:
    """``(count, values)`` uniforms in ``[0, 1)``: image ``i`` of a batch draws from its own
    stream of ``key`` (``stream`` tells the color ops apart, should they be fused)."""
    return np.array([draws.uniforms(key, values, (i << 4) | stream) for i in range(count)])


def to_uint8(y: np.ndarray) -> np.ndarray:
    """tf's ``convert_image_dtype(y, uint8, saturate=True)`` of a ``float32`` array, in place."""
    np.multiply(y, TO_UINT8, out=y)
    np.clip(y, np.float32(0), np.float32(255), out=y)  # float32 bounds: twice as fast
    return y.astype(np.uint8)


def clip_unit(y: np.ndarray) -> np.ndarray:
    """``y`` clipped to ``[0, 1]`` in place."""
    return np.clip(y, np.float32(0), np.float32(1), out=y)


def to_float(x: np.ndarray) -> np.ndarray:
    """tf's ``convert_image_dtype(x, float32)`` of a ``uint8`` array."""
    return np.multiply(x, TO_FLOAT, dtype=np.float32)


def convert(x, dtype: np.dtype, saturate: bool) -> np.ndarray:
    """tf.image.convert_image_dtype (see the module docs)."""
    x = np.asarray(x)
    if x.dtype not in _DTYPES:
        raise TypeError(f"convert_image_dtype: expected a uint8, uint16, float32 or float64 "
                        f"image, got dtype {x.dtype}")
    if x.dtype == dtype:
        return x
    in_int, out_int = x.dtype.kind == "u", dtype.kind == "u"
    if in_int and out_int:
        ratio = (int(np.iinfo(x.dtype).max) + 1) // (int(np.iinfo(dtype).max) + 1)
        if ratio:
            return (x // ratio).astype(dtype)
        ratio = (int(np.iinfo(dtype).max) + 1) // (int(np.iinfo(x.dtype).max) + 1)
        return np.multiply(x, ratio, dtype=dtype)
    if in_int:
        return np.multiply(x, dtype.type(1 / np.iinfo(x.dtype).max), dtype=dtype)
    if not out_int:
        return x.astype(dtype)
    top = np.iinfo(dtype).max
    scaled = np.multiply(x, x.dtype.type(top + 0.5))
    if saturate:
        np.clip(scaled, 0, top, out=scaled)
    with np.errstate(invalid="ignore"):  # out of range without saturate: tf's is undefined
        return scaled.astype(np.int64).astype(dtype) if not saturate else scaled.astype(dtype)


def brightness(x: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """``x + delta``, one delta per image of the batch view ``x``."""
    if x.dtype == np.float32:
        return np.add(x, deltas.astype(np.float32).reshape(-1, 1, 1, 1))
    out = np.empty_like(x)
    for i, delta in enumerate(deltas):
        table = to_uint8(_LEVELS + np.float32(delta))
        out[i] = cv2().LUT(x[i].reshape(x.shape[1], -1), table).reshape(x.shape[1:])
    return out


def channel_means(image: np.ndarray) -> np.ndarray:
    """The mean of each channel of one ``(H, W, C)`` image, in float64 (as ``float32``
    values, what tf averages, for a ``uint8`` image)."""
    if image.shape[-1] <= 4:  # OpenCV's sum, 10x faster than NumPy's over a 3-value axis
        sums = np.array(cv2().sumElems(image)[:image.shape[-1]])
    else:
        sums = image.reshape(-1, image.shape[-1]).sum(axis=0, dtype=np.float64)
    means = sums / (image.shape[0] * image.shape[1])
    return means * np.float64(TO_FLOAT) if image.dtype == np.uint8 else means


def contrast_one(image: np.ndarray, factor: float, out: np.ndarray) -> None:
    """``(x - mean) * factor + mean`` of one ``(H, W, C)`` image into ``out``."""
    means = channel_means(image).astype(np.float32)
    factor = np.float32(factor)
    channels = image.shape[-1]
    if image.dtype == np.uint8:
        tables = to_uint8((_LEVELS[:, None] - means) * factor + means)  # (256, C), tf's order
        if channels == 1:
            out[...] = cv2().LUT(image, tables[:, 0]).reshape(image.shape)
        elif channels <= 4:
            out[...] = cv2().LUT(image, np.ascontiguousarray(tables).reshape(256, 1, channels))
        else:
            out[...] = tables[image, np.arange(channels)]
        return
    if channels <= 4:  # one pass: x * factor + mean * (1 - factor)
        matrix = np.zeros((channels, channels + 1), np.float32)
        matrix[:, :channels] = np.eye(channels) * factor
        matrix[:, channels] = means - means * factor
        if channels == 1:  # OpenCV's output drops a last axis of 1
            out[...] = cv2().transform(image, matrix).reshape(image.shape)
        else:
            cv2().transform(image, matrix, dst=out)
        return
    np.subtract(image, means, out=out)
    out *= factor
    out += means


def affine_clipped(src: np.ndarray, dst: np.ndarray, scale: float,
                   offsets: np.ndarray) -> None:
    """``dst = clip(src * scale + offsets, 0, 1)`` for one contiguous ``float32`` image
    ``(H, W, C)`` (``offsets`` one per channel; ``dst`` may be ``src``), in blocks of rows
    that stay in cache: color_jitter's brightness (``x * f``, ``x + d``: the same floats as
    tf's) and contrast (``x * f + mean * (1 - f)``), each clipped as SimCLR does."""
    height, width, channels = src.shape
    matrix = np.zeros((channels, channels + 1), np.float32)
    matrix[:, :channels] = np.eye(channels) * np.float32(scale)
    matrix[:, channels] = offsets
    step = max(1, BLOCK_PIXELS // width)
    for top in range(0, height, step):
        block, out = src[top:top + step], dst[top:top + step]
        if 1 < channels <= 4:  # OpenCV's transform: one SIMD pass
            cv2().transform(block, matrix, dst=out)
        else:
            np.multiply(block, np.float32(scale), out=out)
            out += offsets.astype(np.float32)
        clip_unit(out)


def contrast(x: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """tf.image.adjust_contrast, one factor per image of the batch view ``x``."""
    out = np.empty_like(x)
    for i, factor in enumerate(factors):
        contrast_one(np.ascontiguousarray(x[i]), float(factor), out[i])
    return out


def grayscale(x: np.ndarray, keep_channels: bool) -> np.ndarray:
    """tf.image.rgb_to_grayscale of the RGB batch view ``x``; ``keep_channels``: the gray
    value in all three channels."""
    n, height, width, _ = x.shape
    flat = np.ascontiguousarray(x).reshape(n * height, width, 3)
    weights = np.array([GRAY_WEIGHTS], np.float32)
    # tf's float route for uint8: (x * (1 / 255)) . weights, times 255.5 truncated.
    gray = cv2().transform(to_float(flat) if x.dtype == np.uint8 else flat, weights)
    if x.dtype == np.uint8:
        gray = to_uint8(gray)
    if keep_channels:  # a copy to three channels: faster than three weighted sums
        return cv2().cvtColor(gray, cv2().COLOR_GRAY2RGB).reshape(n, height, width, 3)
    return gray.reshape(n, height, width, 1)
