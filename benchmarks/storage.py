"""storage: reading an ArrayRecord file of 20k records of 0.2-2 KB, in one process.

jdata iterates ``from_array_record(path)`` (blocks of records through the
reader's batched range reads); grain's best single-process configuration
found here indexes its ``ArrayRecordDataSource`` in a loop (iterating
``MapDataset.source(...)``, or ``.to_iter_dataset()`` with its read threads,
was 4x slower on 2 cores).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time

import numpy as np

N = 20_000


def prepare(scale: float) -> str:
    from array_record.python.array_record_module import ArrayRecordWriter

    directory = tempfile.mkdtemp(prefix="jdata-bench-")
    atexit.register(shutil.rmtree, directory, True)
    path = os.path.join(directory, "records.array_record")
    rng = np.random.default_rng(0)
    writer = ArrayRecordWriter(path, "group_size:1")
    for size in rng.integers(200, 2049, size=int(N * scale)):
        writer.write(rng.bytes(int(size)))
    writer.close()
    return path


def items(path: str) -> int:
    from array_record.python.array_record_module import ArrayRecordReader

    return ArrayRecordReader(path).num_records()


def jdata_pipeline(path: str):
    import jdata

    return jdata.from_array_record(path)


def grain_pipeline(path: str):
    import grain

    source = grain.sources.ArrayRecordDataSource([path])
    return (source[i] for i in range(len(source)))


SYSTEMS = {"jdata": jdata_pipeline, "grain": grain_pipeline}


_PARQUET_ROWS = 50_000
_PARQUET_COLUMNS = 20


def parquet_projection(scale: float, repeats: int, batch_size: int | None = None
                       ) -> tuple[float, float]:
    """``(rows/s reading 2 of 20 columns, the same reading all 20)`` of one Parquet file
    (10 float and 10 string columns, row groups of 10k rows), as rows or, with
    ``batch_size``, as batches of column arrays."""

    import pyarrow as pa
    import pyarrow.parquet as pq

    import jdata

    directory = tempfile.mkdtemp(prefix="jdata-bench-")
    atexit.register(shutil.rmtree, directory, True)
    path = os.path.join(directory, "table.parquet")
    rng = np.random.default_rng(0)
    n = int(_PARQUET_ROWS * scale)
    columns = {}
    for c in range(_PARQUET_COLUMNS):
        columns[f"c{c:02d}"] = (rng.normal(size=n) if c % 2 == 0 else
                                [f"text-{v}" for v in rng.integers(0, 10**9, n)])
    pq.write_table(pa.table(columns), path, row_group_size=10_000)

    def rows(selected) -> int:
        ds = jdata.from_parquet(path, columns=selected, batch_size=batch_size)
        return sum(1 for _ in ds) if batch_size is None else sum(len(b["c00"]) for b in ds)

    return (_best_rate(lambda: rows(["c00", "c01"]), repeats),
            _best_rate(lambda: rows(None), repeats))


_SHARDS = 64


def prepare_shards(scale: float) -> list[str]:
    """The ArrayRecord file's records (sizes 0.2-2 KB) written as 64 shards."""
    from array_record.python.array_record_module import ArrayRecordWriter

    directory = tempfile.mkdtemp(prefix="jdata-bench-")
    atexit.register(shutil.rmtree, directory, True)
    rng = np.random.default_rng(0)
    paths = []
    for f in range(_SHARDS):
        paths.append(os.path.join(directory, f"shard-{f:02d}.array_record"))
        writer = ArrayRecordWriter(paths[-1], "group_size:1")
        for size in rng.integers(200, 2049, size=int(N * scale) // _SHARDS):
            writer.write(rng.bytes(int(size)))
        writer.close()
    return paths


def shuffled_shard_pipelines(paths: list[str]) -> dict:
    """A full shuffle of the shards' records: jdata's ``shuffle(key)`` (at most 128 files
    open per source, shared by its threads) and grain's source indexed in an order drawn
    from a seed (every shard open, as grain keeps them)."""
    import jax

    import jdata

    def grain_shuffled():
        import grain  # a peer, installed by `make bench` only

        source = grain.sources.ArrayRecordDataSource(paths)
        order = np.random.default_rng(0).permutation(len(source))
        return (source[int(i)] for i in order)

    return {"jdata": lambda: jdata.from_array_record(paths).shuffle(jax.random.key(0)),
            "grain": grain_shuffled}


def shuffled_shard_rates(scale: float, repeats: int) -> dict[str, float]:
    """Records/s of each of ``shuffled_shard_pipelines`` over 64 shards."""
    rates = {}
    for name, make in shuffled_shard_pipelines(prepare_shards(scale)).items():
        try:
            rates[name] = _best_rate(lambda make=make: sum(1 for _ in make()), repeats)
        except ImportError:  # a peer that is not installed
            pass
    return rates


def _best_rate(count, repeats: int) -> float:
    """The best of ``repeats`` runs of ``count()`` (which returns what it read), per second."""
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        n = count()
        best = max(best, n / (time.perf_counter() - start))
    return best


def cache_epochs(scale: float) -> tuple[float, float]:
    """``(first epoch seconds, second epoch seconds)`` of the cv workload's JPEG decode and
    resize (a 256-px short side, ``uint8``) behind ``cache(filename)``: the first pass
    decodes and writes, the second reads the directory back."""
    import jdata
    from benchmarks import cv

    jpegs = cv.prepare(scale)
    directory = tempfile.mkdtemp(prefix="jdata-bench-")
    atexit.register(shutil.rmtree, directory, True)
    ds = (jdata.from_source(jpegs).map(lambda j: np.asarray(cv.decode_resized(j)))
          .cache(os.path.join(directory, "cache")))
    times = []
    for _ in range(2):
        start = time.perf_counter()
        for _ in ds:
            pass
        times.append(time.perf_counter() - start)
    return times[0], times[1]


def tfrecord_rates(scale: float, repeats: int) -> dict[str, float]:
    """Records/s over 8 TFRecord files (the ArrayRecord file's record sizes): jdata and
    tf.data, each reading the files one after the other and with a parallel interleave
    (cycle 4, 4 threads); tf.data only if installed."""

    import jdata

    directory = tempfile.mkdtemp(prefix="jdata-bench-")
    atexit.register(shutil.rmtree, directory, True)
    rng = np.random.default_rng(0)
    paths = []
    for f in range(8):
        path = os.path.join(directory, f"part-{f}.tfrecord")
        sizes = rng.integers(200, 2049, size=int(N * scale) // 8)
        jdata.io.write_tfrecord(path, (rng.bytes(int(s)) for s in sizes))
        paths.append(path)
    pattern = os.path.join(directory, "*.tfrecord")
    systems = {
        "jdata": lambda: jdata.from_tfrecord(paths),
        "jdata interleave": lambda: jdata.list_files(pattern).interleave(
            jdata.from_tfrecord, cycle_length=4, num_parallel_calls=4)}
    try:
        import tensorflow as tf

        systems["tf.data"] = lambda: tf.data.TFRecordDataset(paths).as_numpy_iterator()
        systems["tf.data interleave"] = lambda: (
            tf.data.Dataset.list_files(pattern, shuffle=False)
            .interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=4)
            .prefetch(tf.data.AUTOTUNE).as_numpy_iterator())
    except ImportError:
        pass
    return {name: _best_rate(lambda make=make: sum(1 for _ in make()), repeats)
            for name, make in systems.items()}
