"""Geometry UDFs of ``jdata.ops.image``: random resized crops (with boxes) and blurs.

- ``RandomResizedCrop``: tf.image.sample_distorted_bounding_box's window
  (``_image_boxes.sample``) cropped, then resized with tf.image.resize's
  method (``_image_resize``), as SimCLR's ``crop_and_resize`` and SSD's
  random crop do. Boxes come out in the crop's coordinates, clipped to
  [0, 1]; none is dropped (a box outside the crop becomes a degenerate one,
  which the caller filters, as SSD does with its own overlap threshold).
- ``GaussianBlur``: SimCLR's ``gaussian_blur``: radius ``kernel_size // 2``,
  taps ``exp(-x^2 / (2 sigma^2))`` normalized (those under 5e-16 set to 0:
  their products are subnormal floats, which tf's kernels flush to zero and
  which made the filter ten times slower), the horizontal then the
  vertical pass, ``SAME`` padding with zeros (OpenCV's ``sepFilter2D`` with a
  constant zero border), ``VALID`` cut to the pixels the kernel fits in.
  tf's depthwise convolution takes only floats; a ``uint8`` image is blurred
  in ``float32`` and rounded (OpenCV's saturating rounding).
- ``RandomGaussianBlur``: SimCLR's ``random_blur``: with probability ``p``,
  a blur with ``sigma ~ U[sigma_range)``.

``decode_jpeg`` then ``random_resized_crop`` does not fuse: a window drawn
from the JPEG header, then a decode at 1/2, 1/4 or 1/8 DCT scale where the
window stays at least twice the output, ran 1.00x-1.08x the unfused speed
(simplejpeg's scaled decode saves 10-30%: entropy decoding stays; its 3/8 ..
7/8 scales are slower than a full decode; ImageNet-sized pictures cropped to
224 never qualify) for pixels a level off on average. Decoding only the
window's rows (libjpeg-turbo's partial decode, tf's decode_and_crop_jpeg)
is what would pay; neither simplejpeg nor PIL exposes it.

Random draws come from the element's key through ``_image_random``, each op
its own streams and each image of a batch its own stream (``stream(base,
i)``): tf.image draws once per call, so tf crops a batch with one window.
"""

from __future__ import annotations

import functools

import numpy as np

from jdata.ops import _image_boxes as boxes_
from jdata.ops import _image_random as draws
from jdata.ops import _image_resize
from jdata.ops._image_boxes import BLUR, CROP, split_element, stream
from jdata.ops._image_udfs import ImageUDF, checked_image, cv2


class RandomResizedCrop(ImageUDF):
    def __init__(self, height: int, width: int, area_range, aspect_ratio_range,
                 min_object_covered: float, max_attempts: int, method: str,
                 antialias: bool, boxes: bool, text: str):
        super().__init__("random_resized_crop", text)
        self.height, self.width, self.method, self.antialias = height, width, method, antialias
        self.area_range, self.aspect_ratio_range = area_range, aspect_ratio_range
        self.min_object_covered, self.max_attempts, self.boxes = (
            min_object_covered, max_attempts, boxes)
        cv2("jdata.ops.image.random_resized_crop")  # fail where the pipeline is built

    def window(self, height: int, width: int, boxes, key, image: int = 0):
        """The crop ``(y, x, h, w)`` of image ``image`` (of a batch) of that size."""
        given = boxes if boxes is not None and len(boxes) else _WHOLE
        return boxes_.sample(height, width, given, key, stream(CROP, image),
                             self.min_object_covered, self.aspect_ratio_range,
                             self.area_range, self.max_attempts)

    def crop(self, image: np.ndarray, window) -> np.ndarray:
        y, x, h, w = window
        crop = image[y:y + h, x:x + w]
        if (h, w) == (self.height, self.width):
            return np.ascontiguousarray(crop)
        planes = crop if crop.ndim == 3 else crop[..., None]
        out = _image_resize.resize_image(planes, self.height, self.width, self.method,
                                         self.antialias)
        return out if crop.ndim == 3 else out[..., 0]

    def __call__(self, image, *args):
        boxes, key = split_element(args, self.boxes, "random_resized_crop")
        image = checked_image(image, "random_resized_crop", floats=True, batches=True)
        if image.ndim < 4:
            if boxes is not None:
                boxes = boxes_.checked_boxes(boxes, "random_resized_crop")
            window = self.window(*image.shape[:2], boxes, key)
            out = self.crop(image, window)
            if boxes is None:
                return out
            return out, boxes_.cropped_boxes(boxes, window, *image.shape[:2])
        if boxes is not None:
            boxes = boxes_.checked_boxes(boxes, "random_resized_crop", len(image))
        windows = [self.window(*image.shape[1:3], None if boxes is None else boxes[i], key, i)
                   for i in range(len(image))]
        out = np.stack([self.crop(x, w) for x, w in zip(image, windows)])
        if boxes is None:
            return out
        return out, np.stack([boxes_.cropped_boxes(b, w, *image.shape[1:3])
                              for b, w in zip(boxes, windows)]).reshape(boxes.shape)


