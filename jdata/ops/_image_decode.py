"""The decoding kernels of ``jdata.ops.image``: an encoded image's bytes -> an RGB array,
refusing what a header declares too large before anything is allocated.

``decode(data, dtype, max_pixels)`` sniffs the format from the first bytes (as
``tf.io.decode_image``) and returns ``(height, width, 3)``:

- JPEG: libjpeg-turbo through simplejpeg with tf's settings (the fast integer
  DCT, tf's default ``dct_method``; fancy upsampling): the same pixels as tf's.
  CMYK and YCCK are converted to RGB with tf's integer formula. As with tf's
  default (``try_recover_truncated=False``), a truncated file is an error
  (libjpeg's "Premature end of JPEG file"), while a complete file whose entropy
  data is damaged ("Corrupt JPEG data: ... extraneous bytes") decodes, as tf's
  does (libjpeg's warnings are counted there, not raised).
- PNG: libpng through OpenCV (no gamma, no EXIF rotation, as tf's). 8/16-bit, gray,
  gray+alpha, RGB, RGBA, palette; 1/2/4-bit gray scaled to 8 bits (libpng's expansion, as tf's).
- GIF (first frame, as ``expand_animations=False``), BMP and WebP: PIL, which
  opens no other format here (EPS's plugin, for one, runs Ghostscript). PIL's
  ``LOAD_TRUNCATED_IMAGES`` (``False`` unless a program sets it) decides whether
  a truncated one is an error; tf's decoders always refuse it.

Channels are tf's ``channels=3``: gray is repeated, alpha dropped (not blended).
``dtype=np.uint8`` takes a 16-bit PNG's high byte (``v >> 8``: libpng's
``png_set_strip_16``, what tf returns); ``np.uint16`` keeps 16-bit samples and
widens 8-bit ones as tf does: ``v * 257`` for PNG, ``v * 256`` for the rest.

The limit, ``MAX_PIXELS``: tf refuses a JPEG when height * width * components
>= 2**29 (``jpeg_mem.cc``; a PNG when height * width >= 2**29, ``decode_image_op.cc``),
so that no decode allocates 512 MiB or more. ``MAX_PIXELS = 2**29 // 3``
(178,956,970) is that JPEG limit for the 3 channels returned here, one limit for
every format (a PNG's is 3x tf's): at most 512 MiB of ``uint8`` output. It is
also PIL's own refusal threshold (``2 * Image.MAX_IMAGE_PIXELS``), so PIL never
refuses what this limit allows; above it (``max_pixels`` raised) PIL-decoded
formats (GIF, BMP, WebP) stay under PIL's ``MAX_IMAGE_PIXELS``, which this
module never changes. Dimensions are read from the header (``header_size``)
before any pixel is, and the decoded pixels must match them.

Every failure that is the data's fault raises ``ImageDecodeError`` (a
``jdata.DecodeError``, so a ``map`` reports it as a ``jdata.DataError`` that
``ignore_errors()`` skips); a non-``bytes`` element is a ``TypeError``.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from jdata._errors import ImageDecodeError, ImageTooLargeError
from jdata._extras import require

MAX_PIXELS = (1 << 29) // 3

_PNG = b"\x89PNG\r\n\x1a\n"
# What PIL may open: tf's formats (no others: a plugin such as EPS runs Ghostscript).
_PIL_FORMATS = ("JPEG", "PNG", "GIF", "BMP", "WEBP")
# libjpeg's JWRN_JPEG_EOF: the data ended before the image did (a truncated file).
_TRUNCATED = "Premature end of JPEG file"


def image_format(data: bytes) -> str:
    """``"jpeg"``, ``"png"``, ``"gif"``, ``"bmp"`` from the magic bytes, else ``"other"``."""
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == _PNG:
        return "png"
    if data[:4] == b"GIF8":
        return "gif"
    return "bmp" if data[:2] == b"BM" else "other"


def header_size(data: bytes, kind: str) -> tuple[int, int]:
    """``(height, width)`` as the header declares them, read without decoding pixels:
    simplejpeg's JPEG header reader, PNG's IHDR, GIF's screen, BMP's DIB header, else
    PIL's lazy ``open``."""
    if kind == "jpeg" and _simplejpeg() is not None:
        return _simplejpeg().decode_jpeg_header(data)[:2]
    if kind == "png":
        if data[12:16] != b"IHDR":
            raise ImageDecodeError("the PNG's first chunk is not IHDR")
        width, height = struct.unpack(">II", data[16:24])
        return height, width
    if kind == "gif":
        width, height = struct.unpack("<HH", data[6:10])
        return height, width
    if kind == "bmp":
        if struct.unpack("<I", data[14:18])[0] == 12:  # OS/2 BITMAPCOREHEADER
            width, height = struct.unpack("<HH", data[18:22])
        else:  # a negative height: rows stored top-down
            width, height = struct.unpack("<ii", data[18:26])
        return abs(height), width
    picture = open_pil(data)
    return picture.height, picture.width


