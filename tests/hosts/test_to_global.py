"""to_global: global jax.Arrays from per-host batches, prefetched, with exact restores.

The multi-device cases run in a subprocess with 8 forced CPU devices (the
device count is fixed when JAX starts); multi-process runs come with the
jax.distributed tests.
"""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import jdata
from tests.helpers import (assert_elements_equal, assert_same_sequence,
                           check_restore_at_every_step, take_list)

MESH = jax.sharding.Mesh(jax.devices()[:1], ("data",))
BY_ROWS = jax.sharding.NamedSharding(MESH, jax.sharding.PartitionSpec("data"))


def _batches(n=10, batch=4):
    return (jdata.range(n).map(lambda x: {"x": np.full((3,), x, np.float32), "y": x * 2})
            .batch(batch))


def test_batches_become_jax_arrays_with_the_sharding_and_the_same_values():
    host = take_list(_batches())
    for prefetch in (0, 2):
        got = take_list(_batches().to_global(BY_ROWS, prefetch=prefetch))
        assert len(got) == 3
        for g, h in zip(got, host):
            assert isinstance(g["x"], jax.Array) and g["x"].sharding == BY_ROWS
            np.testing.assert_array_equal(np.asarray(g["x"]), h["x"])
            np.testing.assert_array_equal(np.asarray(g["y"]), h["y"])
    ds = _batches().to_global(BY_ROWS)
    assert "ToGlobal(sharding=NamedSharding({'data': 1}, P('data',)), prefetch=2)" in \
        ds.explain()
    assert "inject_prefetch" not in ds.explain()  # it keeps batches ahead itself


def test_a_pytree_of_shardings_and_exact_restores_with_batches_in_flight():
    replicated = jax.sharding.NamedSharding(MESH, jax.sharding.PartitionSpec())
    ds = _batches(22, 2).to_global({"x": BY_ROWS, "y": replicated}, prefetch=3)
    got = check_restore_at_every_step(ds)
    assert got[0]["y"].sharding == replicated and got[0]["x"].sharding == BY_ROWS
    assert [int(b["y"][0]) for b in got] == list(range(0, 44, 4))


def test_bad_arguments_and_leaves_fail_clearly():
    with pytest.raises(TypeError, match="must be a jax.sharding.Sharding"):
        _batches().to_global("data")
    with pytest.raises(TypeError, match="or None"):
        _batches().to_global({"x": BY_ROWS, "y": "data"})
    with pytest.raises(TypeError, match="must be a jax.sharding.Sharding"):
        _batches().to_global({})
    with pytest.raises(ValueError, match="prefetch"):
        _batches().to_global(BY_ROWS, prefetch=-1)
    with pytest.raises(TypeError, match="holds bytes or str"):
        take_list(jdata.from_generator(lambda: iter([b"a", b"b"])).batch(2).to_global(BY_ROWS))
    with pytest.raises(ValueError, match="is a scalar"):
        take_list(jdata.range(3).map(lambda x: x).to_global(BY_ROWS))
    with pytest.raises(ValueError, match="is a scalar"):  # no user code: known when built
        jdata.range(3).to_global(BY_ROWS)


def test_a_rebatched_input_is_checked_by_its_batch_sizes():
    # Node.static_batch_sizes, not rebatch's field `batch_sizes`, is what to_global reads.
    rebatched = jdata.range(16).batch(4, drop_remainder=True).rebatch(8, drop_remainder=True)
    assert rebatched._node.static_batch_sizes() == (8, 8)
    assert [b.shape for b in take_list(rebatched.to_global(BY_ROWS))] == [(8,), (8,)]


def test_none_as_the_whole_sharding_is_refused_with_the_way_to_keep_leaves_on_the_host():
    with pytest.raises(TypeError) as info:
        _batches().to_global(None)
    message = str(info.value)
    assert "sharding=None" in message and "{'image': sharding, 'id': None}" in message
    assert "needs no to_global" in message


