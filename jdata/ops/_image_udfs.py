"""The built-in image UDFs of ``jdata.ops.image`` (which documents them): picklable objects
(for worker processes) whose parameters the optimizer reads, printed as built."""

from __future__ import annotations

import functools

import numpy as np

from jdata._extras import require
from jdata.ops import _image_boxes, _image_random, _image_resize
from jdata.ops import _image_decode as decoding


class ImageUDF:
    """Base of the built-in UDFs: a picklable object (for worker processes) whose parameters
    the optimizer reads, printed as built (``resize(short_side=256)``)."""

    def __init__(self, name: str, text: str):
        self.__name__, self.__qualname__ = name, text


def pil(op: str = "jdata.ops.image"):
    return require("PIL.Image", op)


def cv2(op: str = "jdata.ops.image.resize(antialias=False)"):
    return require("cv2", op)


# The dtypes OpenCV's flip takes.
_CV2_DTYPES = frozenset(np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16,
                                                  np.int32, np.float32, np.float64))


def mirrored(image: np.ndarray) -> np.ndarray:
    """``image[:, ::-1]`` of an ``(H, W)`` or ``(H, W, C)`` image, as a C-contiguous copy where
    OpenCV is installed and takes the dtype: a strided view would make every later NumPy pass
    over it several times slower (a ``uint8`` to ``float32`` conversion of a 300x300 view
    takes 0.5-0.9 ms, of a copy 0.09 ms; NumPy's own copy of the view takes 1 ms, OpenCV's
    0.03 ms). Elsewhere, the view."""
    opencv = _opencv()
    # OpenCV takes rows of contiguous pixels at any row step (a crop's view), <= 512 channels.
    rows_of_pixels = image.strides[-1] == image.itemsize and (image.ndim == 2 or (
        image.ndim == 3 and image.shape[2] <= 512
        and image.strides[1] == image.itemsize * image.shape[2]))
    if opencv is None or image.dtype not in _CV2_DTYPES or not image.size or not rows_of_pixels:
        return image[:, ::-1]
    return opencv.flip(image, 1).reshape(image.shape)  # (H, W, 1) comes back (H, W)


@functools.cache
def _opencv():
    """OpenCV's module, or ``None`` where it is not installed (asked once per process)."""
    try:
        return require("cv2", "jdata.ops.image.random_flip")
    except ImportError:
        return None


class DecodeJpeg(ImageUDF):
    def __init__(self, max_pixels: int = decoding.MAX_PIXELS) -> None:
        text = ("decode_jpeg" if max_pixels == decoding.MAX_PIXELS
                else f"decode_jpeg(max_pixels={max_pixels})")
        super().__init__("decode_jpeg", text)
        self.max_pixels = max_pixels
        pil("jdata.ops.image.decode_jpeg")  # fail where the pipeline is built

    def __call__(self, data: bytes) -> np.ndarray:
        return decoding.decode(data, max_pixels=self.max_pixels, op="decode_jpeg")


