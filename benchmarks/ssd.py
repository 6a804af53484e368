"""ssd: SSD's train pipeline with boxes, batch 64.

Per image (a JPEG and its 8 boxes, ``float32 [8, 4]`` normalized ``[ymin, xmin,
ymax, xmax]``, drawn once per image from its index): decode, SSD's random crop
(``sample_distorted_bounding_box`` constrained by the boxes: min_object_covered
0.3, aspect 0.5-2, area 0.1-1, 100 attempts; the boxes mapped into the crop
and clipped), bilinear resize to 300x300, random flip (the boxes with it),
photometric distortion in a fixed order (additive brightness 32/255, contrast
0.5-1.5, saturation 0.5-1.5, hue 0.05, as SSD's Caffe recipe), normalize to
[-1, 1]. Every system yields ``(images, boxes)``: ``(64, 300, 300, 3)`` float32
(torch: channels first) and ``(64, 8, 4)``.

- ``tf.data``: ``tf.image.sample_distorted_bounding_box`` and the ``random_*``
  ops, ``num_parallel_calls=AUTOTUNE``, prefetch.
- ``jdata``: ``jdata.ops.image``'s kernels (``boxes=True`` crop and flip),
  AUTOTUNE; crop, resize and flip on ``uint8``.
- ``torch``: torchvision v2 with ``tv_tensors.BoundingBoxes``: ``RandomIoUCrop``
  (SSD's crop, torchvision's defaults: scale 0.3-1, aspect 0.5-2, IoU choices
  of the SSD paper; boxes outside it zeroed, so 8 stay), ``Resize`` (no antialias,
  as tf's), flip, ``ColorJitter(0.125, 0.5, 0.5, 0.05)`` (multiplicative
  brightness, random order: torchvision's), ``DataLoader`` with 2 persistent workers.
- ``grain``: the same torchvision v2 transforms, 2 worker processes.
- ``plain``: the jdata kernels called in one thread, no framework.
- ``--tuning`` adds hand-picked jdata configurations, among them ``chain=True``:
  all kernels in one ``random_map`` (``benchmarks/_chain.py``).
"""

from __future__ import annotations

import numpy as np

from benchmarks import cv
from benchmarks._chain import Chain

BATCH = 64
SIZE = 300
BOXES = 8
CROP = {"area_range": (0.1, 1.0), "aspect_ratio_range": (0.5, 2.0), "min_object_covered": 0.3,
        "max_attempts": 100}
DISTORT = {"brightness": 32 / 255, "contrast": 0.5, "saturation": 0.5, "hue": 0.05}
IMPORTS = {"torch": ("torch.utils.data", "torchvision.transforms.v2"),
           "ray": ("ray", "ray.data", "torchvision.transforms.v2")}


def boxes_of(index: int) -> np.ndarray:
    """``BOXES`` boxes inside the image, of 5-50% of a side, the same for ``index`` always."""
    rng = np.random.default_rng(index)
    center = rng.uniform(0.15, 0.85, (BOXES, 2))
    half = rng.uniform(0.025, 0.25, (BOXES, 2))
    return np.clip(np.concatenate([center - half, center + half], 1), 0, 1).astype(np.float32)


def prepare(scale: float):
    return [(jpeg, boxes_of(i)) for i, jpeg in enumerate(cv.prepare(scale))]


def items(data) -> int:
    return len(data)


def items_in(batch) -> int:
    return len(batch[0])


