"""The type aliases of ``jdata.ops.image``'s constructors (one place, for its modules)."""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np

from jdata._declare import Declared

__all__ = ["Array", "ImageFn", "RandomImageFn"]

# An image (``(height, width[, channels])``) or a batch of them.
Array: TypeAlias = np.ndarray[Any, Any]
# A UDF of ``map``: image -> image.
ImageFn: TypeAlias = Declared[[Array], Array]
# A UDF of ``random_map``: (image, the element's ``uint32[2]`` key) -> image.
RandomImageFn: TypeAlias = Declared[[Array, Array], Array]
