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
>>> bool(np.abs(batch - unfused).max() < 2 / 57)  # a DCT-scaled decode: within 2 levels
True

What the optimizer does with them (``Options(optimize=False)`` turns it all
off and gives the unfused results):

- ``reorder``: the pointwise ones (``to_float``, ``normalize``) commute with
  the selections (crops, flips), so a crop runs first.
- ``decode_resize_fusion``: ``decode_jpeg`` then ``resize``, and a
  ``center_crop`` or ``random_crop`` and a ``random_flip`` after them, run as
  one UDF. With ``antialias=True``, the JPEG is decoded at the smallest DCT
  scale (1/2, 1/4, 1/8: nearly free in libjpeg-turbo) whose picture is still
  at least the resize target; only the source box of the crop is resampled,
  and the flip is done before the pixels reach NumPy. The crop window and
  the flip are those of the unfused ops (each random op keeps its own key
  stream). Pixel values are not bit-identical: a DCT-scaled decode differs
  slightly from a full decode then resize (as ``tf.io.decode_jpeg(ratio=2)``
  does: on average by about a level), and without DCT scaling values differ
  by at most 1 (PIL takes the box in float32).
- ``pointwise_after_batch``: pointwise maps right before ``batch`` that grow
  the elements (``normalize`` of ``uint8`` images) run once on the stacked
  batch, so batches are stacked as ``uint8``. ``Dataset.to_global(sharding,
  normalize=(mean, std))`` goes further and normalizes on the devices.

``resize`` is bilinear with half-pixel centers (PIL), ``uint8`` in and out.
With ``antialias=True`` (the default) it equals
``tf.image.resize(x, size, "bilinear", antialias=True)`` rounded, within 1;
tf's default ``antialias=False`` gives the same when enlarging, but when
shrinking it samples 2x2 pixels per output, which aliases (up to 40 apart
here on noisy pictures). ``antialias=False`` does that too, within 1 of tf
(PIL truncates: on average 0.5 lower) and is about 1.5x slower. tf returns
``float32`` without rounding.
"""

from __future__ import annotations

import functools
import io

import numpy as np

from jdata import _validate as check
from jdata._declare import Declared, declare


class _ImageUDF:
    """Base of the built-in UDFs: a picklable object (for worker processes) whose parameters
    the optimizer reads, printed as built (``resize(short_side=256)``)."""

    def __init__(self, name: str, text: str):
        self.__name__, self.__qualname__ = name, text


def _pil():
    try:
        from PIL import Image
    except ImportError as e:
        raise ImportError("jdata.ops.image needs pillow: pip install pillow") from e
    return Image


def _open(data, op: str):
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{op}: expected a JPEG file's bytes, got {type(data).__name__}")
    return _pil().open(io.BytesIO(data))


class _DecodeJpeg(_ImageUDF):
    def __init__(self):
        super().__init__("decode_jpeg", "decode_jpeg")

    def __call__(self, data) -> np.ndarray:
        picture = _open(data, "decode_jpeg")
        return np.asarray(picture if picture.mode == "RGB" else picture.convert("RGB"))


def decode_jpeg():
    """``bytes`` -> ``uint8`` RGB array, with PIL (``pip install pillow``)."""
    return declare(_DecodeJpeg())


class _Resize(_ImageUDF):
    def __init__(self, short_side: int | None, size: tuple[int, int] | None, antialias: bool):
        text = f"short_side={short_side}" if size is None else f"size={size}"
        super().__init__("resize", f"resize({text}{'' if antialias else ', antialias=False'})")
        self.short_side, self.size, self.antialias = short_side, size, antialias

    def target(self, height: int, width: int) -> tuple[int, int]:
        """The output's ``(height, width)`` for an input of that size."""
        if self.size is not None:
            return self.size
        short, long = min(height, width), max(height, width)
        # long * short_side / short rounded half up, in integers (no float ties).
        scaled = (2 * long * self.short_side + short) // (2 * short)
        return (self.short_side, scaled) if height <= width else (scaled, self.short_side)

    def resample(self, picture, height: int, width: int, box):
        """``box`` (left, top, right, bottom in ``picture``'s pixels) resampled to
        ``height x width``, as a PIL image."""
        Image = _pil()
        if self.antialias:
            return picture.resize((width, height), Image.Resampling.BILINEAR, box=box)
        # An affine transform samples 2x2 source pixels per output pixel, whatever the scale.
        x_scale, y_scale = (box[2] - box[0]) / width, (box[3] - box[1]) / height
        return picture.transform((width, height), Image.Transform.AFFINE,
                                 (x_scale, 0, box[0], 0, y_scale, box[1]),
                                 resample=Image.Resampling.BILINEAR)

    def __call__(self, image) -> np.ndarray:
        image = _checked_image(image, "resize")
        height, width = self.target(*image.shape[:2])
        if (height, width) == image.shape[:2]:
            return image
        box = (0, 0, image.shape[1], image.shape[0])
        Image = _pil()
        if image.ndim == 3 and image.shape[2] == 3:
            return np.asarray(self.resample(Image.fromarray(image), height, width, box))
        planes = image.reshape(*image.shape[:2], -1)  # HxW: one plane
        out = [np.asarray(self.resample(Image.fromarray(planes[..., c]), height, width, box))
               for c in range(planes.shape[2])]
        return out[0] if image.ndim == 2 else np.stack(out, axis=-1)


