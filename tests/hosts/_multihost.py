"""One process of a 2-process jax.distributed run on localhost CPU (4 devices each).

Run by tests/hosts/test_multihost.py as
``python tests/hosts/_multihost.py PROCESS_ID PORT OUT_DIR MODE``; writes
``OUT_DIR/process_<id>.json`` with what it saw. MODE is ``full`` (every step),
``crash`` (checkpoint every step with Orbax, die without cleanup after step
``CRASH_AFTER``), ``resume`` (restore the latest checkpoint, then go on) or
``host_leaves`` (a per-host batch of 4 rows over the 8 devices, with a
``bytes`` leaf kept on the host, and the batch sizes that cannot split).
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")

GLOBAL_BATCH, ELEMENTS, CRASH_AFTER = 16, 100, 3


def main(process_id: int, port: int, out_dir: str, mode: str) -> None:
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=process_id, initialization_timeout=120)
    if mode == "host_leaves":
        out = host_leaves()
        with open(os.path.join(out_dir, f"process_{process_id}.json"), "w") as f:
            json.dump(out, f)
        jax.distributed.shutdown()
        return
    import numpy as np
    import orbax.checkpoint as ocp

    import jdata
    import jdata.checkpoint

    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    per_host = jdata.hosts.per_host_batch_size(GLOBAL_BATCH)
    ds = (jdata.hosts.shard_for_this_host(jdata.range(ELEMENTS).shuffle(jax.random.key(7)))
          .map(lambda x: x * 10).batch(per_host, drop_remainder=True)
          .to_global(sharding, prefetch=2))
    total = jax.jit(lambda b: b.sum())
    it = ds.iterator()
    manager = None
    if mode in ("crash", "resume"):
        manager = ocp.CheckpointManager(os.path.join(out_dir, "ckpt"))
    first_step = 0
    if mode == "resume":
        first_step = manager.latest_step() + 1
        it = manager.restore(first_step - 1, args=ocp.args.Composite(
            data=jdata.checkpoint.CheckpointRestore(it))).data
    steps = []
    for step, batch in enumerate(it, first_step):
        local = sorted(int(v) for s in batch.addressable_shards for v in np.asarray(s.data))
        steps.append({"step": step, "local": local, "shape": list(batch.shape),
                      "local_shards": len(batch.addressable_shards),
                      "global_sum": int(total(batch))})
        if manager is not None:
            manager.save(step, args=ocp.args.Composite(
                data=jdata.checkpoint.CheckpointSave(it)))
            manager.wait_until_finished()
        if mode == "crash" and step == CRASH_AFTER:
            with open(os.path.join(out_dir, f"process_{process_id}.json"), "w") as f:
                json.dump({"steps": steps, "devices": len(jax.devices())}, f)
            os._exit(0)  # no cleanup, no shutdown: as a preempted job dies
    with open(os.path.join(out_dir, f"process_{process_id}.json"), "w") as f:
        json.dump({"steps": steps, "devices": len(jax.devices()),
                   "local_devices": len(jax.local_devices())}, f)
    if manager is not None:
        manager.close()
    jax.distributed.shutdown()


def host_leaves() -> dict:
    """Each host batches 4 rows: 8 global rows, one per device (4 on each host's devices)."""
    import numpy as np

    import jdata

    P = jax.sharding.PartitionSpec
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    rows = jax.sharding.NamedSharding(mesh, P("data"))
    grid = jax.sharding.NamedSharding(  # 4 row blocks, 2 of them on each host's devices
        jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model")), P("data"))
    source = jdata.hosts.shard_for_this_host(jdata.range(40)).map(
        lambda x: {"x": x * 10, "id": b"%d" % x})
    ds = source.batch(4, drop_remainder=True).to_global({"x": rows, "id": None})
    total = jax.jit(lambda b: b.sum())
    steps = []
    for batch in ds:
        shards = sorted(batch["x"].addressable_shards, key=lambda s: s.index[0].start)
        steps.append({"local": [int(v) for s in shards for v in np.asarray(s.data)],
                      "ids": [bytes(i).decode() for i in batch["id"]],
                      "shape": list(batch["x"].shape), "global_sum": int(total(batch["x"]))})
    errors = {}
    for name, build in (("rows_by_6", lambda: source.batch(6, drop_remainder=True)
                         .to_global({"x": rows, "id": None})),
                        ("grid_by_3", lambda: source.batch(3, drop_remainder=True)
                         .to_global({"x": grid, "id": None}))):
        try:
            build()
        except ValueError as e:
            errors[name] = str(e)
    spec = ds.element_spec
    grid_spec = source.batch(2, drop_remainder=True).to_global({"x": grid, "id": None})
    return {"steps": steps, "errors": errors,
            "spec": {"x": list(spec["x"].shape), "id": list(spec["id"].shape)},
            "grid_spec": list(grid_spec.element_spec["x"].shape),
            "grid_shape": _first_shape(grid_spec)}


def _first_shape(ds) -> list:
    with ds.iterator() as it:
        return list(next(it)["x"].shape)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
