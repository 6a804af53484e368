"""The color kernels of jdata.ops.image against tf.image's outputs and draws (fixtures written
by tests/ops/fixtures/make_image_color_fixtures.py with TensorFlow), and their UDF contract."""

import os
import pickle

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jdata
from jdata.ops import image
from tests.helpers import check_restore_at_every_step
from tests.ops.fixtures import make_image_color_fixtures as made

_FIXTURES = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "image_color.npz"))
U8, F32, WIDE = (_FIXTURES[k] for k in ("images_u8", "images_f32", "wide_f32"))
KEY = np.array([3, 2026], np.uint32)
ADJUST = {"adjust_brightness": image.adjust_brightness, "adjust_contrast": image.adjust_contrast,
          "adjust_saturation": image.adjust_saturation, "adjust_hue": image.adjust_hue}
# Largest difference from tf's outputs: uint8 in levels, float32 in value.
U8_LEVELS = {"adjust_brightness": 0, "adjust_contrast": 1, "adjust_saturation": 1,
             "adjust_hue": 1}
F32_ERROR = {"adjust_brightness": 1e-7, "adjust_contrast": 1e-6, "adjust_saturation": 2e-6,
             "adjust_hue": 3e-6}


# Saturation and hue of float images outside [0, 1] are not compared (see _image_hsv).
@pytest.mark.parametrize("op, inputs", [(op, inputs) for op in sorted(ADJUST)
                                        for inputs in ("u8", "f32", "wide")
                                        if inputs != "wide" or op in ("adjust_brightness",
                                                                      "adjust_contrast")])
def test_adjust_ops_match_tf_on_images_and_batches(op, inputs):
    x = {"u8": U8, "f32": F32, "wide": WIDE}[inputs]
    for arg, expected in zip(_FIXTURES[f"{op}_args"], _FIXTURES[f"{op}_{inputs}"]):
        udf = ADJUST[op](float(arg))
        out = udf(x)
        assert out.dtype == x.dtype and out.shape == x.shape
        if inputs == "u8":
            difference = np.abs(out.astype(int) - expected)
            assert difference.max() <= U8_LEVELS[op], (op, arg)
            assert (difference > 0).mean() < 0.01, (op, arg)  # a rare rounding, not a bias
        else:
            np.testing.assert_allclose(out, expected, rtol=1e-6, atol=F32_ERROR[op])
        for i in range(len(x)):  # one image alone: the same as in the batch
            np.testing.assert_array_equal(udf(x[i]), out[i])


@pytest.mark.parametrize("keep_channels", [False, True])
def test_rgb_to_grayscale_matches_tf(keep_channels):
    gray = image.rgb_to_grayscale(keep_channels)
    channels = 3 if keep_channels else 1
    for x, expected in ((U8, _FIXTURES["rgb_to_grayscale_u8"]),
                        (F32, _FIXTURES["rgb_to_grayscale_f32"])):
        out = gray(x)
        assert out.shape == (*x.shape[:-1], channels) and out.dtype == x.dtype
        np.testing.assert_allclose(out.astype(float), np.repeat(expected, channels, -1),
                                   atol=2e-7, rtol=0)
        assert gray(x[0]).shape == (*x.shape[1:-1], channels)


def test_convert_image_dtype_matches_tf_for_every_pair_in_range():
    kinds = ["uint8", "uint16", "float32", "float64"]
    for source in kinds:
        x = _FIXTURES[f"convert_source_{source}"]
        for target in kinds:
            for saturate in (False, True):
                expected = _FIXTURES[f"convert_{source}_{target}{'_saturate' * saturate}"]
                out = image.convert_image_dtype(np.dtype(target), saturate)(x)
                assert out.dtype == expected.dtype, (source, target)
                np.testing.assert_array_equal(out, expected, err_msg=f"{source}->{target}")
    out = image.convert_image_dtype(np.uint8, saturate=True)(WIDE)
    np.testing.assert_array_equal(out, _FIXTURES["convert_wide_uint8_saturate"])


