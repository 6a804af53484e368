"""tf.image.sample_distorted_bounding_box's algorithm, and boxes through crops and flips.

``sample`` follows TF's kernel (``sample_distorted_bounding_box_op.cc``)
step by step, in ``float32`` where it computes in ``float`` and rounding as
``lrintf`` (half to even): up to ``max_attempts`` times, an aspect ratio
``U[lo, hi)``, a height uniform between the smallest and the largest that
give an area in ``area_range`` (nudged by one where rounding left the area
outside), a place ``y ~ U{0 .. H - h - 1}``, ``x ~ U{0 .. W - w - 1}`` (tf's
``Uniform(H - h)``: the last place is never drawn, reproduced), accepted when
the window covers at least ``min_object_covered`` of one box (boxes of less
than one pixel are skipped); else the whole image. Its draws come from the
element's key (``_image_random``) rather than tf's Philox stream: the same
distributions, not the same numbers.
"""

from __future__ import annotations

import numpy as np

from jdata.ops import _image_random as draws

_F = np.float32
_RAND_FLOAT = 2.0 ** -23  # tf's RandFloat: 23 random bits


# The ops' stream bases (``stream(base, image)``), far apart so that no two ops or
# images of a batch share a stream.
CROP, BLUR, FLIP = 0x43524F50, 0x424C5552, 0x464C4950


def stream(base: int, image: int) -> int:
    return (base << 24) + image


def split_element(args: tuple, with_boxes: bool, op: str):
    """``(boxes, key)`` from the arguments after the image: ``(key,)`` or, with boxes,
    ``(boxes, key)``."""
    if len(args) == (2 if with_boxes else 1):
        return (args[0] if with_boxes else None), args[-1]
    if with_boxes:
        raise TypeError(f"{op}(boxes=True): expected (image, boxes) elements, got "
                        f"{len(args)} values besides the image and its key")
    raise TypeError(f"{op}: expected image elements, got {len(args) + 1} values with the "
                    f"key; for (image, boxes) elements use {op}(..., boxes=True)")


class _Words:
    """The 64-bit words of one ``_image_random`` stream, drawn as needed (in chunks:
    the draws of a stream are recomputed from its start)."""

    def __init__(self, key, stream: int):
        self.key, self.stream, self.words, self.used = key, stream, [], 0

    def next(self) -> int:
        if self.used == len(self.words):
            self.words = draws.words(self.key, max(8, 2 * len(self.words)), self.stream)
        self.used += 1
        return self.words[self.used - 1]


def _lrint(value) -> int:
    return round(float(value))  # Python rounds half to even, as lrintf


def _random_crop(width: int, height: int, min_area: float, max_area: float, aspect,
                 words: _Words) -> tuple[int, int, int, int] | None:
    """tf's GenerateRandomCrop: ``(x, y, w, h)`` or ``None``."""
    min_pixels = _F(_F(min_area) * _F(width)) * _F(height)
    max_pixels = _F(_F(max_area) * _F(width)) * _F(height)
    crop_height = _lrint(np.sqrt(_F(min_pixels / aspect)))
    max_height = _lrint(np.sqrt(_F(max_pixels / aspect)))
    if _lrint(_F(max_height) * aspect) > width:
        max_height = int((width + 0.5 - float(_F(1e-7))) / float(aspect))
        if _lrint(_F(max_height) * aspect) > width:
            max_height -= 1
    max_height = min(max_height, height)
    crop_height = min(crop_height, max_height)
    if crop_height < max_height:
        crop_height += draws.below(words.next(), max_height - crop_height + 1)
    crop_width = _lrint(_F(crop_height) * aspect)
    area = _F(crop_width * crop_height)
    if area < min_pixels:
        crop_height += 1
        crop_width = _lrint(_F(crop_height) * aspect)
        area = _F(crop_width * crop_height)
    if area > max_pixels:
        crop_height -= 1
        crop_width = _lrint(_F(crop_height) * aspect)
        area = _F(crop_width * crop_height)
    if (area < min_pixels or area > max_pixels or crop_width > width or crop_height > height
            or crop_width <= 0 or crop_height <= 0):
        return None
    y = draws.below(words.next(), height - crop_height) if crop_height < height else 0
    x = draws.below(words.next(), width - crop_width) if crop_width < width else 0
    return x, y, crop_width, crop_height


