"""random_map: a UDF with a per-element key. See ``Dataset.random_map``."""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

import numpy as np

from jdata import _planner, _probe, _random, _tree
from jdata._plan import Node
from jdata.runtime import blocks, udf
from jdata.runtime.iterator import UnaryIterator

_SALT = _random.salt("random_map")


@dataclasses.dataclass(frozen=True, eq=False)
class RandomMapNode(Node):
    """See ``Dataset.random_map``.

    ``key`` is the user's key data, or, where an optimizer rule fused several
    random maps into one (``decode_resize_fusion``), their keys stacked
    (``uint32[n, 2]``): ``fn`` then gets each element's ``(n, 2)`` keys, row
    ``i`` from key ``i``'s stream (``_random.KeyBlocks``). Fusions build
    stacked keys only for maps that are not vectorized.
    """

    input: Node
    fn: Callable
    key: np.ndarray
    num_parallel_calls: int | None = None
    deterministic: bool | None = None
    vectorize: bool = False
    op_name: ClassVar[str] = "random_map"
    parallel: ClassVar[bool] = True
    random: ClassVar[bool] = True

    def cardinality(self) -> int:
        return self.input.cardinality()

    def parallel_udf(self) -> Callable:
        return self.fn

    def runs_jax(self) -> bool:
        return self.vectorize

    def random_access(self) -> bool:
        return self.input.random_access()

    def compute_spec(self):
        if self.vectorize:
            compute = _VectorizedCompute(self, 0)
            return _probe.udf_output_spec(
                self.input,
                lambda e: blocks.serve(compute([e], [0], blocks.BLOCK_SIZE)[0], "random_map", 0),
                "random_map")
        keys = _random.KeyBlocks(self.key, _SALT, 0)
        return _probe.udf_output_spec(
            self.input, lambda e: _apply(self.fn, e, 0, keys), "random_map")


def _apply(fn, element, position: int, keys: _random.KeyBlocks):
    out = udf.call(fn, element, "random_map", position, keys[position])
    return _tree.normalize(out, "random_map")


class _RandomMapReader:
    def __init__(self, node: RandomMapNode, ctx, epoch: int):
        self._input = _planner.make_reader(node.input, ctx, epoch)
        self._fn = node.fn
        self._keys = _random.KeyBlocks(node.key, _SALT, epoch)

    def __len__(self) -> int:
        return len(self._input)

    def __getitem__(self, index: int):
        return _apply(self._fn, self._input[index], index, self._keys)


class _RandomMapIterator(UnaryIterator):
    OP = "random_map"
    COUNTERS = ("position",)

    def __init__(self, node: RandomMapNode, ctx, epoch: int):
        super().__init__(_planner.make_iterator(node.input, ctx, epoch))
        self._fn = node.fn
        self._keys = _random.KeyBlocks(node.key, _SALT, epoch)

    def __next__(self):
        element = next(self._input)
        position = self._position
        self._position = position + 1
        return _apply(self._fn, element, position, self._keys)


class _VectorizedCompute:
    """Computes blocks with ``jit(vmap(fn))``, passing the elements' keys as a batch."""

    def __init__(self, node: RandomMapNode, epoch: int):
        self._vfn = blocks.vectorized(node)
        self._epoch_key = _random.op_epoch_key(node.key, _SALT, epoch)

    def __call__(self, elements: list, positions: list[int], size: int) -> list:
        # Positions are increasing but may have gaps (elements an upstream op
        # failed on), so derive the keys of the whole span and pick rows.
        first = positions[0]
        span = _random.element_keys(self._epoch_key, first, positions[-1] - first + 1)
        keys = span[np.asarray(positions, dtype=np.int64) - first]
        return self._vfn.compute(elements, positions, size, keys)


def _reader(node: RandomMapNode, ctx, epoch: int):
    if not node.vectorize:
        return _RandomMapReader(node, ctx, epoch)
    return blocks.BlockReader(_planner.make_reader(node.input, ctx, epoch),
                              _VectorizedCompute(node, epoch), "random_map")


def _iterator(node: RandomMapNode, ctx, epoch: int):
    threads, deterministic = _planner.op_parallelism(node, ctx)
    if threads and not node.vectorize:
        fn, keys = node.fn, _random.KeyBlocks(node.key, _SALT, epoch)  # thread-safe
        return _planner.parallel_map(
            node, ctx, epoch, lambda element, position: _apply(fn, element, position, keys),
            threads, deterministic)
    if not node.vectorize:
        return _RandomMapIterator(node, ctx, epoch)
    return blocks.BlockIterator(_planner.make_iterator(node.input, ctx, epoch),
                                _VectorizedCompute(node, epoch), "random_map")


_planner.register(RandomMapNode, iterator=_iterator, reader=_reader)
