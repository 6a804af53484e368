"""simclr: SimCLR's two-view train pipeline, per image, batch 64 of pairs.

Each image is decoded once and gives two independent views, each: random
crop-and-resize to 224x224 (bicubic, area 0.08-1, aspect 3/4-4/3), random
flip, color jitter of strength 1 with p=0.8 (random order, simclrv2's
multiplicative brightness), grayscale with p=0.2, Gaussian blur with p=0.5
(kernel 224 // 10, sigma U[0.1, 2]), in [0, 1]. Every system yields float32
batches of 64 pairs, ``(64, 2, 224, 224, 3)`` (torch: channels first).

- ``tf.data``: google-research/simclr ``tf2/data_util.py``'s ops (tf.image, its
  depthwise-convolution blur), ``num_parallel_calls=AUTOTUNE``, prefetch.
- ``jdata``: ``jdata.ops.image``'s kernels, both views of an image in one
  ``random_map`` as SimCLR's ``data.py`` makes them, AUTOTUNE; the crop and flip
  on ``uint8`` (resized pixels rounded, where SimCLR resizes floats), the color
  ops on ``float32``. ``--tuning`` adds, among others, each view an element of
  its own through one ``random_map`` per kernel (``views=pixels``).
- ``torch``: torchvision v2 transforms on ``uint8`` tensors (``ToDtype`` last),
  a ``DataLoader`` with 2 persistent workers. ``antialias=False`` in the crop:
  the arithmetic of the others (tf's bicubic resize does not antialias).
- ``grain``: the same torchvision v2 transforms (grain has no image ops;
  grain users bring PIL, OpenCV or torchvision's), seeded from grain's
  ``random_map`` generator, 2 worker processes.
- ``plain``: the jdata kernels called in one thread, no framework.
- ``--tuning`` adds hand-picked jdata configurations, among them ``chain=True``:
  a view's kernels in one ``random_map`` (``benchmarks/_chain.py``).
"""

from __future__ import annotations

import numpy as np

from benchmarks import cv
from benchmarks._chain import Chain

BATCH = 64
SIZE = 224
BLUR = SIZE // 10  # SimCLR's kernel_size argument: radius 11, 23 taps
IMPORTS = {"torch": ("torch.utils.data", "torchvision.transforms.v2"),
           "ray": ("ray", "ray.data", "torchvision.transforms.v2")}


def prepare(scale: float):
    return cv.prepare(scale)  # JPEGs of 180-520 px a side


def items(images) -> int:
    return len(images)


def view_ops():
    """One view's jdata kernels in order, each with whether it is random."""
    from jdata.ops import image

    return [(True, image.random_resized_crop(SIZE, SIZE, method="bicubic")),
            (True, image.random_flip()),
            (False, image.convert_image_dtype(np.float32)),
            (True, image.color_jitter(0.8, 0.8, 0.8, 0.2, p=0.8)),
            (True, image.random_grayscale(0.2)),
            (True, image.random_gaussian_blur(BLUR, (0.1, 2.0), p=0.5))]


def plain_loop(images, repeat=False, batch=BATCH):
    from jdata.ops import image

    decode, views = image.decode_jpeg(), Pair(Chain(*view_ops()))

    def pair(i):
        return views(decode(images[i]), np.array([i, 0], np.uint32))

    while True:
        for start in range(0, len(images), batch):
            yield np.stack([pair(i) for i in range(start, min(start + batch, len(images)))])
        if not repeat:
            return


def _two(pixels: np.ndarray) -> np.ndarray:
    return np.stack([pixels, pixels])


def _two_bytes(jpeg: bytes) -> np.ndarray:
    return np.array([jpeg, jpeg], object)


class Pair:
    """SimCLR's two views of one image in one UDF (its ``data.py``'s
    ``tf.concat([preprocess(image) for _ in range(2)], -1)``), stacked."""

    def __init__(self, view):
        self.view = view

    def __call__(self, pixels, key):
        from jdata.ops import image

        return np.stack([self.view(pixels, k) for k in image.split_key(key, 2)])


def _pairs(views: np.ndarray) -> np.ndarray:
    return views.reshape(-1, 2, *views.shape[1:])


