"""Decoding one 500x375 image on one core: jdata.ops.image's decoders against tf.io's.

    taskset -c 0 /work/venv-bench/bin/python -m benchmarks.image_decode

The image is matplotlib's ``grace_hopper.jpg`` photo (a smooth gradient plus noise
where matplotlib is missing) resized to 500x375 and encoded as a JPEG (quality 90,
4:2:0), an 8-bit RGB PNG and a 16-bit RGB PNG. Each call decodes to a NumPy array
(``tf.io.decode_*(...).numpy()``, eager, TF pinned to one thread; OpenCV to one
thread), timed in CPU time. The systems alternate within each round; the fastest
round of each is printed (on a shared machine the least disturbed), with jdata's
speed as a multiple of TF's (target: >= 1.0x).
"""

from __future__ import annotations

import io
import os
import time

import numpy as np

ROUNDS, CALLS = 40, 10


def photo() -> np.ndarray:
    from PIL import Image

    try:
        import matplotlib
        path = os.path.join(matplotlib.get_data_path(), "sample_data", "grace_hopper.jpg")
        picture = Image.open(path).convert("RGB")
    except (ImportError, OSError):
        y, x = np.mgrid[0:375, 0:500]
        noise = np.random.default_rng(0).normal(0, 12, (375, 500, 3))
        picture = Image.fromarray(np.clip(np.dstack([x / 2, y / 1.5, (x + y) / 3.5]) + noise,
                                          0, 255).astype(np.uint8))
    return np.asarray(picture.resize((500, 375), Image.Resampling.BICUBIC))


def files() -> dict[str, bytes]:
    import cv2
    from PIL import Image

    rgb = photo()
    jpeg = io.BytesIO()
    Image.fromarray(rgb).save(jpeg, "JPEG", quality=90)
    bgr16 = rgb[..., ::-1].astype(np.uint16) * 257
    return {"jpeg": jpeg.getvalue(), "png8": cv2.imencode(".png", rgb[..., ::-1])[1].tobytes(),
            "png16": cv2.imencode(".png", bgr16)[1].tobytes()}


def timed(fn, data) -> float:
    """CPU seconds per call (the process's, all threads): on a shared machine, what
    other processes take does not count, as it would in wall time."""
    start = time.process_time()
    for _ in range(CALLS):
        fn(data)
    return (time.process_time() - start) / CALLS


def main() -> None:
    import cv2
    import tensorflow as tf

    from jdata.ops import image

    cv2.setNumThreads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    cases = [  # (name, file, jdata's, tf's)
        ("decode_jpeg", "jpeg", image.decode_jpeg(),
         lambda d: tf.io.decode_jpeg(d, channels=3).numpy()),
        ("decode_image (JPEG)", "jpeg", image.decode_image(),
         lambda d: tf.io.decode_image(d, channels=3, expand_animations=False).numpy()),
        ("decode_png 8-bit", "png8", image.decode_png(),
         lambda d: tf.io.decode_png(d, channels=3).numpy()),
        ("decode_png 16-bit -> uint8", "png16", image.decode_png(),
         lambda d: tf.io.decode_png(d, channels=3).numpy()),
        ("decode_png 16-bit -> uint16", "png16", image.decode_png(np.uint16),
         lambda d: tf.io.decode_png(d, channels=3, dtype=tf.uint16).numpy()),
    ]
    encoded = files()
    print("500x375 image; files: " + ", ".join(f"{k} {len(v)} B" for k, v in encoded.items()))
    for name, kind, ours, theirs in cases:
        data = encoded[kind]
        assert (ours(data) == theirs(data)).all(), name  # the same pixels
        times = {"jdata": [], "tf": []}
        for _ in range(ROUNDS):
            times["jdata"].append(timed(ours, data))
            times["tf"].append(timed(theirs, data))
        mine, tf_time = (min(times[k]) for k in ("jdata", "tf"))
        print(f"{name:30s} jdata {mine * 1e6:7.0f} us   tf {tf_time * 1e6:7.0f} us   "
              f"{tf_time / mine:4.2f}x")


if __name__ == "__main__":
    main()
