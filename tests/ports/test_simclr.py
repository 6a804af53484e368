"""SimCLR's augmentations ported to jdata run end to end and restore at every step.

JPEGs (made here with PIL) go through the port's ``build_input_fn``: decode, two
training views per image (``preprocess_for_train`` in a ``random_map``), batch, then
``batch_random_blur`` in a ``random_map`` on batches. A restored run must give the
uninterrupted run's batches bit for bit, from ``get_state`` and from a real Orbax
checkpoint saved at every step. The eval path (``center_crop``) is deterministic.
"""

from __future__ import annotations

import io
from collections import Counter

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from PIL import Image

import jdata.checkpoint
from jdata.ops import image as jimage
from tests import helpers
from tests.ports import _simclr as port

IMAGE_SIZE, BATCH_SIZE, NUM_CLASSES = 40, 2, 3
# Heights and widths: landscape, portrait, square, one below the output size. 46x60 is
# the eval test's image: its central crop is exactly 40x40.
SIZES = [(46, 60), (64, 48), (50, 50), (36, 52), (72, 56), (48, 64), (60, 46), (44, 44),
         (58, 70)]


def _jpeg(height: int, width: int, seed: int) -> bytes:
    """A smooth colored picture with some texture, so crops, flips and jitters show."""
    y, x = np.mgrid[:height, :width]
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], -1)
    noise = np.random.default_rng(seed).normal(0, 12, (height, width, 3))
    pixels = np.clip(base + noise + 30 * seed % 60, 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


ENCODED = [_jpeg(h, w, seed) for seed, (h, w) in enumerate(SIZES)]
LABELS = [seed % NUM_CLASSES for seed in range(len(SIZES))]


def _train(key=0) -> jdata.Dataset:
    return port.build_input_fn(ENCODED, LABELS, batch_size=BATCH_SIZE, image_size=IMAGE_SIZE,
                               num_classes=NUM_CLASSES, is_training=True,
                               key=jax.random.key(key))


def _eval() -> jdata.Dataset:
    return port.build_input_fn(ENCODED, LABELS, batch_size=BATCH_SIZE, image_size=IMAGE_SIZE,
                               num_classes=NUM_CLASSES, is_training=False,
                               key=jax.random.key(0))


def test_training_batches_hold_both_views_as_simclr_feeds_its_model():
    batches = helpers.take_list(_train())
    assert len(batches) == len(SIZES) // BATCH_SIZE  # drop_remainder=True when training
    for features, labels in batches:
        # model.py stacks the two views on the batch axis: (2 * bsz, h, w, 3).
        assert features.shape == (2 * BATCH_SIZE, IMAGE_SIZE, IMAGE_SIZE, 3)
        assert features.dtype == np.float32
        assert 0.0 <= features.min() and features.max() <= 1.0
        assert labels.shape == (BATCH_SIZE, NUM_CLASSES) and labels.dtype == np.float32
        assert (labels.sum(axis=1) == 1).all() and set(np.unique(labels)) <= {0.0, 1.0}
    seen = np.concatenate([labels for _, labels in batches]).argmax(axis=1)
    assert not Counter(seen.tolist()) - Counter(LABELS)  # a shuffled subset of the labels


def test_the_two_views_of_each_image_differ():
    for features, _ in helpers.take_list(_train()):
        first, second = features[:BATCH_SIZE], features[BATCH_SIZE:]
        for a, b in zip(first, second):
            assert np.abs(a - b).mean() > 0.01  # two crops, flips and jitters of one image


def test_views_are_a_function_of_the_key():
    one = helpers.take_list(_train(key=1))
    helpers.assert_same_sequence(helpers.take_list(_train(key=1)), one)
    assert not np.array_equal(helpers.take_list(_train(key=2))[0][0], one[0][0])


def test_some_views_are_grayscale_and_some_are_not():
    # random_color_jitter makes a view gray (its channels equal) with probability 0.2;
    # those draws come from the port's generator, so which views are gray is fixed by
    # the key: this key gives some of each among the 16 views.
    views = np.concatenate([features for features, _ in helpers.take_list(_train())])
    gray = [np.array_equal(v[..., 0], v[..., 1]) and np.array_equal(v[..., 1], v[..., 2])
            for v in views]
    assert 0 < sum(gray) < len(gray)


def test_restores_at_every_step():
    # Through the buffer shuffle, the parallel decode and random_map, the batch, the
    # random_map on batches and the prefetch: every restored run is the rest of the
    # uninterrupted one, bit for bit.
    batches = helpers.check_restore_at_every_step(_train())
    assert len(batches) == len(SIZES) // BATCH_SIZE


def test_restores_from_an_orbax_checkpoint_at_every_step(tmp_path):
    expected = helpers.take_list(_train())
    options = ocp.CheckpointManagerOptions(enable_async_checkpointing=False)
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager:
        it = _train().iterator()
        for step in range(len(expected) + 1):
            manager.save(step, args=ocp.args.Composite(data=jdata.checkpoint.CheckpointSave(it)))
            if step < len(expected):
                helpers.assert_elements_equal(next(it), expected[step], f"step {step}: ")
        it.close()
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager:
        assert manager.all_steps() == list(range(len(expected) + 1))
        for step in manager.all_steps():
            restored = manager.restore(step, args=ocp.args.Composite(
                data=jdata.checkpoint.CheckpointRestore(_train().iterator())))
            with restored.data as it:
                rest = [helpers.materialize(b) for b in it]
            helpers.assert_same_sequence(rest, expected[step:], f"restored at step {step}: ")


def test_eval_path_is_deterministic_and_in_order():
    first, second = helpers.take_list(_eval()), helpers.take_list(_eval())
    helpers.assert_same_sequence(first, second)
    assert [len(labels) for _, labels in first] == [2, 2, 2, 2, 1]  # no drop_remainder
    images = np.concatenate([images for images, _ in first])
    assert images.shape == (len(SIZES), IMAGE_SIZE, IMAGE_SIZE, 3)
    assert images.dtype == np.float32 and 0.0 <= images.min() and images.max() <= 1.0
    labels = np.concatenate([labels for _, labels in first]).argmax(axis=1)
    assert labels.tolist() == LABELS


def test_eval_center_crop_takes_simclrs_window():
    # 46x60 to 40x40 at 0.875: the crop is rint(0.875 * 46) = 40 square, at
    # ((46 - 40 + 1) // 2, (60 - 40 + 1) // 2) = (3, 10); a 40x40 crop resized to 40x40
    # is itself, so the output is those pixels in [0, 1].
    decoded = jimage.decode_jpeg()(ENCODED[0])
    assert decoded.shape == (46, 60, 3)
    out = port.preprocess_image(decoded, IMAGE_SIZE, IMAGE_SIZE, is_training=False)
    np.testing.assert_allclose(out, decoded[3:43, 10:50] / np.float32(255), atol=1e-6)


@pytest.mark.parametrize("height, width, aspect, expected", [
    (44, 60, 1.0, (38, 38)),  # rint(38.5) is 38: half to even, as tf.math.rint
    (60, 44, 1.0, (38, 38)),  # a portrait image: the width bounds the crop
    (36, 80, 2.0, (32, 63)),  # rint(0.875 * 2.0 * 36) = rint(63.0)
    (90, 100, 16 / 9, (49, 88)),  # the requested shape is wider than the image
])
def test_compute_crop_shape_rounds_as_tf(height, width, aspect, expected):
    assert port._compute_crop_shape(height, width, aspect, port.CROP_PROPORTION) == expected


def test_batch_random_blur_keeps_or_blurs_whole_images():
    # One sigma per batch (TF draws it once), then a draw per image: blurred or kept.
    # Generator 1 draws sigma 1.07 and blurs images 2 and 3 at probability 0.5; with
    # probability 1 it draws the same sigma and blurs all.
    images = np.random.default_rng(0).random((6, IMAGE_SIZE, IMAGE_SIZE, 3), np.float32)
    every, = port.batch_random_blur([images], IMAGE_SIZE, IMAGE_SIZE, blur_probability=1.0,
                                    rng=np.random.default_rng(1))
    some, = port.batch_random_blur([images], IMAGE_SIZE, IMAGE_SIZE, blur_probability=0.5,
                                   rng=np.random.default_rng(1))
    blurred = [not np.array_equal(s, x) for s, x in zip(some, images)]
    assert blurred == [False, False, True, True, False, False]
    np.testing.assert_array_equal(some[2:4], every[2:4])
    # Blurred: neighboring pixels closer than in white noise.
    step = np.abs(np.diff(every, axis=2)).mean(axis=(1, 2, 3))
    assert (step < 0.8 * np.abs(np.diff(images, axis=2)).mean()).all()


@pytest.mark.parametrize("random_order", [True, False])
@pytest.mark.parametrize("impl", ["simclrv2", "simclrv1"])
def test_color_jitter_in_either_order_and_brightness(random_order, impl):
    picture = np.random.default_rng(0).random((16, 16, 3), np.float32)
    out = port.color_jitter(picture, 1.0, random_order, impl, rng=np.random.default_rng(3))
    assert out.shape == picture.shape and out.dtype == np.float32
    assert 0.0 <= out.min() and out.max() <= 1.0 and np.abs(out - picture).mean() > 0.01


def test_unknown_brightness_impl_is_refused():
    with pytest.raises(ValueError, match="Unknown impl simclrv3"):
        port.random_brightness(np.zeros((2, 2, 3), np.float32), 0.5, "simclrv3",
                               rng=np.random.default_rng(0))


def test_training_without_a_generator_says_how_to_get_one():
    with pytest.raises(ValueError, match="rng=np.random.default_rng"):
        port.preprocess_image(np.zeros((8, 8, 3), np.uint8), 4, 4, is_training=True)
