"""Built-in image UDFs that declare what they do, so the optimizer can reorder them.

Each function returns a ``jdata.declare``d callable for ``map`` (or, for the
random ones, ``random_map``): pointwise ones (``to_float``, ``normalize``)
commute with selections (``center_crop``, ``random_crop``, ``flip``), so the
optimizer runs a shrinking crop first. Images are ``(height, width,
channels)`` NumPy arrays.

>>> import numpy as np, jdata
>>> from jdata.ops import image
>>> ds = (jdata.from_tensor_slices(np.zeros((2, 64, 64, 3), np.uint8))
...       .map(image.to_float()).map(image.normalize(0.5, 0.25)).map(image.center_crop(32, 32)))
>>> ds.explain().splitlines()[0]
'Plan (optimizer rules fired: reorder, map_fusion)'
>>> next(iter(ds)).shape
(32, 32, 3)
"""

from __future__ import annotations

import io

import numpy as np

from jdata._declare import declare


def decode_jpeg():
    """``bytes`` -> ``uint8`` RGB array, with PIL (``pip install pillow``)."""
    def decode_jpeg(data: bytes) -> np.ndarray:
        try:
            from PIL import Image
        except ImportError as e:
            raise ImportError("image.decode_jpeg needs pillow: pip install pillow") from e
        image = Image.open(io.BytesIO(data))
        return np.asarray(image if image.mode == "RGB" else image.convert("RGB"))

    return declare(decode_jpeg)


def to_float(scale: float = 1 / 255):
    """``x * scale`` as ``float32`` (pointwise)."""
    def to_float(x):
        return x.astype(np.float32) * np.float32(scale)

    return declare(to_float, pointwise=True)


def normalize(mean, std):
    """``(x - mean) / std`` per channel, as ``float32`` (pointwise)."""
    mean, std = np.asarray(mean, np.float32), np.asarray(std, np.float32)

    def normalize(x):
        return (x - mean) / std

    return declare(normalize, pointwise=True)


def center_crop(height: int, width: int):
    """The central ``height x width`` window (a selection)."""
    def center_crop(x):
        top, left = (x.shape[0] - height) // 2, (x.shape[1] - width) // 2
        return x[top:top + height, left:left + width]

    return declare(center_crop, selection=True)


def _key_words(key) -> tuple[int, int]:
    """The two uniformly random 32-bit words of an element's ``uint32[2]`` key."""
    words = np.asarray(key, np.uint32).reshape(-1)
    if words.shape != (2,):
        raise TypeError(f"expected a raw uint32[2] key (random_map's), got shape {words.shape}")
    return int(words[0]), int(words[1])


def random_crop(height: int, width: int):
    """A ``height x width`` window at a place drawn from the element's key (``random_map``).

    The offsets are the key's words modulo the number of places (the bias is
    below 1e-6 for any image), which costs a microsecond where a NumPy
    generator costs tens.
    """
    def random_crop(x, key):
        rows, cols = x.shape[0] - height + 1, x.shape[1] - width + 1
        if rows < 1 or cols < 1:
            raise ValueError(f"random_crop: a {height}x{width} crop does not fit in an image "
                             f"of shape {x.shape}")
        first, second = _key_words(key)
        top, left = first % rows, second % cols
        return x[top:top + height, left:left + width]

    return declare(random_crop, selection=True)


def random_flip():
    """Mirrors left-right with probability 1/2, drawn from the element's key (``random_map``):
    its first word's top bit."""
    def random_flip(x, key):
        return x[:, ::-1] if _key_words(key)[0] >> 31 else x

    return declare(random_flip, selection=True)