def checked_size(height: int, width: int, max_pixels: int, op: str) -> None:
    if height <= 0 or width <= 0:
        raise ImageDecodeError(f"the header declares a {width}x{height} image")
    if height * width > max_pixels:
        raise ImageTooLargeError(
            f"{op}: the header declares a {width}x{height} image ({width * height:,} pixels), "
            f"more than max_pixels={max_pixels:,}; refused before decoding. If such images "
            f"are expected, raise the limit: {op}(max_pixels={width * height})")


def decode(data, dtype=np.uint8, max_pixels: int = MAX_PIXELS,
           op: str = "decode_image") -> np.ndarray:
    """``data``'s pixels as ``(height, width, 3)`` ``dtype`` (see the module docs)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{op}: expected an encoded image's bytes, got {type(data).__name__}")
    data = bytes(data)
    kind = image_format(data)
    name = "image" if kind == "other" else kind.upper()
    try:
        if not data:
            raise ImageDecodeError("the element is empty (0 bytes)")
        height, width = header_size(data, kind)
        checked_size(height, width, max_pixels, op)
        if kind == "png":  # decoded to 8 bits directly where 8 are wanted
            image = _png(data, op, sixteen=dtype == np.uint16)
        else:
            image = (_jpeg if kind == "jpeg" else _pil)(data, max_pixels, op)
        if image.shape[:2] != (height, width):  # the limit checked holds for the pixels
            raise ImageDecodeError(f"the header declares {width}x{height}, the pixels are "
                                   f"{image.shape[1]}x{image.shape[0]}")
    except (ImageTooLargeError, MemoryError):  # (out of memory: not the data's fault)
        raise
    except Exception as e:  # ImageDecodeError, or a decoder's own type on a damaged file
        what = "" if isinstance(e, ImageDecodeError) else f"{type(e).__name__}: "
        raise ImageDecodeError(f"{op}: invalid {name} data ({len(data)} bytes): "
                               f"{what}{e}") from e
    return _converted(image, dtype, widen=257 if kind == "png" else 256)


def _converted(image: np.ndarray, dtype, widen: int) -> np.ndarray:
    if image.dtype == dtype:
        return image
    if dtype == np.uint8:  # 16-bit samples: the high byte
        return (image >> 8).astype(np.uint8)
    return np.multiply(image, np.uint16(widen), dtype=np.uint16)


def _simplejpeg():
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def _jpeg(data: bytes, max_pixels: int, op: str) -> np.ndarray:
    simplejpeg = _simplejpeg()
    if simplejpeg is None:
        return _pil(data, max_pixels, op)
    if simplejpeg.decode_jpeg_header(data)[2] in ("YCbCr", "Gray"):
        return _turbo(simplejpeg, data, "RGB")
    cmyk = _turbo(simplejpeg, data, "CMYK").astype(np.uint16)  # CMYK, YCCK
    # tf's conversion, in integers: an Adobe file stores inverted CMYK.
    ink, black = cmyk[..., :3], cmyk[..., 3:]
    if not _adobe(data):
        ink, black = 255 - ink, 255 - black
    return (ink * black // 255).astype(np.uint8)


def _turbo(simplejpeg, data: bytes, colorspace: str) -> np.ndarray:
    """libjpeg-turbo's decode with tf's settings: the fast integer DCT (tf's default
    ``dct_method``), fancy upsampling."""
    try:  # strict: libjpeg's warnings raise, so a truncated file is seen
        return simplejpeg.decode_jpeg(data, colorspace=colorspace, fastdct=True)
    except ValueError as e:
        if _TRUNCATED in str(e) or not data.rstrip(b"\0").endswith(b"\xff\xd9"):
            raise ImageDecodeError(f"truncated or corrupt: {e}") from e
    # Damaged entropy data in a complete file: tf decodes it and so do we.
    return simplejpeg.decode_jpeg(data, colorspace=colorspace, fastdct=True, strict=False)


def _adobe(data: bytes) -> bool:
    """Whether the JPEG has an Adobe APP14 segment (libjpeg's ``saw_Adobe_marker``)."""
    at = data.find(b"\xff\xee")
    while at != -1:
        if data[at + 4:at + 9] == b"Adobe":
            return True
        at = data.find(b"\xff\xee", at + 2)
    return False


def _png(data: bytes, op: str, sixteen: bool) -> np.ndarray:
    """libpng through OpenCV, to RGB: alpha stripped, gray and palette expanded, 16-bit
    samples stripped to their high byte (``png_set_strip_16``, as tf's) unless
    ``sixteen``; the file's EXIF orientation ignored (as tf's)."""
    cv2 = require("cv2", f"jdata.ops.image.{op}")
    flags = cv2.IMREAD_IGNORE_ORIENTATION | (cv2.IMREAD_ANYDEPTH if sixteen else 0)
    rgb = getattr(cv2, "IMREAD_COLOR_RGB", None)  # OpenCV >= 4.11
    image = cv2.imdecode(np.frombuffer(data, np.uint8),
                         flags | (cv2.IMREAD_COLOR if rgb is None else rgb))
    if image is None:
        raise ImageDecodeError("libpng failed: truncated or corrupt")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB) if rgb is None else image


