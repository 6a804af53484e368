"""cv: JPEG decode, resize short side 256, random crop 224, random flip, normalize, batch 64.

Over generated JPEGs of varied sizes (180-520 px a side). tf.data uses its
native ops; the plain loop, grain, torch and "jdata" run the same PIL UDFs
written by hand; "jdata ops" runs ``jdata.ops.image`` (libjpeg-turbo and
OpenCV), which the optimizer fuses into one UDF and normalizes once per batch.
"""

from __future__ import annotations

import io

import numpy as np

N = 1_024
BATCH = 64
SHORT_SIDE = 256
CROP = 224
_MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
_STD = np.array([0.229, 0.224, 0.225], np.float32) * 255


def prepare(scale: float):
    from PIL import Image

    rng = np.random.default_rng(0)
    images = []
    for _ in range(max(BATCH, int(N * scale))):
        h, w = rng.integers(180, 521, size=2)
        # Smooth gradients plus noise: compresses like a photo, not like static.
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (w + h)], -1)
        pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        images.append(buffer.getvalue())
    return images


def items(images) -> int:
    return len(images)


def decode_resized(jpeg: bytes):
    from PIL import Image

    image = Image.open(io.BytesIO(jpeg)).convert("RGB")
    w, h = image.size
    scale = SHORT_SIDE / min(w, h)
    return image.resize((max(SHORT_SIDE, round(w * scale)), max(SHORT_SIDE, round(h * scale))),
                        Image.BILINEAR)


def crop_flip(jpeg: bytes, rng: np.random.Generator) -> np.ndarray:
    """Decode, resize, random crop and flip: ``uint8``, before normalization.

    The crop and the flip run in PIL, on the resized image, so NumPy gets a
    contiguous crop (a NumPy flip of a 3-channel image is a slow strided copy).
    """
    from PIL import Image

    image = decode_resized(jpeg)
    width, height = image.size
    top = int(rng.integers(0, height - CROP + 1))
    left = int(rng.integers(0, width - CROP + 1))
    crop = image.crop((left, top, left + CROP, top + CROP))
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(crop)


# (x - mean) / std as x * scale + offset, one pass over rows of CROP * 3 values:
# NumPy broadcasts a 3-value axis one pixel at a time, 10x slower.
_SCALE_ROW = np.tile(1 / _STD, CROP).astype(np.float32)
_OFFSET_ROW = np.tile(-_MEAN / _STD, CROP).astype(np.float32)


def normalize(crop: np.ndarray) -> np.ndarray:
    out = np.multiply(crop.reshape(CROP, CROP * 3), _SCALE_ROW, dtype=np.float32)
    out += _OFFSET_ROW
    return out.reshape(CROP, CROP, 3)


def augment(jpeg: bytes, rng: np.random.Generator) -> np.ndarray:
    return normalize(crop_flip(jpeg, rng))


def plain_loop(images, repeat=False):
    """The baseline: one thread, no framework: augment each image, stack, yield."""
    while True:
        for start in range(0, len(images), BATCH):
            yield np.stack([augment(images[i], np.random.default_rng(i))
                            for i in range(start, min(start + BATCH, len(images)))])
        if not repeat:
            return


def jdata_pipeline(images, parallel=-1, engine="auto", repeat=False):
    import jax

    import jdata

    # Written as a tf.data user would: AUTOTUNE parallelism, prefetch.
    source = jdata.from_source(images)
    return ((source.repeat() if repeat else source)
            .random_map(lambda jpeg, key: augment(jpeg, np.random.default_rng(key)),
                        jax.random.key(0), num_parallel_calls=parallel)
            .batch(BATCH).prefetch(jdata.AUTOTUNE).with_options(jdata.Options(engine=engine)))


def jdata_ops_pipeline(images, parallel=-1, engine="auto", repeat=False):
    import jax

    import jdata
    from jdata.ops import image

    # The same parallelism on every map, so that decode_resize_fusion fuses the four.
    crop_key, flip_key = jax.random.split(jax.random.key(0))
    source = jdata.from_source(images)
    return ((source.repeat() if repeat else source)
            .map(image.decode_jpeg(), num_parallel_calls=parallel)
            .map(image.resize(short_side=SHORT_SIDE), num_parallel_calls=parallel)
            .random_map(image.random_crop(CROP, CROP), crop_key, num_parallel_calls=parallel)
            .random_map(image.random_flip(), flip_key, num_parallel_calls=parallel)
            .map(image.normalize(_MEAN, _STD), num_parallel_calls=parallel)
            .batch(BATCH).prefetch(jdata.AUTOTUNE).with_options(jdata.Options(engine=engine)))


# jdata configurations picked by hand, against which AUTOTUNE is judged.
HAND_PICKED = [{"parallel": 2, "engine": "threads"}, {"parallel": 3, "engine": "threads"},
               {"parallel": 4, "engine": "threads"}, {"parallel": 2, "engine": "processes"}]


def tfdata_pipeline(images, repeat=False):
    # Best configuration: native decode/resize/crop ops, parallel map, prefetch.
    import tensorflow as tf

    scale, offset = tf.constant(1 / _STD), tf.constant(-_MEAN / _STD)

    def transform(jpeg, seed):
        image = tf.io.decode_jpeg(jpeg, channels=3)
        shape = tf.cast(tf.shape(image)[:2], tf.float32)
        size = tf.cast(tf.math.ceil(shape * SHORT_SIDE / tf.reduce_min(shape)), tf.int32)
        image = tf.image.resize(image, tf.maximum(size, SHORT_SIDE))
        image = tf.image.stateless_random_crop(image, (CROP, CROP, 3), seed)
        image = tf.image.stateless_random_flip_left_right(image, seed + 1)
        return image * scale + offset  # the same arithmetic as normalize()

    seeds = tf.data.Dataset.random(seed=0).batch(2)
    source = tf.data.Dataset.from_tensor_slices(images)
    ds = (tf.data.Dataset.zip((source.repeat() if repeat else source, seeds))
          .map(transform, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(BATCH).prefetch(tf.data.AUTOTUNE))
    return ds.as_numpy_iterator()


def grain_threads_pipeline(images, repeat=False):
    # grain's default: its read threads run the map.
    import grain

    source = grain.MapDataset.source(images)
    if repeat:
        source = source.repeat(None)
    return source.seed(0).random_map(augment).batch(BATCH).to_iter_dataset()


def grain_pipeline(images, repeat=False):
    # Best configuration found on 2 cores: 2 worker processes.
    import grain

    return grain_threads_pipeline(images, repeat).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2))


def torch_pipeline(images, repeat=False):
    from benchmarks.steady import torch_loader

    return torch_loader(len(images), lambda i: augment(images[i], np.random.default_rng(i)),
                        repeat, batch_size=BATCH)


SYSTEMS = {"jdata": jdata_pipeline, "jdata ops": jdata_ops_pipeline, "tf.data": tfdata_pipeline,
           "grain": grain_pipeline, "grain threads": grain_threads_pipeline,
           "torch": torch_pipeline}