def _mixed(n=10, batch=4):
    """Device leaves (float rows, int matrix) beside host leaves (ids, bytes, str)."""
    return jdata.from_tensor_slices({
        "x": np.arange(3 * n, dtype=np.float32).reshape(n, 3),
        "id": np.arange(100, 100 + n, dtype=np.int64),
        "pair": (np.arange(n, dtype=np.int32), [f"text {i}".encode() for i in range(n)]),
        "meta": {"name": [f"name {i}" for i in range(n)], "w": np.ones(n, np.float32)},
    }).batch(batch)


_MIXED_SHARDING = {"x": BY_ROWS, "id": None, "pair": (BY_ROWS, None),
                   "meta": {"name": None, "w": BY_ROWS}}


def test_host_leaves_of_ids_bytes_and_str_stay_numpy_beside_device_leaves():
    host = take_list(_mixed())
    for prefetch in (0, 2):
        got = take_list(_mixed().to_global(_MIXED_SHARDING, prefetch=prefetch))
        assert len(got) == len(host) == 3
        for g, h in zip(got, host):
            for leaf in (g["x"], g["pair"][0], g["meta"]["w"]):
                assert isinstance(leaf, jax.Array) and leaf.sharding == BY_ROWS
            for leaf in (g["id"], g["pair"][1], g["meta"]["name"]):
                assert isinstance(leaf, np.ndarray) and not isinstance(leaf, jax.Array)
            assert g["id"].dtype == np.int64 and g["pair"][1].dtype == object
            assert isinstance(g["meta"]["name"][0], str)
            assert isinstance(g["pair"][1][0], bytes)
            assert_elements_equal(jax.tree.map(np.asarray, g), h)
    assert got[-1]["meta"]["name"].tolist() == ["name 8", "name 9"]
    ds = _mixed().to_global(_MIXED_SHARDING)
    assert ds.element_spec == _mixed().element_spec  # one host: its batch is the global one
    rows = "NamedSharding({'data': 1}, P('data',))"
    assert (f"ToGlobal(sharding={{'id': None, 'meta': {{'name': None, 'w': {rows}}}, "
            f"'pair': ({rows}, None), 'x': {rows}}}, prefetch=2)") in ds.explain()


def test_a_host_leaf_is_the_batch_itself_read_only_where_the_element_is():
    rows = np.arange(8, dtype=np.int64).reshape(4, 2)
    ds = jdata.from_tensors({"x": np.zeros((4, 3), np.float32), "id": rows}).repeat(2)
    for element in ds.to_global({"x": BY_ROWS, "id": None}):
        np.testing.assert_array_equal(element["id"], rows)
        with pytest.raises(ValueError, match="read-only"):
            element["id"][0, 0] = 7  # would change the next epoch's batch


def test_a_sharding_prefix_covers_whole_subtrees_and_tuples_take_tuples():
    replicated = jax.sharding.NamedSharding(MESH, jax.sharding.PartitionSpec())
    got = take_list(_mixed().to_global({"x": BY_ROWS, "id": replicated, "pair": None,
                                        "meta": None}))
    assert isinstance(got[0]["id"], jax.Array) and got[0]["id"].sharding == replicated
    assert isinstance(got[0]["pair"][0], np.ndarray) and got[0]["pair"][0].dtype == np.int32
    pairs = jdata.range(6).map(lambda i: (np.full((2,), i), str(i))).batch(3)
    first = take_list(pairs.to_global((BY_ROWS, None)))[0]
    assert isinstance(first[0], jax.Array) and first[1].tolist() == ["0", "1", "2"]
    # Every leaf on the host is allowed (the prefetch thread still runs ahead).
    assert take_list(pairs.to_global((None, None)))[1][1].tolist() == ["3", "4", "5"]


