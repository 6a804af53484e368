"""Optional dependencies: one import helper, so every missing extra reads the same.

Core ``import jdata`` needs only NumPy and JAX; everything else is imported where
it is used, through ``require``, whose error names the feature, the missing
module and the ``pip install`` line of the extra that brings it.
"""

from __future__ import annotations

import importlib
import sys

from jdata._errors import MissingExtraError as MissingExtraError

# Top-level module -> (the distribution that installs it, the jdata extra that lists it).
_EXTRAS = {
    "array_record": ("array-record", "io"),
    "pyarrow": ("pyarrow", "io"),
    "fsspec": ("fsspec", "io"),
    "google_crc32c": ("google-crc32c", "io"),
    "google": ("protobuf", "io"),
    "PIL": ("pillow", "image"),
    "cv2": ("opencv-python-headless", "image"),
    "simplejpeg": ("simplejpeg", "image"),
    "scipy": ("scipy", "image"),
    "ray": ("ray", "service"),
    "lz4": ("lz4", "service"),
    "zstandard": ("zstandard", "service"),
    "orbax": ("orbax-checkpoint", "orbax"),
    "matplotlib": ("matplotlib", "plot"),
    "keras": ("keras", "keras"),
}


def require(module: str, feature: str):
    """``importlib.import_module(module)``, or a ``MissingExtraError`` naming ``feature``.

    >>> require("numpy", "a doctest").__name__
    'numpy'
    """
    loaded = sys.modules.get(module)  # the hot path: kernels ask on every call
    if loaded is not None and not getattr(getattr(loaded, "__spec__", None),
                                          "_initializing", False):
        return loaded
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.partition(".")[0]
        if top not in _EXTRAS:  # a module of no extra: a bug in jdata, not a missing install
            raise
        distribution, extra = _EXTRAS[top]
        raise MissingExtraError(feature, module, extra, distribution) from e
