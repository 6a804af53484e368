"""Geometry kernels of jdata.ops.image against TensorFlow's outputs (fixtures written by
tests/ops/fixtures/make_image_geometry_fixtures.py): resize's methods, gaussian_blur,
sample_distorted_bounding_box's distributions; boxes through crops and flips."""

from __future__ import annotations

import fractions
import pickle

import jax
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import jdata
from jdata.ops import _image_boxes, image
from tests.helpers import check_restore_at_every_step, take_list
from tests.ops.fixtures import make_image_geometry_fixtures as fx

TF = np.load(fx.PATH)
AS_UINT8, AS_FLOAT, BLUR_INPUT = fx.inputs()
# Tolerances against tf, as _image_resize states them (on these fixtures: float32 1.3e-6 at
# most; uint8 1 level where OpenCV or PIL compute in fixed point, 0 for bicubic and nearest).
FLOAT_TOLERANCE, UINT8_TOLERANCE = 5e-5, 1


def _key(i: int, j: int = 26) -> np.ndarray:
    return np.array([i, j], np.uint32)


@pytest.mark.parametrize("method, antialias", fx.RESIZE_METHODS)
@pytest.mark.parametrize("size", fx.RESIZE_SIZES)
def test_resize_matches_tf_on_uint8_and_float(method, antialias, size):
    name = method + ("_antialias" if antialias else "")
    for dtype, x in (("uint8", AS_UINT8), ("float32", AS_FLOAT)):
        expected = TF[f"resize/{name}/{dtype}/{size[0]}x{size[1]}"].astype(np.float64)
        out = image.resize(size=size, antialias=antialias, method=method)(x)
        assert out.dtype == x.dtype and out.shape == (*size, 3)
        if dtype == "uint8":  # tf returns float32 unrounded: rounded, saturated
            difference = np.abs(out - np.clip(np.rint(expected), 0, 255)).max()
            exact = method in ("nearest", "bicubic")
            assert difference <= (0 if exact else UINT8_TOLERANCE), (name, dtype)
        else:
            assert np.abs(out - expected).max() <= FLOAT_TOLERANCE, (name, dtype)


