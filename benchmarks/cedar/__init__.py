"""Cedar's workloads (the Cedar data-pipeline paper's NLP and ASR pipelines) as steady-state
benchmarks: ``python -m benchmarks.steady cedar.nlp cedar.asr``.

Each module is a ``benchmarks/steady.py`` workload: its pipeline written once in jdata and
once in each peer's own idiom (tf.data, the PyTorch ``DataLoader``, grain, Ray Data), over data
it makes at ``prepare()`` time from a fixed seed (no network).

- ``nlp``: BPE tokenization (Hugging Face ``tokenizers``), truncate/pad to 64 tokens and an
  embedding lookup: large float32 outputs, so moving elements between processes matters.
- ``asr``: WAV decode, resampling, STFT, phase-vocoder time stretch, SpecAugment masks and
  a mel filterbank: NumPy/SciPy signal processing.
"""
