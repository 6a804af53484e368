"""Reordering by declarations: crops before pointwise maps, filters before maps."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jdata
from jdata import optimize
from jdata.ops.filter import FilterNode
from tests.helpers import assert_same_sequence, check_restore_at_every_step, take_list

OFF = jdata.Options(optimize=False)
IMAGES = np.random.default_rng(0).integers(0, 256, size=(12, 16, 16, 3), dtype=np.uint8)


def to_float(x):
    return x.astype(np.float32) / 255.0


def normalize(x):
    return (x - 0.5) / 0.25


def center_crop(x):
    return x[4:12, 4:12]


def _order(ds) -> list[str]:
    """The UDFs from the output down (maps of different parallelism do not fuse,
    so the tests' orders stay visible)."""
    node, out = optimize.optimize(ds._node, ds.options).plan, []
    while node.inputs():
        fn = getattr(node, "fn", None) or getattr(node, "predicate", None)
        parts = [p for p, _ in reversed(getattr(fn, "parts", ()))]  # an image_chain's
        for part in parts or ([] if fn is None else [fn]):
            out.append(getattr(getattr(part, "fn", part), "__name__", node.op_name))
        node = node.inputs()[0]
    return out


POINTWISE = [jdata.declare(to_float, pointwise=True), jdata.declare(normalize, pointwise=True)]


def test_declare_validates_its_arguments():
    with pytest.raises(ValueError, match="both pointwise and a selection"):
        jdata.declare(abs, pointwise=True, selection=True)
    with pytest.raises(TypeError, match="list of field names"):
        jdata.declare(abs, reads="image")
    assert jdata.declare(abs)(-3) == 3


def test_a_shrinking_crop_moves_before_pointwise_maps_with_the_same_outputs():
    crop = jdata.declare(center_crop, selection=True)
    ds = (jdata.from_tensor_slices(IMAGES).map(POINTWISE[0], num_parallel_calls=2)
          .map(POINTWISE[1]).map(crop))
    assert _order(ds) == ["normalize", "to_float", "center_crop"]
    assert_same_sequence(take_list(ds), take_list(ds.with_options(OFF)))
    check_restore_at_every_step(ds)


def test_a_random_crop_keeps_its_keys_when_moved():
    def random_crop(x, key):
        top, left = np.random.default_rng(key).integers(0, 8, size=2)
        return x[top:top + 8, left:left + 8]

    crop = jdata.declare(random_crop, selection=True)
    ds = (jdata.from_tensor_slices(IMAGES).map(POINTWISE[0], num_parallel_calls=2)
          .random_map(crop, jax.random.key(1)))
    assert _order(ds) == ["to_float", "random_crop"]
    assert_same_sequence(take_list(ds), take_list(ds.with_options(OFF)))


def test_selections_that_do_not_shrink_and_undeclared_maps_stay():
    flip = jdata.declare(lambda x: x[:, ::-1], selection=True)
    same_size = jdata.from_tensor_slices(IMAGES).map(POINTWISE[0], num_parallel_calls=2).map(
        flip)
    assert "reorder" not in [f.rule for f in optimize.optimize(same_size._node,
                                                                same_size.options).fired]
    undeclared = jdata.from_tensor_slices(IMAGES).map(to_float, num_parallel_calls=2).map(
        jdata.declare(center_crop, selection=True))
    assert _order(undeclared)[-1] == "to_float"


def test_a_filter_moves_before_a_map_that_does_not_write_what_it_reads():
    calls = []

    def embed(d):
        calls.append(int(d["id"]))
        return {"id": d["id"], "vec": d["vec"] * 2.0}

    rows = {"id": np.arange(20), "vec": np.ones((20, 4), np.float32)}
    mapped = jdata.declare(embed, reads=["vec"], writes=["vec"])
    keep = jdata.declare(lambda d: d["id"] % 5 == 0, reads=["id"])
    ds = jdata.from_tensor_slices(rows).map(mapped).filter(keep)
    plan = optimize.optimize(ds._node, ds.options).plan
    assert isinstance(plan.input, FilterNode) or isinstance(plan.input.input, FilterNode)
    out = take_list(ds)
    assert [int(d["id"]) for d in out] == [0, 5, 10, 15]
    assert sorted(calls) == [0, 5, 10, 15]  # the map ran only on kept rows
    assert_same_sequence(out, take_list(ds.with_options(OFF)))
    overlapping = jdata.from_tensor_slices(rows).map(mapped).filter(
        jdata.declare(lambda d: d["vec"][0] > 1, reads=["vec"]))
    assert "reorder" not in [f.rule for f in optimize.optimize(overlapping._node,
                                                                overlapping.options).fired]


def test_built_in_image_ops_reorder_on_images_of_varied_sizes():
    from jdata.ops import image

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=(int(h), int(w), 3), dtype=np.uint8)
              for h, w in rng.integers(40, 80, size=(10, 2))]
    ds = (jdata.from_source(images).map(image.to_float()).map(image.normalize(0.5, 0.25))
          .random_map(image.random_crop(32, 32), jax.random.key(0))
          .random_map(image.random_flip(), jax.random.key(1)))
    assert _order(ds)[-1] == "random_crop"  # first, though written third
    assert_same_sequence(take_list(ds), take_list(ds.with_options(OFF)))


def test_explain_shows_what_the_reordering_saved_on_the_first_elements():
    big = np.zeros((4, 256, 256, 3), np.uint8)
    ds = (jdata.from_tensor_slices(big).map(POINTWISE[0]).map(POINTWISE[1])
          .map(jdata.declare(center_crop, selection=True)))
    note = [line for line in ds.explain().splitlines() if "us per element" in line]
    assert len(note) == 1 and "center_crop before normalize, to_float" in note[0]
    before, after = (float(x.replace(",", "")) for x in
                     note[0].split(": ")[1].split(" us")[0].split(" -> "))
    assert after < before  # an 8x8 crop first: float work on 64 pixels, not 65,536
