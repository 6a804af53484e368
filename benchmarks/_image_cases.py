"""The kernels of ``benchmarks/image_kernels.py``: each a jdata call and the tf.image op (or
SimCLR's / SSD's composition of tf.image ops) that it replaces, on one named input."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

_SSD_CROP = {"area_range": (0.1, 1.0), "aspect_ratio_range": (0.5, 2.0),
             "min_object_covered": 0.3, "max_attempts": 100}
_BOXES = np.array([[0.1, 0.2, 0.5, 0.6], [0.4, 0.1, 0.9, 0.4], [0.3, 0.5, 0.7, 0.95]],
                  np.float32)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    input: str
    # (jdata.ops.image, the input, 64 keys) -> call(i); (tensorflow, input tensor) -> call(i).
    jdata: Callable[[Any, Any, list], Callable[[int], Any]]
    tf: Callable[[Any, Any], Callable[[int], Any]]
    note: str = ""


def _ours(make, random=False, boxes=False):
    def build(image, x, keys):
        fn = make(image)
        if boxes:
            return lambda i: fn(x, _BOXES, keys[i % len(keys)])
        if random:
            return lambda i: fn(x, keys[i % len(keys)])
        return lambda i: fn(x)
    return build


def _theirs(make):
    def build(tf, tensor):
        fn = tf.function(lambda t: make(tf, t))  # the input an argument: no constant folding
        return lambda i: fn(tensor)
    return build


def _sdbb(image):
    return lambda x, key: image.sample_distorted_bounding_box(
        x.shape, key, area_range=(0.08, 1.0), aspect_ratio_range=(3 / 4, 4 / 3))


def _tf_sdbb(tf, t):
    return tf.image.sample_distorted_bounding_box(
        tf.shape(t), bounding_boxes=tf.zeros([1, 0, 4]), area_range=(0.08, 1.0),
        aspect_ratio_range=(3 / 4, 4 / 3), min_object_covered=0.1,
        use_image_if_no_bounding_boxes=True)


def _tf_ssd_crop(tf, t):
    begin, size, window = tf.image.sample_distorted_bounding_box(
        tf.shape(t), bounding_boxes=tf.constant(_BOXES)[None], **_SSD_CROP)
    y0, x0, y1, x1 = tf.unstack(window[0, 0])
    boxes = tf.clip_by_value((_BOXES - tf.stack([y0, x0, y0, x0]))
                             / tf.stack([y1 - y0, x1 - x0] * 2), 0.0, 1.0)
    return tf.image.resize(tf.slice(t, begin, size), [300, 300]), boxes


def _tf_flip_boxes(tf, t):
    flip = tf.random.uniform([]) < 0.5
    ymin, xmin, ymax, xmax = tf.unstack(tf.constant(_BOXES), axis=1)
    return (tf.cond(flip, lambda: tf.image.flip_left_right(t), lambda: t),
            tf.cond(flip, lambda: tf.stack([ymin, 1 - xmax, ymax, 1 - xmin], 1),
                    lambda: tf.constant(_BOXES)))


def _tf_ssd_distort(tf, t):
    t = tf.clip_by_value(tf.image.random_brightness(t, 32 / 255), 0.0, 1.0)
    t = tf.clip_by_value(tf.image.random_contrast(t, 0.5, 1.5), 0.0, 1.0)
    t = tf.clip_by_value(tf.image.random_saturation(t, 0.5, 1.5), 0.0, 1.0)
    return tf.clip_by_value(tf.image.random_hue(t, 0.05), 0.0, 1.0)


def _simclr(name):
    def call(tf, t, *args):
        from benchmarks import _tf_simclr

        return getattr(_tf_simclr, name)(t, *args)
    return call


def _apply(p, fn):
    return lambda tf, t: tf.cond(tf.random.uniform([]) < p, lambda: fn(tf, t), lambda: t)


def _color_cases():
    cases = [Case("convert_image_dtype(float32)", "u224",
                  _ours(lambda im: im.convert_image_dtype(np.float32)),
                  _theirs(lambda tf, t: tf.image.convert_image_dtype(t, tf.float32))),
             Case("convert_image_dtype(uint8, saturate=True)", "f224",
                  _ours(lambda im: im.convert_image_dtype(np.uint8, saturate=True)),
                  _theirs(lambda tf, t: tf.image.convert_image_dtype(t, tf.uint8, True)))]
    for op, arg in (("brightness", 0.1), ("contrast", 1.5), ("saturation", 1.5), ("hue", 0.1)):
        for kind in ("f224", "u224"):
            cases.append(Case(f"adjust_{op}({arg})", kind,
                              _ours(lambda im, op=op, arg=arg: getattr(im, f"adjust_{op}")(arg)),
                              _theirs(lambda tf, t, op=op, arg=arg:
                                      getattr(tf.image, f"adjust_{op}")(t, arg))))
    for op, args in (("brightness", (0.4,)), ("contrast", (0.2, 1.8)),
                     ("saturation", (0.2, 1.8)), ("hue", (0.2,))):
        cases.append(Case(f"random_{op}{args}".replace(",)", ")"), "f224",
                          _ours(lambda im, op=op, a=args: getattr(im, f"random_{op}")(*a), True),
                          _theirs(lambda tf, t, op=op, a=args:
                                  getattr(tf.image, f"random_{op}")(t, *a))))
    for kind in ("f224", "u224"):
        cases.append(Case("rgb_to_grayscale()", kind, _ours(lambda im: im.rgb_to_grayscale()),
                          _theirs(lambda tf, t: tf.image.rgb_to_grayscale(t))))
    gray3 = _simclr("to_grayscale")
    return cases + [
        Case("rgb_to_grayscale(keep_channels=True)", "f224",
             _ours(lambda im: im.rgb_to_grayscale(keep_channels=True)), _theirs(gray3)),
        Case("random_grayscale(0.2)", "f224", _ours(lambda im: im.random_grayscale(0.2), True),
             _theirs(_apply(0.2, gray3))),
        Case("color_jitter SimCLR s=1, p=0.8", "f224",
             _ours(lambda im: im.color_jitter(0.8, 0.8, 0.8, 0.2, p=0.8), True),
             _theirs(_apply(0.8, lambda tf, t: _simclr("color_jitter")(tf, t, 1.0))),
             "tf: SimCLR's color_jitter"),
        Case("color_jitter SSD (additive, fixed order)", "f224",
             _ours(lambda im: im.color_jitter(32 / 255, 0.5, 0.5, 0.05, random_order=False,
                                              brightness_mode="additive"), True),
             _theirs(_tf_ssd_distort), "tf: random_brightness/contrast/saturation/hue")]


def _geometry_cases():
    cases = []
    for method in ("bilinear", "bicubic", "nearest", "area"):
        for kind in ("u500", "f500"):
            cases.append(Case(f"resize(224x224, {method})", kind,
                              _ours(lambda im, m=method: im.resize(size=(224, 224), method=m)),
                              _theirs(lambda tf, t, m=method:
                                      tf.image.resize(t, [224, 224], method=m)),
                              "tf: float32 out" if kind == "u500" else ""))
    return cases + [
        Case("resize(224x224, bilinear, antialias)", "u500",
             _ours(lambda im: im.resize(size=(224, 224), antialias=True)),
             _theirs(lambda tf, t: tf.image.resize(t, [224, 224], antialias=True)),
             "tf: float32 out"),
        Case("sample_distorted_bounding_box", "u500", _ours(_sdbb, True), _theirs(_tf_sdbb)),
        Case("random_resized_crop(224, 224) SimCLR", "u500",
             _ours(lambda im: im.random_resized_crop(224, 224), True),
             _theirs(lambda tf, t: _simclr("crop_and_resize")(tf, tf.cast(t, tf.float32),
                                                               224, 224)),
             "tf: SimCLR's crop_and_resize on float"),
        Case("random_resized_crop(224, 224) SimCLR", "f500",
             _ours(lambda im: im.random_resized_crop(224, 224), True),
             _theirs(lambda tf, t: _simclr("crop_and_resize")(tf, t, 224, 224))),
        Case("random_resized_crop(300, 300, boxes) SSD", "u500",
             _ours(lambda im: im.random_resized_crop(300, 300, method="bilinear", boxes=True,
                                                     **_SSD_CROP), boxes=True),
             _theirs(_tf_ssd_crop), "tf: float32 out"),
        Case("random_crop(200, 200)", "u224", _ours(lambda im: im.random_crop(200, 200), True),
             _theirs(lambda tf, t: tf.image.random_crop(t, [200, 200, 3]))),
        Case("random_flip()", "u224", _ours(lambda im: im.random_flip(), True),
             _theirs(lambda tf, t: tf.image.random_flip_left_right(t))),
        Case("random_flip()", "f224", _ours(lambda im: im.random_flip(), True),
             _theirs(lambda tf, t: tf.image.random_flip_left_right(t))),
        Case("random_flip(boxes=True)", "u224",
             _ours(lambda im: im.random_flip(boxes=True), boxes=True), _theirs(_tf_flip_boxes)),
        Case("gaussian_blur(22, 1.0) SimCLR", "f224",
             _ours(lambda im: im.gaussian_blur(22, 1.0)),
             _theirs(lambda tf, t: _simclr("gaussian_blur")(tf, t, 22, 1.0))),
        Case("random_gaussian_blur(22, p=0.5) SimCLR", "f224",
             _ours(lambda im: im.random_gaussian_blur(22, (0.1, 2.0), p=0.5), True),
             _theirs(_apply(0.5, lambda tf, t: _simclr("gaussian_blur")(
                 tf, t, 22, tf.random.uniform([], 0.1, 2.0)))))]


def _decode_cases():
    def tf_decode(fn, **kwargs):
        return _theirs(lambda tf, t: getattr(tf.io, fn)(t, channels=3, **kwargs))

    return [
        Case("decode_jpeg()", "jpeg", _ours(lambda im: im.decode_jpeg()),
             tf_decode("decode_jpeg")),
        Case("decode_png()", "png8", _ours(lambda im: im.decode_png()), tf_decode("decode_png")),
        Case("decode_png(dtype=uint16)", "png16",
             _ours(lambda im: im.decode_png(dtype=np.uint16)),
             _theirs(lambda tf, t: tf.io.decode_png(t, channels=3, dtype=tf.uint16))),
        Case("decode_png() of 16-bit", "png16", _ours(lambda im: im.decode_png()),
             tf_decode("decode_png")),
        Case("decode_image()", "jpeg", _ours(lambda im: im.decode_image()),
             tf_decode("decode_image", expand_animations=False)),
        Case("decode_image()", "png8", _ours(lambda im: im.decode_image()),
             tf_decode("decode_image", expand_animations=False))]


CASES = _color_cases() + _geometry_cases() + _decode_cases()