def jdata_pipeline(images, parallel=-1, engine="auto", views="pair", chain=False,
                   repeat=False, batch=BATCH):
    """``views="pair"``: SimCLR's own form (its ``data.py``): decode, then one UDF that
    makes both views of the image (``Pair``: the view's kernels chained, each with a key
    split from the element's), batch. ``"pixels"``: decode once, each view an element of
    its own through one ``random_map`` per kernel (``chain``: all of a view's kernels in
    one, see ``benchmarks/_chain.py``), batch of views, pairs reshaped; ``"bytes"``: as
    ``"pixels"`` but each view decodes the JPEG itself (twice the decoding, no copy of
    the pixels; jdata does not fuse a crop into the decode: it does not pay)."""
    import jax

    import jdata
    from jdata.ops import image

    ds = jdata.from_source(images)
    ds = ds.repeat() if repeat else ds
    if views == "pair":
        ds = ds.map(image.decode_jpeg(), num_parallel_calls=parallel)
        ds = ds.random_map(Pair(Chain(*view_ops())), jax.random.key(0),
                           num_parallel_calls=parallel)
        return (ds.batch(batch).prefetch(jdata.AUTOTUNE)
                .with_options(jdata.Options(engine=engine)))
    if views == "pixels":
        ds = ds.map(image.decode_jpeg(), num_parallel_calls=parallel).map(_two).unbatch()
    else:
        ds = ds.map(_two_bytes).unbatch().map(image.decode_jpeg(), num_parallel_calls=parallel)
    if chain:
        ds = ds.random_map(Chain(*view_ops()), jax.random.key(0), num_parallel_calls=parallel)
    else:
        for (random, fn), key in zip(view_ops(), jax.random.split(jax.random.key(0), 6)):
            ds = (ds.random_map(fn, key, num_parallel_calls=parallel) if random
                  else ds.map(fn, num_parallel_calls=parallel))
    return (ds.batch(2 * batch).map(_pairs)
            .prefetch(jdata.AUTOTUNE).with_options(jdata.Options(engine=engine)))


HAND_PICKED = [{"views": "pixels"}, {"views": "pixels", "chain": True}, {"views": "bytes"},
               {"views": "bytes", "chain": True}, {"parallel": 2, "engine": "threads"},
               {"parallel": 2, "engine": "processes"}]


def tfdata_pipeline(images, repeat=False):
    import tensorflow as tf

    from benchmarks import _tf_simclr

    def pair(jpeg):
        pixels = tf.image.convert_image_dtype(tf.io.decode_jpeg(jpeg, channels=3), tf.float32)
        return tf.stack([_tf_simclr.train_view(pixels, SIZE, SIZE) for _ in range(2)])

    source = tf.data.Dataset.from_tensor_slices(images)
    ds = ((source.repeat() if repeat else source)
          .map(pair, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(BATCH).prefetch(tf.data.AUTOTUNE))
    return ds.as_numpy_iterator()


class TorchViews:
    """Two torchvision v2 views of a JPEG, ``(2, 3, 224, 224)`` float32 (picklable)."""

    def __init__(self):
        self.transform = None  # built in the worker: the transforms import torch

    def __setstate__(self, state):
        # Unpickled in a worker process: import torchvision before its threads race to (a
        # half-imported torchvision.transforms fails in the others).
        import torchvision.io
        import torchvision.transforms.v2  # noqa: F401

        self.__dict__.update(state)

    def __call__(self, jpeg: bytes):
        import torch
        from torchvision.io import decode_jpeg
        from torchvision.transforms import v2

        if self.transform is None:
            self.transform = v2.Compose([
                v2.RandomResizedCrop(SIZE, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                                     interpolation=v2.InterpolationMode.BICUBIC,
                                     antialias=False),
                v2.RandomHorizontalFlip(),
                v2.RandomApply([v2.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
                v2.RandomGrayscale(0.2),
                v2.RandomApply([v2.GaussianBlur(2 * (BLUR // 2) + 1, sigma=(0.1, 2.0))], p=0.5),
                v2.ToDtype(torch.float32, scale=True)])
        pixels = decode_jpeg(torch.frombuffer(bytearray(jpeg), dtype=torch.uint8))
        return torch.stack([self.transform(pixels), self.transform(pixels)])


def torch_pipeline(images, repeat=False):
    from benchmarks.steady import torch_loader

    views = TorchViews()
    return torch_loader(len(images), lambda i: views(images[i]), repeat, batch_size=BATCH)


class GrainViews(TorchViews):
    """grain's ``random_map``: torchvision's draws seeded from grain's generator."""

    def __call__(self, jpeg: bytes, rng: np.random.Generator) -> np.ndarray:
        import torch

        torch.set_num_threads(1)  # one image per worker process at a time
        torch.manual_seed(int(rng.integers(2 ** 63)))
        return super().__call__(jpeg).numpy()


def grain_pipeline(images, repeat=False):
    import grain

    source = grain.MapDataset.source(images)
    if repeat:
        source = source.repeat(None)
    return (source.seed(0).random_map(GrainViews()).batch(BATCH).to_iter_dataset()
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


def _ray_views(images):
    import torch

    torch.set_num_threads(1)  # one image per actor at a time, as in the DataLoader's workers
    views = TorchViews()
    return lambda i: views(images[i]).numpy()


def ray_pipeline(images, repeat=False):
    """Ray Data: ``map_batches`` of 2 actors holding the JPEGs, each view torchvision's
    (``benchmarks/cedar/_ray.py``)."""
    from benchmarks.cedar import _ray

    return _ray.stream(_ray_views, (images,), len(images), BATCH, repeat)


SYSTEMS = {"jdata": jdata_pipeline, "tf.data": tfdata_pipeline, "torch": torch_pipeline,
           "grain": grain_pipeline, "ray data": ray_pipeline}
