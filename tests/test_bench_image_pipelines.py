"""The jdata side of the SimCLR, SSD and image-kernel benchmarks builds and runs without the
peers (TensorFlow, torch, grain are bench extras), on a few images."""

import numpy as np
import pytest

from benchmarks import _chain, _image_cases, image_kernels, simclr, ssd, steady

_IMAGES = 3  # a short last batch too: batches of 2


@pytest.fixture(scope="module")
def jpegs():
    return simclr.prepare(0.0)[:_IMAGES]


@pytest.fixture(scope="module")
def boxed():
    return ssd.prepare(0.0)[:_IMAGES]


@pytest.mark.parametrize("views, chain", [("pair", False), ("pixels", False),
                                          ("pixels", True), ("bytes", False), ("bytes", True)])
def test_simclr_yields_pairs_of_independent_views_in_the_unit_range(jpegs, views, chain):
    batches = list(simclr.jdata_pipeline(jpegs, views=views, chain=chain, batch=2))
    assert [b.shape for b in batches] == [(2, 2, 224, 224, 3), (1, 2, 224, 224, 3)]
    first = batches[0]
    assert first.dtype == np.float32 and 0 <= first.min() and first.max() <= 1
    assert not np.array_equal(first[0, 0], first[0, 1])  # two crops of one image differ


def test_simclr_plain_loop_does_the_same_work(jpegs):
    batches = list(simclr.plain_loop(jpegs, batch=2))
    assert [(b.shape, b.dtype) for b in batches] == [((2, 2, 224, 224, 3), np.float32),
                                                     ((1, 2, 224, 224, 3), np.float32)]


def _check_ssd_batch(batch, size):
    pixels, boxes = batch
    assert pixels.shape == (size, 300, 300, 3) and pixels.dtype == np.float32
    assert -1 <= pixels.min() and pixels.max() <= 1
    assert boxes.shape == (size, ssd.BOXES, 4) and boxes.dtype == np.float32
    assert ((0 <= boxes) & (boxes <= 1)).all()
    assert (boxes[..., 2:] >= boxes[..., :2]).all()  # ymax >= ymin, xmax >= xmin


@pytest.mark.parametrize("chain", [False, True])
def test_ssd_yields_images_with_their_boxes_in_the_crop(boxed, chain):
    batches = list(ssd.jdata_pipeline(boxed, chain=chain, batch=2))
    assert len(batches) == 2 and ssd.items_in(batches[0]) == 2
    _check_ssd_batch(batches[0], 2)
    _check_ssd_batch(batches[1], 1)


def test_ssd_plain_loop_does_the_same_work(boxed):
    batches = list(ssd.plain_loop(boxed, batch=2))
    _check_ssd_batch(batches[0], 2)
    _check_ssd_batch(batches[1], 1)


def test_ssd_boxes_are_fixed_per_image_and_inside_it():
    assert np.array_equal(ssd.boxes_of(5), ssd.boxes_of(5))
    assert not np.array_equal(ssd.boxes_of(5), ssd.boxes_of(6))
    boxes = ssd.boxes_of(0)
    assert boxes.shape == (ssd.BOXES, 4) and (boxes[:, 2:] > boxes[:, :2]).all()


def test_every_kernel_case_calls_jdata_as_its_api_says():
    data = image_kernels.inputs()
    from jdata.ops import image

    keys = [np.array([7, i], np.uint32) for i in range(4)]
    for case in _image_cases.CASES:
        out = case.jdata(image, data[case.input], keys)(1)
        arrays = out if isinstance(out, tuple) else (out,)
        assert all(np.asarray(a).size > 0 for a in arrays), case.name


def test_a_kernel_row_prints_the_ratio_or_why_there_is_none():
    assert "2.00x" in image_kernels.Row("k", jdata_ms=1.0, tf_ms=2.0).line()
    missing = image_kernels.Row("k", tf_ms=2.0, note="missing in jdata").line()
    assert "missing in jdata" in missing and "x " not in missing


def test_a_chain_gives_each_kernel_a_key_of_its_own():
    seen = []
    chain = _chain.Chain(*[(True, lambda x, key: seen.append(tuple(key)) or x + 1)] * 3,
                         (False, lambda x: x * 10))
    assert chain(1, np.array([5, 9], np.uint32)) == 40
    assert len(set(seen)) == 3 and (5, 9) not in seen


def test_a_chain_carries_tuple_elements_through():
    chain = _chain.Chain((True, lambda x, boxes, key: (x + 1, boxes * 2)),
                         (False, lambda x, boxes: (x, boxes + 1)))
    assert chain(1, 3, np.array([0, 0], np.uint32)) == (2, 7)


def test_a_failed_child_is_reported_by_its_last_exception_line():
    grain_like = ("Traceback (most recent call last):\n  File \"x.py\"\n"
                  "RuntimeError: worker 3 died\n\n--------------------\n"
                  "For simplicity, Grain has removed its internal frames from the traceback")
    assert steady._why(grain_like) == "RuntimeError: worker 3 died"
    assert steady._why("just a line\nthe last one\n") == "the last one"
    assert steady._why("") == "no output"
