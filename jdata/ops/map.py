"""map: applies a UDF to every element. See ``Dataset.map``.

With ``vectorize=True`` the UDF runs in blocks through ``jdata.runtime.blocks``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

from jdata import _planner, _probe, _tree
from jdata._plan import Node
from jdata.runtime import blocks, iterator, udf
from jdata.runtime.iterator import UnaryIterator


@dataclasses.dataclass(frozen=True, eq=False)
class MapNode(Node):
    """See ``Dataset.map``."""

    input: Node
    fn: Callable
    num_parallel_calls: int | None = None
    deterministic: bool | None = None
    vectorize: bool = False
    op_name: ClassVar[str] = "map"
    keeps_positions: ClassVar[bool] = True
    parallel: ClassVar[bool] = True

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
            compute = blocks.vectorized(self).compute
            return _probe.udf_output_spec(
                self.input,
                lambda e: blocks.serve(compute([e], [0], blocks.BLOCK_SIZE)[0], "map", 0), "map")
        return _probe.udf_output_spec(
            self.input, lambda e: _tree.normalize(udf.call(self.fn, e, "map", 0), "map"), "map")


class _MapReader:
    def __init__(self, node: MapNode, ctx, epoch: int):
        self._input = _planner.make_reader(node.input, ctx, epoch)
        self.prefers_blocks = getattr(self._input, "prefers_blocks", False)
        self._fn = node.fn

    def __len__(self) -> int:
        return len(self._input)

    def __getitem__(self, index: int):
        return apply(self._fn, self._input[index], index)

    def read_block(self, lo: int, hi: int):
        elements, input_error = iterator.read_block(self._input, lo, hi)
        outputs, udf_error = udf.call_block(self._fn, elements, "map", lo)
        outputs, invalid = _tree.normalize_block(outputs, "map")
        # Each error cuts the block short of the next one's element: the first set is the earliest.
        return outputs, invalid or udf_error or input_error


class _MapIterator(UnaryIterator):
    OP = "map"
    COUNTERS = ("position",)

    def __init__(self, node: MapNode, ctx, epoch: int):
        super().__init__(_planner.make_iterator(node.input, ctx, epoch))
        self._fn = node.fn

    def __next__(self):
        element = next(self._input)
        position = self._position
        self._position = position + 1
        return apply(self._fn, element, position)


def _reader(node: MapNode, ctx, epoch: int):
    if not node.vectorize:
        return _MapReader(node, ctx, epoch)
    return blocks.BlockReader(_planner.make_reader(node.input, ctx, epoch),
                              blocks.vectorized(node).compute)


def apply(fn, element, position: int):
    """A map's output for one element: the UDF's result, normalized (shared with batch)."""
    return _tree.normalize(udf.call(fn, element, "map", position), "map")


def _iterator(node: MapNode, ctx, epoch: int):
    threads, deterministic = _planner.op_parallelism(node, ctx)
    if threads and not node.vectorize:
        # A vectorized map is already one compiled call per block; threads
        # would only split its blocks.
        fn = node.fn
        return _planner.parallel_map(node, ctx, epoch,
                                     lambda element, position: apply(fn, element, position),
                                     threads, deterministic)
    if not node.vectorize:
        return _MapIterator(node, ctx, epoch)
    return blocks.BlockIterator(_planner.make_iterator(node.input, ctx, epoch),
                                blocks.vectorized(node).compute)


_planner.register(MapNode, iterator=_iterator, reader=_reader)
