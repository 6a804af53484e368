"""SimCLR's color jitter (``color_jitter_rand`` / ``_nonrand`` of google-research/simclr's
``data_util.py``, applied with probability ``p`` as its ``random_apply``).

Each image draws, from its own stream of the element's key: whether to jitter
(probability ``p``), an order of the four transforms (a random permutation
when ``random_order``, else brightness, contrast, saturation, hue) and a
factor for each: brightness ``U[max(0, 1 - b), 1 + b)`` times the image
("multiplicative", simclrv2) or ``U[-b, b)`` added ("additive", simclrv1 and
tf.image.random_brightness), contrast ``U[1 - c, 1 + c)``, saturation
``U[1 - s, 1 + s)``, hue ``U[-h, h)``. A zero strength skips its transform.
After each of the four places the image is clipped to ``[0, 1]``, as
SimCLR's loop does, so a jittered image is always in ``[0, 1]``. Each
transform is one pass over the image in blocks of rows that stay in cache,
the clip included (contrast reads it once more for its means), no Python
per pixel; a saturation right before a hue shares one round trip through HSV
(within 3e-6 of two: the clip between them only takes off roundings).

A ``uint8`` image is jittered as its ``convert_image_dtype(float32)`` and
converted back once at the end (``saturate=True``); tf.image ops on a
``uint8`` image would round after each transform instead (and SimCLR's clip
to ``[0., 1.]`` would fail on one). SimCLR's ``color_jitter_nonrand`` has a
quirk not copied: with ``brightness=0`` it turns the hue twice.
"""

from __future__ import annotations

import numpy as np

from jdata.ops import _image_color as color
from jdata.ops import _image_hsv as hsv
from jdata.ops import _image_random as draws
from jdata.ops._image_color_udfs import STREAMS
from jdata.ops._image_udfs import ImageUDF, cv2

_ORDER = ("brightness", "contrast", "saturation", "hue")


class ColorJitter(ImageUDF):
    def __init__(self, strengths: tuple[float, float, float, float], random_order: bool,
                 multiplicative: bool, p: float):
        text = ", ".join(repr(s) for s in strengths)
        text += "" if random_order else ", random_order=False"
        text += "" if multiplicative else ", brightness_mode='additive'"
        text += "" if p == 1 else f", p={p!r}"
        super().__init__("color_jitter", f"color_jitter({text})")
        self.strengths, self.random_order = strengths, random_order
        self.multiplicative, self.p = multiplicative, p
        b, c, s, h = strengths
        low = max(0.0, 1 - b) if multiplicative else -b
        # Each transform's value range [low, high).
        self.ranges = ((low, 1 + b if multiplicative else b), (1 - c, 1 + c),
                       (1 - s, 1 + s), (-h, h))
        cv2("jdata.ops.image.color_jitter")

    def plan(self, key, index: int) -> list[tuple[str, float]] | None:
        """Image ``index``'s transforms in order with their values, or ``None`` to leave
        it as it is; a skipped transform (zero strength) has value ``None``."""
        words = draws.words(key, 6, (index << 4) | STREAMS["jitter"])
        u = [(w >> 11) * 2.0 ** -53 for w in words]  # as draws.uniforms
        if not u[0] < self.p:
            return None
        order = draws.permutation(words[1], 4) if self.random_order else range(4)
        return [(_ORDER[i], None if self.strengths[i] == 0 else
                 self.ranges[i][0] + u[2 + i] * (self.ranges[i][1] - self.ranges[i][0]))
                for i in order]

    def __call__(self, image: np.ndarray, key: np.ndarray) -> np.ndarray:
        x = color.batch_view(image, "color_jitter", None if self.strengths[2:] == (0, 0)
                             else 3)
        plans = [self.plan(key, i) for i in range(len(x))]
        if all(plan is None for plan in plans):
            return np.asarray(image)
        x = np.ascontiguousarray(x)  # OpenCV's blocks
        out = np.empty_like(x)
        for i, plan in enumerate(plans):
            if plan is None:
                out[i] = x[i]
            elif x.dtype == np.uint8:  # in [0, 1] as float
                y = color.to_float(x[i])
                self._jitter(y, y, plan, in_range=True)
                out[i] = color.to_uint8(y)
            else:
                self._jitter(x[i], out[i], plan, in_range=False)
        return out.reshape(np.shape(image))

    def _jitter(self, y: np.ndarray, out: np.ndarray, plan: list[tuple[str, float | None]],
                in_range: bool) -> None:
        """One ``float32`` image ``(H, W, C)`` through ``plan`` into ``out`` (which may be
        ``y``), clipped after each place."""
        steps = list(plan)
        while steps:
            kind, value = steps.pop(0)
            if value is not None:
                if (in_range and kind == "saturation" and steps and steps[0][0] == "hue"
                        and steps[0][1] is not None):
                    # In [0, 1], saturation keeps each pixel's max and min in [0, 1]: the
                    # clip before the hue only takes off OpenCV's roundings, so one round
                    # trip through HSV does both.
                    value = (value, steps.pop(0)[1])
                    kind = "saturation_hue"
                self._step(kind, value, y, out)  # clipped as it goes
            elif not in_range:  # a clip after a clip, or after a skip of one, changes nothing
                np.clip(y, np.float32(0), np.float32(1), out=out)
            y, in_range = out, True

    def _step(self, kind: str, value, y: np.ndarray, out: np.ndarray) -> None:
        channels = y.shape[-1]
        if kind == "brightness":
            scale, offset = (value, 0.0) if self.multiplicative else (1.0, value)
            color.affine_clipped(y, out, scale, np.full(channels, offset, np.float32))
        elif kind == "contrast":
            means = color.channel_means(y).astype(np.float32)
            color.affine_clipped(y, out, value, means - means * np.float32(value))
        elif kind == "saturation_hue":
            hsv.saturation_hue(y[None], np.array([value[0]]), np.array([value[1]]),
                               out=out[None], clip=True)
        else:
            kernel = hsv.saturation if kind == "saturation" else hsv.hue
            kernel(y[None], np.array([value]), out=out[None], clip=True)