def _checked_image(image, op: str) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise TypeError(f"{op}: expected a uint8 image, got dtype {image.dtype}; {op} before "
                        "to_float or normalize")
    if image.ndim not in (2, 3) or 0 in image.shape:
        raise ValueError(f"{op}: expected a (height, width, channels) or (height, width) "
                         f"image, got shape {image.shape}")
    return image


def resize(short_side: int | None = None, size=None, antialias: bool = True):
    """Bilinear resize to ``short_side`` or to ``size``: ``uint8`` -> ``uint8``.

    Args:
      short_side: scale so that the shorter side is ``short_side`` and the
        longer keeps the aspect ratio, rounded to the nearest int (halves up).
      size: ``(height, width)`` of every output.
      antialias: when shrinking, average over each output pixel's footprint
        (as ``tf.image.resize(antialias=True)`` and PIL) rather than sample
        2x2 pixels (tf's default ``antialias=False``). See the module docs.

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
    if short_side is not None:
        short_side = check.int_arg(short_side, "short_side", "resize", minimum=1)
    else:
        if isinstance(size, (str, bytes)) or not hasattr(size, "__len__") or len(size) != 2:
            raise TypeError(f"resize: size={size!r} must be a (height, width) pair, "
                            "e.g. size=(224, 224)")
        size = tuple(check.int_arg(s, "size", "resize", minimum=1) for s in size)
    return declare(_Resize(short_side, size, check.bool_arg(antialias, "antialias", "resize")))


class _ToFloat(_ImageUDF):
    def __init__(self, scale: float):
        super().__init__("to_float", f"to_float({scale!r})")
        self.scale = np.float32(scale)

    def __call__(self, x):
        return np.multiply(x, self.scale, dtype=np.float32)


def to_float(scale: float = 1 / 255):
    """``x * scale`` as ``float32`` (pointwise)."""
    return declare(_ToFloat(scale), pointwise=True)


def mean_std(mean, std, op: str) -> tuple[np.ndarray, np.ndarray]:
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


@functools.lru_cache(maxsize=64)
def _rows(mean: tuple, scale: tuple, width: int) -> tuple[np.ndarray, np.ndarray]:
    return np.tile(np.float32(mean), width), np.tile(np.float32(scale), width)


class _Normalize(_ImageUDF):
    def __init__(self, mean: np.ndarray, std: np.ndarray):
        super().__init__("normalize", f"normalize({mean.tolist()}, {std.tolist()})")
        self.mean, self.std = mean, std
        mean, std = np.broadcast_arrays(mean, std)
        # (x - mean) * (1 / std): as fast as x * scale + offset, without its cancellation;
        # within 2e-7 relative of dividing.
        self._mean = tuple(mean.reshape(-1).tolist())
        self._scale = tuple((1 / std.reshape(-1).astype(np.float64)).astype(np.float32).tolist())

    def __call__(self, x):
        x = np.asarray(x)
        channels = len(self._mean)
        if channels == 1:  # nothing to broadcast over a last axis
            out = np.subtract(x, np.float32(self._mean[0]), dtype=np.float32)
            out *= np.float32(self._scale[0])
            return out
        if x.ndim == 0 or x.shape[-1] != channels:
            raise ValueError(f"normalize: mean and std have {channels} channels, but the "
                             f"last axis of an input of shape {x.shape} does not")
        # One pass over rows of width * channels values: NumPy broadcasts a
        # 3-value last axis one pixel at a time, about 4x slower.
        width = x.shape[-2] if x.ndim > 1 else 1
        mean, scale = _rows(self._mean, self._scale, width)
        out = np.subtract(x.reshape(-1, width * channels), mean, dtype=np.float32)
        out *= scale
        return out.reshape(x.shape)


def normalize(mean, std):
    """``(x - mean) / std`` per channel, as ``float32`` (pointwise), on an image or a batch.

    ``mean`` and ``std`` are numbers or one per channel (the last axis).
    """
    return declare(_Normalize(*mean_std(mean, std, "normalize")), pointwise=True)


class _Crop(_ImageUDF):
    def __init__(self, name: str, height: int, width: int):
        super().__init__(name, f"{name}({height}, {width})")
        self.height, self.width = height, width

    def window(self, image_height: int, image_width: int, key=None) -> tuple[int, int]:
        """The crop's ``(top, left)`` in an image of that size: central, or from ``key``.

        The random offsets are the key's words modulo the number of places
        (the bias is below 1e-6 for any image), which costs a microsecond
        where a NumPy generator costs tens.
        """
        rows, cols = image_height - self.height + 1, image_width - self.width + 1
        if rows < 1 or cols < 1:
            raise ValueError(f"{self.__name__}: a {self.height}x{self.width} crop does not fit "
                             f"in an image of {image_height}x{image_width}")
        if key is None:
            return (rows - 1) // 2, (cols - 1) // 2
        first, second = _key_words(key)
        return first % rows, second % cols



class _CenterCrop(_Crop):
    def __call__(self, x):
        top, left = self.window(*np.shape(x)[:2])
        return x[top:top + self.height, left:left + self.width]


class _RandomCrop(_Crop):
    def __call__(self, x, key):
        top, left = self.window(*np.shape(x)[:2], key)
        return x[top:top + self.height, left:left + self.width]


def _crop(kind: type, name: str, height: int, width: int) -> _Crop:
    return kind(name, check.int_arg(height, "height", name, minimum=1),
                check.int_arg(width, "width", name, minimum=1))


def center_crop(height: int, width: int):
    """The central ``height x width`` window (a selection)."""
    return declare(_crop(_CenterCrop, "center_crop", height, width), selection=True)


def random_crop(height: int, width: int):
    """A ``height x width`` window at a place drawn from the element's key (``random_map``)."""
    return declare(_crop(_RandomCrop, "random_crop", height, width), selection=True)


