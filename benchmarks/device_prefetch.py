"""device_prefetch: does ``to_global(prefetch=2)`` hide host-to-device transfers behind the step?

A jitted step (a bf16 MLP over flattened 224x224x3 ``uint8`` images, batch
256: 38.5 MB per batch; its hidden layers, on the batch tiled 16 times, make
the step longer than the batch's transfer) trains for a fixed number of steps, fed three ways:
the same batch already on the device (the ideal), ``to_global(prefetch=2)``
from host batches, and ``to_global(prefetch=0)`` (each transfer starts when
the step asks). Each way runs twice: blocking on every step's result (a loop
that reads its loss each step) and letting JAX dispatch run ahead. Prints
the step times and their ratios to the ideal. Meant for an accelerator
(``python -m benchmarks.device_prefetch``); it runs on CPU too, slowly.
"""

from __future__ import annotations

import json
import time

import numpy as np

BATCH, PIXELS = 256, 224 * 224 * 3
# The step must outlast a batch's transfer (~3-7 ms on an H100 from pageable host memory),
# or no prefetch can hide it: the hidden layers run on the batch tiled 16 times.
HIDDEN, LAYERS, TILE = 4096, 24, 16


def _step_fn():
    import jax
    import jax.numpy as jnp

    def loss(params, images):
        x = images.astype(jnp.bfloat16) / 255
        x = jnp.tile(jnp.tanh(x @ params[0]), (TILE, 1))
        for w in params[1:]:
            x = jnp.tanh(x @ w)
        return jnp.mean(x.astype(jnp.float32) ** 2)

    @jax.jit
    def step(params, images):
        value, grads = jax.value_and_grad(loss)(params, images)
        return [p - 1e-3 * g for p, g in zip(params, grads)], value

    return step


def measure(steps: int = 60, warmup: int = 10) -> dict:
    import jax

    import jdata

    rng = np.random.default_rng(0)
    keys = jax.random.split(jax.random.key(0), LAYERS)
    params = [jax.random.normal(keys[0], (PIXELS, HIDDEN), jax.numpy.bfloat16) * 0.01] + [
        jax.random.normal(k, (HIDDEN, HIDDEN), jax.numpy.bfloat16) * 0.02 for k in keys[1:]]
    host = [rng.integers(0, 256, (BATCH, PIXELS), dtype=np.uint8) for _ in range(4)]
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    step = _step_fn()
    on_device = jax.device_put(host[0], sharding)

    def run(next_batch, block: bool) -> float:
        p = params
        for _ in range(warmup):
            p, value = step(p, next_batch())
        jax.block_until_ready(p)
        start = time.perf_counter()
        for _ in range(steps):
            p, value = step(p, next_batch())
            if block:
                value.block_until_ready()
        jax.block_until_ready(p)
        return (time.perf_counter() - start) / steps

    results = {"device": str(jax.devices()[0].device_kind), "batch_mb": host[0].nbytes / 1e6}
    for block in (True, False):
        mode = "blocking" if block else "async"
        ideal = run(lambda: on_device, block)
        row = {"ideal_ms": ideal * 1e3}
        for prefetch in (2, 0):
            it = jdata.from_source(host).repeat().to_global(sharding, prefetch=prefetch).iterator()
            row[f"prefetch{prefetch}_ms"] = run(lambda: next(it), block) * 1e3
            row[f"prefetch{prefetch}_vs_ideal"] = row[f"prefetch{prefetch}_ms"] / row["ideal_ms"]
            it.close()
        results[mode] = row
    start = time.perf_counter()
    for _ in range(10):
        jax.device_put(host[1], sharding).block_until_ready()
    results["transfer_ms"] = (time.perf_counter() - start) / 10 * 1e3
    return results


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
