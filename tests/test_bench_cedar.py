"""The jdata side of Cedar's NLP and ASR benchmarks (benchmarks/cedar/) builds, matches the
plain loop and restores mid-stream, on a few elements (the peers are bench extras)."""

import itertools
import pickle

import numpy as np
import pytest

import jdata
from benchmarks.cedar import _audio, asr, nlp
from tests.helpers import check_restore_at_every_step

pytestmark = pytest.mark.slow

_LINES = 20  # batches of 8: a short last one too
_CLIPS = 5  # batches of 2


@pytest.fixture(scope="module")
def text():
    lines, tokenizer, table = nlp.prepare(0.0)
    return lines[:_LINES], tokenizer, table


@pytest.fixture(scope="module")
def clips():
    return asr.prepare(0.0)[:_CLIPS]


def test_nlp_yields_the_plain_loops_embeddings(text):
    ours = list(nlp.jdata_pipeline(text, batch=8))
    assert [(b.shape, b.dtype) for b in ours] == [((8, 64, 256), np.float32)] * 2 + [
        ((4, 64, 256), np.float32)]
    plain = list(nlp.plain_loop(text, batch=8))
    assert all(np.array_equal(a, b) for a, b in zip(ours, plain, strict=True))


def test_nlp_tokens_are_truncated_or_padded_to_64(text):
    lines, tokenizer, _ = text
    tokenize = nlp.Tokenize(tokenizer)
    ids = [tokenize(line) for line in lines]
    assert all(i.shape == (nlp.MAX_TOKENS,) and i.dtype == np.int32 for i in ids)
    short = tokenize("ka lo")
    assert short[0] != 0 and (short[-10:] == 0).all()  # padded with [PAD], id 0
    assert any((i != 0).all() for i in ids)  # a long line fills all 64 (truncated)


def test_nlp_tokenizer_travels_as_json_and_is_rebuilt(text):
    lines, tokenizer, _ = text
    tokenize = nlp.Tokenize(tokenizer)
    state = pickle.dumps(tokenize)
    assert len(state) < 2 * len(tokenizer) + 1000  # the JSON, not a built object
    assert np.array_equal(pickle.loads(state)(lines[0]), tokenize(lines[0]))


def test_nlp_streams_are_infinite_with_repeat(text):
    ours = list(itertools.islice(iter(nlp.jdata_pipeline(text, repeat=True, batch=8)), 5))
    assert [b.shape for b in ours] == [(8, 64, 256)] * 5  # past the end of one pass
    plain = list(itertools.islice(nlp.plain_loop(text, repeat=True, batch=8), 5))
    assert [len(b) for b in plain] == [8, 8, 4, 8, 8]


def test_nlp_restores_mid_stream(text):
    batches = check_restore_at_every_step(nlp.jdata_pipeline(text, batch=8))
    assert len(batches) == 3


def _keys_of(op_key, n: int) -> list:
    """The per-element keys that a ``random_map`` with ``op_key`` hands its first ``n``
    inputs (a pure function of the key, the epoch and the position)."""
    return list(jdata.from_source(np.arange(n)).random_map(lambda _, key: np.array(key),
                                                           op_key))


def test_asr_yields_the_plain_loops_features_given_jdatas_keys(clips):
    ours = list(asr.jdata_pipeline(clips, batch=2))
    assert [(b.shape, b.dtype) for b in ours] == [((2, 300, 80), np.float32)] * 2 + [
        ((1, 300, 80), np.float32)]
    keys = [_keys_of(key, len(clips)) for key in asr.op_keys()]
    plain = list(asr.plain_loop(clips, batch=2, keys=lambda op, i: keys[op][i]))
    assert all(np.array_equal(a, b) for a, b in zip(ours, plain, strict=True))
    own = next(asr.plain_loop(clips, batch=2))  # other keys: other stretches and masks
    assert not np.array_equal(own, ours[0])


def test_asr_restores_mid_stream_and_repeats_itself(clips):
    batches = check_restore_at_every_step(asr.jdata_pipeline(clips, batch=2))
    again = list(asr.jdata_pipeline(clips, batch=2))
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))


def test_asr_stft_finds_a_tone_in_its_bin():
    t = np.arange(_audio.SOURCE_RATE) / _audio.SOURCE_RATE
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)  # 1 kHz: bin 25 of 40 Hz each
    spec = _audio.spectrogram(_audio.resample(tone))
    assert spec.shape == (1 + _audio.TARGET_RATE // _audio.HOP, _audio.N_FREQS)
    assert np.argmax(np.abs(spec).mean(axis=0)) == 25


def test_asr_time_stretch_at_rate_one_keeps_the_spectrogram():
    rng = np.random.default_rng(0)
    spec = _audio.spectrogram(rng.standard_normal(4000).astype(np.float32))
    np.testing.assert_allclose(_audio.time_stretch(spec, 1.0), spec[:-1], rtol=1e-3, atol=1e-3)
    assert len(_audio.time_stretch(spec, 0.8)) == int(np.ceil((len(spec) - 1) / 0.8))
    assert len(_audio.time_stretch(spec, 1.25)) == int(np.ceil((len(spec) - 1) / 1.25))


def test_asr_masks_zero_exactly_their_span():
    spec = np.ones((10, 6), np.float32)
    spec.setflags(write=False)  # elements are values: the mask copies
    rows = _audio.mask(spec, 2, 3, axis=0)
    assert (rows.sum(axis=1) == [6, 6, 0, 0, 0, 6, 6, 6, 6, 6]).all()
    cols = _audio.mask(spec, 4, 2, axis=1)
    assert (cols.sum(axis=0) == [10, 10, 10, 10, 0, 0]).all()


def test_asr_mel_filterbank_covers_the_band_with_ordered_triangles():
    bank = _audio.mel_filterbank()
    assert bank.shape == (_audio.N_FREQS, _audio.N_MELS) and (bank >= 0).all()
    peaks = bank.argmax(axis=0)
    assert (np.diff(peaks) >= 0).all() and peaks[-1] > peaks[0]
    assert (bank.max(axis=0) > 0).all()  # no empty mel bin
