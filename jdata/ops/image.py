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

``resize`` is ``tf.image.resize`` (half-pixel centers), bilinear by default,
also ``"bicubic"``, ``"nearest"`` and ``"area"``, ``uint8`` in and out
(rounded) or ``float32``. Bilinear with ``antialias=False`` (the default, as
tf's) is OpenCV's ``INTER_LINEAR`` resize, within 1 of
``tf.image.resize(x, size, "bilinear")`` (tf returns ``float32`` without
rounding); when shrinking, it samples 2x2 pixels per output, which aliases,
as tf's does. ``antialias=True`` (PIL's resize on ``uint8``), within 1 of
``tf.image.resize(..., antialias=True)``, averages over each output pixel's
footprint, and lets the fusion decode at a reduced DCT scale. The other
methods and their tolerances: ``jdata.ops._image_resize``. The geometry
section (``random_resized_crop``, ``sample_distorted_bounding_box``, boxes,
``gaussian_blur``): ``jdata.ops._image_geometry``.
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
from typing import Any, TypeVar

import numpy as np

from jdata import _validate as check
from jdata._declare import Declared, declare, unwrapped
from jdata._errors import ImageDecodeError, ImageTooLargeError
from jdata.ops import _image_decode as decoding
from jdata.ops import _image_geometry, _image_random
from jdata.ops import _image_udfs as udfs

# The color and geometry constructors live in their own modules (this one would run past
# the design's module length): they are this module's, as listed in ``__all__``.
from jdata.ops._image_color_api import (
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    color_jitter,
    convert_image_dtype,
    random_brightness,
    random_contrast,
    random_grayscale,
    random_hue,
    random_saturation,
    rgb_to_grayscale,
)
from jdata.ops._image_geometry_api import (
    _method,
    gaussian_blur,
    random_gaussian_blur,
    random_resized_crop,
    sample_distorted_bounding_box,
)
from jdata.ops._image_types import Array, ImageFn, RandomImageFn

__all__ = ["center_crop", "decode_jpeg", "normalize", "random_crop", "random_flip", "resize",
           "split_key", "to_float"]

_C = TypeVar("_C", bound=udfs.Crop)
_Array = Array