class OnImage:
    """A UDF of the image applied to an ``(image, boxes)`` element, the boxes passed on."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = self.__qualname__ = f"on_image({getattr(fn, '__qualname__', fn)})"

    def __call__(self, pixels, boxes, *key):
        return self.fn(pixels, *key), boxes


def _ops():
    """The jdata UDFs in order, each with whether it is random (a `random_map`'s)."""
    from jdata.ops import image

    return [(False, OnImage(image.decode_jpeg())),
            (True, image.random_resized_crop(SIZE, SIZE, method="bilinear", boxes=True, **CROP)),
            (True, image.random_flip(boxes=True)),
            (False, OnImage(image.convert_image_dtype(np.float32))),
            (True, OnImage(image.color_jitter(**DISTORT, random_order=False,
                                              brightness_mode="additive"))),
            (False, OnImage(image.normalize(0.5, 0.5)))]


def plain_loop(data, repeat=False, batch=BATCH):
    augment = Chain(*_ops())
    while True:
        for start in range(0, len(data), batch):
            done = [augment(*data[i], np.array([i, 0], np.uint32))
                    for i in range(start, min(start + batch, len(data)))]
            yield tuple(np.stack(column) for column in zip(*done))
        if not repeat:
            return


def jdata_pipeline(data, parallel=-1, engine="auto", chain=False, repeat=False, batch=BATCH):
    """One ``random_map`` (or ``map``) per kernel; ``chain``: all of them in one, see
    ``benchmarks/_chain.py``."""
    import jax

    import jdata

    ds = jdata.from_source(data)
    ds = ds.repeat() if repeat else ds
    if chain:
        ds = ds.random_map(Chain(*_ops()), jax.random.key(0), num_parallel_calls=parallel)
    else:
        for (random, fn), key in zip(_ops(), jax.random.split(jax.random.key(0), 6)):
            ds = (ds.random_map(fn, key, num_parallel_calls=parallel) if random
                  else ds.map(fn, num_parallel_calls=parallel))
    return (ds.batch(batch).prefetch(jdata.AUTOTUNE)
            .with_options(jdata.Options(engine=engine)))


HAND_PICKED = [{"chain": True}, {"parallel": 2, "engine": "threads"},
               {"parallel": 2, "engine": "processes"}]


def tfdata_pipeline(data, repeat=False):
    import tensorflow as tf

    def augment(jpeg, boxes):
        pixels = tf.io.decode_jpeg(jpeg, channels=3)
        begin, size, window = tf.image.sample_distorted_bounding_box(
            tf.shape(pixels), bounding_boxes=boxes[None], **CROP,
            use_image_if_no_bounding_boxes=True)
        pixels = tf.slice(pixels, begin, size)
        y0, x0, y1, x1 = tf.unstack(window[0, 0])
        extent = [y1 - y0, x1 - x0, y1 - y0, x1 - x0]
        boxes = tf.clip_by_value((boxes - [y0, x0, y0, x0]) / extent, 0.0, 1.0)
        pixels = tf.image.resize(pixels, [SIZE, SIZE], method="bilinear") / 255.0
        flip = tf.random.uniform([]) < 0.5
        pixels = tf.cond(flip, lambda: tf.image.flip_left_right(pixels), lambda: pixels)
        ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=1)
        boxes = tf.cond(flip, lambda: tf.stack([ymin, 1 - xmax, ymax, 1 - xmin], 1),
                        lambda: boxes)
        pixels = tf.clip_by_value(tf.image.random_brightness(pixels, DISTORT["brightness"]), 0, 1)
        pixels = tf.clip_by_value(tf.image.random_contrast(pixels, 0.5, 1.5), 0, 1)
        pixels = tf.clip_by_value(tf.image.random_saturation(pixels, 0.5, 1.5), 0, 1)
        pixels = tf.clip_by_value(tf.image.random_hue(pixels, DISTORT["hue"]), 0, 1)
        return pixels * 2 - 1, boxes

    jpegs, boxes = zip(*data)
    source = tf.data.Dataset.from_tensor_slices((list(jpegs), np.stack(boxes)))
    ds = ((source.repeat() if repeat else source)
          .map(augment, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(BATCH).prefetch(tf.data.AUTOTUNE))
    return ds.as_numpy_iterator()


class TorchAugment:
    """torchvision v2's SSD augmentation of ``(jpeg, boxes)``: ``(image, boxes)`` tensors,
    boxes in pixels ``[x0, y0, x1, y1]`` of the 300x300 image (torchvision's format)."""

    def __init__(self):
        self.transform = None  # built in the worker: the transforms import torch

    def __setstate__(self, state):
        # Unpickled in a worker process: import torchvision before its threads race to (a
        # half-imported torchvision.transforms fails in the others).
        import torchvision.io
        import torchvision.transforms.v2
        import torchvision.tv_tensors  # noqa: F401

        self.__dict__.update(state)

    def __call__(self, jpeg: bytes, boxes: np.ndarray):
        import torch
        from torchvision import tv_tensors
        from torchvision.io import decode_jpeg
        from torchvision.transforms import v2

        if self.transform is None:
            self.transform = v2.Compose([
                v2.RandomIoUCrop(), v2.Resize((SIZE, SIZE), antialias=False),
                v2.RandomHorizontalFlip(),
                v2.ColorJitter(0.125, DISTORT["contrast"], DISTORT["saturation"],
                               DISTORT["hue"]),
                v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.5] * 3)])
        pixels = decode_jpeg(torch.frombuffer(bytearray(jpeg), dtype=torch.uint8))
        height, width = pixels.shape[1:]
        xyxy = torch.from_numpy(boxes[:, [1, 0, 3, 2]] * np.float32([width, height] * 2))
        image, boxes = self.transform(pixels, tv_tensors.BoundingBoxes(
            xyxy, format="XYXY", canvas_size=(height, width)))
        return image, boxes.as_subclass(torch.Tensor)


def torch_pipeline(data, repeat=False):
    from benchmarks.steady import torch_loader

    augment = TorchAugment()
    return torch_loader(len(data), lambda i: augment(*data[i]), repeat, batch_size=BATCH)


class GrainAugment(TorchAugment):
    """grain's ``random_map``: torchvision's draws seeded from grain's generator."""

    def __call__(self, element, rng: np.random.Generator):
        import torch

        torch.set_num_threads(1)  # one image per worker process at a time
        torch.manual_seed(int(rng.integers(2 ** 63)))
        image, boxes = super().__call__(*element)
        return image.numpy(), boxes.numpy()


def grain_pipeline(data, repeat=False):
    import grain

    source = grain.MapDataset.source(data)
    if repeat:
        source = source.repeat(None)
    return (source.seed(0).random_map(GrainAugment()).batch(BATCH).to_iter_dataset()
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


def _ray_augment(data):
    import torch

    torch.set_num_threads(1)  # one image per actor at a time, as in the DataLoader's workers
    augment = TorchAugment()

    def item(i):
        image, boxes = augment(*data[i])
        return image.numpy(), boxes.numpy()
    return item


def ray_pipeline(data, repeat=False):
    """Ray Data: ``map_batches`` of 2 actors holding the JPEGs and boxes, each augmented
    by torchvision (``benchmarks/cedar/_ray.py``)."""
    from benchmarks.cedar import _ray

    return _ray.stream(_ray_augment, (data,), len(data), BATCH, repeat)


SYSTEMS = {"jdata": jdata_pipeline, "tf.data": tfdata_pipeline, "torch": torch_pipeline,
           "grain": grain_pipeline, "ray data": ray_pipeline}