def _same_distribution(ours: np.ndarray, tf_stats: np.ndarray, span: float, label: str,
                       extremes: float = 0.02):
    """``ours`` (2000 draws) against tf's draws' statistics (``made.stats``): the means
    within 5 standard errors, standard deviations within 8%, our share below each of tf's
    deciles within 0.062 of its level (a two-sample Kolmogorov-Smirnov bound at p = 0.001),
    the min and max within ``extremes`` of the range."""
    mine = made.stats(ours)
    error = np.sqrt((mine[1] ** 2 + tf_stats[1] ** 2) / len(ours))
    assert np.all(np.abs(mine[0] - tf_stats[0]) <= 5 * error + 1e-9), (label, "means")
    assert np.all(np.abs(mine[1] - tf_stats[1]) <= 0.08 * tf_stats[1] + 1e-6), (label, "stds")
    assert np.all(np.abs(mine[2:4] - tf_stats[2:4]) <= extremes * span), (label, "extremes")
    for level, decile in zip(np.arange(1, 10) / 10, tf_stats[4:]):
        # Atoms (clipped 0s and 1s) and OpenCV's HSV's roundings: compare within 1e-5.
        below, at_most = (ours < decile - 1e-5).mean(0), (ours <= decile + 1e-5).mean(0)
        assert np.all(below <= level + 0.062) and np.all(at_most >= level - 0.062), (
            label, "decile", level)


def _batch(pixel, count=made.DRAWS) -> np.ndarray:
    return np.broadcast_to(np.asarray(pixel, np.float32), (count, *np.shape(pixel))).copy()


@pytest.mark.parametrize("max_delta", made.RANDOM["brightness"])
def test_random_brightness_draws_as_tf(max_delta):
    out = image.random_brightness(max_delta)(_batch(np.full((2, 2, 1), 0.5)), KEY)
    deltas = out[:, 0, 0, 0] - 0.5
    assert np.abs(deltas).max() <= max_delta
    _same_distribution(deltas, _FIXTURES[f"brightness_{max_delta}"], 2 * max_delta, "brightness")


@pytest.mark.parametrize("low, high", made.RANDOM["contrast"])
def test_random_contrast_draws_as_tf(low, high):
    out = image.random_contrast(low, high)(_batch([[[0.25], [0.75]]]), KEY)
    factors = (out[:, 0, 1, 0] - 0.5) / 0.25
    assert low - 1e-5 <= factors.min() and factors.max() <= high + 1e-5
    _same_distribution(factors, _FIXTURES[f"contrast_{low}_{high}"], high - low, "contrast")


@pytest.mark.parametrize("low, high", made.RANDOM["saturation"])
def test_random_saturation_draws_as_tf(low, high):
    out = image.random_saturation(low, high)(_batch([[made.SATURATION_PIXEL]]), KEY)
    factors = (1 - out.min(axis=(1, 2, 3)) / 0.8) / 0.5
    _same_distribution(factors, _FIXTURES[f"saturation_{low}_{high}"], high - low, "saturation")


@pytest.mark.parametrize("max_delta", made.RANDOM["hue"])
def test_random_hue_draws_as_tf(max_delta):
    pixel = np.array([[made.HUE_PIXEL]], np.float32)
    out = image.random_hue(max_delta)(_batch(pixel), KEY)
    deltas = (made.hue_of(out[:, 0, 0]) - made.hue_of(pixel[0, 0]) + 0.5) % 1.0 - 0.5
    _same_distribution(deltas, _FIXTURES[f"hue_{max_delta}"], 2 * max_delta, "hue")


@pytest.mark.parametrize("setting", range(len(made.JITTER)))
def test_color_jitter_outputs_distribute_as_simclrs(setting):
    b, c, s, h, random_order, multiplicative, p = made.JITTER[setting]
    jitter = image.color_jitter(b, c, s, h, random_order=bool(random_order), p=p,
                                brightness_mode="multiplicative" if multiplicative
                                else "additive")
    square = _FIXTURES["jitter_image"]
    out = jitter(_batch(square), KEY)
    assert out.dtype == np.float32 and out.min() >= 0 and out.max() <= 1
    tf_stats = _FIXTURES[f"jitter_{setting}"]
    _same_distribution(out, tf_stats, 1.0, f"jitter {setting}", extremes=0.1)
    same = np.mean([(o == square).all() for o in out])
    assert abs(same - float(_FIXTURES[f"jitter_{setting}_same"])) < 0.05


