"""random_map_fusion: adjacent maps and random_maps of any UDFs run as one random_map, with
the unfused elements (each random op keeps its key stream), restores and errors."""

from __future__ import annotations

import pickle

import jax
import numpy as np
import pytest

import jdata
from jdata import optimize
from jdata.ops import image
from jdata.ops.map import MapNode
from jdata.ops.map_batch import MapBatchNode
from jdata.ops.random_map import RandomMapNode
from jdata.optimize.rewrite import Chain
from tests.helpers import check_restore_at_every_step

OFF = jdata.Options(optimize=False)
KEYS = jax.random.split(jax.random.key(7), 4)
PICTURES = np.random.default_rng(1).integers(0, 256, (6, 40, 52, 3), dtype=np.uint8)
BOXES = np.tile(np.array([[0.2, 0.1, 0.6, 0.5], [0.5, 0.5, 0.9, 0.95]], np.float32), (6, 1, 1))


def _noise(x, key):
    return x + np.int64(np.asarray(key)[0] % 1000)


def _scaled(x):
    return x * 3


def _pair(x):
    return x, -x


def _mixed(a, b, key):
    return a - b + np.int64(np.asarray(key)[1] % 7)


def _user_chain(ds: jdata.Dataset, **parallel) -> jdata.Dataset:
    return (ds.map(_scaled, **parallel).random_map(_noise, KEYS[0], **parallel)
            .map(_pair, **parallel).random_map(_mixed, KEYS[1], **parallel))


def _nodes(ds: jdata.Dataset) -> list:
    node, found = optimize.optimize(ds._node, ds.options).plan, []
    while node is not None:
        found.append(node)
        node = getattr(node, "input", None)
    return found


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(u), jax.tree.leaves(v)))
        for u, v in zip(a, b))


@pytest.mark.parametrize("parallel", [{}, {"num_parallel_calls": 2},
                                      {"num_parallel_calls": jdata.AUTOTUNE}])
def test_user_maps_and_random_maps_run_as_one_random_map_with_the_unfused_elements(parallel):
    ds = _user_chain(jdata.range(40), **parallel)
    assert "random_map_fusion" in ds.explain().splitlines()[0]
    chains = [n for n in _nodes(ds) if type(n) in (MapNode, RandomMapNode)]
    assert len(chains) == 1 and isinstance(chains[0].fn, Chain)
    assert [random for _, random in chains[0].fn.parts] == [False, True, False, True]
    assert chains[0].key.shape == (2, 2)
    assert "map(_scaled)+random_map(_noise)+map(_pair)+random_map(_mixed)" in ds.explain()
    assert _same(list(ds), list(ds.with_options(OFF)))


def test_restores_at_every_step_as_unfused():
    ds = _user_chain(jdata.range(12).shuffle(jax.random.key(2)), num_parallel_calls=2)
    assert "random_map_fusion" in ds.explain().splitlines()[0]
    # First iterators of each (an iterator is an epoch: the shuffle's order is per epoch).
    assert _same(list(ds), list(ds.with_options(OFF)))
    check_restore_at_every_step(ds)


def test_ssd_written_with_lambdas_between_kernels_is_one_stage():
    to_float = image.convert_image_dtype(np.float32)
    jitter = image.color_jitter(32 / 255, 0.5, 0.5, 0.05, random_order=False,
                                brightness_mode="additive")
    ds = (jdata.from_tensor_slices((PICTURES, BOXES))
          .random_map(image.random_resized_crop(24, 24, boxes=True, min_object_covered=0.3),
                      KEYS[0])
          .random_map(image.random_flip(boxes=True), KEYS[1])
          .map(lambda x, b: (to_float(x), b))
          .random_map(lambda x, b, key: (jitter(x, key), b), KEYS[2]))
    first = ds.explain().splitlines()[0]
    assert "image_chain_fusion" in first and "random_map_fusion" in first
    assert len([n for n in _nodes(ds) if type(n) is RandomMapNode]) == 1
    out = list(ds)
    assert _same(out, list(ds.with_options(OFF)))
    assert out[0][0].shape == (24, 24, 3) and out[0][0].dtype == np.float32


def test_other_parallelism_order_or_vectorized_ops_stop_the_chain():
    ds = (jdata.range(8).random_map(_noise, KEYS[0], num_parallel_calls=2)
          .map(_scaled, num_parallel_calls=None)
          .random_map(_noise, KEYS[1], num_parallel_calls=2, deterministic=False)
          .map(lambda x: x + 1, vectorize=True))
    assert "random_map_fusion" not in ds.explain().splitlines()[0]
    assert sorted(ds) == sorted(ds.with_options(OFF))


def test_a_map_fused_into_its_batch_over_a_sequential_input_stays_there():
    def numbers():
        yield from range(10)

    ds = (jdata.from_generator(numbers, output_signature=jdata.TensorSpec((), np.int64))
          .random_map(_noise, KEYS[0], num_parallel_calls=2)
          .map(_scaled, num_parallel_calls=2).batch(4))
    first = ds.explain().splitlines()[0]
    assert "map_batch_fusion" in first and "random_map_fusion" not in first
    kinds = [type(n) for n in _nodes(ds)]
    assert kinds.index(RandomMapNode) == kinds.index(MapBatchNode) + 1
    assert _same(list(ds), list(ds.with_options(OFF)))


def test_maps_alone_are_left_to_map_fusion():
    ds = jdata.range(5).map(_scaled).map(_pair)
    first = ds.explain().splitlines()[0]
    assert "map_fusion" in first and "random_map_fusion" not in first


def test_an_error_is_reported_at_the_unfused_position():
    def fails_on_three(x):
        if x == 3 * 3:
            raise ValueError("three")
        return x

    ds = jdata.range(6).map(_scaled).map(fails_on_three).random_map(_noise, KEYS[0])
    assert "random_map_fusion" in ds.explain().splitlines()[0]
    with pytest.raises(jdata.UDFError) as fused:
        list(ds)
    with pytest.raises(jdata.UDFError) as unfused:
        list(ds.with_options(OFF))
    assert fused.value.position == unfused.value.position == 3
    assert fused.value.op == "random_map"  # the fused op's name (unfused: the map's)
    assert type(fused.value.__cause__) is ValueError


def test_the_chain_pickles_and_runs_in_worker_processes():
    ds = _user_chain(jdata.range(16), num_parallel_calls=2)
    [chain] = [n.fn for n in _nodes(ds) if type(n) is RandomMapNode]
    again = pickle.loads(pickle.dumps(chain))
    key = np.array([[1, 2], [3, 4]], np.uint32)
    assert again(np.int64(5), key) == chain(np.int64(5), key)
    in_processes = ds.with_options(jdata.Options(engine="processes"))
    assert _same(list(in_processes), list(ds.with_options(OFF)))
