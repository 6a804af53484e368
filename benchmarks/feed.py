"""feed: a small jitted JAX training step fed by each system's ``nlp`` pipeline.

The issue's target: input wait under 5% of step time whenever the pipeline
alone is faster than the model. For each system we run the same training step
(a token MLP predicting each next token's id bucket) on the ``nlp`` workload's
batches (32 x 128 token ids, GIL-bound tokenization) and measure:

- steps/s over ``steps`` training steps;
- the input-wait fraction: time inside ``next()`` over the wall time of those
  steps. We block on each step's result before taking the next batch, so the
  step has finished and nothing is queued while ``next()`` runs: time inside it
  is exactly the time the model sits idle for input. (Without the block, JAX's
  async dispatch lets the loop run ahead and drain the pipeline as fast as it
  produces, and the time in ``next()`` stops meaning "model idle".) This
  synchronous loop charges ``next()``'s own main-thread cost as wait; an async
  loop on an accelerator could hide it behind the step, a CPU "device" cannot.
- the pipeline alone (no model), in batches/s, so the target's condition shows.

The ideal is jdata's pipeline with ``take(1).cache().repeat()``: the same real
batch forever, no input work; its steps/s is the model's own speed, measured
again just before each system. Each
system's steps/s over the ideal's also counts the cores its pipeline takes
from the model (XLA's CPU threads share the machine with the pipeline).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import nlp

STEPS = 300
ALONE_BATCHES = 200
# Consumed untimed and as fast as they come: past worker start-up and autotuning's first
# moves, and enough to drain what the buffers stored meanwhile, which would flatter "alone".
WARMUP_BATCHES = 100
_EMBED = 64
# 8-15 ms a step on 2 cores (load-dependent): several times slower than every system's nlp
# pipeline alone, so the target applies to all of them.
_HIDDEN = 128
_BUCKETS = 128  # targets are next ids mod 128: a softmax over 20k ids would dwarf the input


@dataclasses.dataclass(frozen=True)
class FeedData:
    texts: list
    vocab: dict
    warmup_batches: int
    alone_batches: int
    steps: int


@dataclasses.dataclass(frozen=True)
class FeedResult:
    steps_per_sec: float
    wait_fraction: float
    alone_batches_per_sec: float


def prepare(scale: float) -> FeedData:
    steps, alone = max(2, int(STEPS * scale)), max(1, int(ALONE_BATCHES * scale))
    warmup = max(1, int(WARMUP_BATCHES * min(scale, 1.0)))
    # One spare batch: nlp.prepare rounds its text count down.
    n_texts = (warmup + alone + steps + 1) * nlp.BATCH
    texts, vocab = nlp.prepare(n_texts / nlp.N)
    return FeedData(texts, vocab, warmup, alone, steps)


def items(data: FeedData) -> int:
    return data.steps


def init_params(key, vocab_size: int) -> dict:
    keys = jax.random.split(key, 3)

    def dense(k, n_in, n_out):
        return jax.random.normal(k, (n_in, n_out), jnp.float32) / np.sqrt(n_in)

    return {"embed": jax.random.normal(keys[0], (vocab_size, _EMBED)) * 0.02,
            "hidden": dense(keys[1], _EMBED, _HIDDEN), "out": dense(keys[2], _HIDDEN, _BUCKETS)}


def loss_fn(params: dict, ids) -> jax.Array:
    hidden = jax.nn.relu(params["embed"][ids[:, :-1]] @ params["hidden"])
    logits = hidden @ params["out"]
    targets = ids[:, 1:] % _BUCKETS
    mask = ids[:, 1:] > 0  # 0 pads
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1)[..., 0]
    return (nll * mask).sum() / jnp.maximum(mask.sum(), 1)


@jax.jit
def train_step(params: dict, ids):
    loss, grads = jax.value_and_grad(loss_fn)(params, ids)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


def compiled_step(data: FeedData):
    """Initial parameters and the step, compiled and run once on a real batch."""
    params = init_params(jax.random.key(0), len(data.vocab) + 1)  # id 0 pads
    # nlp's padded batches are 32 x 128 (a shorter longest line among 32 is ~1e-12 likely),
    # so this one compilation serves every system and no step in a timed loop recompiles.
    batches = iter(ideal_pipeline(data))
    params, loss = train_step(params, next(batches))
    _close(batches)
    return jax.block_until_ready(params), train_step


def measure(make_pipeline, data: FeedData) -> FeedResult:
    """Pipeline alone, then the step loop, on one iterator (so one start-up)."""
    params, step = compiled_step(data)
    batches = iter(make_pipeline(data))
    for _ in range(data.warmup_batches):
        next(batches)
    start = time.perf_counter()
    for _ in range(data.alone_batches):
        next(batches)
    alone = data.alone_batches / (time.perf_counter() - start)
    waited = 0.0
    start = time.perf_counter()
    for _ in range(data.steps):
        before = time.perf_counter()
        batch = next(batches)
        waited += time.perf_counter() - before
        params, loss = step(params, batch)
        jax.block_until_ready((params, loss))
    total = time.perf_counter() - start
    _close(batches)  # no worker left running into the next system's measurement
    return FeedResult(data.steps / total, waited / total, alone)


def _close(iterator) -> None:
    # jdata's and grain's iterators close(); torch's shuts its workers down when collected.
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _nlp(pipeline):
    # Each system's best configuration is the nlp workload's (nlp.py says which): jdata and
    # tf.data with AUTOTUNE parallelism and prefetch, grain and torch with 2 worker processes.
    return lambda data: pipeline((data.texts, data.vocab))


def ideal_pipeline(data: FeedData):
    return nlp.jdata_pipeline((data.texts, data.vocab)).take(1).cache().repeat()


def measure_ideal(data: FeedData) -> FeedResult:
    """The model's own speed, over half as many steps: run just before each system, since
    other work on a shared machine changes it within one run."""
    return measure(ideal_pipeline, dataclasses.replace(
        data, warmup_batches=1, alone_batches=1, steps=max(2, data.steps // 2)))


SYSTEMS = {system: _nlp(pipeline) for system, pipeline in nlp.SYSTEMS.items()}
