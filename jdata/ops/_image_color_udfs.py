"""The color UDFs of ``jdata.ops.image``: picklable objects around the kernels of
``_image_color`` and ``_image_hsv``, printed as built (``random_hue(0.1)``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from jdata.ops import _image_color as color
from jdata.ops import _image_hsv as hsv
from jdata.ops._image_udfs import ImageUDF, cv2

# Streams of a key's draws (image i of a batch draws from stream (i << 4) | op's).
STREAMS = {"brightness": 1, "contrast": 2, "saturation": 3, "hue": 4, "grayscale": 5,
           "jitter": 6}
# name: (kernel, the RGB channels it needs or None).
KERNELS: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], int | None]] = {
    "brightness": (color.brightness, None), "contrast": (color.contrast, None),
    "saturation": (hsv.saturation, 3), "hue": (hsv.hue, 3)}


def _reshaped(out: np.ndarray, image: np.ndarray) -> np.ndarray:
    """A kernel's batch-view output in the input's layout (its channel count may differ)."""
    image = np.asarray(image)
    if image.ndim == 2:
        return out.reshape(image.shape) if out.shape[-1] == 1 else out.reshape(
            *image.shape, out.shape[-1])
    return out.reshape(*image.shape[:-1], out.shape[-1])


class ConvertImageDtype(ImageUDF):
    def __init__(self, dtype: np.dtype, saturate: bool):
        text = f"{dtype.name}{', saturate=True' if saturate else ''}"
        super().__init__("convert_image_dtype", f"convert_image_dtype({text})")
        self.dtype, self.saturate = dtype, saturate

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return color.convert(image, self.dtype, self.saturate)


class AdjustColor(ImageUDF):
    """``adjust_<kind>(value)``: the kernel with the same value for every image."""

    def __init__(self, kind: str, value: float):
        super().__init__(f"adjust_{kind}", f"adjust_{kind}({value!r})")
        self.kind, self.value = kind, value
        cv2(f"jdata.ops.image.adjust_{kind}")

    def __call__(self, image: np.ndarray) -> np.ndarray:
        kernel, channels = KERNELS[self.kind]
        x = color.batch_view(image, self.__name__, channels)
        return _reshaped(kernel(x, np.full(len(x), self.value)), image)


class RandomColor(ImageUDF):
    """``random_<kind>``: the kernel with a value uniform in ``[low, high)`` per image."""

    def __init__(self, kind: str, text: str, low: float, high: float):
        super().__init__(f"random_{kind}", f"random_{kind}({text})")
        self.kind, self.low, self.high = kind, low, high
        cv2(f"jdata.ops.image.random_{kind}")

    def values(self, key, count: int) -> np.ndarray:
        """The ``count`` images' values drawn from ``key``."""
        u = color.per_image(key, count, 1, STREAMS[self.kind])[:, 0]
        return self.low + u * (self.high - self.low)

    def __call__(self, image: np.ndarray, key: np.ndarray) -> np.ndarray:
        kernel, channels = KERNELS[self.kind]
        x = color.batch_view(image, self.__name__, channels)
        return _reshaped(kernel(x, self.values(key, len(x))), image)


class RgbToGrayscale(ImageUDF):
    def __init__(self, keep_channels: bool):
        super().__init__("rgb_to_grayscale", "rgb_to_grayscale"
                         + ("(keep_channels=True)" if keep_channels else ""))
        self.keep_channels = keep_channels
        cv2("jdata.ops.image.rgb_to_grayscale")

    def __call__(self, image: np.ndarray) -> np.ndarray:
        x = color.batch_view(image, "rgb_to_grayscale", 3)
        return _reshaped(color.grayscale(x, self.keep_channels), image)


class RandomGrayscale(ImageUDF):
    def __init__(self, p: float):
        super().__init__("random_grayscale", f"random_grayscale(p={p!r})")
        self.p = p
        cv2("jdata.ops.image.random_grayscale")

    def chosen(self, key, count: int) -> np.ndarray:
        """Which of ``count`` images turn gray: each with probability ``p``."""
        return color.per_image(key, count, 1, STREAMS["grayscale"])[:, 0] < self.p

    def __call__(self, image: np.ndarray, key: np.ndarray) -> np.ndarray:
        x = color.batch_view(image, "random_grayscale", 3)
        chosen = self.chosen(key, len(x))
        if not chosen.any():
            return np.asarray(image)
        if chosen.all():  # a single image chosen: no copy of it first
            return color.grayscale(x, keep_channels=True).reshape(np.shape(image))
        out = x.copy()
        out[chosen] = color.grayscale(x[chosen], keep_channels=True)
        return out.reshape(np.shape(image))