def _keys_reference(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """Keys' cubic (a = -0.5), taps outside the image dropped, weights renormalized,
    antialiased (the kernel stretched by the shrink factor), in float64."""
    def weights(n_in, n_out):
        scale = max(n_in / n_out, 1.0)
        centers = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
        t = np.abs(np.arange(n_in)[None, :] - centers[:, None]) / scale
        w = np.where(t < 1, (1.5 * t - 2.5) * t * t + 1,
                     np.where(t < 2, ((-0.5 * t + 2.5) * t - 4) * t + 2, 0))
        return w / w.sum(axis=1, keepdims=True)
    return np.einsum("ij,jkc,lk->ilc", weights(x.shape[0], height), x.astype(np.float64),
                     weights(x.shape[1], width))


@pytest.mark.parametrize("shape, size", [((131, 170, 3), (57, 44)), ((40, 33, 2), (97, 120)),
                                         ((300, 64, 1), (64, 300))])
def test_bicubic_antialias_on_larger_images_is_the_formula(shape, size):
    x = np.random.default_rng(3).random(shape, dtype=np.float32)
    out = image.resize(size=size, method="bicubic", antialias=True)(x)
    np.testing.assert_allclose(out, _keys_reference(x, *size), atol=2e-5)


def _box_reference(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """tf's resize_area as a formula, in exact fractions: output ``i`` the mean of input
    ``[i * in / out, (i + 1) * in / out)``, each pixel weighted by the part inside."""
    def weights(n_in, n_out):
        w = np.zeros((n_out, n_in))
        for i in range(n_out):
            low, high = fractions.Fraction(i * n_in, n_out), fractions.Fraction((i + 1) * n_in,
                                                                               n_out)
            for j in range(int(low), min(n_in, int(np.ceil(high)))):
                w[i, j] = float((min(high, j + 1) - max(low, j)) / (high - low))
        return w
    return np.einsum("ij,jkc,lk->ilc", weights(x.shape[0], height), x.astype(np.float64),
                     weights(x.shape[1], width), optimize=True)


# Growing and shrinking, with box edges on pixel edges (203 -> 290: output row 90 is input
# row 63 alone; OpenCV's INTER_AREA took row 62 there) and off them.
@pytest.mark.parametrize("shape, size", [((203, 292, 3), (290, 387)), ((14, 9, 1), (20, 30)),
                                         ((131, 170, 4), (57, 44)), ((40, 33, 2), (97, 20))])
def test_area_is_the_box_formula_growing_and_shrinking(shape, size):
    x = np.random.default_rng(4).random(shape, dtype=np.float32)
    expected = _box_reference(x, *size)
    out = image.resize(size=size, method="area")(x)
    np.testing.assert_allclose(out, expected, atol=2e-5)
    as_uint8 = (x * 255).astype(np.uint8)
    rounded = image.resize(size=size, method="area")(as_uint8)
    assert np.abs(rounded - np.rint(_box_reference(as_uint8, *size))).max() <= UINT8_TOLERANCE


@pytest.mark.parametrize("method", ["bilinear", "bicubic", "nearest", "area"])
def test_resize_batches_planes_and_channels_agree_with_single_images(method):
    rng = np.random.default_rng(4)
    batch = rng.integers(0, 256, (3, 20, 26, 5), dtype=np.uint8)
    resize = image.resize(size=(11, 31), method=method)
    out = resize(batch)
    assert out.shape == (3, 11, 31, 5) and out.dtype == np.uint8
    for i in range(3):
        np.testing.assert_array_equal(out[i], resize(batch[i]))
        for c in (0, 4):
            np.testing.assert_array_equal(out[i, ..., c], resize(batch[i, ..., c]))
    assert resize(batch[0, ..., :1]).shape == (11, 31, 1)


def test_resize_methods_differ_where_tf_differs():
    x = AS_FLOAT
    outs = {m: image.resize(size=(7, 9), method=m)(x) for m in ("bilinear", "bicubic",
                                                               "nearest", "area")}
    for a, out in outs.items():
        for b, other in outs.items():
            assert a == b or np.abs(out - other).max() > 0.01
    assert outs["nearest"].dtype == np.float32


def test_resize_checks_method_and_warns_where_antialias_does_nothing():
    with pytest.raises(ValueError, match="method='lanczos3' must be one of 'bilinear'"):
        image.resize(size=(4, 4), method="lanczos3")
    with pytest.warns(UserWarning, match="antialias=True has no effect with method='area'"):
        image.resize(size=(4, 4), method="area", antialias=True)
    assert (image.resize(size=(4, 5), method="bicubic").__qualname__
            == "resize(size=(4, 5), method='bicubic')")


@pytest.mark.parametrize("kernel_size, sigma, padding", fx.BLURS)
def test_gaussian_blur_matches_simclr_in_tf(kernel_size, sigma, padding):
    expected = TF[f"blur/{kernel_size}/{sigma}/{padding}"]
    out = image.gaussian_blur(kernel_size, sigma, padding)(BLUR_INPUT)
    assert out.shape == expected.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, atol=1e-6)
    as_uint8 = (BLUR_INPUT * 255).astype(np.uint8)
    rounded = image.gaussian_blur(kernel_size, sigma, padding)(as_uint8)
    assert rounded.dtype == np.uint8
    exact = image.gaussian_blur(kernel_size, sigma, padding)(as_uint8.astype(np.float32))
    assert np.abs(rounded - exact).max() <= 0.5 + 1e-3


def test_gaussian_blur_batches_and_many_channels():
    batch = np.random.default_rng(5).random((2, 10, 12, 6), dtype=np.float32)
    blur = image.gaussian_blur(5, 1.2)
    out = blur(batch)
    np.testing.assert_allclose(out[1], blur(batch[1]), atol=0)
    np.testing.assert_allclose(out[1, ..., 5], blur(batch[1, ..., 5]), atol=0)


@pytest.mark.parametrize("sigma", [0.3, 0.5, 0.8, 1.0, 2.0])
def test_blur_taps_leave_no_subnormal_float_in_the_output(sigma):
    # SimCLR's radius 11 with sigma 0.3-0.8 gave taps near 1e-40: their products with the
    # pixels were subnormal floats, and the filter ran ten times slower on them (tf's
    # kernels flush subnormals to zero). A single lit pixel shows every tap's product.
    point = np.zeros((31, 31, 3), np.float32)
    point[15, 15] = 1.0
    out = image.gaussian_blur(22, sigma)(point)
    lit = np.abs(out[out != 0])
    assert lit.min() >= np.finfo(np.float32).tiny
    assert out[15, 15, 0] == out.max() and np.isclose(out.sum(), 3.0, atol=1e-5)


@pytest.mark.parametrize("call, error, match", [
    (lambda: image.gaussian_blur(0, 1.0), ValueError, "kernel_size=0 must be >= 1"),
    (lambda: image.gaussian_blur(3, 0.0), ValueError, "sigma=0.0 must be >= 1e-06"),
    (lambda: image.gaussian_blur(3, 1.0, "same"), ValueError, "padding='same' must be"),
    (lambda: image.random_gaussian_blur(3, (2.0, 1.0)), ValueError, "min <= max"),
    (lambda: image.random_gaussian_blur(3, p=1.5), ValueError,
     r"p=1.5 must be in \[0.0, 1.0\]"),
    (lambda: image.gaussian_blur(9, 1.0, "VALID")(np.zeros((6, 20), np.float32)), ValueError,
     "padding='VALID' needs an image larger than the kernel"),
    (lambda: image.gaussian_blur(3, 1.0)(np.zeros((6, 6), np.float64)), TypeError,
     "uint8 or float32 image, got dtype float64"),
])
def test_blur_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_random_gaussian_blur_applies_with_p_and_sigma_uniform():
    blur = image.random_gaussian_blur(9, (0.1, 2.0), p=0.5)
    sigmas = [blur.fn.sigma(_key(i)) for i in range(2000)]
    applied = [s for s in sigmas if s is not None]
    assert abs(len(applied) / 2000 - 0.5) < 4 * np.sqrt(0.25 / 2000)
    assert 0.1 <= min(applied) and max(applied) < 2.0
    assert abs(np.mean(applied) - 1.05) < 4 * 1.9 / np.sqrt(12 * len(applied))
    x = BLUR_INPUT
    for i in range(8):
        out, sigma = blur(x, _key(i)), sigmas[i]
        expected = x if sigma is None else image.gaussian_blur(9, sigma)(x)
        np.testing.assert_array_equal(out, expected)
    batch = blur(np.stack([x] * 16), _key(0))  # each image its own draw
    assert 0 < sum(not np.array_equal(b, x) for b in batch) < 16
    never, always = image.random_gaussian_blur(9, p=0.0), image.random_gaussian_blur(9, p=1.0)
    assert all(never.fn.sigma(_key(i)) is None for i in range(50))
    assert all(always.fn.sigma(_key(i)) is not None for i in range(50))


def _windows(setting, count: int = fx.DRAWS) -> np.ndarray:
    (height, width), boxes, covered, aspect, area, attempts = setting
    windows = []
    for i in range(count):
        begin, size, _ = image.sample_distorted_bounding_box(
            (height, width, 3), _key(i, 7), np.array(boxes, np.float32),
            min_object_covered=covered, aspect_ratio_range=aspect, area_range=area,
            max_attempts=attempts)
        windows.append([*begin[:2], *size[:2]])
    return np.array(windows)


@pytest.mark.parametrize("name", list(fx.SDBB_SETTINGS))
def test_sample_distorted_bounding_box_matches_tf_in_distribution(name):
    setting = fx.SDBB_SETTINGS[name]
    ours = fx.window_stats(_windows(setting), *setting[0]).reshape(-1)
    theirs = TF[f"sdbb/{name}"]
    for q, quantity in enumerate(fx.QUANTITIES):
        mean, std, low, high = ours[4 * q:4 * q + 4]
        tf_mean, tf_std, tf_low, tf_high = theirs[4 * q:4 * q + 4]
        spread = max(tf_high - tf_low, 1e-9)
        # Means within 4 standard errors; stds within 12%; extremes within 10% of the range.
        assert abs(mean - tf_mean) <= 4 * np.hypot(std, tf_std) / np.sqrt(fx.DRAWS) + 1e-9, \
            quantity
        assert abs(std - tf_std) <= 0.12 * tf_std + 1e-9, quantity
        assert abs(low - tf_low) <= 0.1 * spread + 1e-9 and \
            abs(high - tf_high) <= 0.1 * spread + 1e-9, quantity
    whole, tf_whole = ours[-1], theirs[-1]
    assert abs(whole - tf_whole) <= 4 * np.sqrt(2 * max(tf_whole * (1 - tf_whole), 1e-4)
                                                 / fx.DRAWS)


@settings(max_examples=150, deadline=None)
@given(height=st.integers(1, 400), width=st.integers(1, 400), seed=st.integers(0, 2**32 - 1),
       box=st.lists(st.floats(0, 1), min_size=4, max_size=4),
       covered=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]),
       aspect=st.tuples(st.floats(0.2, 1.0), st.floats(1.0, 5.0)),
       area=st.tuples(st.floats(0.01, 0.5), st.floats(0.5, 1.0)))
