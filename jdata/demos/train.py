"""``make demo``: train a small image classifier on CPU devices, preempt it, resume exactly.

1. Writes a small image-classification dataset: real JPEGs (10 classes of
   colored patterns with noise) saved to ArrayRecord shards with
   ``Dataset.save``.
2. Reads it back with ``jdata.load``: a per-epoch full shuffle, JPEG decoding and
   a random flip from each element's own key on parallel workers, batches
   that ``to_global`` turns into global ``jax.Array``s sharded over a
   data-parallel mesh of every device (``make demo`` forces 8 CPU devices),
   prefetched onto the devices.
3. Trains a small convolutional network with optax, showing steps/s,
   examples/s and the fraction of time spent waiting for input; saves the
   model, the optimizer and the iterator with Orbax every few steps.
4. Simulates a preemption: drops everything after a checkpoint and some
   more steps, restores the latest checkpoint into fresh objects and goes on.
   The resumed run must consume exactly the batches of an uninterrupted
   run (checked batch by batch against a data-only pass).
5. Prints a report: loss, throughput, input wait, and the optimized plan.

``python -m jdata.demos.train --service`` (``make demo-service``) runs the same
training fed by a ``jdata.service`` whose worker is killed mid-run: see
``jdata.demos.train_service``.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import jdata
from jdata._extras import require

CLASSES = 10
SIDE = 32


def write_dataset(directory: str, n: int, seed: int = 0) -> str:
    """``n`` labelled JPEGs saved as a jdata directory of ArrayRecord shards."""
    Image = require("PIL.Image", "jdata demo")

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:SIDE, 0:SIDE]

    def examples():
        for _ in range(n):
            label = int(rng.integers(CLASSES))
            angle = np.pi * label / CLASSES  # each class: stripes at its own angle
            stripes = np.sin((x * np.cos(angle) + y * np.sin(angle)) / 2.5)
            pixels = np.stack([stripes, np.roll(stripes, label, 0), -stripes], -1)
            pixels = pixels * 80 + 128 + rng.normal(0, 25, pixels.shape)
            buffer = io.BytesIO()
            Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(buffer, "JPEG",
                                                                        quality=90)
            yield {"jpeg": buffer.getvalue(), "label": np.int32(label)}

    path = os.path.join(directory, "images")
    jdata.from_generator(examples).save(path)
    return path


def _decode(example, key):
    Image = require("PIL.Image", "jdata demo")

    image = np.asarray(Image.open(io.BytesIO(example["jpeg"])))
    if key[0] >> 31:  # a random flip from the element's own key
        image = image[:, ::-1]
    return {"image": image, "label": example["label"]}


def keys():
    """The pipeline's keys: the shuffle's and the flips'."""
    return jax.random.split(jax.random.key(0))


def pipeline(path: str, global_batch: int, sharding, epochs: int) -> jdata.Dataset:
    shuffle_key, flip_key = keys()
    per_host = jdata.hosts.per_host_batch_size(global_batch)
    return (jdata.hosts.shard_for_this_host(jdata.load(path))
            .shuffle(shuffle_key)
            .random_map(_decode, flip_key, num_parallel_calls=jdata.AUTOTUNE)
            .batch(per_host, drop_remainder=True)
            .repeat(epochs)
            .to_global(sharding, prefetch=4))


# (name, input channels, output channels, stride): sized so that a step on 2 CPU cores takes
# longer than the pipeline needs for a batch, as an accelerator's step would.
_CONVS = (("conv1", 3, 32, 2), ("conv2", 32, 64, 1), ("conv3", 64, 64, 2))


def init_model(key):
    keys = jax.random.split(key, len(_CONVS) + 1)
    params = {name: jax.random.normal(k, (3, 3, cin, cout)) * (2 / (9 * cin)) ** 0.5
              for k, (name, cin, cout, _) in zip(keys, _CONVS)}
    params["dense"] = jax.random.normal(keys[-1], (_CONVS[-1][2], CLASSES)) * 0.1
    return params


