"""cedar.nlp: Cedar's NLP pipeline, batch 32: BPE tokens embedded per sentence.

Per line of text (a synthetic corpus of ~20k sentences of made-up words, Zipf-distributed,
made at ``prepare()`` time): BPE-tokenize with a Hugging Face ``tokenizers`` model trained on
the same corpus (~4k tokens), truncated or padded to 64 ids, then looked up in a fixed
``(vocab, 256)`` float32 embedding table. Every system yields ``(32, 64, 256)`` float32
batches: 2 MiB each, so how elements cross processes matters (Cedar's point).

The tokenizer reaches every system as its serialized JSON, from which each process
rebuilds it (``Tokenize``).

- ``jdata``: ``map(Tokenize)`` then ``map(Embed)`` (fused), AUTOTUNE, prefetch.
- ``tf.data``: the tokenizer in a ``tf.py_function`` (TensorFlow has no BPE of
  ``tokenizers``' models), ``tf.gather`` on the table; AUTOTUNE, prefetch.
- ``torch``: ``Tokenize`` then ``torch.nn.functional.embedding`` in a ``Dataset``,
  a ``DataLoader`` with 2 workers.
- ``grain``: ``map(Tokenize)``, ``map(Embed)``, 2 worker processes.
- ``ray data``: Ray Data on a local Ray (127.0.0.1): ``map_batches`` of 2 actors holding
  the lines over ``ray.data.range`` (``_ray.stream``); Ray starts with the stream.
- ``plain``: ``Tokenize`` and ``Embed`` in one thread, no framework.
"""

from __future__ import annotations

import numpy as np

N = 20_000
BATCH = 32
MAX_TOKENS = 64
VOCAB = 4_096
DIM = 256
_WORDS = 6_000
_SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "da", "sh", "th", "an",
              "or", "el", "us", "qu", "ix", "br", "st")
_PAD, _UNK = "[PAD]", "[UNK]"  # id 0 pads
_TOKENIZERS = ("tokenizers",)
IMPORTS = {"plain": _TOKENIZERS, "jdata": ("jax", "jdata", *_TOKENIZERS),
           "tf.data": ("tensorflow", *_TOKENIZERS), "torch": ("torch.utils.data", *_TOKENIZERS),
           "grain": ("grain", *_TOKENIZERS), "ray": ("ray", "ray.data", *_TOKENIZERS)}