def test_windows_satisfy_the_constraints_or_are_the_whole_image(height, width, seed, box,
                                                                covered, aspect, area):
    box = [min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]), max(box[1], box[3])]
    begin, size, bbox = image.sample_distorted_bounding_box(
        (height, width), _key(seed, 1), [box], min_object_covered=covered,
        aspect_ratio_range=aspect, area_range=area)
    (y, x, _), (h, w, c) = begin, size
    assert begin.dtype == size.dtype == np.int32 and c == -1 and bbox.shape == (1, 1, 4)
    assert 0 <= y and 0 <= x and y + h <= height and x + w <= width and h >= 1 and w >= 1
    np.testing.assert_allclose(bbox.reshape(4), [y / height, x / width, (y + h) / height,
                                                 (x + w) / width], rtol=1e-6)
    if (h, w) == (height, width):
        return  # the fallback (or a window that happens to be the whole image)
    assert area[0] * height * width * (1 - 1e-6) <= h * w <= area[1] * height * width * (1 + 1e-6)
    x0, y0, x1, y1 = _image_boxes.pixel_boxes(np.array([box]), height, width)[0]
    if (x1 - x0) * (y1 - y0) >= 1:
        inside = max(0, min(y + h, y1) - max(y, y0)) * max(0, min(x + w, x1) - max(x, x0))
        assert inside / ((x1 - x0) * (y1 - y0)) >= covered - 1e-6


