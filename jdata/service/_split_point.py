"""Where a plan can be cut into independent splits, or why it cannot (``jdata.service.splits``).

A plan splits at one node, its *split point*: a random-access node (cut into
ranges of positions) or a file list (a TFRecord or text-lines source, or the
random-access input of an ``interleave``: cut into groups of files). An
``interleave``'s file list may be a ``repeat`` (forever or ``count`` times) of a
random-access list, as in tf.data's training readers
(``from_tensor_slices(files).shuffle(key).repeat().interleave(read)``): the
splits are then the groups of each repetition in turn, as tf.data's split
provider for ``repeat`` starts its input's splits again when they run out.

The ops above the split point, each with one ``input``, then run over each
piece on its own, so each must give the same result over a stream cut into
pieces as over the whole, or (above files) an effect per piece that tf.data's
dynamic sharding has too. What an op does to a cut stream is a fact about
splitting, kept here beside the only code that uses it; an op missing from
the table is refused.
"""

from __future__ import annotations

import dataclasses

from jdata._constants import INFINITE
from jdata._plan import Node
from jdata.io.records import ShardedRecordsNode, TextLinesNode, TFRecordNode
from jdata.ops.batch import BatchNode
from jdata.ops.filter import FilterNode
from jdata.ops.flat_map import FlatMapNode
from jdata.ops.ignore_errors import IgnoreErrorsNode
from jdata.ops.interleave import InterleaveNode
from jdata.ops.map_batch import MapBatchNode
from jdata.ops.padded_batch import PaddedBatchNode
from jdata.ops.random_map import RandomMapNode
from jdata.ops.repeat import RepeatByIndexNode, RepeatNode
from jdata.ops.shuffle import ShuffleNode
from jdata.ops.unbatch import UnbatchNode

# What an op above the split point keeps of a stream cut into pieces:
# one element out per element in, from its value alone: positions and counts;
SAME = "same"
# outputs from each element's value alone, any number: the concatenation;
LOCAL = "local"
# a state over its stream (batch boundaries, a shuffle buffer, keys or nested epochs
# by position): only the multiset of elements, which is all a files split promises.
# A batch with drop_remainder=True drops each files split's own last partial batch,
# as in tf.data, where each split of a dynamic sharding is a stream of its own.
PER_SPLIT = "per_split"

# (Ops that keep positions, ``Node.keeps_positions``, are SAME.)
_ROLES = {FilterNode: LOCAL, UnbatchNode: LOCAL, IgnoreErrorsNode: LOCAL,
          FlatMapNode: PER_SPLIT, BatchNode: PER_SPLIT, PaddedBatchNode: PER_SPLIT,
          MapBatchNode: PER_SPLIT, ShuffleNode: PER_SPLIT, RandomMapNode: PER_SPLIT,
          RepeatNode: PER_SPLIT}

# Why common ops cannot be above a split point, and what to do instead.
_REFUSED = {
    "take": "it counts elements across the whole stream; apply it after distribute",
    "skip": "it counts elements across the whole stream; apply it after distribute",
    "take_while": "it ends the whole stream at the first false; apply it after distribute",
    "shard": "dynamic mode already gives each worker its own splits; drop the shard",
    "enumerate": "it numbers the whole stream; apply it after distribute",
    "scan": "its state runs through the whole stream; apply it after distribute",
    "unique": "it compares elements across the whole stream; apply it after distribute",
    "window": "a window spans elements of several splits; apply it after distribute",
    "cache": "a worker would cache only the splits it read; cache after distribute",
    "cache_file": "a worker would cache only the splits it read; cache after distribute",
    "from_generator": ("a generator can only be read whole, in order; give random-access "
                       "data to from_source, or write the data to files"),
    "counter": "it never ends, so an epoch has no splits; use jdata.range (random access)",
    "random": "it never ends, so an epoch has no splits; zip it in after distribute",
    "interleave": ("its input is not a random-access file list; read the files with "
                   "from_tensor_slices(files) or list_files, with at most a full shuffle(key) "
                   "and a repeat after them, or interleave after distribute"),
}


