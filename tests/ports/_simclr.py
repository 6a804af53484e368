"""SimCLR's augmentations (google-research/simclr ``tf2/data_util.py``), ported to jdata
(an example of a port, not library code).

The functions are SimCLR's, with their names, arguments and structure; each ``tf.image``
call became the ``jdata.ops.image`` kernel of the same name, and the rest of TF became
NumPy:

- ``tf.image.convert_image_dtype`` -> ``image.convert_image_dtype(np.float32)``
- ``tf.image.random_brightness`` (``impl="simclrv1"``) -> ``image.random_brightness``
- ``tf.image.random_contrast`` / ``random_saturation`` / ``random_hue`` -> the kernels
  of those names, with the same arguments
- ``tf.image.rgb_to_grayscale`` -> ``image.rgb_to_grayscale()`` (``tf.tile`` -> ``np.tile``)
- ``tf.image.sample_distorted_bounding_box`` -> ``image.sample_distorted_bounding_box``
- ``tf.image.crop_to_bounding_box`` -> a NumPy slice (a view: nothing is copied)
- ``tf.image.resize(..., BICUBIC)`` -> ``image.resize(size=..., method="bicubic")``
- ``tf.image.random_flip_left_right`` -> ``image.random_flip()``
- ``gaussian_blur``'s two ``tf.nn.depthwise_conv2d`` -> ``image.gaussian_blur``, which is
  that function as a kernel

Randomness: TF's ``tf.random`` ops draw from the graph's global seed. Here every random
function takes ``rng``, a NumPy ``Generator`` seeded by the element's ``random_map`` key
(one per element, made in ``map_fn``), draws its own numbers from it where TF called
``tf.random``, and hands each random kernel a fresh key drawn from it (``_key``). A
pipeline's outputs are thus a function of its key and the element's position: they
restore exactly. What else the port changes is marked ``PORT:``.

``map_fn`` and ``build_input_fn`` are ``tf2/data.py``'s (two views per image,
concatenated on channels); ``model_inputs`` is the first lines of ``tf2/model.py``'s
``Model.__call__`` (split the views, ``batch_random_blur``, views stacked on the batch
axis), here a ``random_map`` on batches.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

import jdata
from jdata.ops import image as jimage

CROP_PROPORTION = 0.875  # Standard for ImageNet.
# PORT: absl flags -> constants (run.py's defaults).
COLOR_JITTER_STRENGTH = 1.0
USE_BLUR = True


def _key(rng: np.random.Generator) -> np.ndarray:
    """A fresh raw ``uint32[2]`` key for one random kernel call."""
    return rng.integers(0, 2**32, size=2, dtype=np.uint32)


def _uniform(rng: np.random.Generator, shape=(), minval=0.0, maxval=1.0):
    """``tf.random.uniform(shape, minval, maxval, tf.float32)``: float32, as TF scales."""
    return np.float32(minval) + rng.random(shape, np.float32) * np.float32(maxval - minval)


def random_apply(func, p, x, *, rng):
    """Randomly apply function func to x with probability p."""
    return func(x) if _uniform(rng) < np.float32(p) else x


def random_brightness(image, max_delta, impl="simclrv2", *, rng):
    """A multiplicative vs additive change of brightness."""
    if impl == "simclrv2":
        factor = _uniform(rng, (), max(1.0 - max_delta, 0), 1.0 + max_delta)
        image = image * factor
    elif impl == "simclrv1":
        image = jimage.random_brightness(max_delta=max_delta)(image, _key(rng))
    else:
        raise ValueError(f"Unknown impl {impl} for random brightness.")
    return image


def to_grayscale(image, keep_channels=True):
    image = jimage.rgb_to_grayscale()(image)
    if keep_channels:
        image = np.tile(image, [1, 1, 3])
    return image


def color_jitter(image, strength, random_order=True, impl="simclrv2", *, rng):
    """Distorts the color of the image (SimCLR's strengths: 0.8, 0.8, 0.8, 0.2)."""
    brightness = 0.8 * strength
    contrast = 0.8 * strength
    saturation = 0.8 * strength
    hue = 0.2 * strength
    jitter = color_jitter_rand if random_order else color_jitter_nonrand
    return jitter(image, brightness, contrast, saturation, hue, impl=impl, rng=rng)


def _transforms(brightness, contrast, saturation, hue, impl, rng):
    """The four jitters, in SimCLR's order (brightness, contrast, saturation, hue)."""
    return [
        lambda x: random_brightness(x, max_delta=brightness, impl=impl, rng=rng),
        lambda x: jimage.random_contrast(lower=1 - contrast, upper=1 + contrast)(x, _key(rng)),
        lambda x: jimage.random_saturation(lower=1 - saturation,
                                           upper=1 + saturation)(x, _key(rng)),
        lambda x: jimage.random_hue(max_delta=hue)(x, _key(rng)),
    ]


def color_jitter_nonrand(image, brightness=0, contrast=0, saturation=0, hue=0,
                         impl="simclrv2", *, rng):
    """Distorts the color of the image (jittering order is fixed)."""
    transforms = _transforms(brightness, contrast, saturation, hue, impl, rng)

    def apply_transform(i, x):
        """Apply the i-th transformation."""
        # As SimCLR's elif chain: a zero strength falls through to hue (kept as written).
        if brightness != 0 and i == 0:
            return transforms[0](x)
        if contrast != 0 and i == 1:
            return transforms[1](x)
        if saturation != 0 and i == 2:
            return transforms[2](x)
        if hue != 0:
            return transforms[3](x)
        return x

    for i in range(4):
        image = apply_transform(i, image)
        image = np.clip(image, 0., 1.)
    return image


def color_jitter_rand(image, brightness=0, contrast=0, saturation=0, hue=0,
                      impl="simclrv2", *, rng):
    """Distorts the color of the image (jittering order is random)."""
    transforms = _transforms(brightness, contrast, saturation, hue, impl, rng)
    strengths = (brightness, contrast, saturation, hue)

    def apply_transform(i, x):
        """Apply the i-th transformation (none for a zero strength)."""
        return x if strengths[i] == 0 else transforms[i](x)

    perm = rng.permutation(4)  # tf.random.shuffle(tf.range(4))
    for i in range(4):
        image = apply_transform(perm[i], image)
        image = np.clip(image, 0., 1.)
    return image


def _compute_crop_shape(image_height, image_width, aspect_ratio, crop_proportion):
    """Compute aspect ratio-preserving shape for central crop: ``crop_proportion`` along
    one side, at most that along the other."""
    # PORT: TF multiplies float32 tensors by Python floats it makes float32 constants.
    image_width_float = np.float32(image_width)
    image_height_float = np.float32(image_height)

    def _requested_aspect_ratio_wider_than_image():
        crop_height = np.rint(np.float32(crop_proportion / aspect_ratio) * image_width_float)
        crop_width = np.rint(np.float32(crop_proportion) * image_width_float)
        return int(crop_height), int(crop_width)

    def _image_wider_than_requested_aspect_ratio():
        crop_height = np.rint(np.float32(crop_proportion) * image_height_float)
        crop_width = np.rint(np.float32(crop_proportion * aspect_ratio) * image_height_float)
        return int(crop_height), int(crop_width)

    if np.float32(aspect_ratio) > image_width_float / image_height_float:
        return _requested_aspect_ratio_wider_than_image()
    return _image_wider_than_requested_aspect_ratio()


def center_crop(image, height, width, crop_proportion):
    """Crops to center of image and rescales to desired size."""
    image_height, image_width = image.shape[:2]
    crop_height, crop_width = _compute_crop_shape(
        image_height, image_width, width / height, crop_proportion)
    offset_height = ((image_height - crop_height) + 1) // 2
    offset_width = ((image_width - crop_width) + 1) // 2
    image = image[offset_height:offset_height + crop_height,
                  offset_width:offset_width + crop_width]
    return jimage.resize(size=(height, width), method="bicubic")(image)


def distorted_bounding_box_crop(image, bbox, min_object_covered=0.1,
                                aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0),
                                max_attempts=100, scope=None, *, rng):
    """Generates cropped_image using one of the bboxes randomly distorted (see
    ``tf.image.sample_distorted_bounding_box``). ``scope`` names nothing here."""
    del scope
    bbox_begin, bbox_size, _ = jimage.sample_distorted_bounding_box(
        np.shape(image), _key(rng), bounding_boxes=bbox,
        min_object_covered=min_object_covered, aspect_ratio_range=aspect_ratio_range,
        area_range=area_range, max_attempts=max_attempts,
        use_image_if_no_bounding_boxes=True)
    offset_y, offset_x = int(bbox_begin[0]), int(bbox_begin[1])
    target_height, target_width = int(bbox_size[0]), int(bbox_size[1])
    return image[offset_y:offset_y + target_height, offset_x:offset_x + target_width]