def test_random_ops_draw_per_image_and_repeat_per_key():
    x = _batch(F32[0], 4)
    for udf in (image.random_brightness(0.3), image.random_contrast(0.5, 1.5),
                image.random_saturation(0.5, 1.5), image.random_hue(0.3),
                image.color_jitter(0.8, 0.8, 0.8, 0.2), image.random_grayscale(0.5)):
        out = udf(x, KEY)
        np.testing.assert_array_equal(udf(x, KEY), out)  # a key gives the same draws
        np.testing.assert_array_equal(udf(x[0], KEY), out[0])  # image 0: the batch's first
        assert len({o.tobytes() for o in out}) > 1, udf.__qualname__  # each its own draw
        other = udf(x, np.array([4, 2026], np.uint32))
        assert not np.array_equal(other, out), udf.__qualname__


def test_random_ops_on_uint8_are_their_float_results_converted_back():
    for udf in (image.random_brightness(0.3), image.random_saturation(0.5, 1.5),
                image.random_hue(0.3), image.color_jitter(0.8, 0.8, 0.8, 0.2)):
        as_float = udf(image.convert_image_dtype(np.float32)(U8), KEY)
        expected = image.convert_image_dtype(np.uint8, saturate=True)(as_float)
        out = udf(U8, KEY)
        assert out.dtype == np.uint8
        # brightness: the same table arithmetic; the rest: a float32 rounding apart
        assert np.abs(out.astype(int) - expected).max() <= (0 if "bright" in udf.__qualname__
                                                            else 1)
    contrast = image.random_contrast(0.5, 1.5)
    expected = image.convert_image_dtype(np.uint8, saturate=True)(
        contrast(image.convert_image_dtype(np.float32)(U8), KEY))
    assert np.abs(contrast(U8, KEY).astype(int) - expected).max() <= 1


def test_random_grayscale_turns_a_share_p_gray_and_leaves_the_rest():
    x = _batch(F32[1], 1000)
    out = image.random_grayscale(0.2)(x, KEY)
    gray = np.array([(o[..., 0] == o[..., 2]).all() for o in out])
    assert 0.16 < gray.mean() < 0.24
    np.testing.assert_array_equal(out[~gray], x[~gray])
    np.testing.assert_allclose(out[gray][..., :1], image.rgb_to_grayscale()(x[gray]), atol=2e-7)
    np.testing.assert_array_equal(image.random_grayscale(0.0)(x, KEY), x)
    assert (image.random_grayscale(1.0)(U8, KEY)[..., 1] == image.rgb_to_grayscale()(U8)[..., 0]
            ).all()


def test_color_jitter_p_zero_is_the_identity_and_zero_strengths_only_clip():
    x = WIDE[0]
    np.testing.assert_array_equal(image.color_jitter(0.8, 0.8, 0.8, 0.2, p=0.0)(x, KEY), x)
    np.testing.assert_array_equal(image.color_jitter()(x, KEY), np.clip(x, 0, 1))
    # brightness alone, in order: x * factor then a clip, factor in [0.5, 1.5)
    out = image.color_jitter(0.5, random_order=False)(_batch(np.full((1, 1, 1), 0.5), 500), KEY)
    assert 0.25 <= out.min() < 0.3 and 0.7 < out.max() < 0.75
    additive = image.color_jitter(0.1, brightness_mode="additive")
    out = additive(_batch(np.full((1, 1, 1), 0.5), 500), KEY)
    assert 0.4 <= out.min() < 0.41 and 0.59 < out.max() < 0.6


def test_two_dimensional_and_one_channel_images():
    x = U8[0, ..., 0]
    for udf in (image.adjust_brightness(0.1), image.adjust_contrast(1.5)):
        out = udf(x)
        assert out.shape == x.shape and out.dtype == np.uint8
        np.testing.assert_array_equal(udf(x[..., None])[..., 0], out)
        np.testing.assert_array_equal(udf(U8[..., :1])[0, ..., 0], out)
    f = F32[0, ..., 0]
    np.testing.assert_allclose(image.adjust_contrast(2.0)(f), (f - f.mean()) * 2 + f.mean(),
                               atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.floats(-1, 1), st.integers(0, 2**32 - 1))
def test_hue_turned_back_and_saturation_one_are_identities(delta, seed):
    x = np.random.default_rng(seed).random((3, 5, 3), dtype=np.float32)
    back = image.adjust_hue(-delta)(image.adjust_hue(delta)(x))
    np.testing.assert_allclose(back, x, atol=1e-5)
    np.testing.assert_allclose(image.adjust_saturation(1.0)(x), x, atol=2e-6)


