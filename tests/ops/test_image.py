"""Built-in image UDFs: real JPEG decoding, and crops and flips drawn from element keys."""

import io
import pickle
import subprocess
import sys

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


# NumPy references of the two resamplings, in float64 without rounding.

def _taps(n_in: int, n_out: int):
    """tf's half-pixel bilinear taps (``antialias=False``): edges repeat the last pixel."""
    centers = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
    low = np.floor(centers)
    return (np.clip(low, 0, n_in - 1).astype(int), np.clip(low + 1, 0, n_in - 1).astype(int),
            centers - low)


def _bilinear(x: np.ndarray, height: int, width: int) -> np.ndarray:
    x = x.astype(np.float64)
    (top, bottom, dy), (left, right, dx) = _taps(x.shape[0], height), _taps(x.shape[1], width)
    rows = x[top] + (x[bottom] - x[top]) * dy[:, None, None]
    return rows[:, left] + (rows[:, right] - rows[:, left]) * dx[None, :, None]


def _triangle_weights(n_in: int, n_out: int) -> np.ndarray:
    """``antialias=True``: a triangle over the output pixel's footprint (at least one input
    pixel either side), normalized over the pixels inside the image."""
    scale = n_in / n_out
    distance = (np.arange(n_in) + 0.5)[None, :] - ((np.arange(n_out) + 0.5) * scale)[:, None]
    weights = np.maximum(0.0, 1 - np.abs(distance) / max(scale, 1.0))
    return weights / weights.sum(axis=1, keepdims=True)


def _antialiased(x: np.ndarray, height: int, width: int) -> np.ndarray:
    return np.einsum("ij,jkc,lk->ilc", _triangle_weights(x.shape[0], height),
                     x.astype(np.float64), _triangle_weights(x.shape[1], width))


SIZES = [(20, 25), (50, 70), (9, 100), (64, 48), (33, 13)]


@pytest.mark.parametrize("size", SIZES)
def test_resize_is_half_pixel_bilinear_within_one_level(size):
    x = np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    smooth = image.resize(size=size, antialias=True)(x)
    assert smooth.shape == (*size, 3) and smooth.dtype == np.uint8
    # PIL rounds after each pass, and computes in fixed point.
    assert np.abs(smooth - _antialiased(x, *size)).max() <= 1 + 1e-9
    sampled = image.resize(size=size)(x)  # tf's default: OpenCV, in fixed point, rounded
    assert sampled.shape == (*size, 3) and sampled.dtype == np.uint8
    assert np.abs(sampled - _bilinear(x, *size)).max() <= 1 + 1e-9


def test_resize_antialias_only_matters_when_shrinking():
    x = np.random.default_rng(1).integers(0, 256, (30, 31, 3), dtype=np.uint8)
    enlarged = _bilinear(x, 50, 70)
    assert np.abs(image.resize(size=(50, 70), antialias=True)(x) - enlarged).max() <= 1 + 1e-9
    shrunk = image.resize(size=(10, 10), antialias=True)(x)
    assert np.abs(shrunk - _bilinear(x, 10, 10)).max() > 20  # sampling 2x2 pixels aliases


def test_resize_short_side_keeps_the_aspect_ratio_rounding_halves_up():
    def shape(h, w, side):
        return image.resize(short_side=side)(np.zeros((h, w, 3), np.uint8)).shape[:2]

    assert shape(6, 9, 4) == (4, 6)
    assert shape(9, 6, 4) == (6, 4)
    assert shape(4, 6, 3) == (3, 5)  # 4.5 rounds up
    assert shape(400, 300, 256) == (341, 256)  # 341.33
    assert shape(5, 5, 12) == (12, 12)
    same = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    assert image.resize(short_side=4)(same) is same  # already that size


def test_resize_takes_any_number_of_channels_as_planes():
    x = np.random.default_rng(2).integers(0, 256, (12, 16, 4), dtype=np.uint8)
    out = image.resize(size=(7, 9))(x)
    assert out.shape == (7, 9, 4)
    for c in range(4):
        np.testing.assert_array_equal(out[..., c], image.resize(size=(7, 9))(x[..., c]))
    assert image.resize(size=(7, 9))(x[..., :1]).shape == (7, 9, 1)
    np.testing.assert_array_equal(image.resize(size=(7, 9))(x[..., :3]), out[..., :3])
    np.testing.assert_array_equal(image.resize(size=(7, 9))(x[:, ::-1, :3]),
                                  image.resize(size=(7, 9))(x[:, ::-1, :3].copy()))