def crop_and_resize(image, height, width, *, rng):
    """Make a random crop and resize it to ``height`` x ``width``."""
    bbox = np.array([0.0, 0.0, 1.0, 1.0], np.float32).reshape(1, 1, 4)
    aspect_ratio = width / height
    image = distorted_bounding_box_crop(
        image, bbox, min_object_covered=0.1,
        aspect_ratio_range=(3. / 4 * aspect_ratio, 4. / 3. * aspect_ratio),
        area_range=(0.08, 1.0), max_attempts=100, scope=None, rng=rng)
    return jimage.resize(size=(height, width), method="bicubic")(image)


def gaussian_blur(image, kernel_size, sigma, padding="SAME"):
    """Blurs an image, or a batch, with a separable Gaussian (jdata's kernel is SimCLR's
    function: radius ``kernel_size // 2``, zero padding for SAME)."""
    return jimage.gaussian_blur(kernel_size, float(sigma), padding=padding)(image)


def random_crop_with_resize(image, height, width, p=1.0, *, rng):
    """Randomly crop and resize an image."""
    def _transform(image):
        return crop_and_resize(image, height, width, rng=rng)
    return random_apply(_transform, p=p, x=image, rng=rng)


def random_color_jitter(image, p=1.0, strength=1.0, impl="simclrv2", *, rng):
    def _transform(image):
        color_jitter_t = functools.partial(color_jitter, strength=strength, impl=impl, rng=rng)
        image = random_apply(color_jitter_t, p=0.8, x=image, rng=rng)
        return random_apply(to_grayscale, p=0.2, x=image, rng=rng)
    return random_apply(_transform, p=p, x=image, rng=rng)