@dataclasses.dataclass(frozen=True, eq=False)
class SplitPoint:
    """Where ``plan`` splits: ``chain`` is the ops from the root down to ``node``'s parent.

    ``kind`` is ``"range"`` (positions of ``node``) or ``"files"`` (``node`` is a
    file source, or an ``interleave`` whose input positions are the files).
    ``exact``: every op above keeps positions (``SAME``), so a split's
    element count is its length and a skip can seek.
    ``files``: for an ``interleave``, the random-access list of one
    repetition's files; ``repeat``: the ``repeat`` between that list and the
    ``interleave`` (None if there is none).
    """

    kind: str
    chain: tuple
    node: Node
    exact: bool
    files: Node | None = None
    repeat: Node | None = None

    @property
    def repetitions(self) -> int | None:
        """How many times the file list is read: 1 but under a ``repeat``; None: forever."""
        return 1 if self.repeat is None else self.repeat.count


def find(plan: Node) -> SplitPoint:
    """The split point of ``plan``; ``ValueError`` naming the op that prevents one."""
    chain, node = [], plan
    while True:
        if node.random_access():
            if node.cardinality() == INFINITE:
                raise _refusal(node, "an epoch of it never ends, so it has no splits; "
                               "repeat after distribute")
            return _checked("range", chain, node)
        if type(node) in (TFRecordNode, TextLinesNode):
            return _checked("files", chain, node)
        files = _file_list(node.input) if type(node) is InterleaveNode else None
        if files is not None:
            return _checked("files", chain, node, *files)
        if role(node) is None:
            raise _refusal(node, _REFUSED.get(node.op_name, _why_not(node)))
        chain.append(node)
        node = node.input


def role(node: Node) -> str | None:
    """``SAME``, ``LOCAL`` or ``PER_SPLIT`` for an op that may be above a split point."""
    if node.keeps_positions:
        return SAME
    for cls in type(node).__mro__:  # subclasses too (the optimizer's injected prefetch)
        if cls in _ROLES:
            return _ROLES[cls]
    return None


def _file_list(node: Node) -> tuple | None:
    """(one repetition's files, the repeat over them or None) for an interleave's input
    ``node``; None if it is not a random-access file list."""
    repeat = None
    if type(node) in (RepeatNode, RepeatByIndexNode):
        repeat, node = node, node.input
    if not node.random_access():
        return None
    if node.cardinality() == INFINITE:
        raise _refusal(node, "an endless file list can only be split where one repeat is "
                       "the interleave's input; move the ops between them under the repeat")
    return node, repeat


def _why_not(node: Node) -> str:
    if type(node) is ShardedRecordsNode:
        return _REFUSED["shard"]
    if len(node.inputs()) > 1:
        return ("it combines several inputs, and a split cuts one stream; distribute each "
                "input on its own, or make the inputs random access")
    if not node.inputs():
        return "this source is read whole, in order (it has neither random access nor files)"
    return "its output over a stream cut into pieces differs from its output over the whole"


def _checked(kind: str, chain: list, node: Node, files: Node | None = None,
             repeat: Node | None = None) -> SplitPoint:
    # From the split point up: the error names the first op that breaks it.
    for op in reversed(chain):
        reason = _range_refusal(op) if kind == "range" else _files_refusal(op)
        if reason is not None:
            raise _refusal(op, reason)
    return SplitPoint(kind, tuple(chain), node, all(role(op) == SAME for op in chain),
                      files, repeat)


def _range_refusal(op: Node) -> str | None:
    if role(op) != PER_SPLIT:
        return None
    below = f"each split restarts its input ({op.input.op_name}) as a new stream"
    if type(op) is ShuffleNode:
        return ("its buffer mixes elements of several splits; shuffle the random-access "
                "input with shuffle(key) (no buffer_size), a full shuffle read by index")
    if type(op) is RandomMapNode:
        return (f"its keys follow positions in its input stream, and {below}; apply random_map "
                "directly to the random-access input")
    if type(op) is FlatMapNode:
        return (f"the datasets it builds draw their randomness from their position in its "
                f"input stream, and {below}; flat_map after distribute")
    return (f"it groups or counts the elements of its input stream, and {below}; move it "
            "after distribute, or move the ops under it that are not random access "
            "(filter...) after it")


def _files_refusal(op: Node) -> str | None:
    # drop_remainder=True is accepted: each split drops its own remainder (tf.data's rule).
    if type(op) is RepeatNode and op.count is None:
        return ("each split would never end; repeat after distribute, or repeat the file "
                "list under the interleave (files.repeat().interleave(read))")
    return None


def _refusal(node: Node, reason: str) -> ValueError:
    return ValueError(f"distribute(processing_mode='dynamic') cannot split this pipeline at "
                      f"{node.op_name} ({node}): {reason}")
