"""Built-in image UDFs that declare what they do, so the optimizer can reorder and fuse them.

Each function returns a ``jdata.declare``d callable for ``map`` (the random
ones for ``random_map``). Images are ``(height, width, channels)`` NumPy
arrays, ``uint8`` until ``to_float`` or ``normalize`` make them ``float32``.
The ImageNet training pipeline:

>>> import io, jax, numpy as np, jdata
>>> from PIL import Image
>>> from jdata.ops import image
>>> def jpeg(height, width):
...     buffer = io.BytesIO()
...     Image.new("RGB", (width, height), (200, 120, 40)).save(buffer, "JPEG")
...     return buffer.getvalue()
>>> crop_key, flip_key = jax.random.split(jax.random.key(0))
>>> mean, std = [124, 116, 104], [58, 57, 57]
>>> ds = (jdata.from_source([jpeg(300, 400), jpeg(600, 520), jpeg(200, 250)])
...       .map(image.decode_jpeg()).map(image.resize(short_side=256))
...       .random_map(image.random_crop(224, 224), crop_key)
...       .random_map(image.random_flip(), flip_key)
...       .map(image.normalize(mean, std)).batch(3))
>>> ds.explain().splitlines()[0]
'Plan (optimizer rules fired: decode_resize_fusion, pointwise_after_batch, inject_prefetch)'
>>> batch = next(iter(ds))
>>> batch.shape, batch.dtype
((3, 224, 224, 3), dtype('float32'))
>>> unfused = next(iter(ds.with_options(jdata.Options(optimize=False))))
>>> bool((batch == unfused).all())  # fused, the same arithmetic
True

What the optimizer does with them (``Options(optimize=False)`` turns it all
off and gives the unfused results):

- ``reorder``: the pointwise ones (``to_float``, ``normalize``) commute with
  the selections (crops, flips), so a crop runs first.
- ``decode_resize_fusion``: ``decode_jpeg`` then ``resize``, and a
  ``center_crop`` or ``random_crop`` and a ``random_flip`` after them, run as
  one UDF, with the crop windows and flips of the unfused ops (each random op
  keeps its own key stream). With the default ``antialias=False`` it does
  the unfused ops' arithmetic in one call (the same pixels) and flips with
  a contiguous copy. With ``antialias=True``, a JPEG at least twice the
  resize target is decoded at the smallest DCT scale (1/2, 1/4, 1/8: nearly
  free in libjpeg-turbo) whose picture is still at least the target, and
  only the source box of the crop is resampled: pixel values then differ
  slightly from a full decode then resize (as ``tf.io.decode_jpeg(ratio=2)``
  does: on average by about a level). Other images get the unfused ops'
  arithmetic, as with ``antialias=False``.
- ``pointwise_after_batch``: pointwise maps right before ``batch`` that grow
  the elements (``normalize`` of ``uint8`` images) run once on the stacked
  batch, so batches are stacked as ``uint8``. ``Dataset.to_global(sharding,
  normalize=(mean, std))`` goes further and normalizes on the devices.

``resize`` is bilinear with half-pixel centers, ``uint8`` in and out. With
``antialias=False`` (the default, as tf's) it is OpenCV's ``INTER_LINEAR``
resize, within 1 of ``tf.image.resize(x, size, "bilinear")`` (tf returns
``float32`` without rounding); when shrinking, it samples 2x2 pixels per
output, which aliases, as tf's does. ``antialias=True`` is PIL's resize,
within 1 of ``tf.image.resize(..., antialias=True)``: it averages over each
output pixel's footprint, and lets the fusion decode at a reduced DCT scale.
``decode_jpeg`` decodes with libjpeg-turbo through simplejpeg, with tf's
settings (the same pixels as ``tf.io.decode_jpeg(channels=3)``), and refuses
an image whose header declares more than ``MAX_PIXELS`` pixels before
decoding; ``decode_png`` and ``decode_image`` add 16-bit PNGs, GIF and BMP (the
decoding section below). The kernels need ``pip install 'jdata-jax[image]'`` (pillow,
opencv-python-headless, simplejpeg).

The UDFs are objects of ``jdata.ops._image_udfs``: picklable for worker
processes, and printed in plans as built (``resize(short_side=256)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias, TypeVar

import numpy as np

from jdata import _validate as check
from jdata._declare import Declared, declare, unwrapped
from jdata.ops import _image_color_udfs as color_udfs
from jdata.ops import _image_decode as decoding
from jdata.ops import _image_jitter as jitter
from jdata.ops import _image_udfs as udfs

__all__ = ["center_crop", "decode_jpeg", "normalize", "random_crop", "random_flip", "resize",
           "to_float"]

_C = TypeVar("_C", bound=udfs.Crop)
# An image (``(height, width[, channels])``) or a batch of them.
_Array: TypeAlias = np.ndarray[Any, Any]
# A UDF of ``map``: image -> image.
ImageFn: TypeAlias = Declared[[_Array], _Array]
# A UDF of ``random_map``: (image, the element's ``uint32[2]`` key) -> image.
RandomImageFn: TypeAlias = Declared[[_Array, _Array], _Array]


def decode_jpeg(max_pixels: int = decoding.MAX_PIXELS) -> Declared[[bytes], _Array]:
    """``bytes`` -> ``uint8`` RGB ``(height, width, 3)`` array, as
    ``tf.io.decode_jpeg(contents, channels=3)``: libjpeg-turbo through simplejpeg with
    tf's settings, the same pixels (CMYK converted as tf's). It decodes PNG (a 16-bit one scaled as tf's), GIF (the first
    frame), BMP and WebP too, as ``decode_image(np.uint8)`` (tf's decodes PNG and GIF but
    refuses BMP and animated GIFs). ``pip install 'jdata-jax[image]'``.

    Args:
      max_pixels: refuse (``ImageTooLargeError``, before decoding) an image whose
        header declares more than ``max_pixels`` pixels (default ``MAX_PIXELS``).

    A truncated, corrupt or refused image raises ``ImageDecodeError``, which
    ``map`` reports as a ``jdata.DataError`` (``ignore_errors()`` skips it).
    See the decoding section's notes.
    """
    op = "decode_jpeg"
    return declare(udfs.DecodeJpeg(check.int_arg(max_pixels, "max_pixels", op, minimum=1)))


def resize(short_side: int | None = None, size: Sequence[int] | None = None,
           antialias: bool = False) -> ImageFn:
    """Bilinear resize to ``short_side`` or to ``size``: ``uint8`` -> ``uint8``.

    Args:
      short_side: scale so that the shorter side is ``short_side`` and the
        longer keeps the aspect ratio, rounded to the nearest int (halves up).
      size: ``(height, width)`` of every output.
      antialias: when shrinking, average over each output pixel's footprint
        (as ``tf.image.resize(antialias=True)``, with PIL) rather than sample
        2x2 pixels (tf's default, with OpenCV). See the module docs.

    Exactly one of ``short_side`` and ``size`` is given. Inputs are
    ``(height, width, channels)`` or ``(height, width)`` ``uint8`` arrays.

    >>> import numpy as np
    >>> from jdata.ops import image
    >>> image.resize(short_side=4)(np.zeros((6, 9, 3), np.uint8)).shape
    (4, 6, 3)
    """
    if (short_side is None) == (size is None):
        raise ValueError(f"resize: give exactly one of short_side and size (got "
                         f"short_side={short_side!r}, size={size!r}), e.g. "
                         "resize(short_side=256) or resize(size=(224, 224))")
    pair = None
    if short_side is not None:
        short_side = check.int_arg(short_side, "short_side", "resize", minimum=1)
    elif size is not None:
        if isinstance(size, (str, bytes)) or not hasattr(size, "__len__") or len(size) != 2:
            raise TypeError(f"resize: size={size!r} must be a (height, width) pair, "
                            "e.g. size=(224, 224)")
        height, width = (check.int_arg(s, "size", "resize", minimum=1) for s in size)
        pair = (height, width)
    return declare(udfs.Resize(short_side, pair, check.bool_arg(antialias, "antialias", "resize")))


def to_float(scale: float = 1 / 255) -> ImageFn:
    """``x * scale`` as ``float32`` (pointwise)."""
    return declare(udfs.ToFloat(scale), pointwise=True)


def mean_std(mean: float | Sequence[float] | _Array, std: float | Sequence[float] | _Array,
             op: str) -> tuple[_Array, _Array]:
    """``(mean, std)`` as ``float32`` arrays of one value or one per channel, checked."""
    arrays = []
    for name, value in (("mean", mean), ("std", std)):
        try:
            array = np.asarray(value, np.float64)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{op}: {name}={value!r} must be a number or one per channel") from e
        if array.ndim > 1 or array.size == 0 or not np.isfinite(array).all():
            raise ValueError(f"{op}: {name}={value!r} must be a finite number or one per "
                             "channel, e.g. [123.7, 116.3, 103.5]")
        arrays.append(array)
    mean, std = arrays
    if (std == 0).any():
        raise ValueError(f"{op}: std={std.tolist()!r} has a zero; it divides")
    if mean.size > 1 and std.size > 1 and mean.size != std.size:
        raise ValueError(f"{op}: mean has {mean.size} channels and std {std.size}")
    return mean.astype(np.float32), std.astype(np.float32)


def normalize(mean: float | Sequence[float] | _Array,
              std: float | Sequence[float] | _Array) -> ImageFn:
    """``(x - mean) / std`` per channel, as ``float32`` (pointwise), on an image or a batch.

    ``mean`` and ``std`` are numbers or one per channel (the last axis).
    """
    return declare(udfs.Normalize(*mean_std(mean, std, "normalize")), pointwise=True)


def _crop(kind: type[_C], name: str, height: int, width: int) -> _C:
    return kind(name, check.int_arg(height, "height", name, minimum=1),
                check.int_arg(width, "width", name, minimum=1))


def center_crop(height: int, width: int) -> ImageFn:
    """The central ``height x width`` window (a selection)."""
    return declare(_crop(udfs.CenterCrop, "center_crop", height, width), selection=True)


def random_crop(height: int, width: int) -> RandomImageFn:
    """A ``height x width`` window at a place drawn from the element's key (``random_map``)."""
    return declare(_crop(udfs.RandomCrop, "random_crop", height, width), selection=True)


def random_flip() -> RandomImageFn:
    """Mirrors left-right with probability 1/2, drawn from the element's key (``random_map``):
    its first word's top bit."""
    return declare(udfs.RandomFlip(), selection=True)


def fused(inner: Any, outer: Any, outer_random: bool) -> udfs.DecodeResized | None:
    """The UDF running the map ``inner`` then ``outer`` (a ``random_map``'s if
    ``outer_random``) as one chain, where ``decode_resize_fusion`` fuses them, else
    ``None``: ``decode_jpeg`` then ``resize``, then a crop, then ``random_flip``."""
    inner, outer = unwrapped(inner), unwrapped(outer)
    if isinstance(outer, (udfs.RandomCrop, udfs.RandomFlip)) != outer_random:
        return None  # e.g. a center_crop in a random_map: it fails unfused too
    if isinstance(inner, udfs.DecodeJpeg) and isinstance(outer, udfs.Resize):
        return udfs.DecodeResized(outer, decode=inner)
    if not isinstance(inner, udfs.DecodeResized) or inner.flip:
        return None
    if isinstance(outer, udfs.Crop) and inner.crop is None:
        return udfs.DecodeResized(inner.resize, outer, decode=inner.decode)
    if isinstance(outer, udfs.RandomFlip):
        return udfs.DecodeResized(inner.resize, inner.crop, flip=True, decode=inner.decode)
    return None


# ------------------------------------------------------------------ color (tf.image's adjust_*)
# (brightness, contrast, saturation, hue, grayscale, color_jitter, convert_image_dtype)
# Kernels in _image_color, _image_hsv and _image_jitter, whose docs say how they differ from
# tf.image's; UDF objects in _image_color_udfs. Each takes an image or a batch (N, H, W, C),
# uint8 or float32; the random ones draw for each image of a batch (tf.image: once a call).

__all__ += ["adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation",
            "color_jitter", "convert_image_dtype", "random_brightness", "random_contrast",
            "random_grayscale", "random_hue", "random_saturation", "rgb_to_grayscale"]


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
    value = color_udfs.number(delta, "delta", "adjust_brightness")
    return declare(color_udfs.AdjustColor("brightness", value), pointwise=True)


def adjust_contrast(contrast_factor: float) -> ImageFn:
    """tf.image.adjust_contrast: ``(x - mean) * contrast_factor + mean``, the mean of each
    channel of each image (so not pointwise)."""
    value = color_udfs.number(contrast_factor, "contrast_factor", "adjust_contrast")
    return declare(color_udfs.AdjustColor("contrast", value))


def adjust_saturation(saturation_factor: float) -> ImageFn:
    """tf.image.adjust_saturation: the HSV saturation times ``saturation_factor``, clipped
    to ``[0, 1]``, on RGB images. ``saturation_factor >= 0`` (tf takes a negative one as 0:
    give 0)."""
    value = color_udfs.number(saturation_factor, "saturation_factor", "adjust_saturation",
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
    value = color_udfs.number(delta, "delta", "adjust_hue", low=-1.0, high=1.0)
    return declare(color_udfs.AdjustColor("hue", value), pointwise=True)


def _range(lower: float, upper: float, op: str) -> tuple[float, float]:
    low = color_udfs.number(lower, "lower", op, low=0.0)
    high = color_udfs.number(upper, "upper", op)
    if high <= low:
        raise ValueError(f"{op}: upper={high} must be > lower={low}")
    return low, high


def random_brightness(max_delta: float) -> RandomImageFn:
    """tf.image.random_brightness: ``adjust_brightness`` by ``U[-max_delta, max_delta)``,
    drawn for each image from the element's key (``random_map``)."""
    value = color_udfs.number(max_delta, "max_delta", "random_brightness", low=0.0)
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
    value = color_udfs.number(max_delta, "max_delta", "random_hue", low=0.0, high=0.5)
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
    p = color_udfs.number(p, "p", "random_grayscale", low=0.0, high=1.0)
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
    strengths = (color_udfs.number(brightness, "brightness", op, low=0.0),
                 color_udfs.number(contrast, "contrast", op, low=0.0, high=1.0),
                 color_udfs.number(saturation, "saturation", op, low=0.0, high=1.0),
                 color_udfs.number(hue, "hue", op, low=0.0, high=0.5))
    if brightness_mode not in ("multiplicative", "additive"):
        raise ValueError(f"color_jitter: brightness_mode={brightness_mode!r} must be "
                         "'multiplicative' (simclrv2) or 'additive' (simclrv1)")
    udf = jitter.ColorJitter(strengths, check.bool_arg(random_order, "random_order", op),
                             brightness_mode == "multiplicative",
                             color_udfs.number(p, "p", op, low=0.0, high=1.0))
    return declare(udf)


# ------------------------------------------------------------------ geometry
# (resize methods, sample_distorted_bounding_box, random_resized_crop, boxes, gaussian_blur)


# ------------------------------------------------------------------ decoding
# (decode_png, decode_image, the pixel limit)
# Kernels in ``_image_decode`` (its docstring: backends, tf's scaling of 16-bit PNGs, the
# truncated-JPEG rule, the limit's reasoning). Output as tf's ``channels=3``: gray
# repeated, alpha dropped (every pipeline here stacks batches of 3-channel images, which
# tf's per-file default ``channels=0`` would not give).
__all__ += ["MAX_PIXELS", "ImageDecodeError", "ImageTooLargeError", "decode_image",
            "decode_png"]

# The default ``max_pixels``: 2**29 // 3 = 178,956,970, tf's JPEG limit for 3 channels
# (no decode of 512 MiB or more, ``jpeg_mem.cc``), also PIL's refusal threshold.
MAX_PIXELS = decoding.MAX_PIXELS
ImageDecodeError = decoding.ImageDecodeError
ImageTooLargeError = decoding.ImageTooLargeError


def _decoder(name: str, dtype: Any, max_pixels: int) -> Declared[[bytes], _Array]:
    try:
        kind = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{name}: dtype={dtype!r} is not a dtype; use np.uint8 or "
                        "np.uint16") from e
    if kind not in (np.uint8, np.uint16):
        raise ValueError(f"{name}: dtype={dtype!r} must be np.uint8 or np.uint16 (for "
                         "float32 in [0, 1], follow with convert_image_dtype(np.float32))")
    max_pixels = check.int_arg(max_pixels, "max_pixels", name, minimum=1)
    return declare(decoding.DecodeImage(name, kind, max_pixels))


def decode_png(dtype: Any = np.uint8,
               max_pixels: int = decoding.MAX_PIXELS) -> Declared[[bytes], _Array]:
    """``bytes`` -> RGB ``(height, width, 3)`` ``dtype`` array, as
    ``tf.io.decode_png(contents, channels=3, dtype=dtype)``: 8- and 16-bit gray, RGB,
    RGBA and palette PNGs (libpng through OpenCV). ``np.uint8`` keeps a 16-bit
    sample's high byte (as tf), ``np.uint16`` keeps 16 bits (8-bit samples times 257,
    as tf). It decodes JPEG, GIF, BMP and WebP too, as ``decode_image`` (tf's decodes
    JPEG and GIF but refuses BMP and animated GIFs).

    Args:
      dtype: ``np.uint8`` or ``np.uint16``.
      max_pixels: refuse (``ImageTooLargeError``, before decoding) an image whose
        header declares more pixels (default ``MAX_PIXELS``).

    >>> import cv2, numpy as np
    >>> from jdata.ops import image
    >>> png = cv2.imencode(".png", np.full((2, 3), 0x1234, np.uint16))[1].tobytes()
    >>> image.decode_png(np.uint16)(png)[0, 0], image.decode_png()(png)[0, 0]
    (array([4660, 4660, 4660], dtype=uint16), array([18, 18, 18], dtype=uint8))
    """
    return _decoder("decode_png", dtype, max_pixels)


def decode_image(dtype: Any = np.uint8,
                 max_pixels: int = decoding.MAX_PIXELS) -> Declared[[bytes], _Array]:
    """``bytes`` -> RGB ``(height, width, 3)`` ``dtype`` array, as
    ``tf.io.decode_image(contents, channels=3, dtype=dtype, expand_animations=False)``:
    JPEG, PNG, GIF (its first frame), BMP and WebP; the format from the first bytes. ``np.uint16`` widens 8-bit samples as tf (times 257 for PNG, 256 for
    the rest). Arguments as ``decode_png``'s; errors as ``decode_jpeg``'s.
    """
    return _decoder("decode_image", dtype, max_pixels)
