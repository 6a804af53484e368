"""Each geometry kernel of ``jdata.ops.image`` against tf.image's on one core.

    taskset -c 0 /work/venv-bench/bin/python -m benchmarks.image_geometry_kernels

(a Python with TensorFlow, from the repository root). tf runs each op in a
``tf.function`` with one intra- and one inter-op thread; jdata's kernels run
with OpenCV and BLAS on one thread. Each time is the fastest of ``--repeats``
timed loops, jdata's and tf's alternating; the table gives both, in
microseconds, and the ratio jdata / tf (below 1: jdata faster).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

SIMCLR = {"aspect_ratio_range": (3 / 4, 4 / 3), "area_range": (0.08, 1.0)}


def _loop(fn, loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - start) / loops * 1e6


def _times(ours, theirs, loops: int, repeats: int) -> tuple[float, float]:
    """The fastest of ``repeats`` timed loops of each, the two alternating (so that a
    busy spell of a shared machine slows both)."""
    ours(), theirs()
    runs = [(_loop(ours, loops), _loop(theirs, loops)) for _ in range(repeats)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def _cases(tf, image, rng):
    """(name, jdata callable, tf callable) for each kernel and input."""
    big = rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)
    small = rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
    for label, x in (("375x500->224", big), ("224->300", small)):
        size = (224, 224) if x is big else (300, 300)
        for dtype in ("uint8", "float32"):
            data = x if dtype == "uint8" else x.astype(np.float32) / 255
            for method, antialias in (("bilinear", False), ("bilinear", True), ("bicubic", False),
                                      ("bicubic", True), ("nearest", False), ("area", False)):
                ours = image.resize(size=size, method=method, antialias=antialias)
                theirs = tf.function(lambda t, m=method, a=antialias, s=size:
                                     tf.image.resize(t, s, m, antialias=a))
                tensor = tf.constant(data)
                yield (f"resize {method}{' aa' if antialias else ''} {dtype} {label}",
                       lambda o=ours, d=data: o(d), lambda f=theirs, t=tensor: f(t).numpy())
    key = np.array([1, 2], np.uint32)
    for dtype in ("uint8", "float32"):
        data = big if dtype == "uint8" else big.astype(np.float32) / 255
        crop = image.random_resized_crop(224, 224, **SIMCLR)
        tensor = tf.constant(data)

        @tf.function
        def tf_crop(t, seed):
            begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
                tf.shape(t), tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=seed,
                min_object_covered=0.1, **SIMCLR)
            return tf.image.resize(tf.slice(t, begin, size), (224, 224), "bicubic")

        seeds = iter(range(10**9))  # a new window each call (tensors: no retracing)
        yield (f"random_resized_crop bicubic {dtype} 375x500->224",
               lambda c=crop, d=data, s=seeds: c(d, np.array([next(s), 3], np.uint32)),
               lambda f=tf_crop, t=tensor, s=seeds: f(t, tf.constant([next(s), 3])).numpy())
    as_float = small.astype(np.float32) / 255
    tf_sample, shape, seed = _tf_sdbb(tf), tf.constant([375, 500, 3]), tf.constant([1, 2])
    yield ("sample_distorted_bounding_box simclr",
           lambda: image.sample_distorted_bounding_box((375, 500, 3), key, **SIMCLR),
           lambda: [v.numpy() for v in tf_sample(shape, seed)])
    blur = image.gaussian_blur(22, 1.0)
    tf_blur = tf.function(lambda t: _simclr_blur(tf, t, 22, 1.0))
    tensor = tf.constant(as_float)
    yield ("gaussian_blur k=22 float32 224", lambda: blur(as_float),
           lambda: tf_blur(tensor).numpy())
    yield ("gaussian_blur k=22 uint8 224", lambda: blur(small), lambda: tf_blur(tensor).numpy())
    boxes = np.array([[0.1, 0.2, 0.5, 0.6]], np.float32)
    flip = image.random_flip(boxes=True)
    tf_flip = tf.function(lambda t, b: (tf.image.flip_left_right(t),
                                        tf.stack([b[:, 0], 1 - b[:, 3], b[:, 2], 1 - b[:, 1]], 1)))
    yield ("random_flip(boxes) float32 224 (flips)",
           lambda: flip(as_float, boxes, np.array([1 << 31, 0], np.uint32)),
           lambda: [v.numpy() for v in tf_flip(tensor, tf.constant(boxes))])


def _tf_sdbb(tf):
    @tf.function
    def sample(shape, seed):
        return tf.image.stateless_sample_distorted_bounding_box(
            shape, tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=seed, min_object_covered=0.1,
            **SIMCLR)
    return sample


def _simclr_blur(tf, image, kernel_size, sigma):
    from tests.ops.fixtures.make_image_geometry_fixtures import _simclr_gaussian_blur
    return _simclr_gaussian_blur(tf, image, kernel_size, sigma)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import cv2
    import tensorflow as tf

    from jdata.ops import image
    cv2.setNumThreads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    print(f"{'kernel':52s} {'jdata us':>9s} {'tf us':>9s} {'ratio':>6s}")
    for name, ours, theirs in _cases(tf, image, np.random.default_rng(0)):
        a, b = _times(ours, theirs, args.loops, args.repeats)
        print(f"{name:52s} {a:9.0f} {b:9.0f} {a / b:6.2f}", flush=True)


if __name__ == "__main__":
    main()