@pytest.mark.parametrize("build, error, match", [
    (lambda: image.adjust_brightness("a"), TypeError, "adjust_brightness: delta='a' must"),
    (lambda: image.adjust_brightness(float("nan")), ValueError, "delta=nan must be finite"),
    (lambda: image.adjust_contrast(True), TypeError, "contrast_factor=True must be a number"),
    (lambda: image.adjust_saturation(-0.5), ValueError, "saturation_factor=-0.5 must be >= 0"),
    (lambda: image.adjust_hue(1.5), ValueError, r"adjust_hue: delta=1.5 must be in \[-1.0, 1.0\]"),
    (lambda: image.random_brightness(-0.1), ValueError, "max_delta=-0.1 must be >= 0"),
    (lambda: image.random_contrast(1.5, 0.5), ValueError, "upper=0.5 must be > lower=1.5"),
    (lambda: image.random_contrast(-0.5, 1.5), ValueError, "lower=-0.5 must be >= 0"),
    (lambda: image.random_saturation(1.0, 1.0), ValueError, "must be > lower"),
    (lambda: image.random_hue(0.6), ValueError, r"max_delta=0.6 must be in \[0.0, 0.5\]"),
    (lambda: image.rgb_to_grayscale(1), TypeError, "keep_channels=1 must be True or False"),
    (lambda: image.random_grayscale(1.5), ValueError, r"p=1.5 must be in \[0.0, 1.0\]"),
    (lambda: image.random_grayscale(keep_channels=False), ValueError, "1-channel and 3-channel"),
    (lambda: image.color_jitter(contrast=1.2), ValueError, r"contrast=1.2 must be in \[0.0, 1.0\]"),
    (lambda: image.color_jitter(hue=0.7), ValueError, "hue=0.7"),
    (lambda: image.color_jitter(brightness=-1), ValueError, "brightness=-1.0 must be >= 0"),
    (lambda: image.color_jitter(brightness_mode="x"), ValueError, "brightness_mode='x' must be"),
    (lambda: image.color_jitter(random_order=None), TypeError, "random_order=None"),
    (lambda: image.convert_image_dtype(np.int8), ValueError, "dtype=int8 is not one of"),
    (lambda: image.convert_image_dtype("nope"), TypeError, "dtype='nope' is not a dtype"),
    (lambda: image.convert_image_dtype(np.float32, saturate=1), TypeError, "saturate=1"),
])
def test_bad_arguments_fail_when_built(build, error, match):
    with pytest.raises(error, match=match):
        build()


@pytest.mark.parametrize("udf, bad, error, match", [
    (image.adjust_brightness(0.1), np.zeros((4, 4, 3), np.float64), TypeError,
     "adjust_brightness: expected a uint8 or float32 image, got dtype float64; convert"),
    (image.adjust_contrast(1.1), np.zeros((4,), np.uint8), ValueError, r"got shape \(4,\)"),
    (image.adjust_hue(0.1), np.zeros((4, 4, 4), np.uint8), ValueError,
     r"adjust_hue: expected 3 \(RGB\) channels, got shape \(4, 4, 4\)"),
    (image.rgb_to_grayscale(), np.zeros((4, 4, 1), np.float32), ValueError, "3 \\(RGB\\)"),
    (image.convert_image_dtype(np.uint8), np.zeros(3, np.int32), TypeError, "got dtype int32"),
])
def test_bad_images_fail_clearly(udf, bad, error, match):
    with pytest.raises(error, match=match):
        udf(bad)
    with pytest.raises(jdata.UDFError) as raised:
        next(iter(jdata.from_tensors(bad).map(udf)))
    assert isinstance(raised.value.__cause__, error)


def test_color_jitter_in_random_map_restores_at_every_step():
    images = [U8[i % 2] for i in range(5)]
    ds = (jdata.from_source(images).map(image.convert_image_dtype(np.float32))
          .random_map(image.color_jitter(0.8, 0.8, 0.8, 0.2, p=0.8), jax.random.key(0))
          .random_map(image.random_grayscale(), jax.random.key(1)))
    full = check_restore_at_every_step(ds)
    assert len(full) == 5 and all(x.dtype == np.float32 and x.shape == (12, 16, 3) for x in full)
    other = list(jdata.from_source(images).map(image.convert_image_dtype(np.float32))
                 .random_map(image.color_jitter(0.8, 0.8, 0.8, 0.2, p=0.8), jax.random.key(7)))
    assert any(not np.array_equal(a, b) for a, b in zip(other, full))


