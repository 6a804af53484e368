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
from tests.helpers import check_restore_at_every_step, take_list

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
    with pytest.raises(ValueError, match="prefetch"):
        _batches().to_global(BY_ROWS, prefetch=-1)
    with pytest.raises(TypeError, match="holds bytes or str"):
        take_list(jdata.from_tensor_slices(["a", "b"]).batch(2).to_global(BY_ROWS))
    with pytest.raises(ValueError, match="is a scalar"):
        take_list(jdata.range(3).to_global(BY_ROWS))


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
