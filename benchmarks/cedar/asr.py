"""cedar.asr: Cedar's speech-recognition pipeline, batch 16.

Per clip (a 1-3 s mono 16-bit WAV at 44.1 kHz, made at ``prepare()`` time): decode,
resample to 16 kHz, complex STFT (n_fft 400, hop 160), phase-vocoder time stretch
(rate U[0.8, 1.25]), power, a time mask (up to 40 frames) and a frequency mask (up to
30 bins) as SpecAugment, 80 mel bins, padded or cropped to 300 frames. Every system
yields ``(16, 300, 80)`` float32 batches (time-major, as ``tf.signal.stft``).

- ``jdata``: one ``map`` or ``random_map`` per step (``benchmarks/cedar/_audio.py``'s
  NumPy/SciPy kernels, stdlib ``wave`` decoding), each random step drawing from its
  element's key; AUTOTUNE, prefetch.
- ``tf.data``: ``tf.audio.decode_wav``, SciPy's resampler in a ``tf.py_function`` (core
  TensorFlow has none), ``tf.signal.stft``, the phase vocoder and masks in TF ops,
  ``tf.signal.linear_to_mel_weight_matrix``; ``num_parallel_calls=AUTOTUNE``, prefetch.
- ``torch``: the NumPy/SciPy kernels in a ``Dataset`` (``soundfile`` decoding, torch's RNG),
  a ``DataLoader`` with 2 workers (torchaudio does not install beside torch 2.14 here).
- ``grain``: the same kernels, ``soundfile`` decoding, draws from grain's ``random_map``
  generator, 2 worker processes.
- ``ray data``: Ray Data on a local Ray (127.0.0.1): ``map_batches`` of 2 actors holding
  the clips over ``ray.data.range`` (``_ray.stream``); Ray starts with the stream.
- ``plain``: jdata's UDFs called in one thread with keys of their own, no framework.
"""

from __future__ import annotations

import io

import numpy as np

from benchmarks.cedar import _audio

N = 200
BATCH = 16
_SIGNAL = ("scipy.signal",)
IMPORTS = {"plain": _SIGNAL, "jdata": ("jax", "jdata", *_SIGNAL),
           "tf.data": ("tensorflow", *_SIGNAL), "torch": ("torch.utils.data", "soundfile",
                                                          *_SIGNAL),
           "grain": ("grain", "soundfile", *_SIGNAL),
           "ray": ("ray", "ray.data", "soundfile", *_SIGNAL)}


def prepare(scale: float) -> list[bytes]:
    """WAV clips, the same for a scale always; at least two batches."""
    rng = np.random.default_rng(0)
    return [_audio.make_wav(rng) for _ in range(max(2 * BATCH, int(N * scale)))]


def items(data) -> int:
    return len(data)


