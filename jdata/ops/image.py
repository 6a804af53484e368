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
  a contiguous copy. With ``antialias=True``, the JPEG is decoded at the
  smallest DCT scale (1/2, 1/4, 1/8: nearly free in libjpeg-turbo) whose
  picture is still at least the resize target, and only the source box of
  the crop is resampled: pixel values then differ slightly from a full
  decode then resize (as ``tf.io.decode_jpeg(ratio=2)`` does: on average by
  about a level), and without DCT scaling by at most 1 (PIL takes the box
  in float32).
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
``decode_jpeg`` decodes with libjpeg-turbo (simplejpeg; PIL for CMYK and
other formats). The kernels need ``pip install 'jdata-jax[image]'`` (pillow,
opencv-python-headless, simplejpeg).

The UDFs are objects of ``jdata.ops._image_udfs``: picklable for worker
processes, and printed in plans as built (``resize(short_side=256)``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, TypeAlias, TypeVar

import numpy as np

from jdata import _validate as check
from jdata._declare import Declared, declare, unwrapped
from jdata.ops import _image_boxes, _image_geometry, _image_resize
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


def decode_jpeg() -> Declared[[bytes], _Array]:
    """``bytes`` -> ``uint8`` RGB array: libjpeg-turbo through simplejpeg, or PIL for what
    simplejpeg does not read (CMYK, other formats). ``pip install 'jdata-jax[image]'``."""
    return declare(udfs.DecodeJpeg())


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


def _method(method: str, antialias: bool, op: str) -> str:
    if method not in _image_resize.METHODS:
        raise ValueError(f"{op}: method={method!r} must be one of "
                         f"{', '.join(map(repr, _image_resize.METHODS))}")
    if antialias and method in ("nearest", "area"):
        warnings.warn(f"{op}: antialias=True has no effect with method={method!r} (tf "
                      "ignores it too); drop it, or use method='bilinear' or 'bicubic'",
                      stacklevel=3)
    return method


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
        return udfs.DecodeResized(outer)
    if not isinstance(inner, udfs.DecodeResized) or inner.flip:
        return None
    if isinstance(outer, udfs.Crop) and inner.crop is None:
        return udfs.DecodeResized(inner.resize, outer)
    if isinstance(outer, udfs.RandomFlip):
        return udfs.DecodeResized(inner.resize, inner.crop, flip=True)
    return None


# ------------------------------------------------------------------ color (tf.image's adjust_*)
# (brightness, contrast, saturation, hue, grayscale, color_jitter, convert_image_dtype)


# ------------------------------------------------------------------ geometry
# (resize methods, sample_distorted_bounding_box, random_resized_crop, boxes, gaussian_blur)
__all__ += ["gaussian_blur", "random_gaussian_blur", "random_resized_crop",
            "sample_distorted_bounding_box"]


def _range(value: Any, arg: str, op: str, low: float,
           high: float | None) -> tuple[float, float]:
    """A ``(min, max)`` pair of finite floats in ``(low, high]``, ``min <= max``."""
    try:
        pair = tuple(float(v) for v in value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{op}: {arg}={value!r} must be a (min, max) pair of numbers") from e
    top = "" if high is None else f" and <= {high}"
    if (len(pair) != 2 or not all(np.isfinite(pair)) or pair[0] > pair[1]
            or pair[0] <= low or (high is not None and pair[1] > high)):
        raise ValueError(f"{op}: {arg}={value!r} must be a (min, max) pair, min <= max, "
                         f"both > {low}{top}")
    return pair


def _number(value: Any, arg: str, op: str, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{op}: {arg}={value!r} must be a number")
    if not np.isfinite(value) or value < low or (high is not None and value > high):
        top = "" if high is None else f" and <= {high}"
        raise ValueError(f"{op}: {arg}={value!r} must be >= {low}{top}")
    return float(value)


def _sampling(op: str, min_object_covered: Any, aspect_ratio_range: Any, area_range: Any,
              max_attempts: Any) -> tuple[float, tuple[float, float], tuple[float, float], int]:
    return (_number(min_object_covered, "min_object_covered", op, 0.0),
            _range(aspect_ratio_range, "aspect_ratio_range", op, 0.0, None),
            _range(area_range, "area_range", op, 0.0, 1.0),
            check.int_arg(max_attempts, "max_attempts", op, minimum=1))


def sample_distorted_bounding_box(image_size: Sequence[int], key: _Array,
                                  bounding_boxes: _Array | None = None, *,
                                  min_object_covered: float = 0.1,
                                  aspect_ratio_range: Sequence[float] = (0.75, 1.33),
                                  area_range: Sequence[float] = (0.05, 1.0),
                                  max_attempts: int = 100,
                                  use_image_if_no_bounding_boxes: bool = True,
                                  ) -> tuple[_Array, _Array, _Array]:
    """tf.image.sample_distorted_bounding_box's window, drawn from ``key`` (a raw ``uint32[2]``).

    Args:
      image_size: ``(height, width[, channels])``.
      key: the draws' key, e.g. a ``random_map`` UDF's element key.
      bounding_boxes: normalized ``[ymin, xmin, ymax, xmax]`` rows (``(n, 4)``
        or tf's ``(1, n, 4)``), in [0, 1]; the window covers at least
        ``min_object_covered`` of one of them. None or empty: the whole image
        (where ``use_image_if_no_bounding_boxes``, else an error, as tf's).
      min_object_covered, aspect_ratio_range, area_range, max_attempts: tf's.

    Returns:
      tf's ``(begin, size, bbox)``: ``int32`` ``[y, x, 0]`` and ``[h, w, -1]``
      and the window normalized, ``float32`` ``(1, 1, 4)``. After
      ``max_attempts`` failed attempts, the whole image. Same algorithm and
      distributions as tf's (see ``_image_boxes``), other random numbers.

    >>> import numpy as np
    >>> from jdata.ops import image
    >>> begin, size, bbox = image.sample_distorted_bounding_box(
    ...     (375, 500, 3), np.array([0, 7], np.uint32), area_range=(0.08, 1.0))
    >>> bool((begin[:2] + size[:2] <= [375, 500]).all()), size[2].item()
    (True, -1)
    """
    op = "sample_distorted_bounding_box"
    covered, aspect, area, attempts = _sampling(op, min_object_covered, aspect_ratio_range,
                                                area_range, max_attempts)
    sizes = [check.int_arg(s, "image_size", op, minimum=1) for s in image_size]
    if len(sizes) not in (2, 3):
        raise ValueError(f"{op}: image_size={image_size!r} must be (height, width[, channels])")
    boxes = np.zeros((0, 4), np.float32) if bounding_boxes is None else np.asarray(
        bounding_boxes, np.float32)
    if boxes.shape[-1:] != (4,) or boxes.ndim not in (2, 3):
        raise ValueError(f"{op}: bounding_boxes must have shape (n, 4) or (1, n, 4), got "
                         f"shape {boxes.shape}")
    boxes = boxes.reshape(-1, 4)
    if not ((boxes >= 0) & (boxes <= 1)).all():
        raise ValueError(f"{op}: bounding_boxes must be normalized, in [0, 1]; got values "
                         f"from {boxes.min()} to {boxes.max()}")
    if not len(boxes):
        if not use_image_if_no_bounding_boxes:
            raise ValueError(f"{op}: no bounding boxes; pass some, or "
                             "use_image_if_no_bounding_boxes=True for the whole image")
        boxes = np.array([[0, 0, 1, 1]], np.float32)
    height, width = sizes[:2]
    y, x, h, w = _image_boxes.sample(height, width, boxes, key, 0, covered, aspect, area,
                                     attempts)
    bbox = np.array([y / np.float32(height), x / np.float32(width),
                     (y + h) / np.float32(height), (x + w) / np.float32(width)], np.float32)
    return (np.array([y, x, 0], np.int32), np.array([h, w, -1], np.int32),
            bbox.reshape(1, 1, 4))


def random_resized_crop(height: int, width: int, *, area_range: Sequence[float] = (0.08, 1.0),
                        aspect_ratio_range: Sequence[float] = (3 / 4, 4 / 3),
                        min_object_covered: float = 0.1, max_attempts: int = 100,
                        method: str = "bicubic", antialias: bool = False,
                        boxes: bool = False) -> RandomImageFn:
    """A ``sample_distorted_bounding_box`` window cropped and resized to ``height x width``.

    SimCLR's ``crop_and_resize`` is ``random_resized_crop(h, w,
    aspect_ratio_range=(3/4 * w/h, 4/3 * w/h))`` (the window constrained by
    the whole image). With ``boxes=True`` the element is ``(image, boxes)``
    (boxes ``float32`` ``(n, 4)`` normalized ``[ymin, xmin, ymax, xmax]``):
    they constrain the window (``min_object_covered``; none: the whole
    image) and come back in the crop's coordinates, clipped to [0, 1], none
    dropped (SSD's random crop). A ``(N, H, W, C)`` batch crops each image
    its own window (``(N, n, 4)`` boxes), giving ``(N, height, width, C)``.
    ``resize``'s ``method`` and ``antialias``; ``uint8`` or ``float32``.

    >>> import numpy as np
    >>> from jdata.ops import image
    >>> crop = image.random_resized_crop(8, 8)
    >>> crop(np.zeros((30, 40, 3), np.uint8), np.array([0, 1], np.uint32)).shape
    (8, 8, 3)
    """
    op = "random_resized_crop"
    size = [check.int_arg(v, name, op, minimum=1) for v, name in ((height, "height"),
                                                                   (width, "width"))]
    covered, aspect, area, attempts = _sampling(op, min_object_covered, aspect_ratio_range,
                                                area_range, max_attempts)
    antialias = check.bool_arg(antialias, "antialias", op)
    method = _method(method, antialias, op)
    boxes = check.bool_arg(boxes, "boxes", op)
    text = (f"{op}({size[0]}, {size[1]}, area_range={area}, aspect_ratio_range={aspect}, "
            f"method={method!r}{', antialias=True' if antialias else ''}"
            f"{', boxes=True' if boxes else ''})")
    return declare(_image_geometry.RandomResizedCrop(size[0], size[1], area, aspect, covered,
                                                     attempts, method, antialias, boxes, text))


def _blur_size(kernel_size: Any, op: str) -> int:
    return check.int_arg(kernel_size, "kernel_size", op, minimum=1)


def gaussian_blur(kernel_size: int, sigma: float, padding: str = "SAME") -> ImageFn:
    """SimCLR's ``gaussian_blur``: a separable Gaussian of radius ``kernel_size // 2``.

    ``padding="SAME"`` pads with zeros (tf's convolution), ``"VALID"``
    keeps the pixels the kernel fits in. ``uint8`` (rounded) or ``float32``,
    an image or a batch. See ``_image_geometry`` for the differences from tf.

    >>> import numpy as np
    >>> from jdata.ops import image
    >>> out = image.gaussian_blur(3, 1.0)(np.ones((4, 4), np.float32))
    >>> float(out[1, 1]), round(float(out[0, 0]), 3)  # the corner sees zeros outside
    (1.0, 0.527)
    """
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"gaussian_blur: padding={padding!r} must be 'SAME' or 'VALID'")
    return declare(_image_geometry.GaussianBlur(
        _blur_size(kernel_size, "gaussian_blur"),
        _number(sigma, "sigma", "gaussian_blur", 1e-6), padding))


def random_gaussian_blur(kernel_size: int, sigma_range: Sequence[float] = (0.1, 2.0),
                         p: float = 0.5) -> RandomImageFn:
    """SimCLR's ``random_blur``: with probability ``p`` (per image), ``gaussian_blur`` with
    ``sigma ~ U[sigma_range)`` drawn from the element's key. SimCLR: ``kernel_size =
    height // 10``."""
    op = "random_gaussian_blur"
    return declare(_image_geometry.RandomGaussianBlur(
        _blur_size(kernel_size, op), _range(sigma_range, "sigma_range", op, 0.0, None),
        _number(p, "p", op, 0.0, 1.0)))


# ------------------------------------------------------------------ decoding
# (decode_png, decode_image, the pixel limit)
