"""optimizer: what jdata's static optimizer buys, jdata against itself in one run.

- **vectorize**: a per-element JAX augmentation (random flip, normalize,
  random brightness) of 48x48x3 ``uint8`` images, batch 64, as
  ``random_map(fn, key, vectorize=True)`` (``jit(vmap(fn))`` over blocks)
  against the same UDF called per element with the optimizer off; outputs
  compared.
- **reorder**: JPEG decode -> float -> normalize -> random crop over the cv
  workload's images, with the built-in declared UDFs of ``jdata.ops.image``:
  the optimizer moves the crop before the float maps; against
  ``Options(optimize=False)``, outputs compared.

- **cv vectorized**: the cv workload with its float normalization written in
  ``jax.numpy`` and run with ``vectorize=True`` (one ``jit(vmap)`` per block,
  after the PIL crop/flip on threads), against the same pipeline without
  ``vectorize`` (one eager JAX call per image), against the cv workload as
  written (NumPy normalize), and against tf.data's cv pipeline, in one run.

Ratios are best-of-``repeats`` rates; the first two have no peer (they are
jdata's own rewrites).
"""

from __future__ import annotations

import time

import numpy as np

_IMAGES = 4096
_BATCH = 64
_CROP = 128


def _augment(image, key):
    import jax
    import jax.numpy as jnp

    flip_key, brightness_key = jax.random.split(key)
    image = jnp.where(jax.random.bernoulli(flip_key), image[:, ::-1], image)
    x = (image.astype(jnp.float32) / 255.0 - 0.5) / 0.25
    return x + jax.random.uniform(brightness_key, (), minval=-0.2, maxval=0.2)


def _best_rate(make, items: int, repeats: int) -> tuple[float, list]:
    best, out = 0.0, []
    for _ in range(repeats):
        start = time.perf_counter()
        out = [b for b in make()]
        best = max(best, items / (time.perf_counter() - start))
    return best, out


def _max_difference(a: list, b: list) -> float:
    assert len(a) == len(b)
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(a, b))


def vectorize(scale: float, repeats: int) -> tuple[float, float]:
    """``(vectorized / per-element rate, largest output difference)``."""
    import jax

    import jdata

    n = max(_BATCH, int(_IMAGES * scale))
    images = np.random.default_rng(0).integers(0, 256, size=(n, 48, 48, 3), dtype=np.uint8)

    def pipeline(vectorized: bool):
        ds = (jdata.from_tensor_slices(images)
              .random_map(_augment, jax.random.key(0), vectorize=vectorized).batch(_BATCH))
        return ds if vectorized else ds.with_options(jdata.Options(optimize=False))

    fast, fast_out = _best_rate(lambda: pipeline(True), n, repeats)
    slow, slow_out = _best_rate(lambda: pipeline(False), n, 1)  # slow: one pass
    return fast / slow, _max_difference(fast_out, slow_out)


def reorder(scale: float, repeats: int) -> tuple[float, float]:
    """``(reordered / unreordered rate, largest output difference)``."""
    import jax

    import jdata
    from benchmarks import cv
    from jdata.ops import image

    jpegs = cv.prepare(scale)

    def pipeline(optimize: bool):
        return (jdata.from_source(jpegs).map(image.decode_jpeg()).map(image.to_float())
                .map(image.normalize(0.45, 0.22))
                .random_map(image.random_crop(_CROP, _CROP), jax.random.key(0)).batch(32)
                .with_options(jdata.Options(optimize=optimize)))

    fast, fast_out = _best_rate(lambda: pipeline(True), len(jpegs), repeats)
    slow, slow_out = _best_rate(lambda: pipeline(False), len(jpegs), repeats)
    return fast / slow, _max_difference(fast_out, slow_out)


def _crop_flip(jpeg: bytes, key) -> np.ndarray:
    from benchmarks import cv

    return cv.crop_flip(jpeg, np.random.default_rng(key))


def _jnp_normalize(crop):
    import jax.numpy as jnp

    from benchmarks import cv

    return (crop.astype(jnp.float32) - cv._MEAN) / cv._STD


def cv_vectorized(scale: float, repeats: int) -> dict:
    """The cv workload with a ``jax.numpy`` normalize and ``vectorize=True``.

    Rates relative to it (``vectorized / other``): the same pipeline without
    ``vectorize`` (``per_element``: one eager JAX call per image), the cv
    workload as written (``numpy``: NumPy normalize), and tf.data's cv pipeline
    (``tfdata``, ``None`` if not installed); and ``difference``, the largest
    output difference from the NumPy pipeline.
    """
    import jax

    import jdata
    from benchmarks import cv

    jpegs = cv.prepare(scale)

    def jnp_pipeline(vectorize: bool):
        # Same keys as cv.jdata_pipeline's random_map, so the outputs can be compared.
        return (jdata.from_source(jpegs)
                .random_map(_crop_flip, jax.random.key(0), num_parallel_calls=jdata.AUTOTUNE)
                .map(_jnp_normalize, vectorize=vectorize).batch(cv.BATCH)
                .prefetch(jdata.AUTOTUNE))

    fast, fast_out = _best_rate(lambda: jnp_pipeline(True), len(jpegs), repeats)
    slow, _ = _best_rate(lambda: jnp_pipeline(False), len(jpegs), 1)  # slow: one pass
    plain, plain_out = _best_rate(lambda: cv.jdata_pipeline(jpegs), len(jpegs), repeats)
    try:
        tfdata, _ = _best_rate(lambda: cv.tfdata_pipeline(jpegs), len(jpegs), repeats)
    except ImportError:
        tfdata = None
    return {"per_element": fast / slow, "numpy": fast / plain,
            "tfdata": None if tfdata is None else fast / tfdata,
            "difference": _max_difference(fast_out, plain_out)}


def report(scale: float, repeats: int) -> None:
    print("== optimizer: jdata with its rewrites against without, same data")
    ratio, diff = vectorize(scale, repeats)
    print(f"  vectorize (48x48x3 augmentation, batch {_BATCH}) {ratio:6.2f}x  "
          f"max |difference| {diff:.1e}  (target >= 5x)")
    ratio, diff = reorder(scale, repeats)
    print(f"  reorder (decode, float, normalize, crop {_CROP})  {ratio:6.2f}x  "
          f"max |difference| {diff:.1e}  (target >= 1.5x)")
    cv = cv_vectorized(scale, repeats)
    versus = ("tf.data not installed" if cv["tfdata"] is None
              else f"{cv['tfdata']:.2f}x tf.data")
    print(f"  cv, jnp normalize with vectorize=True     {cv['per_element']:6.2f}x without "
          f"(target > 1x), {cv['numpy']:.2f}x cv as written (NumPy normalize), {versus}, "
          f"max |difference| {cv['difference']:.1e}")