@pytest.mark.parametrize("kwargs, error, match", [
    ({"bounding_boxes": [[0, 0, 1.5, 1]]}, ValueError, "must be normalized, in \\[0, 1\\]"),
    ({"bounding_boxes": [0, 0, 1, 1]}, ValueError, "shape \\(n, 4\\) or \\(1, n, 4\\)"),
    ({"bounding_boxes": np.zeros((0, 4)), "use_image_if_no_bounding_boxes": False},
     ValueError, "no bounding boxes"),
    ({"area_range": (0.0, 1.0)}, ValueError, "area_range=\\(0.0, 1.0\\) must be a"),
    ({"area_range": (0.5, 1.2)}, ValueError, "<= 1.0"),
    ({"aspect_ratio_range": (2, 1)}, ValueError, "min <= max"),
    ({"aspect_ratio_range": "ab"}, TypeError, "pair of numbers"),
    ({"max_attempts": 0}, ValueError, "max_attempts=0 must be >= 1"),
    ({"min_object_covered": -0.1}, ValueError, "min_object_covered=-0.1 must be >= 0.0"),
])
def test_sample_distorted_bounding_box_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        image.sample_distorted_bounding_box((10, 10, 3), _key(0), **kwargs)


def test_random_resized_crop_crops_the_sampled_window_and_resizes():
    x = np.random.default_rng(6).integers(0, 256, (60, 80, 3), dtype=np.uint8)
    crop = image.random_resized_crop(24, 32)
    for i in range(5):
        y0, x0, h, w = crop.fn.window(60, 80, None, _key(i))
        expected = image.resize(size=(24, 32), method="bicubic")(x[y0:y0 + h, x0:x0 + w])
        np.testing.assert_array_equal(crop(x, _key(i)), expected)
    assert crop(x.astype(np.float32) / 255, _key(0)).dtype == np.float32
    assert crop(x[..., 0], _key(0)).shape == (24, 32)