def random_time_stretch(spec: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The phase vocoder at a rate drawn from the element's key."""
    return _audio.time_stretch(spec, np.random.default_rng(key).uniform(*_audio.STRETCH_RANGE))


def random_time_mask(spec: np.ndarray, key: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(key)
    return _audio.mask(spec, *_audio.mask_span(len(spec), _audio.TIME_MASK_MAX, rng.integers),
                       axis=0)


def random_freq_mask(spec: np.ndarray, key: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(key)
    return _audio.mask(spec, *_audio.mask_span(_audio.N_FREQS, _audio.FREQ_MASK_MAX,
                                               rng.integers), axis=1)


def ops() -> list:
    """jdata's UDFs in order, each with whether it is random (a ``random_map``'s)."""
    return [(False, _audio.decode_wav), (False, _audio.resample), (False, _audio.spectrogram),
            (True, random_time_stretch), (False, _audio.power), (True, random_time_mask),
            (True, random_freq_mask), (False, _audio.mel), (False, _audio.fix_length)]


def op_keys() -> list:
    """The key of each of ``ops()`` (used by the random ones), as ``jdata_pipeline`` passes."""
    import jax

    return list(jax.random.split(jax.random.key(0), len(ops())))


def _own_keys(op: int, index: int) -> np.ndarray:
    return np.array([index, op], np.uint32)


def plain_loop(data, repeat=False, batch=BATCH, keys=_own_keys):
    """jdata's UDFs in one thread; ``keys(op, index)`` is the key of op ``op`` (an index
    into ``ops()``) for clip ``index``."""
    steps = ops()

    def features(index):
        element = data[index]
        for op, (random, fn) in enumerate(steps):
            element = fn(element, keys(op, index)) if random else fn(element)
        return element

    while True:
        for start in range(0, len(data), batch):
            yield np.stack([features(i) for i in range(start, min(start + batch, len(data)))])
        if not repeat:
            return


def jdata_pipeline(data, parallel=-1, engine="auto", repeat=False, batch=BATCH):
    import jdata

    ds = jdata.from_source(data)
    ds = ds.repeat() if repeat else ds
    for (random, fn), key in zip(ops(), op_keys()):
        ds = (ds.random_map(fn, key, num_parallel_calls=parallel) if random
              else ds.map(fn, num_parallel_calls=parallel))
    return (ds.batch(batch).prefetch(jdata.AUTOTUNE)
            .with_options(jdata.Options(engine=engine)))


HAND_PICKED = [{"parallel": 2, "engine": "threads"}, {"parallel": 2, "engine": "processes"}]


def _tf_resample(samples):
    return _audio.resample(samples.numpy())


def _tf_time_stretch(spec, rate):
    """The phase vocoder of ``_audio.time_stretch`` in TF ops."""
    import tensorflow as tf

    steps = tf.range(0.0, tf.cast(tf.shape(spec)[0] - 1, tf.float32), rate)
    index = tf.cast(steps, tf.int32)
    alpha = (steps - tf.floor(steps))[:, None]
    before, after = tf.gather(spec, index), tf.gather(spec, index + 1)
    magnitude = (1 - alpha) * tf.abs(before) + alpha * tf.abs(after)
    expected = tf.constant(_audio.expected_advance())
    delta = tf.math.angle(after) - tf.math.angle(before) - expected
    delta -= 2 * np.pi * tf.round(delta / (2 * np.pi))
    phase = tf.math.angle(spec[0]) + tf.cumsum(expected + delta, axis=0, exclusive=True)
    return tf.complex(magnitude * tf.cos(phase), magnitude * tf.sin(phase))


def _tf_mask(x, max_width: int, axis: int):
    import tensorflow as tf

    size = tf.shape(x)[axis]
    width = tf.random.uniform([], 0, tf.minimum(max_width, size) + 1, tf.int32)
    start = tf.random.uniform([], 0, size - width + 1, tf.int32)
    where = tf.range(size)
    keep = tf.cast((where < start) | (where >= start + width), x.dtype)
    return x * tf.reshape(keep, [-1, 1] if axis == 0 else [1, -1])


def tfdata_pipeline(data, repeat=False):
    import tensorflow as tf

    mel_bank = tf.signal.linear_to_mel_weight_matrix(
        _audio.N_MELS, _audio.N_FREQS, _audio.TARGET_RATE, 0.0, _audio.TARGET_RATE / 2)

    def features(wav):
        audio, _ = tf.audio.decode_wav(wav, desired_channels=1)
        samples = tf.py_function(_tf_resample, [audio[:, 0]], tf.float32)
        samples = tf.pad(tf.reshape(samples, [-1]), [[_audio.N_FFT // 2] * 2], mode="REFLECT")
        spec = tf.signal.stft(samples, _audio.N_FFT, _audio.HOP, _audio.N_FFT)
        spec = _tf_time_stretch(spec, tf.random.uniform([], *_audio.STRETCH_RANGE))
        power = tf.square(tf.abs(spec))
        power = _tf_mask(power, _audio.TIME_MASK_MAX, axis=0)
        power = _tf_mask(power, _audio.FREQ_MASK_MAX, axis=1)
        out = tf.matmul(power, mel_bank)[:_audio.FRAMES]
        out = tf.pad(out, [[0, _audio.FRAMES - tf.shape(out)[0]], [0, 0]])
        return tf.ensure_shape(out, [_audio.FRAMES, _audio.N_MELS])

    source = tf.data.Dataset.from_tensor_slices(data)
    ds = ((source.repeat() if repeat else source)
          .map(features, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(BATCH).prefetch(tf.data.AUTOTUNE))
    return ds.as_numpy_iterator()


def _soundfile_decode(data: bytes) -> np.ndarray:
    import soundfile

    samples, _ = soundfile.read(io.BytesIO(data), dtype="float32")
    return samples


def numpy_features(data: bytes, uniform, integers) -> np.ndarray:
    """A clip's features by the NumPy/SciPy kernels (``soundfile`` decoding), drawn from a
    peer's RNG (see ``_audio.augment``)."""
    spec = _audio.spectrogram(_audio.resample(_soundfile_decode(data)))
    return _audio.fix_length(_audio.mel(_audio.augment(spec, uniform, integers)))


class TorchFeatures:
    """A clip's features in a ``DataLoader`` worker, drawn from torch's RNG (seeded per
    worker by the ``DataLoader``)."""

    def __init__(self, data):
        self.data = data

    def __call__(self, index: int) -> np.ndarray:
        import torch

        def uniform(low, high):
            return float(torch.empty(()).uniform_(low, high))

        def integers(low, high):
            return int(torch.randint(low, high, ()))

        return numpy_features(self.data[index], uniform, integers)


def torch_pipeline(data, repeat=False):
    from benchmarks.steady import torch_loader

    return torch_loader(len(data), TorchFeatures(data), repeat, batch_size=BATCH)


def _grain_augment(spec: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return _audio.augment(spec, rng.uniform, rng.integers)


def _grain_features(augmented: np.ndarray) -> np.ndarray:
    return _audio.fix_length(_audio.mel(augmented))


def grain_pipeline(data, repeat=False):
    import grain

    source = grain.MapDataset.source(data)
    if repeat:
        source = source.repeat(None)
    return (source.map(_soundfile_decode).map(_audio.resample).map(_audio.spectrogram)
            .seed(0).random_map(_grain_augment).map(_grain_features)
            .batch(BATCH).to_iter_dataset()
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


def _ray_features(data):
    rng = np.random.default_rng()  # each Ray actor its own
    return lambda index: numpy_features(data[index], rng.uniform, rng.integers)


def ray_pipeline(data, repeat=False):
    """Ray Data: ``map_batches`` of 2 actors holding the clips (``_ray.stream``)."""
    from benchmarks.cedar import _ray

    return _ray.stream(_ray_features, (data,), len(data), BATCH, repeat)


SYSTEMS = {"jdata": jdata_pipeline, "tf.data": tfdata_pipeline, "torch": torch_pipeline,
           "grain": grain_pipeline, "ray data": ray_pipeline}