def _key_words(key) -> tuple[int, int]:
    """The two uniformly random 32-bit words of an element's ``uint32[2]`` key."""
    words = np.asarray(key, np.uint32).reshape(-1)
    if words.shape != (2,):
        raise TypeError(f"expected a raw uint32[2] key (random_map's), got shape {words.shape}")
    return int(words[0]), int(words[1])


class _RandomFlip(_ImageUDF):
    def __init__(self):
        super().__init__("random_flip", "random_flip")

    @staticmethod
    def flips(key) -> bool:
        return bool(_key_words(key)[0] >> 31)

    def __call__(self, x, key):
        return x[:, ::-1] if self.flips(key) else x


def random_flip():
    """Mirrors left-right with probability 1/2, drawn from the element's key (``random_map``):
    its first word's top bit."""
    return declare(_RandomFlip(), selection=True)


class _DecodeResized(_ImageUDF):
    """``decode_jpeg``, ``resize`` and an optional crop and flip in one PIL chain (see the
    module docs). Random ops take their keys in order: ``random_crop``'s, ``random_flip``'s."""

    def __init__(self, resize: _Resize, crop: _Crop | None = None, flip: bool = False):
        parts = ["random_flip"] if flip else []
        parts += [crop.__qualname__] if crop is not None else []
        super().__init__("decode_resized",
                         ".".join([*parts, resize.__qualname__, "decode_jpeg"]))
        self.resize, self.crop, self.flip = resize, crop, flip

    def __call__(self, data, keys=None) -> np.ndarray:
        keys = None if keys is None else np.asarray(keys).reshape(-1, 2)
        picture = _open(data, "decode_jpeg")
        height, width = self.resize.target(picture.height, picture.width)
        # The whole original picture's box in the decoded one's pixels: (0, 0, width / s,
        # height / s) at DCT scale 1/s. A DCT-scaled decode averages pixels, as antialiasing
        # does; sampling 2x2 pixels of it would differ from sampling the full picture a lot.
        draft = self.resize.antialias and picture.draft("RGB", (width, height))
        box = draft[1] if draft else (0, 0, picture.width, picture.height)
        if picture.mode not in ("RGB", "L"):  # as decode_jpeg: CMYK to RGB first
            picture = picture.convert("RGB")
        top, left, out_height, out_width = 0, 0, height, width
        if self.crop is not None:
            random = isinstance(self.crop, _RandomCrop)
            top, left = self.crop.window(height, width, keys[0] if random else None)
            out_height, out_width = self.crop.height, self.crop.width
        x_scale, y_scale = box[2] / width, box[3] / height
        region = (left * x_scale, top * y_scale,
                  (left + out_width) * x_scale, (top + out_height) * y_scale)
        picture = self.resize.resample(picture, out_height, out_width, region)
        if self.flip and _RandomFlip.flips(keys[-1]):
            picture = picture.transpose(_pil().Transpose.FLIP_LEFT_RIGHT)
        return np.asarray(picture if picture.mode == "RGB" else picture.convert("RGB"))


def fused(inner, outer, outer_random: bool) -> _DecodeResized | None:
    """The UDF running the map ``inner`` then ``outer`` (a ``random_map``'s if
    ``outer_random``) as one chain, where ``decode_resize_fusion`` fuses them, else
    ``None``: ``decode_jpeg`` then ``resize``, then a crop, then ``random_flip``."""
    inner, outer = (fn.fn if isinstance(fn, Declared) else fn for fn in (inner, outer))
    if isinstance(outer, (_RandomCrop, _RandomFlip)) != outer_random:
        return None  # e.g. a center_crop in a random_map: it fails unfused too
    if isinstance(inner, _DecodeJpeg) and isinstance(outer, _Resize):
        return _DecodeResized(outer)
    if not isinstance(inner, _DecodeResized) or inner.flip:
        return None
    if isinstance(outer, _Crop) and inner.crop is None:
        return _DecodeResized(inner.resize, outer)
    if isinstance(outer, _RandomFlip):
        return _DecodeResized(inner.resize, inner.crop, flip=True)
    return None