def test_exact_restores_at_every_step_with_host_leaves_in_flight():
    expected = [jax.tree.map(np.asarray, b) for b in take_list(_mixed(22, 2))]
    for prefetch in (0, 3):
        got = check_restore_at_every_step(_mixed(22, 2).to_global(_MIXED_SHARDING,
                                                                  prefetch=prefetch))
        assert_same_sequence([jax.tree.map(np.asarray, b) for b in got], expected)
        assert [b["pair"][1].tolist() for b in got][-1] == [b"text 20", b"text 21"]
    ds = (jdata.range(9).map(lambda i: {"x": np.float32(i), "t": str(i)}).batch(2)
          .to_global({"x": BY_ROWS, "t": None}, prefetch=2))
    got = check_restore_at_every_step(ds)
    assert [b["t"].tolist() for b in got] == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"],
                                             ["8"]]


def test_a_sharding_pytree_that_does_not_match_fails_when_built_with_both_structures():
    with pytest.raises(ValueError) as info:
        _mixed().to_global({"x": BY_ROWS, "id": None, "pair": (BY_ROWS, None, None),
                            "meta": None})
    message = str(info.value)
    assert "the sharding pytree does not match the elements" in message
    assert "sharding: PyTreeDef({'id': *, 'meta': *, 'pair': (*, *, *), 'x': *})" in message
    assert "leaves at ['id'], ['meta'], ['pair'][0], ['pair'][1], ['pair'][2], ['x']" in message
    assert ("leaves at ['id'], ['meta']['name'], ['meta']['w'], ['pair'][0], ['pair'][1], "
            "['x']") in message
    assert message.endswith("at ['pair'] the sharding has a tuple with [0], [1], [2], the "
                            "element a tuple with [0], [1]")
    with pytest.raises(ValueError, match=r"leaves at \['x'\], \['z'\]"):
        _mixed().to_global({"x": BY_ROWS, "z": None})


def test_a_mismatch_or_text_under_a_sharding_behind_user_code_fails_at_the_first_batch():
    ds = jdata.range(8).map(lambda i: {"x": np.float32(i), "t": b"%d" % i}).batch(4)
    mismatched = ds.to_global({"x": BY_ROWS, "u": None})  # the spec needs the user's code
    with pytest.raises(ValueError, match=r"does not match the elements(.|\n)*\['t'\]"):
        take_list(mismatched)
    with pytest.raises(TypeError) as info:
        take_list(ds.to_global(BY_ROWS))
    assert "the leaf at ['t'] holds bytes or str" in str(info.value)
    assert "put None at its place in the sharding pytree" in str(info.value)


def test_text_under_a_sharding_fails_when_built_naming_the_leaf_and_the_fix():
    with pytest.raises(TypeError) as info:
        _mixed().to_global({"x": BY_ROWS, "id": None, "pair": BY_ROWS, "meta": None})
    message = str(info.value)
    assert message.startswith("to_global: the leaf at ['pair'][1] holds bytes or str")
    assert "put None at its place in the sharding pytree" in message
    with pytest.raises(TypeError, match=r"the leaf at \['meta'\]\['name'\] holds bytes"):
        _mixed().to_global(BY_ROWS)


def test_per_host_batch_size_checks_divisibility():
    assert jdata.hosts.per_host_batch_size(256, num_processes=4) == 64
    assert jdata.hosts.per_host_batch_size(8) == 8  # this test runs one process
    with pytest.raises(ValueError, match="does not split evenly over 3 processes"):
        jdata.hosts.per_host_batch_size(256, num_processes=3)
    with pytest.raises(ValueError, match="positive int"):
        jdata.hosts.per_host_batch_size(0, num_processes=2)


