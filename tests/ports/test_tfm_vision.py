"""The TF Model Garden's classification eval pipeline ported to jdata gives TF's batches.

The reference is fixtures/tfm_vision_eval.npz and the three TFRecord files beside it,
written by fixtures/make_tfm_vision_fixtures.py, which runs the Model Garden's own
tf.data code. Order, batching, labels, crop windows and shapes must be equal; the
images are compared twice: from TF's own decoded crops (resize and normalization must
match to the bit) and end to end with PIL's JPEG decoder (a stated tolerance).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests import helpers
from tests.ports import _tfm_vision as port
from tests.ports.fixtures import make_tfm_vision_fixtures as fx

_FIXTURE = np.load(fx.FIXTURE, allow_pickle=False)


def _split(name: str) -> list:
    """The byte strings stored flat in ``name`` with their lengths in ``<name>_lengths``."""
    ends = np.cumsum(_FIXTURE[f"{name}_lengths"])
    return [piece.tobytes() for piece in np.split(_FIXTURE[name], ends[:-1])]


_RECORDS, _ENCODED = _split("records"), _split("encoded")


def _tf_crops() -> dict:
    """image bytes -> (the window TF cropped, the pixels TF decoded in it)."""
    windows = _FIXTURE["crop_windows"]
    sizes = [int(h) * int(w) * 3 for _, _, h, w in windows]
    pieces = np.split(_FIXTURE["crops"], np.cumsum(sizes)[:-1])
    return {e: (tuple(win), px.reshape(win[2], win[3], 3))
            for e, win, px in zip(_ENCODED, windows.tolist(), pieces)}


_TF_CROPS = _tf_crops()


def _decoder() -> port.Decoder:
    return port.Decoder({r: (e, label) for r, e, label in
                         zip(_RECORDS, _ENCODED, _FIXTURE["labels"])})


def _pipeline(parser: port.Parser):
    return port.read(fx.FILES, _decoder().decode, parser.parse_fn(is_training=False),
                     fx.GLOBAL_BATCH_SIZE, fx.DROP_REMAINDER, fx.CYCLE_LENGTH,
                     fx.BLOCK_LENGTH, fx.DETERMINISTIC)


def _run(parser: port.Parser) -> tuple[np.ndarray, np.ndarray, list]:
    batches = helpers.take_list(_pipeline(parser))
    sizes = [len(labels) for _, labels in batches]
    return (np.concatenate([images for images, _ in batches]),
            np.concatenate([labels for _, labels in batches]), sizes)


def _tf_decode_and_crop(image_bytes, crop_window, channels=3):
    window, pixels = _TF_CROPS[image_bytes]
    assert tuple(int(v) for v in crop_window) == window  # the port's window is TF's
    return pixels


def test_order_batches_and_labels_equal_tf():
    images, labels, sizes = _run(port.Parser(fx.OUTPUT_SIZE))
    assert sizes == _FIXTURE["batch_sizes"].tolist()
    helpers.assert_elements_equal(labels, _FIXTURE["image_labels"])
    assert images.shape == _FIXTURE["images"].shape and images.dtype == np.float32


def test_resize_and_normalize_equal_tf_on_tf_decoded_pixels():
    # With TF's decoded crops put in, the rest (crop window, half-pixel bilinear resize,
    # MEAN_RGB/STDDEV_RGB) is float32 arithmetic in the same order as TF's kernels, so
    # it is equal to the bit.
    images, _, _ = _run(port.Parser(fx.OUTPUT_SIZE, decode_and_crop=_tf_decode_and_crop))
    helpers.assert_elements_equal(images, _FIXTURE["images"])


def test_end_to_end_with_pil_within_decoder_tolerance():
    # PIL decodes with libjpeg's accurate DCT over the whole image; TF with the fast DCT
    # over the window (see port.decode_and_crop_jpeg). On these noisy images the decoded
    # pixels differ by 0.94 levels of 255 on average (78% by 0 or 1, max 9); the resize
    # averages that and normalization divides by ~57: outputs differ by 0.0166 on
    # average, 0.124 at most (7 levels). The bounds leave a little room for other
    # libjpeg-turbo builds, and fail for any real error (a crop one pixel off is ~0.1
    # on average here).
    images, _, _ = _run(port.Parser(fx.OUTPUT_SIZE))
    diff = np.abs(images - _FIXTURE["images"])
    assert diff.max() < 0.16
    assert diff.mean() < 0.025


def test_restores_at_every_step():
    # What the port adds over the tf.data pipeline: an eval pass resumes exactly, through
    # the parallel interleave of TFRecord files, the parallel maps and the prefetch.
    ds = _pipeline(port.Parser(fx.OUTPUT_SIZE, decode_and_crop=_tf_decode_and_crop))
    batches = helpers.check_restore_at_every_step(ds)
    helpers.assert_elements_equal(np.concatenate([b[1] for b in batches]),
                                  _FIXTURE["image_labels"])


def test_block_length_none_reads_as_one():
    # DataConfig lets block_length be None, which tf.data's interleave reads as 1.
    parser = port.Parser(fx.OUTPUT_SIZE)
    ds = port.read(fx.FILES, _decoder().decode, parser.parse_fn(is_training=False),
                   fx.GLOBAL_BATCH_SIZE, fx.DROP_REMAINDER, fx.CYCLE_LENGTH, None,
                   fx.DETERMINISTIC)
    labels = np.concatenate([b[1] for b in helpers.take_list(ds)])
    helpers.assert_elements_equal(labels, _FIXTURE["image_labels"])


def test_crop_window_uses_float32_like_tf():
    # TF computes the window in float32: 0.7 * 90 is 63.0 there (TF gives [13, 18, 63,
    # 63]), but 62.99999999999999 in float64, which would truncate to a 62-pixel crop.
    seen = []
    port.center_crop_image_v2(b"", np.array([90, 100, 3]), 0.7,
                              decode_and_crop=lambda _, window, channels: seen.append(window))
    assert seen[0].tolist() == [13, 18, 63, 63]


def test_fixture_stays_small():
    total = sum(os.path.getsize(p) for p in [fx.FIXTURE, *fx.FILES])
    assert total < 200_000


def test_train_path_is_not_ported():
    with pytest.raises(NotImplementedError, match="eval path only"):
        port.Parser(fx.OUTPUT_SIZE).parse_fn(is_training=True)
