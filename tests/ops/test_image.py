"""Built-in image UDFs: real JPEG decoding, and crops and flips drawn from element keys."""

import io

import jax
import numpy as np
import pytest
from PIL import Image

import jdata
from jdata.ops import image


def _jpeg(pixels: np.ndarray, mode: str | None = None) -> bytes:
    buffer = io.BytesIO()
    picture = Image.fromarray(pixels)
    (picture.convert(mode) if mode else picture).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def test_decode_jpeg_gives_rgb_uint8_for_color_and_grayscale_files():
    rng = np.random.default_rng(0)
    smooth = np.clip(np.add.outer(np.arange(24), np.arange(32))[..., None] * 4
                     + rng.integers(0, 3, (24, 32, 3)), 0, 255).astype(np.uint8)
    color = image.decode_jpeg()(_jpeg(smooth))
    assert color.shape == (24, 32, 3) and color.dtype == np.uint8
    assert np.abs(color.astype(int) - smooth).mean() < 4  # lossy, but the same picture
    gray = image.decode_jpeg()(_jpeg(smooth, "L"))
    assert gray.shape == (24, 32, 3)
    assert (gray[..., 0] == gray[..., 1]).all()


def test_random_crop_and_flip_cover_every_choice_and_repeat_per_key():
    x = np.arange(6 * 5 * 1).reshape(6, 5, 1)

    def build():
        return (jdata.from_tensors(x).repeat(400)
                .random_map(image.random_crop(3, 3), jax.random.key(0))
                .random_map(image.random_flip(), jax.random.key(1)))

    crops = [c for c in build()]
    corners = {(int(c[0, 0, 0]), int(c[0, 2, 0])) for c in crops}
    # 4 x 3 places, each flipped or not: the top row's first and last values tell them apart.
    assert len(corners) == 24
    flipped = sum(int(c[0, 0, 0]) > int(c[0, 2, 0]) for c in crops)
    assert 140 < flipped < 260
    again = [c for c in build()]
    assert len(again) == 400 and all((a == b).all() for a, b in zip(crops, again))


def test_random_crop_larger_than_the_image_fails_clearly():
    with pytest.raises(jdata.UDFError) as raised:
        next(iter(jdata.from_tensors(np.zeros((4, 4, 3), np.uint8))
                  .random_map(image.random_crop(8, 8), jax.random.key(0))))
    assert "does not fit" in str(raised.value.__cause__)