def open_pil(data: bytes, max_pixels: int | None = None, op: str = "decode_image"):
    """``data`` opened by PIL (lazily: the header only), its size checked if
    ``max_pixels`` is given."""
    Image = require("PIL.Image", f"jdata.ops.image.{op}")
    try:  # (PIL warns above half its limit: a filter here would be global state)
        picture = Image.open(io.BytesIO(data), formats=_PIL_FORMATS)
    except Image.DecompressionBombError as e:
        raise ImageTooLargeError(
            f"{op}: {e} (PIL's own limit, PIL.Image.MAX_IMAGE_PIXELS, applies to the "
            "images PIL decodes: GIF, BMP, WebP)") from e
    if max_pixels is not None:
        checked_size(picture.height, picture.width, max_pixels, op)
    return picture


def _pil(data: bytes, max_pixels: int, op: str) -> np.ndarray:
    # PIL's size checked again: it may exceed the header's (a GIF frame beyond its screen).
    picture = open_pil(data, max_pixels, op)
    return np.asarray(picture if picture.mode == "RGB" else picture.convert("RGB"))


class DecodeImage:
    """The UDF of ``decode_png`` and ``decode_image``: picklable, printed as built."""

    def __init__(self, name: str, dtype: np.dtype, max_pixels: int):
        args = [f"dtype=np.{dtype.name}"] if dtype != np.uint8 else []
        args += [f"max_pixels={max_pixels}"] if max_pixels != MAX_PIXELS else []
        self.__name__, self.__qualname__ = name, f"{name}({', '.join(args)})" if args else name
        self.dtype, self.max_pixels = dtype, max_pixels
        for module in ("PIL.Image", "cv2"):  # fail where the pipeline is built
            require(module, f"jdata.ops.image.{name}")

    def __call__(self, data: bytes) -> np.ndarray:
        return decode(data, self.dtype, self.max_pixels, self.__name__)