def test_random_resized_crop_of_a_batch_gives_each_image_its_window():
    batch = np.stack([np.random.default_rng(7).random((50, 60, 3), dtype=np.float32)] * 6)
    out = image.random_resized_crop(16, 16, method="bilinear")(batch, _key(3))
    assert out.shape == (6, 16, 16, 3) and out.dtype == np.float32
    assert len({o.tobytes() for o in out}) == 6  # the same image, six windows
    crop = image.random_resized_crop(16, 16, method="bilinear").fn
    y, x, h, w = crop.window(50, 60, None, _key(3), 2)
    np.testing.assert_array_equal(out[2], crop.crop(batch[2], (y, x, h, w)))


@settings(max_examples=60, deadline=None)
@given(height=st.integers(20, 120), width=st.integers(20, 120), seed=st.integers(0, 2**32 - 1),
       corners=st.lists(st.floats(0.05, 0.95), min_size=4, max_size=4),
       covered=st.sampled_from([0.1, 0.5, 0.9]))
@example(height=22, width=87, seed=140034, corners=[0.5, 0.75, 0.625, 0.546875], covered=0.1)
def test_boxes_follow_the_pixels_through_crop_and_flip(height, width, seed, corners, covered):
    ymin, ymax = sorted(corners[:2])
    xmin, xmax = sorted(corners[2:])
    top, bottom = int(np.floor(ymin * height)), int(np.ceil(ymax * height))
    left, right = int(np.floor(xmin * width)), int(np.ceil(xmax * width))
    box = np.array([[top / height, left / width, bottom / height, right / width]], np.float32)
    marked = np.zeros((height, width), np.uint8)
    marked[top:bottom, left:right] = 255
    crop = image.random_resized_crop(height, width, method="nearest", boxes=True,
                                     min_object_covered=covered, area_range=(0.3, 1.0))
    out, boxes = crop(marked, box, _key(seed))
    if np.random.default_rng(seed).random() < 0.5:
        flip_key = np.array([1 << 31, 0], np.uint32)
        out, boxes = image.random_flip(boxes=True)(out, boxes, flip_key)
    assert boxes.dtype == np.float32 and boxes.shape == (1, 4)
    assert ((0 <= boxes) & (boxes <= 1)).all()
    rows, cols = np.nonzero(out)
    if not len(rows):  # the box was cropped out: degenerate, up to float32 rounding
        # (a box right of the crop clips to [0.9999999, 1.0]: 1e-7 of a pixel wide)
        extent = boxes[0, 2:] - boxes[0, :2]
        assert min(extent[0] * height, extent[1] * width) < 1e-3, boxes
        return
    # The marked pixels span the box, within a pixel of nearest-neighbour rounding.
    scale = np.array([height, width, height, width])
    found = np.array([rows.min(), cols.min(), rows.max() + 1, cols.max() + 1])
    assert np.abs(boxes[0] * scale - found).max() <= 1 + 1e-3


def test_random_flip_of_a_batch_flips_each_image_and_its_boxes():
    batch = np.arange(16 * 2 * 3).reshape(16, 2, 3, 1).astype(np.float32)
    boxes = np.tile(np.array([[[0.0, 0.1, 0.5, 0.3]]], np.float32), (16, 1, 1))
    out, flipped = image.random_flip(boxes=True)(batch, boxes, _key(9))
    mirrored = [bool((o != b).any()) for o, b in zip(out, batch)]
    assert 0 < sum(mirrored) < 16
    for o, b, f, m in zip(out, batch, flipped, mirrored):
        np.testing.assert_array_equal(o, b[:, ::-1] if m else b)
        np.testing.assert_allclose(f, [[0.0, 0.7, 0.5, 0.9]] if m else [[0.0, 0.1, 0.5, 0.3]],
                                   atol=1e-7)
    assert image.random_flip()(batch, _key(9)).shape == batch.shape
    # A selection on images, not on boxes (1 - x): only the first may move before maps.
    assert image.random_flip().traits.selection
    assert not image.random_flip(boxes=True).traits.selection