_EIGHT_DEVICES = textwrap.dedent("""
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, numpy as np, jdata
    P = jax.sharding.PartitionSpec
    data = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    grid = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    ds = jdata.range(64).map(lambda x: np.arange(6, dtype=np.int32) + 6 * x).batch(16)
    out = {"devices": len(jax.devices())}
    for name, mesh in (("data", data), ("grid", grid)):
        batches = list(ds.to_global(jax.sharding.NamedSharding(mesh, P("data"))))
        first = batches[0]
        out[name] = {
            "shape": list(first.shape), "batches": len(batches),
            "shards": len(first.addressable_shards),
            "rows_per_shard": sorted({s.data.shape[0] for s in first.addressable_shards}),
            "equal": all(np.array_equal(np.asarray(b), h) for b, h in zip(batches, ds)),
        }
    it = ds.to_global(jax.sharding.NamedSharding(data, P("data")), prefetch=2).iterator()
    seen = [np.asarray(next(it)) for _ in range(2)]
    rest = [np.asarray(b) for b in ds.to_global(jax.sharding.NamedSharding(data, P("data")))
            .iterator(it.get_state())]
    out["restored"] = all(np.array_equal(a, b) for a, b in zip(seen + rest, ds))
    out["restored_count"] = len(seen + rest)
    print(json.dumps(out))
""")


def test_eight_devices_one_mesh_axis_and_a_replicated_axis():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", _EIGHT_DEVICES], capture_output=True,
                            text=True, timeout=240, env=env,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["devices"] == 8
    assert out["data"] == {"shape": [16, 6], "batches": 4, "shards": 8, "rows_per_shard": [2],
                           "equal": True}
    # 4-way data parallel, each row block replicated on the 2 devices of the model axis.
    assert out["grid"] == {"shape": [16, 6], "batches": 4, "shards": 8, "rows_per_shard": [4],
                           "equal": True}
    assert out["restored"] and out["restored_count"] == 4


# The preamble of the scripts run on 8 forced CPU devices: a row mesh and a 4x2 grid.
_MESHES = textwrap.dedent("""
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, numpy as np, jdata
    P = jax.sharding.PartitionSpec
    devices = np.array(jax.devices())
    rows = jax.sharding.NamedSharding(jax.sharding.Mesh(devices, ("data",)), P("data"))
    grid = jax.sharding.NamedSharding(
        jax.sharding.Mesh(devices.reshape(4, 2), ("data", "model")), P("data"))
""")


_DIVISIBILITY = _MESHES + textwrap.dedent("""
    replicated = jax.sharding.NamedSharding(jax.sharding.Mesh(devices, ("data",)), P())
    texts = jdata.range(64).map(lambda i: {"x": np.float32(i), "t": str(i)})

    def built(make):
        try:
            make()
        except ValueError as e:
            return str(e)
        return "built"

    def consumed(ds):
        got = []
        try:
            for batch in ds:
                got.append(np.asarray(batch).tolist())
        except ValueError as e:
            return {"batches": got, "error": str(e)}
        return {"batches": got}

    def uneven():
        yield np.arange(8)
        yield np.arange(8, 14)

    out = {
        "by_6": built(lambda: jdata.range(64).batch(6, drop_remainder=True).to_global(rows)),
        "by_6_with_remainder": built(lambda: jdata.range(64).batch(6).to_global(rows)),
        "short_last": built(lambda: jdata.range(20).batch(8).to_global(rows)),
        "exact": built(lambda: jdata.range(24).batch(8).to_global(rows)),
        "behind_user_code": built(lambda: texts.batch(6, drop_remainder=True)
                                  .to_global({"x": rows, "t": None})),
        "grid_by_6": built(lambda: jdata.range(64).batch(6).to_global(grid)),
        "grid_by_4": built(lambda: jdata.range(64).batch(4).to_global(grid)),
        "replicated_by_6": built(lambda: jdata.range(64).batch(6).to_global(replicated)),
        "late_short": consumed(jdata.range(20).filter(lambda x: x >= 0).batch(8)
                               .to_global(rows, prefetch=2)),
        "late_uneven": consumed(jdata.from_generator(uneven).to_global(rows)),
    }
    ds = texts.batch(8, drop_remainder=True).to_global({"x": rows, "t": None}, prefetch=2)
    it = ds.iterator()
    first = next(it)
    state = it.get_state()  # the next 2 batches are on the devices already
    out["host_leaf"] = {
        "shards": len(first["x"].addressable_shards), "t": first["t"].tolist(),
        "x": np.asarray(first["x"]).tolist(), "batches": 1 + len(list(it)),
        "restored": [b["t"].tolist() for b in ds.iterator(state)],
    }
    print(json.dumps(out))
""")


