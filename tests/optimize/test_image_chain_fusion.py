"""image_chain_fusion: adjacent maps and random_maps of jdata.ops.image's kernels run as
one random_map, with the unfused pixels (each random op keeps its key stream)."""

from __future__ import annotations

import pickle

import jax
import numpy as np
import pytest

import jdata
from jdata import optimize
from jdata.ops import image
from jdata.ops.random_map import RandomMapNode
from jdata.optimize.image_chain_fusion import ImageChain
from tests.helpers import check_restore_at_every_step

OFF = jdata.Options(optimize=False)
KEYS = jax.random.split(jax.random.key(3), 6)
PICTURES = np.random.default_rng(0).integers(0, 256, (6, 40, 52, 3), dtype=np.uint8)
BOXES = np.tile(np.array([[0.2, 0.1, 0.6, 0.5], [0.5, 0.5, 0.9, 0.95]], np.float32), (6, 1, 1))


def _simclr_view(ds: jdata.Dataset, **parallel) -> jdata.Dataset:
    """SimCLR's view, one op per kernel, as a user writes it."""
    ops = [(image.random_resized_crop(24, 24), KEYS[0]), (image.random_flip(), KEYS[1]),
           (image.convert_image_dtype(np.float32), None),
           (image.color_jitter(0.8, 0.8, 0.8, 0.2, p=0.8), KEYS[2]),
           (image.random_grayscale(0.2), KEYS[3]),
           (image.random_gaussian_blur(3, p=0.5), KEYS[4])]
    for fn, key in ops:
        ds = ds.map(fn, **parallel) if key is None else ds.random_map(fn, key, **parallel)
    return ds


def _plan(ds: jdata.Dataset):
    return optimize.optimize(ds._node, ds.options).plan


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(u), jax.tree.leaves(v)))
        for u, v in zip(a, b))


@pytest.mark.parametrize("parallel", [{}, {"num_parallel_calls": 2}])
def test_a_simclr_view_runs_as_one_random_map_with_the_unfused_pixels(parallel):
    ds = _simclr_view(jdata.from_tensor_slices(PICTURES), **parallel)
    assert "image_chain_fusion" in ds.explain().splitlines()[0]
    fused = _plan(ds)
    chains = [n for n in _walk(fused) if type(n) is RandomMapNode]
    assert len(chains) == 1 and isinstance(chains[0].fn, ImageChain)
    assert len(chains[0].fn.parts) == 6 and chains[0].key.shape == (5, 2)
    assert "random_map(random_resized_crop" in ds.explain()  # named by its parts
    out, unfused = list(ds), list(ds.with_options(OFF))
    assert _same(out, unfused)
    assert out[0].shape == (24, 24, 3) and out[0].dtype == np.float32
    assert not np.array_equal(out[0], out[1])


def test_boxes_pass_through_the_chain_as_unfused():
    ds = (jdata.from_tensor_slices((PICTURES, BOXES))
          .random_map(image.random_resized_crop(20, 20, boxes=True, min_object_covered=0.3),
                      KEYS[0])
          .random_map(image.random_flip(boxes=True), KEYS[1]))
    assert "image_chain_fusion" in ds.explain().splitlines()[0]
    out = list(ds)
    assert _same(out, list(ds.with_options(OFF)))
    assert out[0][0].shape == (20, 20, 3) and out[0][1].shape == (2, 4)


def test_a_user_function_between_kernels_or_other_parallelism_stops_the_chain():
    ds = (jdata.from_tensor_slices(PICTURES)
          .random_map(image.random_flip(), KEYS[0])
          .map(lambda x: x[::2])
          .random_map(image.random_flip(), KEYS[1], num_parallel_calls=2)
          .map(image.rgb_to_grayscale(), num_parallel_calls=None))
    assert "image_chain_fusion" not in ds.explain().splitlines()[0]
    assert _same(list(ds), list(ds.with_options(OFF)))


def test_maps_alone_are_left_to_map_fusion():
    ds = (jdata.from_tensor_slices(PICTURES).map(image.convert_image_dtype(np.float32))
          .map(image.adjust_brightness(0.1)))
    assert "image_chain_fusion" not in ds.explain().splitlines()[0]
    assert "map_fusion" in ds.explain().splitlines()[0]


def test_decode_resize_fusion_keeps_its_chain():
    import io

    from PIL import Image

    def jpeg(seed):
        buffer = io.BytesIO()
        pixels = np.random.default_rng(seed).integers(0, 256, (30, 40, 3), np.uint8)
        Image.fromarray(pixels).save(buffer, "JPEG")
        return buffer.getvalue()

    ds = (jdata.from_source([jpeg(i) for i in range(4)]).map(image.decode_jpeg())
          .map(image.resize(short_side=24)).random_map(image.random_crop(20, 20), KEYS[0])
          .random_map(image.color_jitter(0.4, 0.4, 0.4, 0.1), KEYS[1]))
    first = ds.explain().splitlines()[0]
    assert "decode_resize_fusion" in first and "image_chain_fusion" not in first
    assert _same(list(ds), list(ds.with_options(OFF)))


def test_a_fused_chain_restores_at_every_step_and_pickles():
    ds = _simclr_view(jdata.from_tensor_slices(PICTURES).repeat(2)).batch(3)
    check_restore_at_every_step(ds)
    chain = next(n for n in _walk(_plan(ds)) if type(n) is RandomMapNode).fn
    again = pickle.loads(pickle.dumps(chain))
    key = np.array([[1, 2]] * 5, np.uint32)
    assert np.array_equal(again(PICTURES[0], key), chain(PICTURES[0], key))


def test_an_element_that_fails_in_the_chain_is_named_at_its_position():
    bad = PICTURES.astype(np.float64)  # the kernels refuse float64 images
    ds = _simclr_view(jdata.from_tensor_slices(bad))
    assert "image_chain_fusion" in ds.explain().splitlines()[0]
    with pytest.raises(jdata.UDFError) as fused:
        list(ds)
    with pytest.raises(jdata.UDFError) as unfused:
        list(ds.with_options(OFF))
    assert fused.value.position == unfused.value.position == 0
    assert fused.value.op == "random_map"
    assert type(fused.value.__cause__) is type(unfused.value.__cause__)


def _walk(node):
    """The nodes of a linear plan, outermost first."""
    while node is not None:
        yield node
        node = getattr(node, "input", None)