FLIPPED = [np.arange(5 * 4 * 3, dtype=np.uint8).reshape(5, 4, 3),
           np.arange(5 * 4, dtype=np.float32).reshape(5, 4),
           np.arange(5 * 4, dtype=np.uint16).reshape(5, 4, 1),
           np.arange(9 * 8 * 3, dtype=np.float64).reshape(9, 8, 3)[1:6, 2:7],  # a crop's view
           np.arange(9 * 8 * 3, dtype=np.float32).reshape(9, 8, 3)[::-1],
           np.arange(9 * 8 * 3, dtype=np.float32).reshape(9, 8, 3)[:, :, ::-1],
           np.arange(4 * 5 * 3).reshape(4, 5, 3) % 2 == 0,  # bool: OpenCV has no flip of it
           np.arange(4 * 5 * 3, dtype=np.int64).reshape(4, 5, 3),
           np.arange(4 * 5 * 600, dtype=np.float32).reshape(4, 5, 600)]


@pytest.mark.parametrize("picture", FLIPPED, ids=lambda p: f"{p.dtype}{p.shape}")
def test_a_flipped_image_is_a_contiguous_copy_where_opencv_takes_it(picture):
    """A NumPy mirror is a strided view, and every later NumPy pass over one is several
    times slower (a uint8 to float32 conversion of a 300x300 view: 0.5-0.9 ms against 0.09):
    `random_flip` hands OpenCV's contiguous copy on, the same pixels, the same shape."""
    key = _key(1 << 31)  # its first word's top bit: a key that mirrors
    assert image.random_flip()(np.array([[[0.0], [1.0]]]), key)[0, 0, 0] == 1
    out = image.random_flip()(picture, key)
    np.testing.assert_array_equal(out, picture[:, ::-1])
    assert out.shape == picture.shape and out.dtype == picture.dtype
    opencv_takes = picture.dtype not in (np.bool_, np.int64) and picture.shape[-1] <= 512 and (
        picture.strides[-1] == picture.itemsize)
    assert out.flags.c_contiguous == opencv_takes
    if opencv_takes:
        assert not np.shares_memory(out, picture)


@pytest.mark.parametrize("call, error, match", [
    (lambda: image.random_resized_crop(0, 4), ValueError, "height=0 must be >= 1"),
    (lambda: image.random_resized_crop(4, 4, method="cubic"), ValueError, "method='cubic'"),
    (lambda: image.random_resized_crop(4, 4, boxes=1), TypeError, "boxes=1 must be True"),
    (lambda: image.random_resized_crop(4, 4)(np.zeros((8, 8, 3), np.uint8), [[0, 0, 1, 1]],
                                             _key(0)),
     TypeError, "for \\(image, boxes\\) elements use random_resized_crop\\(..., boxes=True\\)"),
    (lambda: image.random_resized_crop(4, 4, boxes=True)(np.zeros((8, 8, 3), np.uint8),
                                                         _key(0)),
     TypeError, "boxes=True\\): expected \\(image, boxes\\) elements"),
    (lambda: image.random_resized_crop(4, 4, boxes=True)(np.zeros((8, 8, 3), np.uint8),
                                                         [0, 0, 1, 1], _key(0)),
     ValueError, "boxes must have shape \\(n, 4\\)"),
    (lambda: image.random_flip(boxes=True)(np.zeros((2, 8, 8, 3)), np.zeros((3, 1, 4)),
                                           _key(0)),
     ValueError, "\\(2, n, 4\\) for a batch of 2"),
])
def test_crop_and_flip_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_ssd_pipeline_restores_at_every_step():
    rng = np.random.default_rng(8)
    images = rng.integers(0, 256, (6, 40, 50, 3), dtype=np.uint8)
    boxes = np.tile(np.array([[[0.2, 0.2, 0.7, 0.6], [0.1, 0.5, 0.3, 0.9]]], np.float32),
                    (6, 1, 1))
    crop_key, flip_key, blur_key = jax.random.split(jax.random.key(0), 3)
    ds = (jdata.from_tensor_slices((images, boxes))
          .random_map(image.random_resized_crop(24, 24, boxes=True, area_range=(0.1, 1.0),
                                                aspect_ratio_range=(0.5, 2.0),
                                                min_object_covered=0.5), crop_key)
          .random_map(image.random_flip(boxes=True), flip_key)
          .map(lambda x, b: (x.astype(np.float32) / 255, b))
          .random_map(lambda x, b, k: (image.random_gaussian_blur(3)(x, k), b), blur_key))
    full = check_restore_at_every_step(ds)
    assert len(full) == 6 and all(x.shape == (24, 24, 3) and b.shape == (2, 4) for x, b in full)
    assert len({x.tobytes() for x, _ in full}) == 6
    later = take_list(ds)  # a new iterator is a new epoch: new keys, new windows
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(full, later))


