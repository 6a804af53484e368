"""to_global: per-host batches as global ``jax.Array``s, transferred ahead. See
``Dataset.to_global``."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import numpy as np

from jdata import _planner, _spec, _tree
from jdata._plan import Node
from jdata.runtime import prefetch
from jdata.runtime.iterator import Iterator, UnaryIterator

_OP = "to_global"


def _is_sharding(x) -> bool:
    return isinstance(x, jax.sharding.Sharding)


def check_shardings(sharding) -> None:
    leaves = jax.tree_util.tree_leaves(sharding, is_leaf=_is_sharding)
    if not leaves or not all(_is_sharding(s) for s in leaves):
        raise TypeError(
            f"{_OP}: sharding={sharding!r} must be a jax.sharding.Sharding (or a pytree of "
            "them matching the elements), e.g. NamedSharding(Mesh(jax.devices(), ('data',)), "
            "PartitionSpec('data'))")


@dataclasses.dataclass(frozen=True, eq=False)
class ToGlobalNode(Node):
    """See ``Dataset.to_global``."""

    input: Node
    sharding: Any
    prefetch: int = 2
    op_name: ClassVar[str] = _OP

    def cardinality(self) -> int:
        return self.input.cardinality()

    def compute_spec(self):
        spec = self.input.element_spec()
        if jax.process_count() == 1:  # one host: its batch is the global batch
            return spec
        return _tree.map(lambda s: _spec.TensorSpec((None, *s.shape[1:]), s.dtype), spec)

    def __str__(self):
        return f"ToGlobal(sharding={_describe(self.sharding)}, prefetch={self.prefetch})"


def _describe(sharding) -> str:
    if isinstance(sharding, jax.sharding.NamedSharding):
        return f"NamedSharding({dict(sharding.mesh.shape)}, {sharding.spec})"
    text = repr(sharding)
    return text if len(text) <= 60 else text[:57] + "..."


def _global(sharding, leaf, path):
    if isinstance(leaf, (bytes, str)) or (isinstance(leaf, np.ndarray) and leaf.dtype == object):
        raise TypeError(f"{_OP}: the leaf at {jax.tree_util.keystr(path)} holds bytes or str, "
                        "which a jax.Array cannot; map it to numbers before to_global")
    if np.ndim(leaf) == 0:
        raise ValueError(f"{_OP}: the leaf at {jax.tree_util.keystr(path)} is a scalar; "
                         "to_global takes batches (batch before it)")
    return jax.make_array_from_process_local_data(sharding, np.asarray(leaf))


class _Globalize(UnaryIterator):
    """Each per-host batch as a pytree of global arrays (the transfers start here)."""

    OP = "to_global"

    def __init__(self, input_iterator: Iterator, sharding):
        super().__init__(input_iterator)
        self._sharding = sharding

    def __next__(self):
        batch = next(self._input)
        if _is_sharding(self._sharding):
            return jax.tree_util.tree_map_with_path(
                lambda path, leaf: _global(self._sharding, leaf, path), batch)
        return jax.tree_util.tree_map_with_path(
            lambda path, sharding, leaf: _global(sharding, leaf, path), self._sharding, batch,
            is_leaf=_is_sharding)


def _iterator(node: ToGlobalNode, ctx, epoch: int):
    converted = _Globalize(_planner.make_iterator(node.input, ctx, epoch), node.sharding)
    if node.prefetch == 0:
        return converted
    # A thread converts ahead: up to `prefetch` batches sit on the devices; the state is the
    # input's before the oldest of them, so a restore transfers them again.
    return prefetch.PrefetchIterator(converted, node.prefetch)


_planner.register(ToGlobalNode, iterator=_iterator)
