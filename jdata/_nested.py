"""Datasets built inside UDFs (flat_map, interleave, window, group_by_window).

A nested dataset's iterator gets an epoch mixed from the outer iterator's
epoch and the outer element's position, so random ops inside nested datasets
differ from one outer element to the next, deterministically.
"""

from __future__ import annotations

from jdata import _planner, _random
from jdata._plan import Node
from jdata.runtime import udf
from jdata.runtime.context import Context
from jdata.runtime.iterator import Iterator


def dataset_node(value, op: str) -> Node:
    """The plan node of a ``Dataset`` returned by a user function."""
    from jdata._dataset import Dataset  # the API layer imports the ops, not the reverse

    if not isinstance(value, Dataset):
        raise TypeError(f"{op}: the user function returned {type(value).__name__}; "
                        "it must return a jdata.Dataset")
    return value._node


def as_dataset(node: Node):
    """Wraps a node as a user-facing ``Dataset``."""
    from jdata._dataset import Dataset

    return Dataset(node)


def nested_epoch(parent_epoch: int, op: str, position: int) -> int:
    return _random.mix_epoch(parent_epoch, _random.salt(op), position)


def open_dataset(fn, element, op: str, position: int, ctx: Context, parent_epoch: int,
                 *extra) -> Iterator:
    """Calls ``fn(element, *extra)`` and returns an iterator of the dataset it builds."""
    node = dataset_node(udf.call(fn, element, op, position, *extra), op)
    return _planner.make_iterator(node, ctx, nested_epoch(parent_epoch, op, position))
