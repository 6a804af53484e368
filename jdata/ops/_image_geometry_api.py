"""``jdata.ops.image``'s geometry constructors (``sample_distorted_bounding_box``,
``random_resized_crop``, SimCLR's ``gaussian_blur``), re-exported there."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from jdata import _validate as check
from jdata._declare import declare
from jdata.ops import _image_boxes, _image_geometry, _image_resize
from jdata.ops._image_types import Array, ImageFn, RandomImageFn

__all__ = ["gaussian_blur", "random_gaussian_blur", "random_resized_crop",
           "sample_distorted_bounding_box"]

# ------------------------------------------------------------------ geometry
# (resize methods, sample_distorted_bounding_box, random_resized_crop, boxes, gaussian_blur)


def _method(method: str, antialias: bool, op: str) -> str:
    if method not in _image_resize.METHODS:
        raise ValueError(f"{op}: method={method!r} must be one of "
                         f"{', '.join(map(repr, _image_resize.METHODS))}")
    if antialias and method in ("nearest", "area"):
        warnings.warn(f"{op}: antialias=True has no effect with method={method!r} (tf "
                      "ignores it too); drop it, or use method='bilinear' or 'bicubic'",
                      stacklevel=3)
    return method


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


def _sampling(op: str, min_object_covered: Any, aspect_ratio_range: Any, area_range: Any,
              max_attempts: Any) -> tuple[float, tuple[float, float], tuple[float, float], int]:
    return (check.float_arg(min_object_covered, "min_object_covered", op, 0.0),
            _range(aspect_ratio_range, "aspect_ratio_range", op, 0.0, None),
            _range(area_range, "area_range", op, 0.0, 1.0),
            check.int_arg(max_attempts, "max_attempts", op, minimum=1))


def sample_distorted_bounding_box(image_size: Sequence[int], key: Array,
                                  bounding_boxes: Array | None = None, *,
                                  min_object_covered: float = 0.1,
                                  aspect_ratio_range: Sequence[float] = (0.75, 1.33),
                                  area_range: Sequence[float] = (0.05, 1.0),
                                  max_attempts: int = 100,
                                  use_image_if_no_bounding_boxes: bool = True,
                                  ) -> tuple[Array, Array, Array]:
    """tf.image.sample_distorted_bounding_box's window, drawn from ``key`` (a raw ``uint32[2]``).

    Args:
      image_size: ``(height, width[, channels])``.
      key: the draws' key, e.g. a ``random_map`` UDF's element key.
      bounding_boxes: normalized ``[ymin, xmin, ymax, xmax]`` rows (``(n, 4)``
        or tf's ``(1, n, 4)``), in [0, 1]; the window covers at least
        ``min_object_covered`` of one of them. None or empty: the whole image
        (where ``use_image_if_no_bounding_boxes``, else an error, as tf's).
      min_object_covered: the least fraction of a box the window covers (tf's).
      aspect_ratio_range: the window's ``width / height`` range (tf's).
      area_range: the window's fraction of the image's area (tf's).
      max_attempts: windows drawn before falling back to the whole image.
      use_image_if_no_bounding_boxes: without boxes, the whole image is the box.

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
        check.float_arg(sigma, "sigma", "gaussian_blur", 1e-6), padding))


def random_gaussian_blur(kernel_size: int, sigma_range: Sequence[float] = (0.1, 2.0),
                         p: float = 0.5) -> RandomImageFn:
    """SimCLR's ``random_blur``: with probability ``p`` (per image), ``gaussian_blur`` with
    ``sigma ~ U[sigma_range)`` drawn from the element's key. SimCLR: ``kernel_size =
    height // 10``."""
    op = "random_gaussian_blur"
    return declare(_image_geometry.RandomGaussianBlur(
        _blur_size(kernel_size, op), _range(sigma_range, "sigma_range", op, 0.0, None),
        check.float_arg(p, "p", op, 0.0, 1.0)))