@pytest.mark.parametrize("kwargs, error, match", [
    ({}, ValueError, "exactly one of short_side and size"),
    ({"short_side": 256, "size": (224, 224)}, ValueError, "exactly one"),
    ({"short_side": 0}, ValueError, "short_side=0 must be >= 1"),
    ({"short_side": 2.5}, TypeError, "short_side=2.5 must be an int"),
    ({"short_side": True}, TypeError, "must be an int"),
    ({"size": 224}, TypeError, r"size=224 must be a \(height, width\) pair"),
    ({"size": (224,)}, TypeError, "pair"),
    ({"size": "ab"}, TypeError, "pair"),
    ({"size": (0, 3)}, ValueError, "size=0 must be >= 1"),
    ({"short_side": 8, "antialias": "yes"}, TypeError, "antialias='yes' must be True or False"),
])
def test_resize_bad_arguments_fail_when_built(kwargs, error, match):
    with pytest.raises(error, match=match):
        image.resize(**kwargs)


@pytest.mark.parametrize("bad, error, match", [
    (np.zeros((8, 8, 3), np.float64), TypeError, "uint8 or float32 image, got dtype float64"),
    (np.zeros((8,), np.uint8), ValueError, r"got shape \(8,\)"),
    (np.zeros((2, 2, 8, 8, 3), np.uint8), ValueError, "height, width, channels"),
    (np.zeros((0, 8, 3), np.uint8), ValueError, "got shape"),
])
def test_resize_bad_images_fail_clearly(bad, error, match):
    ds = jdata.from_tensors(bad).map(image.resize(short_side=4))
    with pytest.raises(jdata.UDFError) as raised:
        next(iter(ds))
    assert isinstance(raised.value.__cause__, error)
    assert raised.value.__cause__.args[0].startswith("resize: ")
    with pytest.raises(error, match=match):
        image.resize(short_side=4)(bad)


def test_decode_jpeg_refuses_what_is_not_bytes():
    with pytest.raises(TypeError, match="expected an encoded image's bytes, got ndarray"):
        image.decode_jpeg()(np.zeros(3, np.uint8))


@pytest.mark.parametrize("shape", [(5, 7, 3), (4, 5, 7, 3), (2, 3, 5, 7, 3), (3,)])
def test_normalize_equals_the_formula_on_images_and_batches(shape):
    mean, std = np.array([123.675, 116.28, 103.53]), np.array([58.395, 57.12, 57.375])
    x = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    out = image.normalize(mean, std)(x)
    assert out.dtype == np.float32 and out.shape == x.shape
    exact = (x - mean) / std
    np.testing.assert_allclose(out, exact, rtol=1e-6, atol=1e-7)
    as_float = image.normalize(mean, std)(x.astype(np.float32))
    np.testing.assert_allclose(as_float, exact, rtol=1e-6, atol=1e-7)
    strided = x[..., ::-1] if len(shape) > 1 else x
    np.testing.assert_allclose(image.normalize(mean, std)(strided), (strided - mean) / std,
                               rtol=1e-6, atol=1e-7)


def test_normalize_with_one_value_broadcasts_like_the_formula():
    x = np.arange(12, dtype=np.uint8).reshape(2, 3, 2)
    np.testing.assert_allclose(image.normalize(4, 2)(x), (x - 4.0) / 2)
    np.testing.assert_allclose(image.normalize([4], [2, 4])(x), (x - 4.0) / np.array([2, 4]))
    assert image.normalize(4, 2)(np.uint8(8)) == 2
    np.testing.assert_array_equal(image.to_float()(np.array([0, 255], np.uint8)), [0, 1])


@pytest.mark.parametrize("mean, std, error, match", [
    ([1, 2, 3], [1, 0, 1], ValueError, "has a zero"),
    ([1, 2, 3], [1, 2], ValueError, "mean has 3 channels and std 2"),
    ([[1, 2, 3]], 1, ValueError, "one per channel"),
    ([], 1, ValueError, "one per channel"),
    (float("nan"), 1, ValueError, "finite"),
    ("a", 1, TypeError, "mean='a' must be a number"),
])
def test_normalize_bad_arguments_fail_when_built(mean, std, error, match):
    with pytest.raises(error, match=match):
        image.normalize(mean, std)


def test_normalize_refuses_images_with_other_channels():
    with pytest.raises(ValueError, match="3 channels, but the last axis"):
        image.normalize([1, 2, 3], [1, 1, 1])(np.zeros((4, 4, 4), np.uint8))


def test_crops_check_their_arguments_and_fit():
    for crop in (image.center_crop, image.random_crop):
        with pytest.raises(ValueError, match="height=0 must be >= 1"):
            crop(0, 4)
        with pytest.raises(TypeError, match="width=2.0 must be an int"):
            crop(4, 2.0)
    with pytest.raises(ValueError, match="center_crop: a 5x5 crop does not fit in an image "
                                         "of 4x8"):
        image.center_crop(5, 5)(np.zeros((4, 8, 3)))
    x = np.arange(5 * 6).reshape(5, 6)
    np.testing.assert_array_equal(image.center_crop(3, 3)(x), x[1:4, 1:4])


