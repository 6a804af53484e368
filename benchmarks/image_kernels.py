"""image_kernels: each ``jdata.ops.image`` kernel alone against its tf.image op, on one core.

jdata's kernel is called directly (no pipeline) with OpenCV and NumPy's
BLAS held to one thread each (``threadpoolctl``); TensorFlow runs the op in
a ``tf.function`` with intra- and inter-op parallelism 1. Inputs: a 224x224x3
image (``float32`` in [0, 1] and ``uint8``), a 375x500x3 one for resizes and
crops, a 500x375 JPEG and PNG (8- and 16-bit) for decoding. Random kernels
get a different key (tf: a fresh draw) on every call, so branches taken with a
probability are taken as often as they would be. Rounds interleave the two,
per kernel; the table gives the median ms per call and ``tf / jdata`` (> 1:
jdata faster; the issue's target is >= 1). A kernel that this jdata does not
have yet is reported as missing. The heap's thresholds are raised first, as a
jdata iterator does (``jdata/runtime/heap.py``), for both.

    python -m benchmarks.image_kernels [--quick] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks import _image_cases


@dataclasses.dataclass
class Row:
    name: str
    jdata_ms: float | None = None
    tf_ms: float | None = None
    note: str = ""

    def line(self) -> str:
        ours = f"{self.jdata_ms:10.3f}" if self.jdata_ms is not None else f"{'-':>10s}"
        theirs = f"{self.tf_ms:10.3f}" if self.tf_ms is not None else f"{'-':>10s}"
        ratio = (f"{self.tf_ms / self.jdata_ms:7.2f}x" if self.jdata_ms and self.tf_ms
                 else f"{'-':>8s}")
        return f"  {self.name:44s} {ours} {theirs} {ratio}  {self.note}"


def inputs() -> dict[str, Any]:
    """The inputs, from a fixed seed: smooth gradients plus noise (compresses like a photo)."""
    from PIL import Image

    rng = np.random.default_rng(0)

    def photo(height, width):
        y, x = np.mgrid[0:height, 0:width]
        base = np.stack([x * 255 // width, y * 255 // height,
                         (x + y) * 255 // (width + height)], -1)
        return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)

    def encoded(pixels, fmt, **kwargs):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format=fmt, **kwargs)
        return buffer.getvalue()

    import cv2  # PIL writes 16-bit PNGs of one channel only

    small, large = photo(224, 224), photo(375, 500)
    deep = cv2.imencode(".png", large.astype(np.uint16) * 257)[1].tobytes()
    return {"u224": small, "f224": small.astype(np.float32) / 255, "u500": large,
            "f500": large.astype(np.float32) / 255, "jpeg": encoded(large, "JPEG", quality=90),
            "png8": encoded(large, "PNG"), "png16": deep}


def per_call_ms(call: Callable[[int], Any], seconds: float) -> float:
    """Mean ms of ``call(i)`` over at least ``seconds`` (and 3 calls), after one warm-up."""
    call(0)
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or calls < 3:
        call(calls)
        calls += 1
    return 1000 * elapsed / calls


def _one_core() -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:
        pass
    # NumPy's BLAS (the band resampler's matrix products) starts a thread per core
    # otherwise: one core means one thread for jdata too.
    import threadpoolctl

    threadpoolctl.threadpool_limits(1, user_api="blas")


def measure(case: _image_cases.Case, data: dict[str, Any], rounds: int,
            seconds: float) -> Row:
    """One case: jdata's call (or why there is none) and tf's, interleaved rounds."""
    import tensorflow as tf

    from jdata.ops import image

    row = Row(f"{case.name} [{case.input}]")
    x = data[case.input]
    # Random words, as random_map's keys are: a kernel may read a key's bits as they are
    # (random_flip's top bit), and [7, i] would never flip.
    keys = list(np.random.default_rng(7).integers(0, 2 ** 32, (64, 2), dtype=np.uint32))
    ours = None
    try:
        ours = case.jdata(image, x, keys)
        ours(0)  # fails here, not mid-table, if the kernel refuses the input
    except Exception as e:  # noqa: BLE001 (a kernel's failure is a row, not a crash)
        missing = isinstance(e, AttributeError) and "jdata.ops.image" in str(e)
        row.note = "missing in jdata" if missing else f"jdata: {type(e).__name__}: {e}"[:90]
        ours = None
    tensor = tf.constant(x)
    theirs = case.tf(tf, tensor)
    jdata_runs, tf_runs = [], []
    for _ in range(rounds):
        if ours is not None:
            jdata_runs.append(per_call_ms(ours, seconds))
        tf_runs.append(per_call_ms(theirs, seconds))
    row.jdata_ms = statistics.median(jdata_runs) if jdata_runs else None
    row.tf_ms = statistics.median(tf_runs)
    row.note = row.note or case.note
    return row


def report(rounds: int = 3, seconds: float = 0.5, only=None, log=print) -> list[Row]:
    _one_core()
    # The heap as a jdata pipeline sets it (jdata/runtime/heap.py); TF's tensors, made in
    # this process too, get the same warm pages.
    from jdata.runtime import heap

    heap.keep_freed_pages()
    data = inputs()
    log(f"== image_kernels: one core, median of {rounds} interleaved rounds of >= {seconds:g}"
        " s, ms per call; tf / jdata > 1: jdata faster")
    log(f"  {'kernel [input]':44s} {'jdata ms':>10s} {'tf ms':>10s} {'tf/jdata':>8s}")
    rows = []
    for case in _image_cases.CASES:
        if only and not any(name in case.name for name in only):
            continue
        rows.append(measure(case, data, rounds, seconds))
        log(rows[-1].line())
    timed = [r for r in rows if r.jdata_ms and r.tf_ms]
    slower = [r.name for r in timed if r.tf_ms < r.jdata_ms]
    missing = [r.name for r in rows if r.jdata_ms is None]
    log(f"  {len(timed) - len(slower)} of {len(timed)} timed kernels at least as fast as "
        f"tf.image; slower: {', '.join(slower) or 'none'}; {len(missing)} not timed (notes)")
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.5, help="per kernel per round")
    parser.add_argument("--quick", action="store_true", help="1 round of 0.05 s: a smoke run")
    parser.add_argument("--only", nargs="*", default=None, help="kernels whose name has these")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = 1, 0.05
    report(args.rounds, args.seconds, args.only)


if __name__ == "__main__":
    main()