class Resize(ImageUDF):
    def __init__(self, short_side: int | None, size: tuple[int, int] | None, antialias: bool,
                 method: str = "bilinear"):
        text = f"short_side={short_side}" if size is None else f"size={size}"
        text += ", antialias=True" if antialias else ""
        text += f", method={method!r}" if method != "bilinear" else ""
        super().__init__("resize", f"resize({text})")
        self.short_side, self.size, self.antialias = short_side, size, antialias
        self.method = method
        # Fail where the pipeline is built: PIL resamples uint8 (bilinear, antialias=True),
        # OpenCV and the band resampler the rest.
        if antialias and method == "bilinear":
            pil("jdata.ops.image.resize(antialias=True)")
        cv2()

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
        Image = pil()
        if self.antialias:
            return picture.resize((width, height), Image.Resampling.BILINEAR, box=box)
        # An affine transform samples 2x2 source pixels per output pixel, whatever the scale.
        x_scale, y_scale = (box[2] - box[0]) / width, (box[3] - box[1]) / height
        return picture.transform((width, height), Image.Transform.AFFINE,
                                 (x_scale, 0, box[0], 0, y_scale, box[1]),
                                 resample=Image.Resampling.BILINEAR)

    def sampled(self, image: np.ndarray, height: int, width: int) -> np.ndarray:
        """``antialias=False``: OpenCV's bilinear resize, half-pixel centers as tf's."""
        if image.ndim == 3 and image.shape[2] > 4:  # OpenCV takes at most 4 channels
            return np.stack([self.sampled(image[..., c], height, width)
                             for c in range(image.shape[2])], axis=-1)
        out = cv2().resize(image, (width, height), interpolation=cv2().INTER_LINEAR)
        return out.reshape(height, width, *image.shape[2:])  # OpenCV drops a last axis of 1

    def __call__(self, image: np.ndarray) -> np.ndarray:
        image = checked_image(image, "resize", floats=True, batches=True)
        height, width = self.target(*image.shape[image.ndim == 4:][:2])
        if (height, width) == image.shape[image.ndim == 4:][:2]:
            return image
        if image.ndim == 4:
            return np.stack([self.one(x, height, width) for x in image])
        return self.one(image, height, width)

    def one(self, image: np.ndarray, height: int, width: int) -> np.ndarray:
        """One image resized to ``height x width``."""
        if self.method != "bilinear" or image.dtype != np.uint8:
            planes = image if image.ndim == 3 else image[..., None]
            out = _image_resize.resize_image(planes, height, width, self.method, self.antialias)
            return out if image.ndim == 3 else out[..., 0]
        if not self.antialias:
            return self.sampled(image, height, width)
        box = (0, 0, image.shape[1], image.shape[0])
        Image = pil()
        if image.ndim == 3 and image.shape[2] == 3:
            return np.asarray(self.resample(Image.fromarray(image), height, width, box))
        planes = image.reshape(*image.shape[:2], -1)  # HxW: one plane
        out = [np.asarray(self.resample(Image.fromarray(planes[..., c]), height, width, box))
               for c in range(planes.shape[2])]
        return out[0] if image.ndim == 2 else np.stack(out, axis=-1)


def checked_image(image, op: str, floats: bool = False, batches: bool = False) -> np.ndarray:
    """``image`` as an array, refused (naming ``op``) unless ``uint8`` (or ``float32`` where
    ``floats``) of shape ``(H, W)``, ``(H, W, C)`` (or ``(N, H, W, C)`` where ``batches``)."""
    image = np.asarray(image)
    if image.dtype != np.uint8 and not (floats and image.dtype == np.float32):
        if floats:
            raise TypeError(f"{op}: expected a uint8 or float32 image, got dtype {image.dtype};"
                            " convert it first, e.g. image.astype(np.float32)")
        raise TypeError(f"{op}: expected a uint8 image, got dtype {image.dtype}; {op} before "
                        "to_float or normalize")
    if image.ndim not in ((2, 3, 4) if batches else (2, 3)) or 0 in image.shape:
        batch = " or a (batch, height, width, channels) batch" if batches else ""
        raise ValueError(f"{op}: expected a (height, width, channels) or (height, width) "
                         f"image{batch}, got shape {image.shape}")
    return image


class ToFloat(ImageUDF):
    def __init__(self, scale: float):
        super().__init__("to_float", f"to_float({scale!r})")
        self.scale = np.float32(scale)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.multiply(x, self.scale, dtype=np.float32)


@functools.lru_cache(maxsize=64)
def _rows(mean: tuple, scale: tuple, width: int) -> tuple[np.ndarray, np.ndarray]:
    return np.tile(np.float32(mean), width), np.tile(np.float32(scale), width)