def test_image_udfs_print_as_built_and_pickle():
    udfs = [image.decode_jpeg(), image.resize(short_side=256), image.resize(size=(4, 5),
            antialias=True), image.to_float(), image.normalize([1, 2], 3),
            image.center_crop(2, 3), image.random_crop(4, 5), image.random_flip()]
    assert [u.__qualname__ for u in udfs] == [
        "decode_jpeg", "resize(short_side=256)", "resize(size=(4, 5), antialias=True)",
        "to_float(0.00392156862745098)", "normalize([1.0, 2.0], 3.0)", "center_crop(2, 3)",
        "random_crop(4, 5)", "random_flip"]
    x = np.random.default_rng(0).integers(0, 256, (9, 8, 2), dtype=np.uint8)
    for udf in udfs[1:6]:
        again = pickle.loads(pickle.dumps(udf))
        np.testing.assert_array_equal(again(x), udf(x))
    assert "Map(fn=resize(short_side=256))" in str(jdata.range(1).map(udfs[1]).explain())


_EXIT_SCRIPT = """
import io, itertools, sys
import jax, numpy as np
from PIL import Image
import jdata
from jdata.ops import image

def jpeg(seed):
    pixels = np.random.default_rng(seed).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG")
    return buffer.getvalue()

k1, k2 = jax.random.split(jax.random.key(0))
ds = (jdata.from_source([jpeg(i) for i in range(16)]).repeat()
      .map(image.decode_jpeg(), num_parallel_calls=2)
      .map(image.resize(short_side=256), num_parallel_calls=2)
      .random_map(image.random_crop(224, 224), k1, num_parallel_calls=2)
      .random_map(image.random_flip(), k2, num_parallel_calls=2).batch(8))
it = ds.iterator()
for _ in itertools.islice(it, 5):
    pass
if sys.argv[1] == "close":
    it.close()   # and exit at once, the threads maybe still inside OpenCV
else:
    raise RuntimeError("the training step failed")   # exits with the iterator open
"""


@pytest.mark.slow
@pytest.mark.parametrize("how, code", [("close", 0), ("raise", 1)])
def test_exiting_while_threads_run_the_kernels_does_not_abort(tmp_path, how, code):
    # Threads inside OpenCV when the interpreter tore down aborted the process
    # ("terminate called without an active exception", exit code 134).
    script = tmp_path / "exit.py"
    script.write_text(_EXIT_SCRIPT)
    for _ in range(3):
        done = subprocess.run([sys.executable, str(script), how], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == code, done.stderr[-2000:]
        assert "terminate called" not in done.stderr


@pytest.mark.parametrize("parallel", [None, 2])
def test_truncated_and_foreign_bytes_are_element_errors_that_ignore_errors_skips(parallel):
    def jpeg(value):
        buffer = io.BytesIO()
        Image.new("RGB", (40, 30), (value, value, value)).save(buffer, "JPEG")
        return buffer.getvalue()

    good = [jpeg(10 * i) for i in range(6)]
    files = good[:2] + [good[2][:len(good[2]) // 2], b"not a jpeg"] + good[4:]
    ds = jdata.from_source(files).map(image.decode_jpeg(), num_parallel_calls=parallel)
    assert [int(x[0, 0, 0]) for x in ds.ignore_errors()] == [0, 10, 40, 50]
    with pytest.raises(jdata.UDFError) as raised:
        list(ds)
    assert raised.value.position == 2


def test_crops_take_each_image_of_a_batch():
    """A (N, H, W, C) batch is cropped on its image axes, not its batch axis (a probe: a
    2x2 crop of a (3, 6, 7, 3) batch came out (2, 2, 7, 3))."""
    batch = np.arange(3 * 6 * 7 * 3, dtype=np.uint8).reshape(3, 6, 7, 3)
    central = image.center_crop(2, 2)(batch)
    assert central.shape == (3, 2, 2, 3)
    assert all((central[i] == image.center_crop(2, 2)(batch[i])).all() for i in range(3))
    places = set()
    for seed in range(20):
        cropped = image.random_crop(2, 3)(batch, np.array([seed, 1], np.uint32))
        assert cropped.shape == (3, 2, 3, 3)
        for i in range(3):  # each a window of its own image
            rows = [(t, le) for t in range(5) for le in range(5)
                    if (batch[i, t:t + 2, le:le + 3] == cropped[i]).all()]
            assert rows
            places.add((i, rows[0]))
        again = image.random_crop(2, 3)(batch, np.array([seed, 1], np.uint32))
        assert (again == cropped).all()
    assert len({p for i, p in places if i == 0}) > 5  # the windows vary with the key
    assert len({p for i, p in places if i == 1}) > 5
