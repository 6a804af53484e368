"""shuffle_buffer: a flax-style text pipeline with a shuffle buffer, jdata against tf.data.

TFRecord files of Zipf-like sentences -> ``shuffle(buffer)`` -> tokenize
(parallel map, AUTOTUNE) -> padded batches of 32 -> prefetch, for buffers
of 1,000 and 10,000 records: the shape of flax's WMT/LM1B input pipelines.
tf.data tokenizes with its native string ops and a static hash table (its
best configuration, as in ``nlp``); jdata runs the same tokenizer as
``nlp`` in Python. jdata's asynchronous stages record their input's
position before every element; with a shuffle buffer that record used to
be the whole buffer (O(buffer) per element, 12x slower than tf.data), now
it is O(1).

Measured as a training run sees it, separately: time to the first batch,
and the steady rate of one long stream (the files repeated) after a
warm-up. Systems alternate round by round; medians are reported.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from benchmarks import nlp

BUFFERS = (1_000, 10_000)
_FILES = 8
_SEED = 7


def prepare(scale: float, directory: str) -> tuple[list[str], dict]:
    """TFRecord files of the ``nlp`` sentences (UTF-8) in ``directory``, and the vocabulary."""
    import jdata

    texts, vocab = nlp.prepare(scale)
    paths = []
    for f in range(_FILES):
        path = os.path.join(directory, f"part-{f:02d}.tfrecord")
        jdata.io.write_tfrecord(path, (t.encode() for t in texts[f::_FILES]))
        paths.append(path)
    return paths, vocab


class _Tokenize:
    """``nlp.Tokenizer`` over a record's bytes."""

    def __init__(self, vocab: dict):
        self._tokenize = nlp.Tokenizer(vocab)

    def __call__(self, record: bytes):
        return self._tokenize(record.decode())


def jdata_pipeline(data, buffer_size: int):
    import jax
    import jdata

    paths, vocab = data
    return (jdata.from_tfrecord(paths).repeat().shuffle(jax.random.key(_SEED), buffer_size)
            .map(_Tokenize(vocab), num_parallel_calls=jdata.AUTOTUNE)
            .padded_batch(nlp.BATCH).prefetch(jdata.AUTOTUNE))


def tfdata_pipeline(data, buffer_size: int):
    import tensorflow as tf

    paths, vocab = data
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(list(vocab), list(vocab.values()),
                                            value_dtype=tf.int64), default_value=0)

    def tokenize(text):
        return tf.cast(table.lookup(tf.strings.split(text)[:nlp.MAX_TOKENS]), tf.int32)

    ds = (tf.data.TFRecordDataset(paths).repeat().shuffle(buffer_size, seed=_SEED)
          .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
          .padded_batch(nlp.BATCH).prefetch(tf.data.AUTOTUNE))
    return iter(ds.as_numpy_iterator())


SYSTEMS = {"jdata": jdata_pipeline, "tf.data": tfdata_pipeline}


def _import_peers(systems) -> None:
    # Importing TensorFlow takes seconds: not part of any pipeline's first batch.
    if not systems or "tf.data" in systems:
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass


def measure(make_pipeline, data, buffer_size: int, warmup_sec: float,
            measure_sec: float) -> tuple[float, float]:
    """``(seconds to the first batch, sentences/s in the steady state)`` of one stream."""
    start = time.perf_counter()
    it = iter(make_pipeline(data, buffer_size))
    next(it)
    first = time.perf_counter() - start
    deadline = time.perf_counter() + warmup_sec
    while time.perf_counter() < deadline:
        next(it)
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < measure_sec:
        count += len(next(it))
    close = getattr(it, "close", None)
    if close is not None:
        close()
    return first, count / elapsed


def report(scale: float = 1.0, rounds: int = 3, warmup_sec: float = 2.0,
           measure_sec: float = 4.0, systems=None) -> dict:
    """Prints and returns, per buffer size, each system's median first-batch time and
    steady rate, and jdata's ratio to tf.data."""
    with tempfile.TemporaryDirectory(prefix="jdata-bench-shuffle-") as directory:
        return _report(prepare(scale, directory), rounds, warmup_sec, measure_sec, systems)


def _report(data, rounds: int, warmup_sec: float, measure_sec: float, systems) -> dict:
    _import_peers(systems)
    print(f"== shuffle_buffer: TFRecord -> shuffle(buffer) -> tokenize (parallel) -> "
          f"padded_batch({nlp.BATCH}) -> prefetch; steady state after {warmup_sec:.0f} s, "
          f"{measure_sec:.0f} s measured; medians of {rounds} interleaved rounds")
    results = {}
    for buffer_size in BUFFERS:
        samples: dict[str, list] = {}
        for _ in range(rounds):
            for system, make_pipeline in SYSTEMS.items():
                if systems and system not in systems:
                    continue
                try:
                    sample = measure(make_pipeline, data, buffer_size, warmup_sec, measure_sec)
                except ImportError as e:
                    print(f"  {system:8s} not installed ({e.name}); `make bench` installs it")
                    continue
                samples.setdefault(system, []).append(sample)
        medians = {s: (statistics.median(f for f, _ in v), statistics.median(r for _, r in v))
                   for s, v in samples.items()}
        for system, (first, rate) in medians.items():
            print(f"  buffer {buffer_size:>6,}  {system:8s} first batch {first:6.2f} s  "
                  f"steady {rate:10,.0f} sentences/s")
        if "jdata" in medians and "tf.data" in medians:
            ratio = medians["jdata"][1] / medians["tf.data"][1]
            print(f"  buffer {buffer_size:>6,}  jdata / tf.data steady {ratio:.2f}x "
                  f"(target >= 1.0x), first batch "
                  f"{medians['tf.data'][0] / medians['jdata'][0]:.2f}x")
        results[buffer_size] = medians
    return results
