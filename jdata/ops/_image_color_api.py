"""``jdata.ops.image``'s color constructors (tf.image's ``adjust_*``/``random_*``,
grayscale, ``convert_image_dtype``, SimCLR's ``color_jitter``), re-exported there."""

from __future__ import annotations

from typing import Any

import numpy as np

from jdata import _validate as check
from jdata._declare import declare
from jdata.ops import _image_color_udfs as color_udfs
from jdata.ops import _image_jitter as jitter
from jdata.ops._image_types import ImageFn, RandomImageFn

__all__ = ["adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation",
           "color_jitter", "convert_image_dtype", "random_brightness", "random_contrast",
           "random_grayscale", "random_hue", "random_saturation", "rgb_to_grayscale"]

# ------------------------------------------------------------------ color (tf.image's adjust_*)
# (brightness, contrast, saturation, hue, grayscale, color_jitter, convert_image_dtype)
# Kernels in _image_color, _image_hsv and _image_jitter, whose docs say how they differ from
# tf.image's; UDF objects in _image_color_udfs. Each takes an image or a batch (N, H, W, C),
# uint8 or float32; the random ones draw for each image of a batch (tf.image: once a call).



def convert_image_dtype(dtype: Any, saturate: bool = False) -> ImageFn:
    """tf.image.convert_image_dtype to ``dtype`` (``uint8``, ``uint16``, ``float32`` or
    ``float64``; floats in ``[0, 1]``): ints to floats times ``1 / max``, floats to ints
    times ``max + 0.5`` truncated (clipped first if ``saturate``), ints to ints by a shift.

    >>> import numpy as np
    >>> from jdata.ops import image
    >>> image.convert_image_dtype(np.float32)(np.array([0, 255], np.uint8))
    array([0., 1.], dtype=float32)
    >>> image.convert_image_dtype(np.uint8)(np.array([0.5, 0.999], np.float32))  # truncated
    array([127, 255], dtype=uint8)
    """
    try:
        target = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"convert_image_dtype: dtype={dtype!r} is not a dtype; use np.uint8, "
                        "np.uint16, np.float32 or np.float64") from e
    if target not in (np.uint8, np.uint16, np.float32, np.float64):
        raise ValueError(f"convert_image_dtype: dtype={target.name} is not one of uint8, "
                         "uint16, float32, float64")
    udf = color_udfs.ConvertImageDtype(target, check.bool_arg(saturate, "saturate",
                                                               "convert_image_dtype"))
    return declare(udf, pointwise=True)


def adjust_brightness(delta: float) -> ImageFn:
    """tf.image.adjust_brightness: ``x + delta`` (``uint8``: on ``x / 255``, converted back
    with saturation; float images are not clipped)."""
    value = check.float_arg(delta, "delta", "adjust_brightness")
    return declare(color_udfs.AdjustColor("brightness", value), pointwise=True)


def adjust_contrast(contrast_factor: float) -> ImageFn:
    """tf.image.adjust_contrast: ``(x - mean) * contrast_factor + mean``, the mean of each
    channel of each image (so not pointwise)."""
    value = check.float_arg(contrast_factor, "contrast_factor", "adjust_contrast")
    return declare(color_udfs.AdjustColor("contrast", value))


def adjust_saturation(saturation_factor: float) -> ImageFn:
    """tf.image.adjust_saturation: the HSV saturation times ``saturation_factor``, clipped
    to ``[0, 1]``, on RGB images. ``saturation_factor >= 0`` (tf takes a negative one as 0:
    give 0)."""
    value = check.float_arg(saturation_factor, "saturation_factor", "adjust_saturation",
                              low=0.0)
    return declare(color_udfs.AdjustColor("saturation", value), pointwise=True)


def adjust_hue(delta: float) -> ImageFn:
    """tf.image.adjust_hue: the HSV hue turned by ``delta`` (in turns, ``[-1, 1]``), on
    RGB images.

    >>> import numpy as np
    >>> from jdata.ops import image
    >>> image.adjust_hue(1 / 3)(np.array([[[1.0, 0.0, 0.0]]], np.float32)).round(6)
    array([[[0., 1., 0.]]], dtype=float32)
    """
    value = check.float_arg(delta, "delta", "adjust_hue", low=-1.0, high=1.0)
    return declare(color_udfs.AdjustColor("hue", value), pointwise=True)


def _range(lower: float, upper: float, op: str) -> tuple[float, float]:
    low = check.float_arg(lower, "lower", op, low=0.0)
    high = check.float_arg(upper, "upper", op)
    if high <= low:
        raise ValueError(f"{op}: upper={high} must be > lower={low}")
    return low, high


def random_brightness(max_delta: float) -> RandomImageFn:
    """tf.image.random_brightness: ``adjust_brightness`` by ``U[-max_delta, max_delta)``,
    drawn for each image from the element's key (``random_map``)."""
    value = check.float_arg(max_delta, "max_delta", "random_brightness", low=0.0)
    return declare(color_udfs.RandomColor("brightness", repr(value), -value, value),
                   pointwise=True)