def corpus(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` sentences of 4-90 words (some past 64 tokens) drawn Zipf-like from a fixed
    vocabulary of made-up words of 1-4 syllables."""
    parts = rng.integers(0, len(_SYLLABLES), (_WORDS, 4))
    sizes = rng.integers(1, 5, _WORDS)
    words = ["".join(_SYLLABLES[p] for p in row[:k]) for row, k in zip(parts, sizes)]
    lengths = rng.integers(4, 91, n)
    ranks = (rng.zipf(1.3, int(lengths.sum())) - 1) % _WORDS
    ends = np.cumsum(lengths)
    return [" ".join(words[r] for r in ranks[end - k:end]) for end, k in zip(ends, lengths)]


def train_tokenizer(lines: list[str]) -> str:
    """A BPE tokenizer of ~``VOCAB`` tokens trained on ``lines``, truncating and padding to
    ``MAX_TOKENS``, serialized as JSON."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=_UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[_PAD, _UNK],
                                  show_progress=False)
    tokenizer.train_from_iterator(lines, trainer)
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding(length=MAX_TOKENS, pad_id=0, pad_token=_PAD)
    return tokenizer.to_str()


def prepare(scale: float):
    """``(lines, tokenizer JSON, embedding table)``, the same for a scale always."""
    from tokenizers import Tokenizer

    rng = np.random.default_rng(0)
    lines = corpus(max(2 * BATCH, int(N * scale)), rng)
    tokenizer = train_tokenizer(lines)
    vocab = Tokenizer.from_str(tokenizer).get_vocab_size()
    table = rng.standard_normal((vocab, DIM), dtype=np.float32)
    return lines, tokenizer, table


def items(data) -> int:
    return len(data[0])


class Tokenize:
    """A line -> its ``MAX_TOKENS`` BPE ids (int32); pickles as the tokenizer's JSON, which
    each process rebuilds."""

    def __init__(self, tokenizer_json: str):
        self.tokenizer_json = tokenizer_json
        self._build()

    def _build(self) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_str(self.tokenizer_json)

    def __getstate__(self):
        return {"tokenizer_json": self.tokenizer_json}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._build()

    def __call__(self, line: str) -> np.ndarray:
        return np.asarray(self._tokenizer.encode(line).ids, np.int32)


class Embed:
    """Ids -> their rows of the embedding table, ``(MAX_TOKENS, DIM)`` float32."""

    def __init__(self, table: np.ndarray):
        self.table = table

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        return np.take(self.table, ids, axis=0)


def plain_loop(data, repeat=False, batch=BATCH):
    lines, tokenizer, table = data
    tokenize, embed = Tokenize(tokenizer), Embed(table)
    while True:
        for start in range(0, len(lines), batch):
            yield np.stack([embed(tokenize(line)) for line in lines[start:start + batch]])
        if not repeat:
            return


def jdata_pipeline(data, parallel=-1, engine="auto", repeat=False, batch=BATCH):
    import jdata

    lines, tokenizer, table = data
    ds = jdata.from_source(lines)
    ds = ds.repeat() if repeat else ds
    return (ds.map(Tokenize(tokenizer), num_parallel_calls=parallel)
            .map(Embed(table), num_parallel_calls=parallel)
            .batch(batch).prefetch(jdata.AUTOTUNE)
            .with_options(jdata.Options(engine=engine)))


HAND_PICKED = [{"parallel": 2, "engine": "threads"}, {"parallel": 2, "engine": "processes"}]


def tfdata_pipeline(data, repeat=False):
    import tensorflow as tf

    lines, tokenizer, table = data
    tokenize, embeddings = Tokenize(tokenizer), tf.constant(table)

    def ids_of(line):
        return tokenize(line.numpy().decode())

    def embed(line):
        ids = tf.ensure_shape(tf.py_function(ids_of, [line], tf.int32), [MAX_TOKENS])
        return tf.gather(embeddings, ids)

    source = tf.data.Dataset.from_tensor_slices(lines)
    ds = ((source.repeat() if repeat else source)
          .map(embed, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(BATCH).prefetch(tf.data.AUTOTUNE))
    return ds.as_numpy_iterator()


class TorchEmbed:
    """A line's embeddings in a ``DataLoader`` worker: ``Tokenize``, then
    ``torch.nn.functional.embedding``."""

    def __init__(self, lines, tokenizer_json: str, table: np.ndarray):
        self.lines, self.tokenize, self.table = lines, Tokenize(tokenizer_json), table

    def __call__(self, index: int):
        import torch

        ids = torch.from_numpy(self.tokenize(self.lines[index]))
        return torch.nn.functional.embedding(ids, torch.from_numpy(self.table))


def torch_pipeline(data, repeat=False):
    from benchmarks.steady import torch_loader

    lines, tokenizer, table = data
    return torch_loader(len(lines), TorchEmbed(lines, tokenizer, table), repeat,
                        batch_size=BATCH)


def grain_pipeline(data, repeat=False):
    import grain

    lines, tokenizer, table = data
    source = grain.MapDataset.source(lines)
    if repeat:
        source = source.repeat(None)
    return (source.map(Tokenize(tokenizer)).map(Embed(table)).batch(BATCH).to_iter_dataset()
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


def _embedder(lines, tokenizer_json: str, table: np.ndarray):
    tokenize, embed = Tokenize(tokenizer_json), Embed(table)
    return lambda index: embed(tokenize(lines[index]))


def ray_pipeline(data, repeat=False):
    """Ray Data: ``map_batches`` of 2 actors holding the lines (``_ray.stream``)."""
    from benchmarks.cedar import _ray

    return _ray.stream(_embedder, data, len(data[0]), BATCH, repeat)


SYSTEMS = {"jdata": jdata_pipeline, "tf.data": tfdata_pipeline, "torch": torch_pipeline,
           "grain": grain_pipeline, "ray data": ray_pipeline}
