"""The shuffle-buffer benchmark's files and jdata's pipeline over them."""

import numpy as np

import pytest

import jdata
from benchmarks import nlp, shuffle_buffer

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow


def test_jdata_tokenizes_shuffled_sentences_of_the_benchmark_files(tmp_path):
    paths, vocab = shuffle_buffer.prepare(0.01, str(tmp_path))
    sentences = [r.decode() for r in jdata.from_tfrecord(paths)]
    assert len(sentences) == 200
    tokenize = nlp.Tokenizer(vocab)
    expected = {tuple(tokenize(s)) for s in sentences}
    with shuffle_buffer.jdata_pipeline((paths, vocab), buffer_size=50).iterator() as it:
        rows = [row for _ in range(6) for row in next(it)]
    assert len(rows) == 6 * nlp.BATCH
    # Token ids start at 1 (0 pads): a row is its sentence's tokens up to its last id.
    found = [tuple(row[:np.max(np.flatnonzero(row), initial=-1) + 1]) for row in rows]
    assert all(tokens in expected for tokens in found)  # each row is one sentence, padded
    in_file_order = [tuple(tokenize(s)) for s in sentences[:len(found)]]
    assert found != in_file_order  # shuffled


def test_the_report_gives_a_steady_rate_and_a_first_batch_time():
    result = shuffle_buffer.report(scale=0.01, rounds=1, warmup_sec=0.1, measure_sec=0.2,
                                   systems=["jdata"])
    for buffer_size in shuffle_buffer.BUFFERS:
        first, rate = result[buffer_size]["jdata"]
        assert 0 < first < 60 and rate > 0
