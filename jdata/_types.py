"""Type aliases of jdata's public signatures (elements and states are pytrees: ``Any``)."""

import os
from collections.abc import Sequence
from typing import Any, TypeAlias

import jax
import numpy as np

# A JAX PRNG key (``jax.random.key(0)``, ``jax.random.PRNGKey(0)``) or its ``uint32[2]`` data.
Key: TypeAlias = jax.Array | np.ndarray[Any, Any]
# A path (``str``, ``bytes``, ``os.PathLike``), a glob pattern or an fsspec URL.
Path: TypeAlias = str | bytes | os.PathLike[str]
# One path or a list of them.
Paths: TypeAlias = Path | Sequence[Path]