def _logits(params, images):
    x = images.astype(jnp.float32) / 127.5 - 1
    for name, _, _, stride in _CONVS:
        x = jax.lax.conv_general_dilated(x, params[name], (stride, stride), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        x = jax.nn.relu(x)
    return x.mean(axis=(1, 2)) @ params["dense"]


def make_step(optimizer):
    import optax

    def loss_fn(params, batch):
        logits = _logits(params, batch["image"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

    @jax.jit
    def step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def _digest(batch) -> str:
    """A batch's fingerprint, to compare runs batch by batch."""
    h = hashlib.sha256()
    for key in ("image", "label"):
        h.update(np.asarray(batch[key]).tobytes())
    return h.hexdigest()[:16]


class Progress:
    """One status line: steps/s, examples/s and the share of time spent waiting for input."""

    def __init__(self, total: int, batch: int, stream=None):
        self.total, self.batch, self.stream = total, batch, stream or sys.stdout
        self.start = time.perf_counter()
        self.steps = 0
        self.wait = 0.0

    def update(self, step: int, loss: float, waited: float) -> None:
        self.steps += 1
        self.wait += waited
        elapsed = time.perf_counter() - self.start
        done = int(30 * (step + 1) / self.total)
        self.stream.write(
            f"\r[{'#' * done}{'.' * (30 - done)}] step {step + 1}/{self.total}  "
            f"loss {loss:.3f}  {self.steps / elapsed:5.1f} steps/s  "
            f"{self.steps * self.batch / elapsed:7,.0f} examples/s  "
            f"input wait {100 * self.wait / elapsed:4.1f}%")
        self.stream.flush()

    def close(self) -> dict:
        self.stream.write("\n")
        elapsed = time.perf_counter() - self.start
        return {"steps": self.steps, "seconds": elapsed,
                "examples_per_sec": self.steps * self.batch / elapsed,
                "wait_fraction": self.wait / elapsed}


def train(ds, step, params, opt_state, manager, first_step: int, last_step: int,
          progress: Progress, it=None, digests: list | None = None, every: int = 10,
          observe=None):
    """Steps ``first_step .. last_step - 1``; checkpoints every ``every`` steps.

    ``observe(step, batch)``, if given, sees each batch as it arrives.
    """
    import orbax.checkpoint as ocp

    import jdata.checkpoint

    it = ds.iterator() if it is None else it
    loss = jnp.nan
    for s in range(first_step, last_step):
        start = time.perf_counter()
        batch = next(it)
        waited = time.perf_counter() - start
        if digests is not None:
            digests.append(_digest(batch))
        if observe is not None:
            observe(s, batch)
        params, opt_state, loss = step(params, opt_state, batch)
        # Reading the loss waits for the step, so the time in next() is time the devices
        # sat idle waiting for input (the next batches are fetched during the step).
        progress.update(s, float(loss), waited)
        if (s + 1) % every == 0:
            manager.save(s + 1, args=ocp.args.Composite(
                model=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
                data=jdata.checkpoint.CheckpointSave(it)))
    return params, opt_state, float(loss), it


def main(images: int = 4096, global_batch: int = 64, epochs: int = 4) -> dict:
    import optax
    import orbax.checkpoint as ocp

    import jdata.checkpoint

    workdir = tempfile.mkdtemp(prefix="jdata-demo-")
    try:
        devices = jax.devices()
        print(f"== {len(devices)} {devices[0].platform} devices, {jax.process_count()} "
              f"process(es); a data-parallel mesh over all of them")
        mesh = jax.sharding.Mesh(np.array(devices), ("data",))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        start = time.perf_counter()
        path = write_dataset(workdir, images)
        print(f"== wrote {images} JPEGs to ArrayRecord shards in "
              f"{time.perf_counter() - start:.1f} s ({path})")

        ds = pipeline(path, global_batch, sharding, epochs)
        total = len(ds)
        print("== reference: the batches of an uninterrupted run (data only)")
        # A dataset of its own: each new iterator of ``ds`` would be a later epoch.
        reference = [_digest(b) for b in pipeline(path, global_batch, sharding, epochs)]

        optimizer = optax.adam(3e-3)
        step = make_step(optimizer)
        fresh = init_model(jax.random.key(1))
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        params = jax.device_put(fresh, replicated)
        opt_state = jax.device_put(optimizer.init(params), replicated)
        manager = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"),
                                        options=ocp.CheckpointManagerOptions(max_to_keep=2))
        preempt_at = int(total * 0.6)
        print(f"== training {total} steps of {global_batch}; preempted at step {preempt_at}")
        progress = Progress(total, global_batch)
        digests: list[str] = []
        params, opt_state, loss, it = train(ds, step, params, opt_state, manager, 0,
                                            preempt_at, progress, digests=digests)
        manager.wait_until_finished()
        it.close()
        del params, opt_state, it  # the preemption: nothing survives but the checkpoints
        resume_from = manager.latest_step()
        print(f"\n== preempted after step {preempt_at}; restoring step {resume_from}")
        like = jax.device_put(fresh, replicated)
        restored = manager.restore(resume_from, args=ocp.args.Composite(
            model=ocp.args.StandardRestore(
                {"params": like, "opt_state": jax.device_put(optimizer.init(like), replicated)}),
            data=jdata.checkpoint.CheckpointRestore(ds.iterator())))
        digests = digests[:resume_from]  # steps after the checkpoint are done again
        params, opt_state, loss, it = train(
            ds, step, restored.model["params"], restored.model["opt_state"], manager,
            resume_from, total, progress, it=restored.data, digests=digests)
        manager.wait_until_finished()
        it.close()
        manager.close()
        report = progress.close()
        exact = digests == reference
        accuracy = _accuracy(path, params, sharding)
        print("== report")
        print(f"final loss {loss:.3f}; accuracy on the training images {accuracy:.1%}")
        print(f"{report['examples_per_sec']:,.0f} examples/s, "
              f"{report['steps'] / report['seconds']:.1f} steps/s over {report['steps']} "
              f"steps; waiting for input {report['wait_fraction']:.1%} of the time")
        print(f"resumed run matches the uninterrupted one: {exact}")
        print("== the optimized plan")
        print(ds.explain().split("\n\n")[0])
        if not exact:
            raise SystemExit("demo failed: the resumed run consumed other batches")
        return {**report, "loss": loss, "accuracy": accuracy, "exact": exact, "steps": total}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _accuracy(path: str, params, sharding) -> float:
    ds = (jdata.load(path).map(lambda e: _decode(e, np.zeros(2, np.uint32)))
          .batch(256))
    correct = total = 0
    for batch in ds:
        predicted = np.asarray(jnp.argmax(_logits(params, batch["image"]), -1))
        correct += int((predicted == batch["label"]).sum())
        total += len(batch["label"])
    return correct / total


if __name__ == "__main__":
    if sys.argv[1:] == ["--service"]:  # the same training fed by a jdata.service
        from jdata.demos import train_service as demo_service

        demo_service.main()
    elif sys.argv[1:]:
        raise SystemExit(f"usage: python -m jdata.demos.train [--service] (not {sys.argv[1:]})")
    else:
        main()