def random_blur(image, height, width, p=1.0, *, rng):
    """Randomly blur an image (or a batch: one sigma for all, as TF draws once)."""
    del width

    def _transform(image):
        sigma = _uniform(rng, (), 0.1, 2.0)
        return gaussian_blur(image, kernel_size=height // 10, sigma=sigma, padding="SAME")
    return random_apply(_transform, p=p, x=image, rng=rng)


def batch_random_blur(images_list, height, width, blur_probability=0.5, *, rng):
    """Blurs each batch of ``images_list`` (one sigma per batch), then keeps the blur for
    each image with probability ``blur_probability``."""
    def generate_selector(p, bsz):
        return (_uniform(rng, (bsz, 1, 1, 1)) < np.float32(p)).astype(np.float32)

    new_images_list = []
    for images in images_list:
        images_new = random_blur(images, height, width, p=1., rng=rng)
        selector = generate_selector(blur_probability, images.shape[0])
        images = images_new * selector + images * (1 - selector)
        images = np.clip(images, 0., 1.)
        new_images_list.append(images)
    return new_images_list


def preprocess_for_train(image, height, width, color_distort=True, crop=True, flip=True,
                         impl="simclrv2", *, rng):
    """Preprocesses the given image for training."""
    if crop:
        image = random_crop_with_resize(image, height, width, rng=rng)
    if flip:
        image = jimage.random_flip()(image, _key(rng))
    if color_distort:
        image = random_color_jitter(image, strength=COLOR_JITTER_STRENGTH, impl=impl, rng=rng)
    image = np.reshape(image, [height, width, 3])
    return np.clip(image, 0., 1.)


def preprocess_for_eval(image, height, width, crop=True):
    """Preprocesses the given image for evaluation (deterministic)."""
    if crop:
        image = center_crop(image, height, width, crop_proportion=CROP_PROPORTION)
    image = np.reshape(image, [height, width, 3])
    return np.clip(image, 0., 1.)


def preprocess_image(image, height, width, is_training=False, color_distort=True,
                     test_crop=True, *, rng=None):
    """Preprocesses the given image: float32 in [0, 1]."""
    if is_training and rng is None:  # PORT: the generator that replaces tf.random's state
        raise ValueError("preprocess_image: is_training=True draws from rng; pass "
                         "rng=np.random.default_rng(element_key)")
    image = jimage.convert_image_dtype(np.float32)(image)
    if is_training:
        return preprocess_for_train(image, height, width, color_distort, rng=rng)
    return preprocess_for_eval(image, height, width, test_crop)


# --- tf2/data.py and the input end of tf2/model.py ------------------------------------------


def map_fn(image, label, key, *, image_size, num_classes):
    """Two training views of ``image``, concatenated on channels, and a one-hot label.
    PORT: a ``random_map`` fn: the element's key seeds the views' generator."""
    rng = np.random.default_rng(key)
    xs = []
    for _ in range(2):  # Two transformations
        xs.append(preprocess_image(image, image_size, image_size, is_training=True, rng=rng))
    image = np.concatenate(xs, -1)
    label = np.eye(num_classes, dtype=np.float32)[label]  # tf.one_hot
    return image, label


def eval_map_fn(image, label, *, image_size, num_classes):
    """``map_fn`` for evaluation: one centrally cropped view."""
    image = preprocess_image(image, image_size, image_size, is_training=False,
                             test_crop=image_size > 32)
    return image, np.eye(num_classes, dtype=np.float32)[label]


def model_inputs(features, labels, key, *, image_size):
    """``Model.__call__``'s first lines on a batch: the views split from the channels,
    blurred (``batch_random_blur``), stacked on the batch axis ``(2 * bsz, h, w, 3)``.
    PORT: a ``random_map`` on batches, in the input pipeline rather than the model."""
    features_list = np.split(features, 2, axis=-1)
    if USE_BLUR:
        features_list = batch_random_blur(features_list, image_size, image_size,
                                          rng=np.random.default_rng(key))
    return np.concatenate(features_list, 0), labels


def _decode(encoded, label):
    # PORT: tfds decodes the JPEGs; here jdata's decoder does.
    return jimage.decode_jpeg()(encoded), label


def build_input_fn(encoded, labels, *, batch_size, image_size, num_classes, is_training,
                   key) -> jdata.Dataset:
    """``build_input_fn``'s dataset over JPEG files' bytes with their labels.

    PORT: one pass (no ``repeat(-1)``, so that a test ends), deterministic order (TF
    trades it away; jdata keeps it so that a restored run is exact), keys where TF has
    seeds.
    """
    shuffle_key, map_key, blur_key = jax.random.split(key, 3)
    dataset = jdata.from_tensor_slices((list(encoded), np.asarray(labels, np.int64)))
    if is_training:
        buffer_multiplier = 50 if image_size <= 32 else 10
        dataset = dataset.shuffle(shuffle_key, buffer_size=batch_size * buffer_multiplier)
    dataset = dataset.map(_decode, num_parallel_calls=jdata.AUTOTUNE)
    if is_training:
        dataset = dataset.random_map(
            lambda image, label, k: map_fn(image, label, k, image_size=image_size,
                                           num_classes=num_classes),
            map_key, num_parallel_calls=jdata.AUTOTUNE)
    else:
        dataset = dataset.map(
            lambda image, label: eval_map_fn(image, label, image_size=image_size,
                                             num_classes=num_classes),
            num_parallel_calls=jdata.AUTOTUNE)
    dataset = dataset.batch(batch_size, drop_remainder=is_training)
    if is_training:
        dataset = dataset.random_map(
            lambda features, label, k: model_inputs(features, label, k, image_size=image_size),
            blur_key)
    return dataset.prefetch(jdata.AUTOTUNE)