def random_contrast(lower: float, upper: float) -> RandomImageFn:
    """tf.image.random_contrast: ``adjust_contrast`` by ``U[lower, upper)`` per image."""
    low, high = _range(lower, upper, "random_contrast")
    return declare(color_udfs.RandomColor("contrast", f"{low!r}, {high!r}", low, high))


def random_saturation(lower: float, upper: float) -> RandomImageFn:
    """tf.image.random_saturation: ``adjust_saturation`` by ``U[lower, upper)`` per image."""
    low, high = _range(lower, upper, "random_saturation")
    return declare(color_udfs.RandomColor("saturation", f"{low!r}, {high!r}", low, high),
                   pointwise=True)


def random_hue(max_delta: float) -> RandomImageFn:
    """tf.image.random_hue: ``adjust_hue`` by ``U[-max_delta, max_delta)`` per image,
    ``max_delta`` in ``[0, 0.5]``."""
    value = check.float_arg(max_delta, "max_delta", "random_hue", low=0.0, high=0.5)
    return declare(color_udfs.RandomColor("hue", repr(value), -value, value), pointwise=True)


def rgb_to_grayscale(keep_channels: bool = False) -> ImageFn:
    """tf.image.rgb_to_grayscale: ``0.2989 R + 0.5870 G + 0.1140 B`` as one channel, or
    in all three with ``keep_channels`` (SimCLR's ``to_grayscale``)."""
    keep = check.bool_arg(keep_channels, "keep_channels", "rgb_to_grayscale")
    return declare(color_udfs.RgbToGrayscale(keep))


def random_grayscale(p: float = 0.2, keep_channels: bool = True) -> RandomImageFn:
    """``rgb_to_grayscale(keep_channels=True)`` with probability ``p`` per image (SimCLR's
    ``random_apply(to_grayscale, p)``)."""
    if not check.bool_arg(keep_channels, "keep_channels", "random_grayscale"):
        raise ValueError("random_grayscale: keep_channels=False would give 1-channel and "
                         "3-channel images at random; keep the default, or map "
                         "rgb_to_grayscale() for always-gray images")
    p = check.float_arg(p, "p", "random_grayscale", low=0.0, high=1.0)
    return declare(color_udfs.RandomGrayscale(p))


def color_jitter(brightness: float = 0.0, contrast: float = 0.0, saturation: float = 0.0,
                 hue: float = 0.0, *, random_order: bool = True,
                 brightness_mode: str = "multiplicative", p: float = 1.0) -> RandomImageFn:
    """SimCLR's color jitter with probability ``p``: brightness, contrast, saturation and
    hue by random factors, in a random order, clipping to ``[0, 1]`` after each (see
    ``jdata.ops._image_jitter``). SimCLR's strength ``s``:
    ``color_jitter(0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s, p=0.8)``.

    Args:
      brightness: factor ``U[max(0, 1 - brightness), 1 + brightness)``
        ("multiplicative", simclrv2), or delta ``U[-brightness, brightness)``
        ("additive", simclrv1, tf.image.random_brightness).
      contrast: factor ``U[1 - contrast, 1 + contrast)``, ``contrast <= 1``.
      saturation: factor ``U[1 - saturation, 1 + saturation)``, at most 1.
      hue: delta ``U[-hue, hue)``, ``hue <= 0.5``. A zero skips a transform.
      random_order: a random order per image, else the order above.
      brightness_mode: "multiplicative" or "additive".
      p: the probability that an image is jittered at all.

    >>> import jax, numpy as np, jdata
    >>> from jdata.ops import image
    >>> jitter = image.color_jitter(0.8, 0.8, 0.8, 0.2, p=0.8)
    >>> ds = jdata.from_tensors(np.full((4, 4, 3), 0.5, np.float32)).repeat(3)
    >>> [x.shape for x in ds.random_map(jitter, jax.random.key(0))]
    [(4, 4, 3), (4, 4, 3), (4, 4, 3)]
    """
    op = "color_jitter"
    strengths = (check.float_arg(brightness, "brightness", op, low=0.0),
                 check.float_arg(contrast, "contrast", op, low=0.0, high=1.0),
                 check.float_arg(saturation, "saturation", op, low=0.0, high=1.0),
                 check.float_arg(hue, "hue", op, low=0.0, high=0.5))
    if brightness_mode not in ("multiplicative", "additive"):
        raise ValueError(f"color_jitter: brightness_mode={brightness_mode!r} must be "
                         "'multiplicative' (simclrv2) or 'additive' (simclrv1)")
    udf = jitter.ColorJitter(strengths, check.bool_arg(random_order, "random_order", op),
                             brightness_mode == "multiplicative",
                             check.float_arg(p, "p", op, low=0.0, high=1.0))
    return declare(udf)