_WHOLE = np.array([[0.0, 0.0, 1.0, 1.0]], np.float32)


@functools.lru_cache(maxsize=1024)
def gaussian_taps(radius: int, sigma: float) -> np.ndarray:
    """SimCLR's kernel in ``float32``: ``exp(-x^2 / (2 sigma^2))`` over ``-radius..radius``,
    normalized."""
    x = np.arange(-radius, radius + 1, dtype=np.float32)
    taps = np.exp(-np.square(x) / (np.float32(2) * np.square(np.float32(sigma))))
    taps = (taps / taps.sum(dtype=np.float32)).astype(np.float32)
    # Taps this small add nothing a float32 sum near a pixel's value keeps, but their
    # products are subnormal and make the filter ten times slower (sigma 0.3-0.8 at
    # radius 11; tf's kernels flush subnormals to zero).
    taps[taps < _NEGLIGIBLE] = 0
    return taps


# The smallest tap kept: a pixel above 2**-24 times two taps (one per pass) stays a normal
# float32. Dropped taps (under 5e-16, at most 22 a pass) change an output by under 2e-14
# times the largest pixel.
_NEGLIGIBLE = np.sqrt(np.finfo(np.float32).tiny * np.float32(2 ** 24))


def blur(image: np.ndarray, radius: int, sigma: float, padding: str, op: str) -> np.ndarray:
    """One image (``(H, W)`` or ``(H, W, C)``) blurred: see the module docs."""
    if padding == "VALID" and min(image.shape[:2]) <= 2 * radius:
        raise ValueError(f"{op}: padding='VALID' needs an image larger than the kernel "
                         f"({2 * radius + 1} pixels), got shape {image.shape}; use "
                         "padding='SAME'")
    taps = gaussian_taps(radius, float(sigma))
    if image.ndim == 3 and image.shape[2] > 4:  # OpenCV filters at most 4 channels
        out = np.stack([blur(image[..., c], radius, sigma, "SAME", op)
                        for c in range(image.shape[2])], axis=-1)
    else:
        out = cv2().sepFilter2D(image, -1, taps, taps, borderType=cv2().BORDER_CONSTANT)
        out = out.reshape(image.shape)  # OpenCV drops a last axis of 1
    if padding == "VALID":
        out = out[radius:out.shape[0] - radius, radius:out.shape[1] - radius]
    return out


class GaussianBlur(ImageUDF):
    def __init__(self, kernel_size: int, sigma: float, padding: str):
        super().__init__("gaussian_blur",
                         f"gaussian_blur({kernel_size}, {sigma!r}, padding={padding!r})")
        self.radius, self.sigma, self.padding = kernel_size // 2, sigma, padding
        cv2("jdata.ops.image.gaussian_blur")

    def __call__(self, image):
        image = checked_image(image, "gaussian_blur", floats=True, batches=True)
        if image.ndim == 4:
            return np.stack([blur(x, self.radius, self.sigma, self.padding, "gaussian_blur")
                             for x in image])
        return blur(image, self.radius, self.sigma, self.padding, "gaussian_blur")


class RandomGaussianBlur(ImageUDF):
    def __init__(self, kernel_size: int, sigma_range: tuple[float, float], p: float):
        super().__init__("random_gaussian_blur", f"random_gaussian_blur({kernel_size}, "
                         f"sigma_range={sigma_range!r}, p={p!r})")
        self.radius, self.sigma_range, self.p = kernel_size // 2, sigma_range, p
        cv2("jdata.ops.image.random_gaussian_blur")

    def sigma(self, key, image: int = 0) -> float | None:
        """Image ``image``'s sigma, or ``None`` where it is not blurred."""
        apply, u = draws.uniforms(key, 2, stream(BLUR, image))
        if not apply < self.p:
            return None
        low, high = (np.float32(s) for s in self.sigma_range)
        return float(np.float32(u) * (high - low) + low)

    def _one(self, image: np.ndarray, key, index: int) -> np.ndarray:
        sigma = self.sigma(key, index)
        if sigma is None:
            return image
        return blur(image, self.radius, sigma, "SAME", "random_gaussian_blur")

    def __call__(self, image, key):
        image = checked_image(image, "random_gaussian_blur", floats=True, batches=True)
        if image.ndim == 4:
            return np.stack([self._one(x, key, i) for i, x in enumerate(image)])
        return self._one(image, key, 0)