def _covers(window, boxes: list[list[int]], min_covered: float) -> bool:
    """tf's SatisfiesOverlapConstraints: ``boxes`` are integer ``[x0, y0, x1, y1]`` rows
    (Python ints: a few boxes per call, where NumPy's per-call cost was most of the time)."""
    x, y, w, h = window
    if w * h < 1:
        return False
    least = _F(min_covered)
    for x0, y0, x1, y1 in boxes:
        area = (x1 - x0) * (y1 - y0)
        if area < 1:
            continue
        inter_w, inter_h = min(x + w, x1) - max(x, x0), min(y + h, y1) - max(y, y0)
        inter = inter_w * inter_h if inter_w >= 0 and inter_h >= 0 else 0
        if _F(inter) / _F(area) >= least:
            return True
    return False


def pixel_boxes(boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    """Normalized ``[ymin, xmin, ymax, xmax]`` rows as tf's integer ``(x0, y0, x1, y1)``."""
    scaled = boxes.astype(np.float32) * np.array([height, width, height, width], np.float32)
    return scaled.astype(np.int64)[:, [1, 0, 3, 2]]  # static_cast<int32>: toward zero


def sample(height: int, width: int, boxes: np.ndarray, key, stream: int, min_covered: float,
           aspect_range, area_range, max_attempts: int) -> tuple[int, int, int, int]:
    """The window ``(y, x, h, w)``; ``boxes`` normalized ``(n, 4)``, at least one."""
    pixels = pixel_boxes(boxes, height, width).tolist()
    words = _Words(key, stream)
    low, span = _F(aspect_range[0]), _F(aspect_range[1]) - _F(aspect_range[0])
    for _ in range(max_attempts):
        aspect = _F((words.next() >> 41) * _RAND_FLOAT) * span + low
        window = _random_crop(width, height, area_range[0], area_range[1], aspect, words)
        if window is not None and _covers(window, pixels, min_covered):
            x, y, w, h = window
            return y, x, h, w
    return 0, 0, height, width


def cropped_boxes(boxes: np.ndarray, window, height: int, width: int) -> np.ndarray:
    """Normalized ``boxes`` of an image of ``height x width`` in the coordinates of its crop
    ``window`` ``(y, x, h, w)``, clipped to [0, 1], ``float32``."""
    y, x, h, w = window
    scale = np.array([height, width, height, width], np.float64)
    shifted = boxes.astype(np.float64) * scale - np.array([y, x, y, x], np.float64)
    return np.clip(shifted / np.array([h, w, h, w], np.float64), 0, 1).astype(np.float32)


def flipped_boxes(boxes: np.ndarray) -> np.ndarray:
    """Boxes of a left-right mirrored image: ``[ymin, 1 - xmax, ymax, 1 - xmin]``."""
    boxes = np.asarray(boxes, np.float32)
    return np.stack([boxes[..., 0], 1 - boxes[..., 3], boxes[..., 2], 1 - boxes[..., 1]], -1)


def checked_boxes(boxes, op: str, images: int | None = None) -> np.ndarray:
    """``boxes`` as ``float32`` ``(n, 4)`` (or ``(images, n, 4)`` for a batch), refused
    with a message naming ``op`` otherwise."""
    array = np.asarray(boxes, np.float32)
    shape = (4,) if images is None else (images, 4)
    if array.ndim != len(shape) + 1 or array.shape[-1] != 4 or (
            images is not None and array.shape[0] != images):
        want = "(n, 4)" if images is None else f"({images}, n, 4) for a batch of {images}"
        raise ValueError(f"{op}: boxes must have shape {want} ([ymin, xmin, ymax, xmax] "
                         f"rows), got shape {array.shape}")
    return array