def test_color_udfs_print_as_built_and_pickle():
    udfs = [image.convert_image_dtype(np.float32), image.adjust_brightness(0.1),
            image.adjust_hue(-0.25), image.random_contrast(0.5, 1.5), image.random_hue(0.1),
            image.rgb_to_grayscale(True), image.random_grayscale(),
            image.color_jitter(0.4, 0.4, 0.4, 0.1, p=0.8, brightness_mode="additive")]
    assert [u.__qualname__ for u in udfs] == [
        "convert_image_dtype(float32)", "adjust_brightness(0.1)", "adjust_hue(-0.25)",
        "random_contrast(0.5, 1.5)", "random_hue(0.1)", "rgb_to_grayscale(keep_channels=True)",
        "random_grayscale(p=0.2)",
        "color_jitter(0.4, 0.4, 0.4, 0.1, brightness_mode='additive', p=0.8)"]
    for udf in udfs:
        again = pickle.loads(pickle.dumps(udf))
        args = (F32,) if udf.__qualname__.startswith(("convert", "adjust", "rgb")) else (F32, KEY)
        np.testing.assert_array_equal(again(*args), udf(*args))
    assert udfs[1].traits.pointwise and not udfs[3].traits.pointwise  # contrast: the mean


@pytest.mark.parametrize("multiplicative", [True, False])
def test_color_jitter_is_its_plan_of_adjust_ops_each_then_a_clip(multiplicative):
    jitter = image.color_jitter(0.5, 0.5, 0.5, 0.2, brightness_mode="multiplicative"
                                if multiplicative else "additive")
    adjust = {"contrast": image.adjust_contrast, "saturation": image.adjust_saturation,
              "hue": image.adjust_hue}
    orders = set()
    for seed in range(40):
        key = np.array([seed, 1], np.uint32)
        plan = jitter.fn.plan(key, 0)
        orders.add(tuple(kind for kind, _ in plan))
        expected = F32[1]
        for kind, value in plan:
            if kind == "brightness":
                low, high = (0.5, 1.5) if multiplicative else (-0.5, 0.5)
                assert low <= value < high
                expected = expected * np.float32(value) if multiplicative else (
                    expected + np.float32(value))
            else:
                expected = adjust[kind](value)(expected)
            expected = np.clip(expected, 0, 1)
        np.testing.assert_allclose(jitter(F32[1], key), expected, atol=3e-6)
    assert len(orders) > 12  # random orders (24 possible)


@pytest.mark.parametrize("channels", [1, 2, 4, 5])
def test_brightness_contrast_and_jitter_take_any_number_of_channels(channels):
    x = np.random.default_rng(channels).integers(0, 256, (2, 9, 11, channels), dtype=np.uint8)
    as_float = image.convert_image_dtype(np.float32)(x)
    back = image.convert_image_dtype(np.uint8, saturate=True)
    for udf in (image.adjust_brightness(-0.2), image.adjust_contrast(1.7)):
        assert np.abs(udf(x).astype(int) - back(udf(as_float))).max() <= 1
    jitter = image.color_jitter(0.5, 0.5)
    out = jitter(as_float, KEY)
    assert out.shape == x.shape and 0 <= out.min() and out.max() <= 1
    assert np.abs(jitter(x, KEY).astype(int) - back(out)).max() <= 1


def test_blocks_of_rows_across_images_give_each_image_its_own_values():
    # 200x200 images: the kernels' blocks of rows (32768 pixels) end inside images.
    x = np.random.default_rng(5).random((3, 200, 200, 3), dtype=np.float32)
    for random, adjust in ((image.random_hue(0.5), image.adjust_hue),
                           (image.random_saturation(0.2, 1.8), image.adjust_saturation)):
        out = random(x, KEY)
        values = random.fn.values(KEY, len(x))
        assert len(set(values.tolist())) == 3
        for i, value in enumerate(values):
            np.testing.assert_array_equal(out[i], adjust(float(value))(x[i]))
    jitter = image.color_jitter(0.8, 0.8, 0.8, 0.2)
    out = jitter(x, KEY)
    for i in range(len(x)):
        plan = jitter.fn.plan(KEY, i)
        expected = x[i]
        for kind, value in plan:
            if kind == "brightness":
                expected = expected * np.float32(value)
            else:
                expected = ADJUST[f"adjust_{kind}"](value)(expected)
            expected = np.clip(expected, 0, 1)
        np.testing.assert_allclose(out[i], expected, atol=3e-6)
