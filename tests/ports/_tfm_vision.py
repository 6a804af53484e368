"""The TF Model Garden's image classification eval input pipeline, ported to jdata (an
example of a port, not library code).

The structure is the Model Garden's, op for op (``official/core/input_reader.py``,
``official/vision/dataloaders/classification_input.py``,
``official/vision/ops/preprocess_ops.py``; the TF originals, reduced to this path, are in
fixtures/make_tfm_vision_fixtures.py): every ``tf.data.Dataset.X`` became ``jdata.X``, TF
image ops became PIL and NumPy. What the rename did not cover is marked ``PORT:``.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

import jdata

AUTOTUNE = jdata.AUTOTUNE
CENTER_CROP_FRACTION = 0.875
MEAN_RGB = tuple(255 * i for i in (0.485, 0.456, 0.406))
STDDEV_RGB = tuple(255 * i for i in (0.229, 0.224, 0.225))
IMAGE_KEY, LABEL_KEY = "image/encoded", "image/class/label"


# --- official/vision/ops/preprocess_ops.py --------------------------------------------------


def extract_jpeg_shape(image_bytes: bytes) -> np.ndarray:
    """``tf.image.extract_jpeg_shape``: reads the header only, as TF does."""
    with Image.open(io.BytesIO(image_bytes)) as image:
        width, height = image.size
        return np.array([height, width, len(image.getbands())], np.int32)


def decode_and_crop_jpeg(image_bytes: bytes, crop_window, channels: int = 3) -> np.ndarray:
    """``tf.image.decode_and_crop_jpeg``. PORT: not to the bit. PIL cannot decode only a
    window, so this decodes the whole image, then crops; and TF decodes with libjpeg's
    fast integer DCT (its ``dct_method=""`` default), PIL with the accurate one, which
    ``dct_method="INTEGER_ACCURATE"`` full decodes match exactly. Pixels differ by a few
    levels, more at the window's edges, where TF's partial decode upsamples chroma
    differently from its own full decode."""
    y, x, h, w = (int(v) for v in crop_window)
    with Image.open(io.BytesIO(image_bytes)) as image:
        rgb = np.asarray(image.convert("RGB") if channels == 3 else image)
    return rgb[y:y + h, x:x + w]


def center_crop_image_v2(image_bytes, image_shape, center_crop_fraction=CENTER_CROP_FRACTION,
                         decode_and_crop=decode_and_crop_jpeg):
    # PORT: TF computes in float32 (tf.cast(image_shape, tf.float32)); float64 NumPy
    # would truncate differently for fractions that are not exact in binary.
    image_shape = np.asarray(image_shape, np.float32)
    crop_size = np.float32(center_crop_fraction) * np.minimum(image_shape[0], image_shape[1])
    crop_offset = ((image_shape - crop_size) / np.float32(2.0)).astype(np.int32)
    crop_size = crop_size.astype(np.int32)
    crop_window = np.stack([crop_offset[0], crop_offset[1], crop_size, crop_size])
    return decode_and_crop(image_bytes, crop_window, channels=3)


def _bilinear_axis(in_size: int, out_size: int):
    """Source rows (or columns) and weights of TF's half-pixel-centers bilinear resize."""
    scale = np.float32(in_size) / np.float32(out_size)
    src = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    floor = np.floor(src)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(src), in_size - 1).astype(np.int64)
    return lower, upper, (src - floor).astype(np.float32)


def resize_bilinear(image: np.ndarray, size) -> np.ndarray:
    """``tf.image.resize(image, size, method="bilinear")`` (half-pixel centers, no
    antialiasing), in float32 as TF's kernel computes it. PORT: jdata has no resize;
    PIL's and ``jax.image.resize``'s bilinear antialias when shrinking, so they differ."""
    top, bottom, y_lerp = _bilinear_axis(image.shape[0], size[0])
    left, right, x_lerp = _bilinear_axis(image.shape[1], size[1])
    image = image.astype(np.float32)
    x_lerp = x_lerp[None, :, None]
    top_rows, bottom_rows = image[top], image[bottom]
    top_values = top_rows[:, left] + (top_rows[:, right] - top_rows[:, left]) * x_lerp
    bottom_values = (bottom_rows[:, left]
                     + (bottom_rows[:, right] - bottom_rows[:, left]) * x_lerp)
    return top_values + (bottom_values - top_values) * y_lerp[:, None, None]


