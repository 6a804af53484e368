"""decode_resize_fusion: decode_jpeg -> resize -> crop -> random_flip as one UDF, with the
unfused ops' crop windows and flips (each random op keeps its key stream)."""

from __future__ import annotations

import io
import os
import pickle

import jax
import numpy as np
import pytest
from PIL import Image

import jdata
from jdata import _random, optimize
from jdata.ops import image
from jdata.ops.map import MapNode
from jdata.ops.random_map import RandomMapNode
from tests.helpers import check_restore_at_every_step, plan_ops, take_list

OFF = jdata.Options(optimize=False)
CROP_KEY, FLIP_KEY = jax.random.split(jax.random.key(0))
SIDE, CROP = 32, 24


def _jpeg(height: int, width: int, seed: int = 0, mode: str = "RGB", noise: float = 30) -> bytes:
    """Waves plus noise: a window one pixel off, or flipped, differs by tens of levels."""
    y, x = np.mgrid[0:height, 0:width]
    waves = np.stack([128 + 100 * np.sin(x / 5 + y / 7), x * 255 / width, y * 255 / height], -1)
    noisy = waves + np.random.default_rng(seed).normal(0, noise, waves.shape)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).convert(mode).save(
        buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def _jpegs(count: int, low: int, high: int, **kwargs) -> list[bytes]:
    sizes = np.random.default_rng(1).integers(low, high, size=(count, 2))
    return [_jpeg(int(h), int(w), seed=i, **kwargs) for i, (h, w) in enumerate(sizes)]


def _chain(jpegs, resize=None, crop="random", flip=True, **map_kwargs) -> jdata.Dataset:
    ds = (jdata.from_source(jpegs).map(image.decode_jpeg(), **map_kwargs)
          .map(resize or image.resize(short_side=SIDE), **map_kwargs))
    if crop == "random":
        ds = ds.random_map(image.random_crop(CROP, CROP), CROP_KEY, **map_kwargs)
    elif crop == "center":
        ds = ds.map(image.center_crop(CROP, CROP), **map_kwargs)
    return ds.random_map(image.random_flip(), FLIP_KEY, **map_kwargs) if flip else ds


def _plan(ds: jdata.Dataset):
    return optimize.optimize(ds._node, ds.options).plan


def _epochs(ds: jdata.Dataset, count: int = 2) -> np.ndarray:
    """``count`` epochs (iterators) of same-shape images, stacked, as ints."""
    return np.stack([e for _ in range(count) for e in take_list(ds)]).astype(int)


def test_the_chain_becomes_one_random_map_holding_both_keys_in_order():
    ds = _chain(_jpegs(4, 20, 60))
    assert "decode_resize_fusion" in ds.explain().splitlines()[0]
    plan = _plan(ds)
    assert plan_ops(plan) == ["random_map", "from_source"]
    assert plan.fn.__qualname__ == ("random_flip.random_crop(24, 24).resize(short_side=32)"
                                    ".decode_jpeg")
    np.testing.assert_array_equal(plan.key, np.stack([jax.random.key_data(CROP_KEY),
                                                      jax.random.key_data(FLIP_KEY)]))


def test_stacked_keys_give_each_op_its_own_stream():
    crop, flip = (np.asarray(jax.random.key_data(k)) for k in (CROP_KEY, FLIP_KEY))
    salt = _random.salt("random_map")
    for epoch in (0, 3):
        stacked = _random.KeyBlocks(np.stack([crop, flip]), salt, epoch)
        singles = [_random.KeyBlocks(k, salt, epoch) for k in (crop, flip)]
        for position in (0, 5, 1023, 1024, 5000):
            np.testing.assert_array_equal(stacked[position],
                                          [s[position] for s in singles])


def _flips(count: int, epoch: int) -> list[bool]:
    keys = _random.KeyBlocks(np.asarray(jax.random.key_data(FLIP_KEY)),
                             _random.salt("random_map"), epoch)
    return [bool(keys[p][0] >> 31) for p in range(count)]


SMOOTH = image.resize(short_side=SIDE, antialias=True)


def test_without_dct_scaling_the_unfused_pixels():
    ds = _chain(_jpegs(12, 20, 60), resize=SMOOTH)  # under twice the target: full scale
    fused, unfused = _epochs(ds), _epochs(ds.with_options(OFF))
    assert (fused == unfused).all()  # decode_jpeg's decode, then the unfused ops
    # Not vacuous: both epochs flip some images and not others, and a flip is far away.
    assert 0 < sum(_flips(12, 0)) < 12 and _flips(12, 0) != _flips(12, 1)
    assert np.abs(fused[:12, :, ::-1] - unfused[:12]).mean() > 20


def test_dct_scaled_decoding_keeps_the_windows_and_flips():
    jpegs = _jpegs(8, 70, 140, noise=0)  # 2x-4x the target: decoded at 1/2 or 1/4 scale
    ds = _chain(jpegs, resize=SMOOTH)
    fused, unfused = _epochs(ds), _epochs(ds.with_options(OFF))
    difference = np.abs(fused - unfused).mean()
    assert 0 < difference < 2
    # A window one pixel off is several times further away.
    assert np.abs(unfused[:, :, 1:] - unfused[:, :, :-1]).mean() > 3 * difference


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_grayscale_and_cmyk_files_decode_as_rgb_as_unfused(mode):
    ds = _chain(_jpegs(4, 20, 60, mode=mode))
    fused, unfused = _epochs(ds, 1), _epochs(ds.with_options(OFF), 1)
    assert fused.shape[-1] == 3 and np.abs(fused - unfused).max() <= 1


@pytest.mark.parametrize("crop, flip, node_type", [
    (None, False, MapNode), ("center", False, MapNode), (None, True, RandomMapNode),
    ("center", True, RandomMapNode), ("random", False, RandomMapNode)])
def test_partial_chains_fuse_too(crop, flip, node_type):
    ds = _chain(_jpegs(6, 20, 60), crop=crop, flip=flip)
    plan = _plan(ds)
    assert plan_ops(plan) == [node_type.op_name, "from_source"] and type(plan) is node_type
    if node_type is RandomMapNode:
        assert plan.key.shape == (2,)  # one random op: its key as is
    fused, unfused = take_list(ds), take_list(ds.with_options(OFF))
    assert all(np.abs(f.astype(int) - u).max() <= 1 for f, u in zip(fused, unfused))


def test_the_default_resize_fuses_without_dct_scaling_bit_for_bit():
    # Up to 4x the target, noisy: a DCT-scaled decode would be far from sampling 2x2 pixels.
    ds = _chain(_jpegs(6, 20, 130), resize=image.resize(short_side=SIDE, antialias=False))
    assert plan_ops(_plan(ds)) == ["random_map", "from_source"]
    fused, unfused = _epochs(ds), _epochs(ds.with_options(OFF))
    np.testing.assert_array_equal(fused, unfused)
    assert 0 < sum(_flips(6, 0)) < 6 and np.abs(fused[:6, :, ::-1] - unfused[:6]).mean() > 20


def test_fixed_size_resize_fuses():
    ds = _chain(_jpegs(6, 20, 100), resize=image.resize(size=(30, 40)))
    assert plan_ops(_plan(ds)) == ["random_map", "from_source"]
    assert np.abs(_epochs(ds, 1) - _epochs(ds.with_options(OFF), 1)).mean() < 2


def test_maps_of_other_parallelism_or_in_another_order_do_not_fuse():
    jpegs = _jpegs(2, 20, 30)
    mixed = (jdata.from_source(jpegs).map(image.decode_jpeg(), num_parallel_calls=2)
             .map(image.resize(short_side=SIDE)))
    assert "decode_resize_fusion" not in mixed.explain()
    cropped_first = (jdata.from_source(jpegs).map(image.decode_jpeg())
                     .random_map(image.random_crop(8, 8), CROP_KEY)
                     .map(image.resize(short_side=SIDE)))
    assert "decode_resize_fusion" not in cropped_first.explain()
    misused = _chain(jpegs, flip=False).map(image.center_crop(4, 4)).random_map(
        image.center_crop(2, 2), FLIP_KEY)  # a center_crop given keys fails unfused
    fused = _plan(misused)  # the two crops chain (image_chain_fusion), apart from the decode
    assert [p.__qualname__ for p, _ in fused.fn.parts] == ["center_crop(4, 4)",
                                                           "center_crop(2, 2)"]
    assert fused.input.fn.__qualname__.startswith("random_crop(24, 24).resize")


def test_restores_at_every_step_and_errors_keep_their_positions():
    jpegs = _jpegs(7, 20, 60)
    check_restore_at_every_step(_chain(jpegs).batch(3))
    broken = jpegs[:2] + [b"not a jpeg"] + jpegs[3:]
    with pytest.raises(jdata.UDFError) as raised:
        take_list(_chain(broken))
    assert (raised.value.op, raised.value.position) == ("random_map", 2)
    small = _chain([_jpeg(20, 30)], resize=image.resize(size=(20, 20)))
    with pytest.raises(jdata.UDFError) as raised:
        take_list(small)
    assert "random_crop: a 24x24 crop does not fit in an image of 20x20" in str(
        raised.value.__cause__)


def test_the_fused_udf_pickles_and_runs_in_worker_processes():
    fused = _plan(_chain(_jpegs(1, 20, 30))).fn
    again = pickle.loads(pickle.dumps(fused))
    assert again.__qualname__ == fused.__qualname__ and again.resize.short_side == SIDE
    jpegs = _jpegs(8, 20, 60)

    def run(engine: str) -> list:
        ds = _chain(jpegs, num_parallel_calls=2).map(
            lambda x: (x, np.int64(os.getpid())), num_parallel_calls=2)
        return take_list(ds.batch(4).with_options(jdata.Options(engine=engine)))

    threads, processes = run("threads"), run("processes")
    assert all(np.array_equal(t[0], p[0]) for t, p in zip(threads, processes))
    assert os.getpid() not in np.concatenate([p[1] for p in processes])
    unfused = take_list(_chain(jpegs).batch(4).with_options(OFF))
    assert np.abs(np.stack([t[0] for t in threads]).astype(int) - np.stack(unfused)).max() <= 1
