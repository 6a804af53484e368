"""to_global: per-host batches as global ``jax.Array``s, transferred ahead. See
``Dataset.to_global``."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jdata import _plan, _planner, _spec, _tree
from jdata._plan import Node
from jdata.hosts import shardings
from jdata.runtime import prefetch
from jdata.runtime.iterator import Iterator, UnaryIterator

_OP = "to_global"


@dataclasses.dataclass(frozen=True, eq=False)
class ToGlobalNode(Node):
    """See ``Dataset.to_global``."""

    input: Node
    sharding: Any
    prefetch: int = 2
    # (mean, std) as float32 arrays of one value or one per channel: uint8 device leaves
    # become (x - mean) / std on the devices.
    normalize: tuple | None = None
    op_name: ClassVar[str] = _OP

    def cardinality(self) -> int:
        return self.input.cardinality()

    def compute_spec(self):
        spec = self.input.element_spec()
        one_host = jax.process_count() == 1
        if one_host and self.normalize is None:  # one host: its batch is the global batch
            return spec
        flat, tree = _tree.flatten(spec)
        targets = shardings.per_leaf(self.sharding, spec)
        out = []
        for leaf, target in zip(flat, targets):
            if target is not None:
                leaf = leaf if one_host else _global_spec(leaf, target)
                if self.normalize is not None and getattr(leaf, "dtype", None) == np.uint8:
                    leaf = _spec.TensorSpec(leaf.shape, np.float32)
            out.append(leaf)
        return _tree.unflatten(tree, out)

    def __str__(self):
        normalize = "" if self.normalize is None else (
            f", normalize=({self.normalize[0].tolist()}, {self.normalize[1].tolist()})")
        return (f"ToGlobal(sharding={shardings.describe_tree(self.sharding)}, "
                f"prefetch={self.prefetch}{normalize})")


def _global_spec(spec: _spec.TensorSpec, sharding) -> _spec.TensorSpec:
    """A device leaf's spec: the hosts' batches side by side (host leaves keep theirs)."""
    if not spec.shape:
        return spec
    split = shardings.batch_split(sharding, spec.rank)
    rows = spec.shape[0]
    rows = rows * split.hosts if rows is not None and split is not None else None
    return _spec.TensorSpec((rows, *spec.shape[1:]), spec.dtype)


def normalize_argument(normalize) -> tuple | None:
    """``normalize`` checked: ``None``, or ``(mean, std)`` as ``float32`` arrays."""
    if normalize is None:
        return None
    if isinstance(normalize, (str, bytes)) or not (hasattr(normalize, "__len__")
                                                   and len(normalize) == 2):
        raise TypeError(f"{_OP}: normalize={normalize!r} must be a (mean, std) pair, e.g. "
                        "normalize=([123.7, 116.3, 103.5], [58.4, 57.1, 57.4])")
    from jdata.ops import image  # NumPy only: no PIL until an image is decoded

    return image.mean_std(normalize[0], normalize[1], _OP)


def check_input(node: Node, sharding, normalize: tuple | None = None) -> None:
    """The checks static facts allow when the dataset is built; iteration does the rest.

    With an element spec that runs no user code: the sharding's structure,
    no bytes, str or scalar leaf under a sharding, and a ``uint8`` one among
    them to ``normalize``. With known batch sizes (``Node.static_batch_sizes``):
    every batch, the short last one included, splits evenly over the devices
    of this process.
    """
    if node.cardinality() == 0:
        return
    spec = _static_spec(node)
    if spec is not None:
        flat, _ = jax.tree_util.tree_flatten_with_path(spec)
        device, dtypes = [], []
        for (path, leaf), target in zip(flat, shardings.per_leaf(sharding, spec)):
            if target is not None and isinstance(leaf, _spec.TensorSpec):
                _check_kind(leaf.dtype == object, leaf.rank, shardings.where(path))
                device.append((shardings.where(path), target, leaf.rank))
                dtypes.append((shardings.where(path), leaf.dtype))
        if normalize is not None:
            _check_normalized(dtypes)
    else:  # only the sharding's own leaves are known
        flat, _ = jax.tree_util.tree_flatten_with_path(sharding, is_leaf=shardings.is_leaf)
        device = [(shardings.where(path) if path else "every leaf", target, None)
                  for path, target in flat if target is not None]
    sizes = node.static_batch_sizes()
    for where, target, rank in device:
        split = shardings.batch_split(target, rank)
        if split is None:
            continue
        if sizes.full is not None:
            shardings.check_rows(sizes.full, split, where, target)
        if sizes.last is not None:
            shardings.check_rows(sizes.last, split, where, target, full=sizes.full)


def _static_spec(node: Node):
    """The input's element spec where computing it runs no user function, else None."""
    if not _plan.spec_is_static(node):
        return None
    try:
        return node.element_spec()
    except Exception:  # e.g. inputs that do not combine: iteration reports it
        return None


def _check_normalized(dtypes: list) -> None:
    """``(where, dtype)`` of the device leaves: ``normalize`` needs a ``uint8`` one."""
    if not any(dtype == np.uint8 for _, dtype in dtypes):
        found = "; ".join(f"{where} is {dtype}" for where, dtype in dtypes) or "none is sharded"
        raise ValueError(
            f"{_OP}: normalize=(mean, std) normalizes the uint8 leaves that go to the devices, "
            f"but none is uint8 ({found}); drop normalize=, or the map(normalize(...)) before "
            "it, so that the batches reach to_global as uint8")