def test_eight_devices_batches_that_do_not_split_fail_when_built_or_at_that_batch():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", _DIVISIBILITY], capture_output=True,
                            text=True, timeout=240, env=env,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    rule = ("its sharding NamedSharding({'data': 8}, P('data',)) splits dimension 0 into 8 "
            "blocks, so a batch needs a multiple of 8 rows")
    assert out["by_6"] == out["by_6_with_remainder"] == (
        f"to_global: the element has a batch of 6 rows, but {rule}; use a per-host batch "
        "size that is a multiple of 8 (e.g. 8), with batch(..., drop_remainder=True) so that "
        "a short last batch is dropped")
    assert out["short_last"] == (
        f"to_global: the element has a short batch of 4 rows (the others have 8), but {rule}; "
        "drop it with batch(..., drop_remainder=True), or give the dataset a multiple of 8 "
        "elements")
    # Behind a map the spec is unknown, but batch's size is not: named by the sharding's leaf.
    assert out["behind_user_code"].startswith(
        "to_global: the leaf at ['x'] has a batch of 6 rows")
    assert "splits dimension 0 into 4 blocks, so a batch needs a multiple of 4 rows" in \
        out["grid_by_6"] and "(e.g. 4 or 8)" in out["grid_by_6"]
    assert out["exact"] == out["grid_by_4"] == out["replicated_by_6"] == "built"
    # The filter hides the count: the short last batch fails when it comes, after the others.
    assert out["late_short"]["batches"] == [list(range(8)), list(range(8, 16))]
    assert "has a short batch of 4 rows (the others have 8)" in out["late_short"]["error"]
    assert "batch(..., drop_remainder=True)" in out["late_short"]["error"]
    assert out["late_uneven"]["batches"] == [list(range(8))]
    assert "has a short batch of 6 rows" in out["late_uneven"]["error"]
    host = out["host_leaf"]
    assert host["shards"] == 8 and host["batches"] == 8
    assert host["t"] == [str(i) for i in range(8)] and host["x"] == list(range(8))
    assert host["restored"] == [[str(i) for i in range(j, j + 8)] for j in range(8, 64, 8)]


MEAN, STD = np.array([123.675, 116.28, 103.53]), np.array([58.395, 57.12, 57.375])


def _images(n=10, batch=4):
    pixels = np.random.default_rng(0).integers(0, 256, (n, 5, 6, 3), dtype=np.uint8)
    return pixels, jdata.from_tensor_slices({"image": pixels, "label": np.arange(n),
                                             "raw": pixels}).batch(batch)


def test_normalize_ships_uint8_and_normalizes_the_device_leaves_on_the_devices():
    pixels, ds = _images()
    sharding = {"image": BY_ROWS, "label": BY_ROWS, "raw": None}
    for prefetch in (0, 2):
        got = take_list(ds.to_global(sharding, prefetch=prefetch, normalize=(MEAN, STD)))
        images = np.concatenate([np.asarray(b["image"]) for b in got])
        assert got[0]["image"].dtype == np.float32 and got[0]["image"].sharding == BY_ROWS
        np.testing.assert_allclose(images, (pixels - MEAN) / STD, rtol=1e-6, atol=1e-6)
        assert np.asarray(got[0]["label"]).tolist() == [0, 1, 2, 3]  # not uint8: as is
        assert got[0]["raw"].dtype == np.uint8  # on the host: as is
    normalized = ds.to_global(sharding, normalize=(MEAN.tolist(), STD.tolist()))
    assert normalized.element_spec["image"].dtype == np.float32
    assert normalized.element_spec["raw"].dtype == np.uint8
    assert "normalize=([123.675" in normalized.explain()
    gray = take_list(jdata.from_tensors(np.full((2, 3), 51, np.uint8)).to_global(
        BY_ROWS, normalize=(1, 2)))
    np.testing.assert_array_equal(np.asarray(gray[0]), np.full((2, 3), 25, np.float32))