class Normalize(ImageUDF):
    def __init__(self, mean: np.ndarray, std: np.ndarray):
        super().__init__("normalize", f"normalize({mean.tolist()}, {std.tolist()})")
        self.mean, self.std = mean, std
        mean, std = np.broadcast_arrays(mean, std)
        # (x - mean) * (1 / std): as fast as x * scale + offset, without its cancellation;
        # within 2e-7 relative of dividing.
        self._mean = tuple(mean.reshape(-1).tolist())
        self._scale = tuple((1 / std.reshape(-1).astype(np.float64)).astype(np.float32).tolist())

    def __call__(self, x: np.ndarray) -> np.ndarray:
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
        rows = x.reshape(-1, width * channels)
        out = np.empty(rows.shape, np.float32)
        # In blocks of about 256 KB of output, so the multiply finds the subtraction's
        # result in cache: a batch's float32 output is written to memory once, not twice.
        step = max(1, _BLOCK_VALUES // rows.shape[1])
        for start in range(0, rows.shape[0], step):
            block = out[start:start + step]
            np.subtract(rows[start:start + step], mean, out=block, dtype=np.float32)
            block *= scale
        return out.reshape(x.shape)


_BLOCK_VALUES = 1 << 16


class Crop(ImageUDF):
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
        first, second = _image_random.key_words(key)
        return first % rows, second % cols


class CenterCrop(Crop):
    """The central window of an image, or of each image of a ``(N, H, W, C)`` batch."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if np.ndim(x) == 4:
            top, left = self.window(*np.shape(x)[1:3])
            return x[:, top:top + self.height, left:left + self.width]
        top, left = self.window(*np.shape(x)[:2])
        return x[top:top + self.height, left:left + self.width]


class RandomCrop(Crop):
    """A window of an image at a place drawn from the key, or of each image of a
    ``(N, H, W, C)`` batch at its own place (stacked: a copy)."""

    def __call__(self, x, key):
        if np.ndim(x) != 4:
            top, left = self.window(*np.shape(x)[:2], key)
            return x[top:top + self.height, left:left + self.width]
        x = np.asarray(x)
        out = np.empty((len(x), self.height, self.width, *x.shape[3:]), x.dtype)
        for i, picture in enumerate(x):
            first, second = _image_random.words(key, 2, _image_boxes.stream(_CROP, i))
            top, left = self.window(*x.shape[1:3], np.array([first >> 32, second >> 32],
                                                            np.uint32))
            out[i] = picture[top:top + self.height, left:left + self.width]
        return out


# random_crop's stream base on batches (``_image_boxes.stream``): "RCRP".
_CROP = 0x52435250


class RandomFlip(ImageUDF):
    """Mirrors an image (the key's first word's top bit says whether) or each image of a
    ``(N, H, W, C)`` batch (each its own draw); with ``boxes``, ``(image, boxes)``."""

    def __init__(self, boxes: bool = False) -> None:
        super().__init__("random_flip", "random_flip(boxes=True)" if boxes else "random_flip")
        self.boxes = boxes

    @staticmethod
    def flips(key) -> bool:
        return bool(_image_random.key_words(key)[0] >> 31)

    def __call__(self, x: np.ndarray, *args):
        boxes, key = _image_boxes.split_element(args, self.boxes, "random_flip")
        x = np.asarray(x)
        if x.ndim != 4:  # an image
            flip = self.flips(key)
            out = mirrored(x) if flip else x
            if boxes is None:
                return out
            boxes = _image_boxes.checked_boxes(boxes, "random_flip")
            return out, _image_boxes.flipped_boxes(boxes) if flip else boxes
        words = [_image_random.words(key, 1, _image_boxes.stream(_image_boxes.FLIP, i))[0]
                 for i in range(len(x))]
        flip = np.array([w >> 63 for w in words], bool)
        out = np.array(x)  # each image a copy, mirrored or not
        for i in np.flatnonzero(flip):
            out[i] = mirrored(x[i])
        if boxes is None:
            return out
        boxes = _image_boxes.checked_boxes(boxes, "random_flip", len(x))
        return out, np.where(flip[:, None, None], _image_boxes.flipped_boxes(boxes), boxes)


class DecodeResized(ImageUDF):
    """``decode_jpeg``, ``resize`` and an optional crop and flip in one PIL chain (see the
    module docs). Random ops take their keys in order: ``random_crop``'s, ``random_flip``'s."""

    def __init__(self, resize: Resize, crop: Crop | None = None, flip: bool = False,
                 decode: DecodeJpeg | None = None):
        decode = DecodeJpeg() if decode is None else decode
        parts = ["random_flip"] if flip else []
        parts += [crop.__qualname__] if crop is not None else []
        super().__init__("decode_resized",
                         ".".join([*parts, resize.__qualname__, decode.__qualname__]))
        self.resize, self.crop, self.flip, self.decode = resize, crop, flip, decode

    def __call__(self, data, keys=None) -> np.ndarray:
        keys = None if keys is None else np.asarray(keys).reshape(-1, 2)
        if not self.resize.antialias or not _drafts(data):
            return self._decoded(data, keys)
        try:  # the decode's errors and limit, as unfused
            return self._drafted(data, keys)
        except decoding.ImageDecodeError:
            raise
        except Exception as e:  # PIL's own error types on a damaged file
            raise decoding.ImageDecodeError(f"decode_jpeg: invalid JPEG data ({len(data)} "
                                            f"bytes): {type(e).__name__}: {e}") from e

    def _drafted(self, data: bytes, keys) -> np.ndarray:
        """``antialias=True`` on a JPEG: decoded at a reduced DCT scale by PIL."""
        picture = decoding.open_pil(data, self.decode.max_pixels, "decode_jpeg")
        full_size = picture.size  # only the header is read so far
        height, width = self.resize.target(picture.height, picture.width)
        # The whole original picture's box in the decoded one's pixels: (0, 0, width / s,
        # height / s) at DCT scale 1/s. A DCT-scaled decode averages pixels, as antialiasing
        # does; sampling 2x2 pixels of it would differ from sampling the full picture a lot.
        draft = picture.draft("RGB", (width, height))
        if picture.size == full_size:  # no DCT scaling: decode_jpeg's pixels, as unfused
            return self._decoded(data, keys)
        box = draft[1] if draft else (0, 0, picture.width, picture.height)
        if picture.mode not in ("RGB", "L"):  # as decode_jpeg: CMYK to RGB first
            picture = picture.convert("RGB")
        top, left, out_height, out_width = 0, 0, height, width
        if self.crop is not None:
            random = isinstance(self.crop, RandomCrop)
            top, left = self.crop.window(height, width, keys[0] if random else None)
            out_height, out_width = self.crop.height, self.crop.width
        x_scale, y_scale = box[2] / width, box[3] / height
        region = (left * x_scale, top * y_scale,
                  (left + out_width) * x_scale, (top + out_height) * y_scale)
        picture = self.resize.resample(picture, out_height, out_width, region)
        if self.flip and RandomFlip.flips(keys[-1]):
            picture = picture.transpose(pil().Transpose.FLIP_LEFT_RIGHT)
        return np.asarray(picture if picture.mode == "RGB" else picture.convert("RGB"))

    def _decoded(self, data, keys) -> np.ndarray:
        """``antialias=False`` (or not a JPEG): the unfused ops' arithmetic in one call, so
        the same pixels (a full decode: sampling 2x2 pixels of a DCT-scaled one would
        differ a lot)."""
        image = self.decode(data)
        height, width = self.resize.target(*image.shape[:2])
        image = self.resize(image)
        if self.crop is not None:
            random = isinstance(self.crop, RandomCrop)
            top, left = self.crop.window(height, width, keys[0] if random else None)
            image = image[top:top + self.crop.height, left:left + self.crop.width]
        if self.flip and RandomFlip.flips(keys[-1]):
            return mirrored(image)
        return image


def _drafts(data) -> bool:
    """Whether PIL decodes ``data`` at a reduced DCT scale: a JPEG read without a loss
    of bits (a 16-bit PNG through PIL would lose them: it is decoded in full instead)."""
    is_bytes = isinstance(data, (bytes, bytearray, memoryview))
    return is_bytes and decoding.image_format(bytes(data[:3])) == "jpeg"
