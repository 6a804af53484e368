"""parse_example: tf.train.Example records -> NumPy, jdata.io.parse_example against TF's C++ parser.

Two record shapes, parsed in batches of 256:

- ``image``: an encoded image (``bytes``, 1.5-2.5 KB), an int64 label, a
  float bounding box of 4 values, and 10-30 int64 tokens (a ``VarLenFeature``);
- ``nlp``: ``input_ids`` and ``segment_ids`` (128 int64 each) and a label.

Systems, on the same batches: ``jdata`` (``jdata.io.parse_example`` on a
NumPy object array, as ``batch()`` hands it over); ``tf eager``
(``tf.io.parse_example`` on a string tensor built beforehand: TF's C++
parser plus one op dispatch); ``tf eager + numpy`` (the same, its outputs
turned into NumPy as a JAX pipeline needs them); and whole pipelines over
the records in memory, ``jdata.from_tensor_slices(records).batch(256).map(
parse)`` against ``tf.data``'s ``from_tensor_slices(records).batch(256)
.map(parse)``. Systems alternate within each round; medians of the rounds
are reported, with jdata's ratio to each TF system (target: >= 0.5x
``tf eager``). Measured on 2 shared cores (5 rounds): jdata 0.62x ``tf eager``
and 0.73x ``tf eager + numpy`` on both record shapes.
"""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np

BATCH = 256
RECORDS = 8192
WORKLOADS = ("image", "nlp")


def prepare(workload: str, scale: float = 1.0, seed: int = 0) -> list[bytes]:
    """Serialized Examples of ``workload``, built without TensorFlow."""
    from jdata.io import _example_proto as proto

    rng = np.random.default_rng(seed)
    records = []
    for i in range(max(BATCH, int(RECORDS * scale))):
        example = proto.Example()
        feature = example.features.feature
        if workload == "image":
            feature["image/encoded"].bytes_list.value.append(
                rng.bytes(int(rng.integers(1536, 2560))))
            feature["image/label"].int64_list.value.append(i % 1000)
            feature["image/bbox"].float_list.value.extend(rng.random(4, np.float32).tolist())
            feature["tokens"].int64_list.value.extend(
                rng.integers(0, 30_000, int(rng.integers(10, 31))).tolist())
        else:
            feature["input_ids"].int64_list.value.extend(rng.integers(0, 30_000, 128).tolist())
            feature["segment_ids"].int64_list.value.extend([0] * 64 + [1] * 64)
            feature["label"].int64_list.value.append(i % 2)
        records.append(example.SerializeToString())
    return records


def features(workload: str, io, int64=np.int64, float32=np.float32, string=bytes) -> dict:
    """The spec of ``workload`` in ``io``'s terms: ``jdata.io``, or ``tf.io`` with TF's
    dtypes."""
    if workload == "image":
        return {"image/encoded": io.FixedLenFeature([], string),
                "image/label": io.FixedLenFeature([], int64),
                "image/bbox": io.FixedLenFeature([4], float32),
                "tokens": io.VarLenFeature(int64)}
    return {"input_ids": io.FixedLenFeature([128], int64),
            "segment_ids": io.FixedLenFeature([128], int64),
            "label": io.FixedLenFeature([], int64, default_value=0)}


def _batches(records: list[bytes]) -> list[np.ndarray]:
    out = []
    for start in range(0, len(records) - BATCH + 1, BATCH):
        batch = np.empty(BATCH, object)
        batch[:] = records[start:start + BATCH]
        out.append(batch)
    return out


def jdata_parse(records, workload: str):
    """A pass of ``jdata.io.parse_example`` over the records' batches."""
    import jdata

    batches, spec = _batches(records), features(workload, jdata.io)
    return lambda: [jdata.io.parse_example(batch, spec) for batch in batches]


def jdata_pipeline(records, workload: str):
    import jdata

    parse = functools.partial(jdata.io.parse_example, features=features(workload, jdata.io))
    column = np.empty(len(records), object)  # a list would become a NumPy bytes array,
    column[:] = records                      # which drops records' trailing zero bytes
    ds = jdata.from_tensor_slices(column).batch(BATCH, drop_remainder=True).map(parse)
    return lambda: list(ds)


def tf_eager(records, workload: str, to_numpy: bool = False):
    import tensorflow as tf

    batches = [tf.constant(batch.tolist()) for batch in _batches(records)]
    spec = features(workload, tf.io, tf.int64, tf.float32, tf.string)

    def parse(batch):
        parsed = tf.io.parse_example(batch, spec)
        if to_numpy:
            return {k: (v.numpy() if isinstance(v, tf.Tensor) else
                        (v.indices.numpy(), v.values.numpy(), v.dense_shape.numpy()))
                    for k, v in parsed.items()}
        return parsed

    return lambda: [parse(batch) for batch in batches]


def tf_data(records, workload: str):
    import tensorflow as tf

    spec = features(workload, tf.io, tf.int64, tf.float32, tf.string)
    ds = (tf.data.Dataset.from_tensor_slices(records).batch(BATCH, drop_remainder=True)
          .map(lambda batch: tf.io.parse_example(batch, spec)))
    return lambda: list(ds)


SYSTEMS = {"jdata": jdata_parse, "tf eager": tf_eager,
           "tf eager + numpy": functools.partial(tf_eager, to_numpy=True),
           "jdata pipeline": jdata_pipeline, "tf.data pipeline": tf_data}
_PEERS = {"jdata": ("tf eager", "tf eager + numpy"), "jdata pipeline": ("tf.data pipeline",)}


def rate(run, records: int, measure_sec: float) -> float:
    """Records/s of ``run`` (one pass over ``records`` records), repeated for ``measure_sec``."""
    count, start = 0, time.perf_counter()
    while True:
        run()
        count += records
        elapsed = time.perf_counter() - start
        if elapsed >= measure_sec:
            return count / elapsed


def report(scale: float = 1.0, rounds: int = 3, measure_sec: float = 1.0,
           systems=None) -> dict:
    """Prints and returns ``{workload: {system: median records/s}}`` and jdata's ratios."""
    print(f"== parse_example: batches of {BATCH} serialized Examples -> NumPy; records/s, "
          f"medians of {rounds} interleaved rounds of >= {measure_sec:.1f} s")
    results = {}
    for workload in WORKLOADS:
        records = prepare(workload, scale)
        runs = {}
        for system, make in SYSTEMS.items():
            if systems and system not in systems:
                continue
            try:
                runs[system] = make(records, workload)
            except ImportError as e:
                print(f"  {system:16s} not installed ({e.name}); `make bench` installs it")
                continue
            runs[system]()  # warm-up: TF traces, jdata builds its message classes
        n = len(records) // BATCH * BATCH
        samples: dict[str, list] = {system: [] for system in runs}
        for _ in range(rounds):
            for system, run in runs.items():
                samples[system].append(rate(run, n, measure_sec))
        medians = {system: statistics.median(v) for system, v in samples.items()}
        for system, value in medians.items():
            print(f"  {workload:5s} {system:16s} {value:12,.0f} records/s")
        for ours, peers in _PEERS.items():
            for peer in peers:
                if ours in medians and peer in medians:
                    target = " (target >= 0.5x)" if peer == "tf eager" else ""
                    print(f"  {workload:5s} {ours} / {peer}: "
                          f"{medians[ours] / medians[peer]:.2f}x{target}")
        results[workload] = medians
    return results
