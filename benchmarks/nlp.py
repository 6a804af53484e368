"""nlp: whitespace tokenization + vocabulary lookup in pure Python (GIL-bound).

Generated Zipf-like text; each line is tokenized, looked up in a dict
vocabulary, truncated to 128 tokens; batches of 32 are padded to their
longest line.
"""

from __future__ import annotations

import numpy as np

N = 20_000
BATCH = 32
MAX_TOKENS = 128
_VOCAB_SIZE = 20_000


def prepare(scale: float):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(_VOCAB_SIZE)]
    lengths = rng.integers(8, 300, size=int(N * scale))
    ranks = rng.zipf(1.2, size=int(lengths.sum())) % _VOCAB_SIZE
    texts, start = [], 0
    for n in lengths:
        texts.append(" ".join(words[r] for r in ranks[start:start + n]))
        start += n
    vocab = {w: i + 1 for i, w in enumerate(words)}  # 0 pads
    return texts, vocab


def items(data) -> int:
    return len(data[0])


class Tokenizer:
    def __init__(self, vocab: dict):
        self.vocab = vocab

    def __call__(self, text: str) -> np.ndarray:
        get = self.vocab.get
        ids = [get(w, 0) for w in text.split()[:MAX_TOKENS]]
        return np.asarray(ids, dtype=np.int32)


def pad_batch(rows) -> np.ndarray:
    out = np.zeros((len(rows), max(len(r) for r in rows)), np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def plain_loop(data, repeat=False):
    """The baseline: one thread, no framework: tokenize, pad, yield."""
    texts, vocab = data
    tokenize = Tokenizer(vocab)
    while True:
        for start in range(0, len(texts), BATCH):
            yield pad_batch([tokenize(t) for t in texts[start:start + BATCH]])
        if not repeat:
            return


def jdata_pipeline(data, parallel=-1, engine="auto", repeat=False):
    import jdata

    # Written as a tf.data user would: AUTOTUNE parallelism, prefetch.
    texts, vocab = data
    source = jdata.from_source(texts)
    if repeat:
        source = source.repeat()
    return (source.map(Tokenizer(vocab), num_parallel_calls=parallel)
            .padded_batch(BATCH).prefetch(jdata.AUTOTUNE)
            .with_options(jdata.Options(engine=engine)))


# jdata configurations picked by hand, against which AUTOTUNE is judged.
HAND_PICKED = [{"parallel": 2, "engine": "threads"}, {"parallel": 1, "engine": "processes"},
               {"parallel": 2, "engine": "processes"}, {"parallel": 3, "engine": "processes"}]


def tfdata_pipeline(data, repeat=False):
    # Best configuration: native string ops and a static hash table, parallel map.
    import tensorflow as tf

    texts, vocab = data
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(list(vocab), list(vocab.values()),
                                            value_dtype=tf.int64), default_value=0)

    def tokenize(text):
        return tf.cast(table.lookup(tf.strings.split(text)[:MAX_TOKENS]), tf.int32)

    source = tf.data.Dataset.from_tensor_slices(texts)
    ds = ((source.repeat() if repeat else source)
          .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
          .padded_batch(BATCH).prefetch(tf.data.AUTOTUNE))
    return ds.as_numpy_iterator()


def grain_threads_pipeline(data, repeat=False):
    # grain's default: its read threads run the map.
    import grain

    texts, vocab = data
    source = grain.MapDataset.source(texts)
    if repeat:
        source = source.repeat(None)
    return source.map(Tokenizer(vocab)).batch(BATCH, batch_fn=pad_batch).to_iter_dataset()


def grain_pipeline(data, repeat=False):
    # Best configuration on 2 cores: worker processes for the GIL-bound UDF.
    import grain

    ds = grain_threads_pipeline(data, repeat)
    return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))


def torch_pipeline(data, repeat=False):
    # A padding collate, as padded_batch.
    from benchmarks.steady import torch_loader

    texts, vocab = data
    tokenize = Tokenizer(vocab)
    return torch_loader(len(texts), lambda i: tokenize(texts[i]), repeat, batch_size=BATCH,
                        collate_fn=pad_batch)


SYSTEMS = {"jdata": jdata_pipeline, "tf.data": tfdata_pipeline, "grain": grain_pipeline,
           "grain threads": grain_threads_pipeline, "torch": torch_pipeline}
