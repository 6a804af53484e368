"""pointwise_after_batch: pointwise maps that grow the elements run once per batch."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jdata
from jdata import optimize
from jdata.ops import image
from tests.helpers import (assert_same_sequence, check_restore_at_every_step, plan_ops,
                           take_list)

OFF = jdata.Options(optimize=False)
MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]
IMAGES = np.random.default_rng(0).integers(0, 256, (10, 6, 5, 3), dtype=np.uint8)


def _optimized(ds: jdata.Dataset):
    return optimize.optimize(ds._node, ds.options)


def _fired(ds: jdata.Dataset) -> list[str]:
    return [f.rule for f in _optimized(ds).fired]


def test_normalize_runs_on_the_uint8_batch_with_the_same_values():
    ds = jdata.from_tensor_slices(IMAGES).map(image.normalize(MEAN, STD)).batch(4)
    assert plan_ops(_optimized(ds).plan)[-3:] == ["map", "batch", "from_tensor_slices"]
    assert "pointwise_after_batch" in _fired(ds)
    batches = take_list(ds)
    assert_same_sequence(batches, take_list(ds.with_options(OFF)))  # the same arithmetic
    np.testing.assert_allclose(np.concatenate(batches), (IMAGES - np.array(MEAN)) / STD,
                               rtol=1e-6, atol=1e-7)


def test_convert_image_dtype_to_float_runs_on_the_uint8_batch_with_the_same_values():
    ds = jdata.from_tensor_slices(IMAGES).map(image.convert_image_dtype(np.float32)).batch(4)
    assert plan_ops(_optimized(ds).plan)[-3:] == ["map", "batch", "from_tensor_slices"]
    batches = take_list(ds)
    assert_same_sequence(batches, take_list(ds.with_options(OFF)))
    np.testing.assert_array_equal(np.concatenate(batches), IMAGES * np.float32(1 / 255))
    back = jdata.from_tensor_slices(IMAGES.astype(np.float32) / 255).map(
        image.convert_image_dtype(np.uint8)).batch(4)
    assert "pointwise_after_batch" not in _fired(back)  # shrinks the elements: stays


def test_a_run_of_pointwise_maps_moves_together_if_it_grows_the_elements():
    ds = (jdata.from_tensor_slices(IMAGES).map(image.to_float())
          .map(image.normalize(0.5, 0.25)).batch(3, drop_remainder=True))
    result = _optimized(ds)
    assert [f.rule for f in result.fired][:2] == ["pointwise_after_batch", "map_fusion"]
    assert plan_ops(result.plan)[-3:] == ["map", "batch", "from_tensor_slices"]
    assert_same_sequence(take_list(ds), take_list(ds.with_options(OFF)))
    undeclared = (jdata.from_tensor_slices(IMAGES).map(lambda x: x // 2)
                  .map(image.normalize(MEAN, STD)).batch(4))
    assert plan_ops(_optimized(undeclared).plan)[-4:] == ["map", "batch", "map",
                                                          "from_tensor_slices"]
    assert_same_sequence(take_list(undeclared), take_list(undeclared.with_options(OFF)))


@pytest.mark.parametrize("make", [
    lambda: jdata.from_tensor_slices(IMAGES.astype(np.float32)).map(  # does not grow
        image.normalize(MEAN, STD)),
    lambda: jdata.from_tensor_slices(IMAGES).map(lambda x: x / 255.0),  # not declared
    lambda: jdata.from_tensor_slices(IMAGES).map(  # a user's UDF: it may take one image only
        jdata.declare(lambda x: x / np.float32(255), pointwise=True)),
    lambda: jdata.from_tensor_slices(IMAGES).map(image.normalize(MEAN, STD)).random_map(
        image.random_flip(), jax.random.key(0)),  # not right before the batch
])
def test_maps_that_do_not_qualify_stay(make):
    ds = make().batch(4)
    assert "pointwise_after_batch" not in _fired(ds)


def test_plans_that_ignore_errors_are_left_alone():
    ds = jdata.from_tensor_slices(IMAGES).map(image.normalize(MEAN, STD)).batch(4)
    assert "pointwise_after_batch" not in _fired(ds.ignore_errors())


def test_sequential_inputs():
    def images():
        yield from IMAGES

    ds = jdata.from_generator(images).map(image.to_float(), num_parallel_calls=2).batch(4)
    assert "pointwise_after_batch" in _fired(ds)
    assert_same_sequence(take_list(ds), take_list(ds.with_options(OFF)))


def _one_image_only(x):
    # A user's pointwise UDF written for one image (as an OpenCV call is): not a batch.
    if x.ndim != 3:
        raise ValueError(f"one image expected, got shape {x.shape}")
    return x.astype(np.float32)


def _fails_on_five(x):
    if (_one_image_only(x) == 5).any():
        raise ValueError("five")
    return x.astype(np.float32)


def test_a_users_declared_pointwise_udf_stays_per_element():
    ds = jdata.from_tensor_slices(IMAGES).map(
        jdata.declare(_one_image_only, pointwise=True)).batch(4)
    assert "pointwise_after_batch" not in _fired(ds)
    assert_same_sequence(take_list(ds), take_list(ds.with_options(OFF)))
    bad = jdata.from_tensor_slices(np.arange(12, dtype=np.uint8).reshape(12, 1, 1, 1)).map(
        jdata.declare(_fails_on_five, pointwise=True)).batch(4)
    with pytest.raises(jdata.UDFError) as raised:
        take_list(bad)
    assert (raised.value.op, raised.value.position) == ("map", 5)  # the element, as unfused


def test_restores_at_every_step():
    ds = jdata.from_tensor_slices(IMAGES).map(image.normalize(MEAN, STD)).batch(3)
    check_restore_at_every_step(ds, take_list(ds.with_options(OFF)))