def test_normalize_restores_exactly_at_every_step():
    _, ds = _images(11, 2)
    got = check_restore_at_every_step(ds.to_global({"image": BY_ROWS, "label": None,
                                                    "raw": None}, prefetch=3,
                                                   normalize=(MEAN, STD)))
    assert len(got) == 6 and got[0]["image"].dtype == np.float32


def test_normalize_bad_arguments_and_leaves_fail_clearly():
    _, ds = _images()
    with pytest.raises(TypeError, match=r"normalize='x' must be a \(mean, std\) pair"):
        ds.to_global(BY_ROWS, normalize="x")
    with pytest.raises(TypeError, match="pair"):
        ds.to_global(BY_ROWS, normalize=(1, 2, 3))
    with pytest.raises(ValueError, match="to_global: std=.* has a zero"):
        ds.to_global(BY_ROWS, normalize=(0, [1, 0, 1]))
    floats = jdata.from_tensor_slices({"image": np.zeros((4, 2, 2, 3), np.float32)}).batch(2)
    with pytest.raises(ValueError) as info:  # known when built: no user code
        floats.to_global(BY_ROWS, normalize=(MEAN, STD))
    assert str(info.value).startswith(
        "to_global: normalize=(mean, std) normalizes the uint8 leaves that go to the devices, "
        "but none is uint8 (the leaf at ['image'] is float32); drop normalize=, or the "
        "map(normalize(...)) before it")
    behind_a_map = floats.map(lambda e: e).to_global(BY_ROWS, normalize=(MEAN, STD))
    with pytest.raises(ValueError, match="but none is uint8"):
        take_list(behind_a_map)
    with pytest.raises(ValueError, match=r"normalize has 3 values per channel, but the leaf "
                                         r"at \['image'\] has shape \(4, 5, 6, 4\)"):
        take_list(jdata.from_tensors({"image": np.zeros((4, 5, 6, 4), np.uint8)})
                  .map(lambda e: e).to_global(BY_ROWS, normalize=(MEAN, STD)))


_EIGHT_DEVICES_NORMALIZE = _MESHES + textwrap.dedent("""
    pixels = np.random.default_rng(0).integers(0, 256, (32, 4, 4, 3), dtype=np.uint8)
    mean, std = np.array([120.0, 110.0, 100.0]), np.array([60.0, 50.0, 40.0])
    ds = jdata.from_tensor_slices(pixels).batch(16)
    out = {}
    for name, sharding in (("rows", rows), ("grid", grid)):
        batches = list(ds.to_global(sharding, normalize=(mean, std)))
        out[name] = {
            "sharding": batches[0].sharding == sharding, "dtype": str(batches[0].dtype),
            "shards": len(batches[0].addressable_shards),
            "error": float(np.abs(np.concatenate([np.asarray(b) for b in batches])
                                  - (pixels - mean) / std).max()),
        }
    print(json.dumps(out))
""")


def test_eight_devices_normalize_keeps_the_sharding():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", _EIGHT_DEVICES_NORMALIZE],
                            capture_output=True, text=True, timeout=240, env=env,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for name in ("rows", "grid"):
        assert out[name]["sharding"] and out[name]["dtype"] == "float32", out
        assert out[name]["shards"] == 8 and out[name]["error"] < 1e-5, out