def _check_channels(leaf: np.ndarray, channels: int, where: str) -> None:
    if channels > 1 and (leaf.ndim < 2 or leaf.shape[-1] != channels):
        raise ValueError(f"{_OP}: normalize has {channels} values per channel, but {where} has "
                         f"shape {leaf.shape}, whose last axis is not {channels} channels")


@functools.partial(jax.jit, static_argnums=(1, 2))
def _normalized(x: jax.Array, mean: tuple, std: tuple) -> jax.Array:
    # Mean and std are static: constants of the program, compiled once per shape and sharding.
    return (x.astype(jnp.float32) - np.float32(mean)) / np.float32(std)


def _check_kind(text: bool, rank: int, where: str) -> None:
    if text:
        raise TypeError(
            f"{_OP}: {where} holds bytes or str, which a jax.Array cannot; put None at its "
            "place in the sharding pytree to keep it on the host as NumPy (e.g. "
            "{'image': sharding, 'text': None}), or map it to numbers before to_global")
    if rank == 0:
        raise ValueError(f"{_OP}: {where} is a scalar; to_global takes batches (batch before "
                         "it), or put None at its place in the sharding pytree to keep it "
                         "on the host")


class _Globalize(UnaryIterator):
    """Each per-host batch with its device leaves as global arrays (the transfers start
    here) and its host leaves (``None`` in the sharding) as they are."""

    OP = "to_global"

    def __init__(self, input_iterator: Iterator, sharding, normalize: tuple | None):
        super().__init__(input_iterator)
        self._sharding = sharding
        self._normalize = None if normalize is None else tuple(
            tuple(a.reshape(-1).tolist()) for a in normalize)
        self._treedef = None
        self._targets: list = []  # (leaf index, sharding, where) of each device leaf
        self._splits: dict = {}  # (leaf index, rank) -> shardings.Split | None
        self._rows = 0  # the most rows a batch had: a batch with fewer is a remainder

    def _match(self, batch, treedef) -> None:
        """Pairs the batch's leaves with their shardings, once per structure."""
        flat, _ = jax.tree_util.tree_flatten_with_path(batch)
        targets = shardings.per_leaf(self._sharding, batch)
        self._targets = [(i, target, shardings.where(path))
                         for i, ((path, _), target) in enumerate(zip(flat, targets))
                         if target is not None]
        self._treedef = treedef

    def __next__(self):
        batch = next(self._input)
        leaves, treedef = _tree.flatten(batch)
        if self._treedef is None or treedef != self._treedef:
            self._match(batch, treedef)
        if not self._targets:
            return batch
        data = [self._checked(leaves[i], i, target, where)
                for i, target, where in self._targets]
        self._rows = max(self._rows, data[0].shape[0])
        # One call for all device leaves: on one host, one device_put of the whole list.
        arrays = jax.make_array_from_process_local_data([t for _, t, _ in self._targets], data)
        if self._normalize is not None:
            arrays = self._normalized(arrays, data)
        for (i, _, _), array in zip(self._targets, arrays):
            leaves[i] = array
        return _tree.unflatten(treedef, leaves)

    def _normalized(self, arrays: list, data: list) -> list:
        """The uint8 arrays normalized on their devices (dispatched: it runs as they arrive)."""
        if not any(leaf.dtype == np.uint8 for leaf in data):
            _check_normalized([(where, leaf.dtype) for (_, _, where), leaf
                               in zip(self._targets, data)])
        mean, std = self._normalize
        return [_normalized(array, mean, std) if array.dtype == np.uint8 else array
                for array in arrays]

    def _checked(self, leaf, i: int, sharding, where: str) -> np.ndarray:
        _check_kind(isinstance(leaf, (bytes, str)) or
                    (isinstance(leaf, np.ndarray) and leaf.dtype == object),
                    np.ndim(leaf), where)
        leaf = np.asarray(leaf)
        key = (i, leaf.ndim)
        if key not in self._splits:
            self._splits[key] = shardings.batch_split(sharding, leaf.ndim)
        split, rows = self._splits[key], leaf.shape[0]
        if split is not None:
            shardings.check_rows(rows, split, where, sharding,
                                 full=self._rows if rows < self._rows else None)
        if self._normalize is not None and leaf.dtype == np.uint8:
            _check_channels(leaf, max(map(len, self._normalize)), where)
        return leaf


def _iterator(node: ToGlobalNode, ctx, epoch: int):
    converted = _Globalize(_planner.make_iterator(node.input, ctx, epoch), node.sharding,
                           node.normalize)
    if node.prefetch == 0:
        return converted
    # A thread converts ahead: up to `prefetch` batches sit on the devices; the state is the
    # input's before the oldest of them, so a restore transfers them again. Host leaves ride
    # in the same buffer, so each stays with its batch's device leaves.
    return prefetch.PrefetchIterator(converted, node.prefetch)


_planner.register(ToGlobalNode, iterator=_iterator)