def test_geometry_udfs_print_as_built_and_pickle():
    udfs = [image.random_resized_crop(8, 8), image.gaussian_blur(5, 1.0),
            image.random_gaussian_blur(5), image.random_flip(boxes=True)]
    assert [u.__qualname__ for u in udfs] == [
        ("random_resized_crop(8, 8, area_range=(0.08, 1.0), aspect_ratio_range="
         "(0.75, 1.3333333333333333), method='bicubic')"),
        "gaussian_blur(5, 1.0, padding='SAME')",
        "random_gaussian_blur(5, sigma_range=(0.1, 2.0), p=0.5)", "random_flip(boxes=True)"]
    x = np.random.default_rng(9).random((12, 14, 3), dtype=np.float32)
    for udf in udfs[:3]:
        again = pickle.loads(pickle.dumps(udf))
        args = (x,) if udf is udfs[1] else (x, _key(4))
        np.testing.assert_array_equal(again(*args), udf(*args))


def test_only_bilinear_resizes_and_flips_without_boxes_fuse_with_decoding():
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(10).integers(0, 256, (30, 40, 3), np.uint8)).save(
        buffer, "JPEG")
    source = jdata.from_source([buffer.getvalue()] * 3).map(image.decode_jpeg())
    key = jax.random.key(1)
    chains = {
        "bicubic": source.map(image.resize(size=(16, 16), method="bicubic")),
        "bilinear": source.map(image.resize(size=(16, 16))),
        "crop": source.random_map(image.random_resized_crop(16, 16), key),
        "flip": source.map(image.resize(size=(16, 16))).random_map(image.random_flip(), key),
    }
    fired = {name: "decode_resize_fusion" in ds.explain().splitlines()[0]
             for name, ds in chains.items()}
    assert fired == {"bicubic": False, "bilinear": True, "crop": False, "flip": True}
    off = jdata.Options(optimize=False)
    for ds in chains.values():
        for a, b in zip(take_list(ds), take_list(ds.with_options(off))):
            np.testing.assert_array_equal(a, b)


def test_random_maps_of_batches_draw_per_image_and_restore():
    images = np.random.default_rng(11).integers(0, 256, (8, 30, 40, 3), dtype=np.uint8)
    ds = (jdata.from_tensor_slices(images).batch(4)
          .random_map(image.random_resized_crop(12, 12), jax.random.key(2))
          .random_map(image.random_flip(), jax.random.key(3))
          .random_map(image.random_gaussian_blur(3, p=0.5), jax.random.key(4)))
    full = check_restore_at_every_step(ds)
    assert [b.shape for b in full] == [(4, 12, 12, 3)] * 2 and full[0].dtype == np.uint8
    assert len({x.tobytes() for b in full for x in b}) == 8