def normalize_image(image: np.ndarray, offset, scale) -> np.ndarray:
    # PORT: tf.image.convert_image_dtype scales integer images to [0, 1] and leaves
    # float ones alone; here the image is always resize's float32.
    if image.dtype != np.float32:
        raise TypeError(f"normalize_image expects resize's float32 output, got {image.dtype}")
    image = image - np.asarray(offset, np.float32)[None, None]
    return image / np.asarray(scale, np.float32)[None, None]


# --- official/vision/dataloaders/classification_input.py ------------------------------------


class Decoder:
    """``Decoder.decode`` is ``tf.io.parse_single_example``. PORT: this port stands in a
    table of the features TF parsed when the fixture was written (record -> features),
    because jdata's tf.train.Example parser is being written elsewhere."""

    def __init__(self, parsed_by_record: dict):
        self._parsed = parsed_by_record

    def decode(self, serialized_example: bytes) -> dict:
        image, label = self._parsed[bytes(serialized_example)]
        return {IMAGE_KEY: image, LABEL_KEY: np.int64(label)}


class Parser:
    """``Parser`` with its defaults (decode_jpeg_only, aug_crop, bilinear, float32): the
    eval path only. ``decode_and_crop`` replaces ``tf.image.decode_and_crop_jpeg``."""

    def __init__(self, output_size, decode_and_crop=decode_and_crop_jpeg):
        self._output_size = list(output_size)
        self._decode_and_crop = decode_and_crop

    def _parse_eval_image(self, decoded_tensors):
        image_bytes = decoded_tensors[IMAGE_KEY]
        image_shape = extract_jpeg_shape(image_bytes)
        image = center_crop_image_v2(image_bytes, image_shape, CENTER_CROP_FRACTION,
                                     self._decode_and_crop)
        image = resize_bilinear(image, self._output_size)
        image = normalize_image(image, offset=MEAN_RGB, scale=STDDEV_RGB)
        return image.astype(np.float32)  # convert_image_dtype(float32 -> float32)

    def _parse_eval_data(self, decoded_tensors):
        image = self._parse_eval_image(decoded_tensors)
        label = np.int32(decoded_tensors[LABEL_KEY])
        return image, label

    def parse_fn(self, is_training: bool):
        if is_training:
            raise NotImplementedError("this port covers the eval path only")
        return self._parse_eval_data


# --- official/core/input_reader.py ----------------------------------------------------------


def _maybe_map_fn(dataset: jdata.Dataset, fn=None) -> jdata.Dataset:
    return dataset if fn is None else dataset.map(fn, num_parallel_calls=AUTOTUNE)


def _shard_files_then_read(matched_files, dataset_fn, cycle_length, block_length,
                           deterministic) -> jdata.Dataset:
    dataset = jdata.from_tensor_slices(matched_files)
    # PORT: tf.data's keyword is map_func=; jdata's is fn= (so it is passed by position).
    # block_length=None (DataConfig allows it) means 1 in both.
    return dataset.interleave(dataset_fn, cycle_length=cycle_length, block_length=block_length,
                              num_parallel_calls=cycle_length if cycle_length else AUTOTUNE,
                              deterministic=deterministic)


def read(matched_files, decoder_fn, parser_fn, global_batch_size: int, drop_remainder: bool,
         cycle_length, block_length: int, deterministic) -> jdata.Dataset:
    """``InputReader.read`` for an eval config over several files: no input context, no
    cache, no tf.data service."""
    # PORT: tf.data.TFRecordDataset -> jdata.from_tfrecord, used as interleave's fn.
    dataset = _shard_files_then_read(matched_files, jdata.from_tfrecord, cycle_length,
                                     block_length, deterministic)
    dataset = _maybe_map_fn(dataset, decoder_fn)
    dataset = _maybe_map_fn(dataset, parser_fn)
    dataset = dataset.batch(global_batch_size, drop_remainder=drop_remainder)
    if deterministic is not None:
        # PORT: tf.data.Options is set field by field (options.deterministic = ...);
        # jdata.Options is frozen and takes its fields in the constructor.
        dataset = dataset.with_options(jdata.Options(deterministic=deterministic))
    return dataset.prefetch(AUTOTUNE)
