"""overhead: ``range(N).map(x * 2).filter(x % 3 != 0).batch(256)`` with plain Python UDFs.

Measures the framework's own per-element cost: the UDFs do almost nothing.
"""

from __future__ import annotations

import numpy as np

N = 200_000
BATCH = 256


def double(x):
    return x * 2


def keep(x):
    return x % 3 != 0


def prepare(scale: float):
    return int(N * scale)


def items(n: int) -> int:
    return n


def plain_loop(n: int, repeat=False):
    """The baseline: one thread, no framework."""
    while True:
        batch = []
        for x in range(n):
            y = double(x)
            if keep(y):
                batch.append(y)
                if len(batch) == BATCH:
                    yield np.asarray(batch)
                    batch = []
        if batch:
            yield np.asarray(batch)
        if not repeat:
            return


def jdata_pipeline(n: int, parallel=None, engine="auto", repeat=False):
    import jdata

    source = jdata.range(n)
    return ((source.repeat() if repeat else source)
            .map(double, num_parallel_calls=parallel).filter(keep).batch(BATCH)
            .with_options(jdata.Options(engine=engine)))


# jdata configurations picked by hand, against which the default is judged.
HAND_PICKED = [{"parallel": 2, "engine": "threads"}, {"parallel": 2, "engine": "processes"}]


def tfdata_pipeline(n: int, repeat=False):
    # Best configuration: the lambdas trace into a graph, so no Python runs per element.
    import tensorflow as tf

    source = tf.data.Dataset.range(n)
    ds = ((source.repeat() if repeat else source)
          .map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
          .filter(lambda x: x % 3 != 0).batch(BATCH).prefetch(tf.data.AUTOTUNE))
    return ds.as_numpy_iterator()


def grain_pipeline(n: int, repeat=False):
    import grain

    source = grain.MapDataset.range(n)
    return ((source.repeat(None) if repeat else source).map(double).filter(keep).to_iter_dataset()
            .batch(BATCH))


def torch_pipeline(n: int, repeat=False):
    # Best configuration here: a hand-written generator in the main process;
    # worker processes only add IPC for UDFs this cheap.
    import torch.utils.data as tud

    class Source(tud.IterableDataset):
        def __iter__(self):
            while True:
                yield from (d for d in map(double, range(n)) if keep(d))
                if not repeat:
                    return

    return tud.DataLoader(Source(), batch_size=BATCH, num_workers=0)


SYSTEMS = {"jdata": jdata_pipeline, "tf.data": tfdata_pipeline, "grain": grain_pipeline,
           "torch": torch_pipeline}
