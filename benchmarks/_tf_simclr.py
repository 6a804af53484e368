"""SimCLR's train view in TensorFlow, as google-research/simclr's ``tf2/data_util.py`` does
it (rewritten here, the same ops and distributions): the tf.data side of
``benchmarks/simclr.py`` (imported only where TensorFlow is installed)."""

from __future__ import annotations

import tensorflow as tf


def random_apply(fn, p: float, x):
    return tf.cond(tf.random.uniform([]) < p, lambda: fn(x), lambda: x)


def crop_and_resize(image, height: int, width: int):
    """sample_distorted_bounding_box over the whole image, crop, bicubic resize."""
    aspect = width / height
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        min_object_covered=0.1, aspect_ratio_range=(3 / 4 * aspect, 4 / 3 * aspect),
        area_range=(0.08, 1.0), max_attempts=100, use_image_if_no_bounding_boxes=True)
    image = tf.slice(image, begin, size)
    return tf.image.resize([image], [height, width], method="bicubic")[0]


def color_jitter(image, strength: float):
    """simclrv2: multiplicative brightness, then the others, in a random order, clipped
    after each."""
    b, c, s, h = 0.8 * strength, 0.8 * strength, 0.8 * strength, 0.2 * strength
    transforms = [
        lambda x: x * tf.random.uniform([], max(1.0 - b, 0.0), 1.0 + b),
        lambda x: tf.image.random_contrast(x, 1 - c, 1 + c),
        lambda x: tf.image.random_saturation(x, 1 - s, 1 + s),
        lambda x: tf.image.random_hue(x, h),
    ]
    order = tf.random.shuffle(tf.range(4))
    for i in range(4):
        image = tf.switch_case(order[i], [lambda f=f, x=image: f(x) for f in transforms])
        image = tf.clip_by_value(image, 0.0, 1.0)
    return image


def to_grayscale(image):
    return tf.tile(tf.image.rgb_to_grayscale(image), [1, 1, 3])


def gaussian_blur(image, kernel_size: int, sigma):
    """Separable depthwise convolution, zero ("SAME") padding, radius kernel_size // 2."""
    radius = kernel_size // 2
    x = tf.range(-radius, radius + 1, dtype=tf.float32)
    taps = tf.exp(-x ** 2 / (2.0 * sigma ** 2))
    taps /= tf.reduce_sum(taps)
    channels = tf.shape(image)[-1]
    horizontal = tf.tile(tf.reshape(taps, [1, -1, 1, 1]), [1, 1, channels, 1])
    vertical = tf.tile(tf.reshape(taps, [-1, 1, 1, 1]), [1, 1, channels, 1])
    out = tf.nn.depthwise_conv2d(image[None], horizontal, [1, 1, 1, 1], "SAME")
    return tf.nn.depthwise_conv2d(out, vertical, [1, 1, 1, 1], "SAME")[0]


def train_view(image, height: int, width: int, strength: float = 1.0):
    """``preprocess_for_train`` (crop, flip, color distortion, clip), then ``random_blur``
    with p=0.5 and a clip (SimCLR blurs each view of the batch)."""
    image = crop_and_resize(image, height, width)
    image = tf.image.random_flip_left_right(image)
    image = random_apply(lambda x: color_jitter(x, strength), 0.8, image)
    image = random_apply(to_grayscale, 0.2, image)
    image = tf.clip_by_value(tf.reshape(image, [height, width, 3]), 0.0, 1.0)
    image = random_apply(
        lambda x: gaussian_blur(x, height // 10, tf.random.uniform([], 0.1, 2.0)), 0.5, image)
    return tf.clip_by_value(image, 0.0, 1.0)