def decode_jpeg(max_pixels: int = decoding.MAX_PIXELS) -> Declared[[bytes], _Array]:
    """``bytes`` -> ``uint8`` RGB ``(height, width, 3)`` array, as
    ``tf.io.decode_jpeg(contents, channels=3)``: libjpeg-turbo through simplejpeg with
    tf's settings, the same pixels (CMYK converted as tf's). It decodes PNG (a 16-bit one
    scaled as tf's), GIF (the first frame), BMP and WebP too, as ``decode_image(np.uint8)``
    (tf's decodes PNG and GIF but refuses BMP and animated GIFs).
    ``pip install 'jdata-jax[image]'``.

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
           antialias: bool = False, method: str = "bilinear") -> ImageFn:
    """tf.image.resize to ``short_side`` or to ``size``: ``uint8`` -> ``uint8`` (rounded),
    ``float32`` -> ``float32``, on an image or a ``(N, H, W, C)`` batch.

    Args:
      short_side: scale so that the shorter side is ``short_side`` and the
        longer keeps the aspect ratio, rounded to the nearest int (halves up).
      size: ``(height, width)`` of every output.
      antialias: when shrinking, average over each output pixel's footprint
        (as ``tf.image.resize(antialias=True)``, with PIL) rather than sample
        2x2 pixels (tf's default, with OpenCV). See the module docs. No effect
        on ``"nearest"`` and ``"area"`` (as in tf): a warning there.
      method: ``"bilinear"``, ``"bicubic"`` (Keys, a = -0.5, as tf's; not
        OpenCV's), ``"nearest"`` or ``"area"``, with tf's half-pixel centers.
        How each is computed, and its tolerance against tf: ``_image_resize``.

    Exactly one of ``short_side`` and ``size`` is given. Inputs are
    ``(height, width, channels)`` or ``(height, width)`` ``uint8`` or
    ``float32`` arrays, or batches of them.

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
    antialias = check.bool_arg(antialias, "antialias", "resize")
    return declare(udfs.Resize(short_side, pair, antialias, _method(method, antialias, "resize")))


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


def random_flip(boxes: bool = False) -> RandomImageFn:
    """Mirrors left-right with probability 1/2, drawn from the element's key (``random_map``):
    its first word's top bit; each image of a ``(N, H, W, C)`` batch its own draw.

    With ``boxes=True`` the element is ``(image, boxes)``, boxes ``float32``
    ``(n, 4)`` normalized ``[ymin, xmin, ymax, xmax]`` (``(N, n, 4)`` for a
    batch), mirrored to ``[ymin, 1 - xmax, ymax, 1 - xmin]`` with the image.

    >>> import numpy as np
    >>> from jdata.ops import image
    >>> key = np.array([1 << 31, 0], np.uint32)  # top bit set: flips
    >>> _, boxes = image.random_flip(boxes=True)(np.zeros((4, 4, 3)), [[0, .1, .5, .3]], key)
    >>> boxes.astype(float).round(2).tolist()
    [[0.0, 0.7, 0.5, 0.9]]
    """
    boxes = check.bool_arg(boxes, "boxes", "random_flip")
    # With boxes it computes (1 - x): not a selection, which the optimizer could move
    # before a pointwise map of the boxes.
    return declare(udfs.RandomFlip(boxes), selection=not boxes)


def split_key(key: Array, num: int = 2) -> Array:
    """``num`` independent raw keys (``uint32[num, 2]``) from one (``uint32[2]``), for a
    function that calls several random kernels on one element: each call its own key.

    About a microsecond a key, the same on every machine (counter-based draws of the
    key, as the kernels draw: no NumPy generator per element).

    >>> import numpy as np
    >>> from jdata.ops import image
    >>> crop_key, flip_key = image.split_key(np.array([0, 7], np.uint32))
    >>> crop_key.dtype, bool((crop_key != flip_key).any())
    (dtype('uint32'), True)
    """
    num = check.int_arg(num, "num", "split_key", minimum=1)
    words = _image_random.words(key, num, _SPLIT_STREAM)
    return np.array([(w >> 32, w & 0xFFFFFFFF) for w in words], np.uint32)


# split_key's stream of a key's draws: apart from every kernel's ("SPLT").
_SPLIT_STREAM = 0x53504C54 << 32


def fused(inner: Any, outer: Any, outer_random: bool) -> udfs.ImageUDF | None:
    """The UDF running the map ``inner`` then ``outer`` (a ``random_map``'s if
    ``outer_random``) as one chain, where ``decode_resize_fusion`` fuses them, else
    ``None``: ``decode_jpeg`` then ``resize``, then a crop, then ``random_flip``."""
    inner, outer = unwrapped(inner), unwrapped(outer)
    random = (udfs.RandomCrop, udfs.RandomFlip, _image_geometry.RandomResizedCrop)
    if isinstance(outer, random) != outer_random:
        return None  # e.g. a center_crop in a random_map: it fails unfused too
    if isinstance(outer, _image_geometry.RandomResizedCrop):
        return None  # crop before decode does not pay: see _image_geometry
    if isinstance(outer, udfs.RandomFlip) and outer.boxes:
        return None
    if isinstance(outer, udfs.Resize) and outer.method != "bilinear":
        return None
    if isinstance(inner, udfs.DecodeJpeg) and isinstance(outer, udfs.Resize):
        return udfs.DecodeResized(outer, decode=inner)
    if not isinstance(inner, udfs.DecodeResized) or inner.flip:
        return None
    if isinstance(outer, udfs.Crop) and inner.crop is None:
        return udfs.DecodeResized(inner.resize, outer, decode=inner.decode)
    if isinstance(outer, udfs.RandomFlip):
        return udfs.DecodeResized(inner.resize, inner.crop, flip=True, decode=inner.decode)
    return None


__all__ += ["adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation",
            "color_jitter", "convert_image_dtype", "random_brightness", "random_contrast",
            "random_grayscale", "random_hue", "random_saturation", "rgb_to_grayscale",
            "gaussian_blur", "random_gaussian_blur", "random_resized_crop",
            "sample_distorted_bounding_box"]


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
    JPEG, PNG, GIF (its first frame), BMP and WebP; the format from the first bytes.
    ``np.uint16`` widens 8-bit samples as tf (times 257 for PNG, 256 for the rest).
    Arguments as ``decode_png``'s; errors as ``decode_jpeg``'s.
    """
    return _decoder("decode_image", dtype, max_pixels)
