"""The ASR workload's signal processing in NumPy and SciPy, shared by jdata's UDFs, the plain
loop and the PyTorch and grain peers (torchaudio's transforms, written without torch).

Spectrograms are time-major, ``(frames, 201)``, as ``tf.signal.stft`` gives them; the random
kernels take their draws as arguments, so that each system draws them from its own RNG.
"""

from __future__ import annotations

import functools
import io
import wave

import numpy as np

SOURCE_RATE = 44_100
TARGET_RATE = 16_000
N_FFT = 400
HOP = 160
N_FREQS = N_FFT // 2 + 1
N_MELS = 80
FRAMES = 300  # every clip's features are padded or cropped to this many frames
STRETCH_RANGE = (0.8, 1.25)
TIME_MASK_MAX = 40  # frames
FREQ_MASK_MAX = 30  # linear-frequency bins
# 44.1 kHz -> 16 kHz is up 160, down 441.
_UP, _DOWN = 160, 441


def make_wav(rng: np.random.Generator) -> bytes:
    """A 1-3 s mono 16-bit WAV at 44.1 kHz: three enveloped sines and some noise."""
    n = int(rng.uniform(1.0, 3.0) * SOURCE_RATE)
    t = np.arange(n) / SOURCE_RATE
    tones = sum(np.sin(2 * np.pi * f * t + phase)
                for f, phase in zip(rng.uniform(80, 4000, 3), rng.uniform(0, 2 * np.pi, 3)))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(0.5, 4) * t)
    signal = tones * envelope / 3 + 0.05 * rng.standard_normal(n)
    pcm = np.clip(signal * 0.5 * 32767, -32768, 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SOURCE_RATE)
        f.writeframes(pcm.tobytes())
    return out.getvalue()


def decode_wav(data: bytes) -> np.ndarray:
    """A 16-bit mono WAV's samples as float32 in [-1, 1) (stdlib ``wave``, no codec library)."""
    with wave.open(io.BytesIO(data), "rb") as f:
        raw = f.readframes(f.getnframes())
    return np.frombuffer(raw, "<i2").astype(np.float32) / np.float32(32768)


@functools.cache
def _lowpass() -> np.ndarray:
    # resample_poly's default filter (Kaiser, beta 5), designed once rather than per call:
    # the design costs as much as the filtering.
    from scipy import signal

    taps = signal.firwin(2 * 10 * _DOWN + 1, 1 / _DOWN, window=("kaiser", 5.0))
    taps = taps.astype(np.float32)
    taps.setflags(write=False)
    return taps


def resample(samples: np.ndarray) -> np.ndarray:
    """44.1 kHz -> 16 kHz with SciPy's polyphase filter."""
    from scipy import signal

    return signal.resample_poly(samples, _UP, _DOWN, window=_lowpass()).astype(
        np.float32, copy=False)


@functools.cache
def _hann() -> np.ndarray:
    n = np.arange(N_FFT)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)).astype(np.float32)  # periodic
    window.setflags(write=False)
    return window


def spectrogram(samples: np.ndarray) -> np.ndarray:
    """The complex STFT, ``(frames, 201)`` complex64: centered frames (reflect padding) of
    ``N_FFT`` samples every ``HOP``, a periodic Hann window."""
    padded = np.pad(samples, N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]
    return np.fft.rfft(frames * _hann(), axis=-1).astype(np.complex64, copy=False)


@functools.cache
def expected_advance() -> np.ndarray:
    """Each bin's phase advance over one hop at its center frequency, modulo 2 pi: the
    phase vocoder's reference, whose deviation gives a bin's true frequency."""
    # Modulo 2 pi (it only enters phases) so that float32 phases accumulated over hundreds
    # of frames stay small and precise.
    advance = np.mod(np.linspace(0, np.pi * HOP, N_FREQS), 2 * np.pi).astype(np.float32)
    advance.setflags(write=False)
    return advance


def time_stretch(spec: np.ndarray, rate: float) -> np.ndarray:
    """A phase vocoder: ``spec`` played ``rate`` times as fast, ``ceil((frames - 1) / rate)``
    frames; magnitudes interpolated between neighbour frames, phases accumulated."""
    steps = np.arange(0, len(spec) - 1, rate)
    index = steps.astype(np.intp)
    alpha = (steps - index).astype(np.float32)[:, None]
    before, after = spec[index], spec[index + 1]
    magnitude = (1 - alpha) * np.abs(before) + alpha * np.abs(after)
    expected = expected_advance()
    delta = np.angle(after) - np.angle(before) - expected
    delta -= np.float32(2 * np.pi) * np.round(delta / np.float32(2 * np.pi))
    advance = np.cumsum(expected + delta, axis=0)
    phase = np.angle(spec[0]) + np.concatenate([np.zeros_like(advance[:1]), advance[:-1]])
    return (magnitude * np.exp(1j * phase)).astype(np.complex64, copy=False)


def power(spec: np.ndarray) -> np.ndarray:
    """``|spec|^2`` as float32."""
    return np.square(np.abs(spec))


def mask(spec: np.ndarray, start: int, width: int, axis: int) -> np.ndarray:
    """A copy of ``spec`` with ``width`` rows (``axis=0``, time) or columns (``axis=1``,
    frequency) from ``start`` zeroed (SpecAugment)."""
    out = np.array(spec)  # the input is a value that other consumers may share
    index = [slice(None), slice(None)]
    index[axis] = slice(start, start + width)
    out[tuple(index)] = 0
    return out


def mask_span(size: int, max_width: int, integers) -> tuple[int, int]:
    """``(start, width)`` of a mask: width uniform in ``0..max_width``, start uniform where it
    fits; ``integers(low, high)`` draws an int in ``[low, high)`` from the caller's RNG."""
    width = integers(0, min(max_width, size) + 1)
    return integers(0, size - width + 1), width


@functools.cache
def mel_filterbank() -> np.ndarray:
    """``(201, 80)`` float32: HTK-mel triangles from 0 Hz to 8 kHz over the STFT's bins."""
    def to_mel(hz):
        return 2595 * np.log10(1 + hz / 700)

    edges = 700 * (10 ** (np.linspace(0, to_mel(TARGET_RATE / 2), N_MELS + 2) / 2595) - 1)
    hz = np.linspace(0, TARGET_RATE / 2, N_FREQS)[:, None]
    rising = (hz - edges[:-2]) / (edges[1:-1] - edges[:-2])
    falling = (edges[2:] - hz) / (edges[2:] - edges[1:-1])
    bank = np.maximum(0, np.minimum(rising, falling)).astype(np.float32)
    bank.setflags(write=False)
    return bank


def mel(power_spec: np.ndarray) -> np.ndarray:
    """``(frames, 201)`` power -> ``(frames, 80)`` mel power."""
    return power_spec @ mel_filterbank()


def fix_length(features: np.ndarray) -> np.ndarray:
    """Zero-padded or cropped to ``FRAMES`` frames, so that clips batch."""
    if len(features) >= FRAMES:
        return features[:FRAMES]
    return np.pad(features, ((0, FRAMES - len(features)), (0, 0)))


def augment(spec: np.ndarray, uniform, integers) -> np.ndarray:
    """Time stretch, power, time mask, frequency mask of a complex spectrogram, drawn from a
    peer's RNG: ``uniform(low, high)`` a float, ``integers(low, high)`` an int."""
    out = power(time_stretch(spec, uniform(*STRETCH_RANGE)))
    out = mask(out, *mask_span(len(out), TIME_MASK_MAX, integers), axis=0)
    return mask(out, *mask_span(N_FREQS, FREQ_MASK_MAX, integers), axis=1)
