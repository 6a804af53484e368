"""The logical plan: frozen dataclass nodes, one per op, in ``jdata/ops/``.

A node holds its inputs, parameters and UDFs; it has no threads and no
buffers. Nodes are printable (``explain``), serializable with cloudpickle and
fingerprintable. Rewrites build new nodes with ``dataclasses.replace``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import types
import weakref
from typing import Any, ClassVar, NamedTuple

import numpy as np

from jdata import _tree
from jdata._constants import AUTOTUNE, INFINITE, UNKNOWN

# Derived facts about nodes (element specs) live beside the nodes, not in
# them, so that nodes stay frozen and pickle without caches.
_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class BatchSizes(NamedTuple):
    """The leading dimension of a node's elements where static facts fix it (else None).

    ``full``: every element's but the last; ``last``: the last one's (equal
    to ``full`` where nothing makes it shorter).
    """

    full: int | None
    last: int | None


@dataclasses.dataclass(frozen=True, eq=False)
class Node:
    """Base of all logical plan nodes.

    Subclasses are frozen dataclasses whose fields are their inputs (``Node``s,
    or tuples/dicts of them) and parameters. They define ``op_name``,
    ``cardinality()`` and ``compute_spec()``; ops that can serve elements by
    index over random-access inputs override ``random_access()``.
    """

    op_name: ClassVar[str] = "node"
    # True where ``compute_spec`` infers the sizes from the first elements of
    # an opaque source (``jdata._probe``): a later element may have others.
    spec_inferred: ClassVar[bool] = False
    # Capabilities the planner and the optimizer rely on, declared per node type
    # (never found by probing fields or listing op names):
    # ``num_parallel_calls`` and ``deterministic`` fields: the op may run on a pool.
    parallel: ClassVar[bool] = False
    # Its elements are batches: a consumer's step overlaps the next batch's work.
    batching: ClassVar[bool] = False
    # A ``key`` field: the op's random choices come from it.
    random: ClassVar[bool] = False
    # A ``buffer_size`` field that may be AUTOTUNE, for the autotuner to size.
    tunable_buffer: ClassVar[bool] = False
    # A source whose reader can pass over other shards' elements (``sharded``).
    reads_shards: ClassVar[bool] = False
    # One element out for each element in, in order, each from that element alone: the
    # op keeps positions and counts (``shard``/``skip``/``take`` may move below it; a
    # service split point above it keeps each element's position).
    keeps_positions: ClassVar[bool] = False

    def inputs(self) -> tuple[Node, ...]:
        """Child nodes, in field order."""
        out = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, Node):
                out.append(value)
            elif is_node_collection(value):
                out.extend(value.values() if isinstance(value, dict) else value)
        return tuple(out)

    def params(self) -> dict[str, Any]:
        """Non-input fields, for printing and fingerprinting."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, Node) or is_node_collection(value):
                continue
            out[field.name] = value
        return out

    def cardinality(self) -> int:
        return UNKNOWN

    def parallel_udf(self):
        """The user function this op runs on its pool (threads or worker processes), if any:
        what decides the engine (``runtime.engine``)."""
        return None

    def op_parts(self) -> tuple[tuple[str, Any], ...]:
        """The ops a fused node was made of, as ``(op name, UDF or None)`` in the order they
        apply, for its name (``op_label``); empty for a node of one op."""
        return ()

    def sharded(self, num_shards: int, index: int) -> Node:
        """This source reading only shard ``index`` of ``num_shards`` (``reads_shards``)."""
        raise NotImplementedError(f"{self.op_name} does not read shards itself")

    def runs_jax(self) -> bool:
        """True if the op's work is JAX code (XLA releases the GIL; worker processes
        would each compile it again)."""
        return False

    def random_access(self) -> bool:
        """True if this node serves element ``i`` directly (see ``runtime.Reader``)."""
        return False

    def static_batch_size(self) -> int | None:
        """The leading dimension of every element where static facts fix it, else None.

        Read from the element spec only where that spec holds for every element
        (``spec_is_exact``); ops that fix the size themselves (``batch`` with
        ``drop_remainder``) override this. Counts built on it (``unbatch``'s
        cardinality) are exact or ``UNKNOWN``, never wrong.
        """
        if not spec_is_exact(self):
            return None
        try:
            sizes = {leaf.shape[0] if leaf.shape else None
                     for leaf in _tree.leaves(self.element_spec())}
        except Exception:  # e.g. nested datasets (window), or inputs that do not combine
            return None
        return sizes.pop() if len(sizes) == 1 else None

    def static_batch_sizes(self) -> BatchSizes:
        """``static_batch_size``, or more where a batching op knows its short last batch.

        ``batch(n)`` without ``drop_remainder`` has no static batch size, but
        every batch but the last has ``n`` rows, and a known input cardinality
        fixes the last one's: what ``to_global`` checks against its sharding
        when the dataset is built.
        """
        size = self.static_batch_size()
        return BatchSizes(size, size)

    def compute_spec(self):
        raise NotImplementedError(type(self).__name__)

    def element_spec(self) -> Any:
        """The pytree of ``TensorSpec`` of this node's elements (memoized)."""
        try:
            return _MEMO[self]
        except KeyError:
            spec = _MEMO[self] = self.compute_spec()
            return spec

    def __str__(self):
        # Parameters left at their defaults are omitted to keep plans readable.
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        args = ", ".join(f"{k}={_describe(v, k)}" for k, v in self.params().items()
                         if not (k in defaults and _is_default(v, defaults[k])))
        return f"{type(self).__name__.removesuffix('Node')}({args})"


class Unchanged(Node):
    """Base of the one-input ops whose elements have their input's structure (tf.data's
    ``UnaryUnchangedStructureDataset``): the element spec is the input's. Two class flags
    say what else passes through: ``keeps_count``, the cardinality is the input's (else
    unknown, unless the op computes it); ``keeps_access``, the op serves elements by index
    where its input does (else not, unless the op says)."""

    keeps_count: ClassVar[bool] = False
    keeps_access: ClassVar[bool] = False

    def compute_spec(self):
        return self.input.element_spec()  # type: ignore[attr-defined]

    def cardinality(self) -> int:
        return self.input.cardinality() if self.keeps_count else UNKNOWN  # type: ignore

    def random_access(self) -> bool:
        return self.keeps_access and self.input.random_access()  # type: ignore


def is_node_collection(value) -> bool:
    """True for a non-empty tuple, list or dict of nodes (an op's inputs, e.g. ``zip``'s)."""
    # all() stops at a source's first datum, so a large in-memory source costs nothing.
    if isinstance(value, (tuple, list)):
        return bool(value) and all(isinstance(v, Node) for v in value)
    if isinstance(value, dict):
        return bool(value) and all(isinstance(v, Node) for v in value.values())
    return False


def _is_default(value, default) -> bool:
    if default is dataclasses.MISSING:
        return False
    try:
        return bool(value is default or value == default)
    except Exception:  # e.g. arrays, whose == is elementwise
        return False


# Parameters where -1 means "let the runtime decide", printed as the user wrote it.
_AUTOTUNE_PARAMS = frozenset({"num_parallel_calls", "buffer_size"})


def _describe(value, name: str = "") -> str:
    if name in _AUTOTUNE_PARAMS and value is not None and value == AUTOTUNE:
        return "AUTOTUNE"
    if callable(value) and hasattr(value, "__qualname__"):
        return value.__qualname__
    text = repr(value)
    if isinstance(value, np.ndarray):  # one line, e.g. a fused random_map's stacked keys
        text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def udf_label(fn) -> str:
    """A UDF's short name in op names: a function's ``__name__``, else its ``__qualname__``."""
    fn = getattr(fn, "func", fn) if isinstance(fn, functools.partial) else fn
    if isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
        return fn.__name__
    return getattr(fn, "__qualname__", type(fn).__name__)


def op_label(node: Node) -> str:
    """What ``explain()``, ``stats()``, plots and traces call an op: its name and UDFs,
    e.g. ``map(decode)``; a fused op names its parts, e.g. ``map(decode)+map(crop)``."""
    if node.op_parts():
        return "+".join(part_label(op, fn) for op, fn in node.op_parts())
    udfs = [v for v in node.params().values() if callable(v) and not isinstance(v, type)]
    if len(udfs) == 1 and getattr(udfs[0], "op_parts", None):
        return "+".join(part_label(op, fn) for op, fn in udfs[0].op_parts)
    return f"{node.op_name}({', '.join(map(udf_label, udfs))})" if udfs else node.op_name


def part_label(op: str, fn) -> str:
    if fn is None:
        return op
    parts = getattr(fn, "op_parts", None)
    if parts:  # fused again: its parts in order
        return "+".join(part_label(o, f) for o, f in parts)
    return f"{op}({udf_label(fn)})"


def op_labels(plan: Node) -> dict[int, str]:
    """``op_label`` of every node of the plan, by ``id``; ops that would share a name are
    numbered in the order they apply (``map(<lambda>) #1``, ``map(<lambda>) #2``)."""
    # Inputs first (#1 is applied first); a node reached twice (a shared input) once.
    nodes = list({id(n): n for n in list(walk(plan))[::-1]}.values())
    labels = [op_label(n) for n in nodes]
    counts = collections.Counter(labels)
    seen: collections.Counter = collections.Counter()
    out = {}
    for n, label in zip(nodes, labels):
        if counts[label] > 1:
            seen[label] += 1
            label = f"{label} #{seen[label]}"
        out[id(n)] = label
    return out


def walk(node: Node):
    """Every node of the plan, parents before children."""
    yield node
    for child in node.inputs():
        yield from walk(child)


def spec_is_static(node: Node) -> bool:
    """True if ``node.element_spec()`` runs no user function (none in the plan).

    Build-time checks that need specs (e.g. concatenate's compatibility) run
    only then, so that building a dataset never executes user code.
    """
    return not any(callable(value) for n in walk(node) for value in n.params().values())


def spec_is_exact(node: Node) -> bool:
    """True if every size in ``node.element_spec()`` holds for every element.

    Without user functions the spec is computed, not inferred, unless a source
    infers it from its first elements (``Node.spec_inferred``).
    """
    return spec_is_static(node) and not any(n.spec_inferred for n in walk(node))


def structure_signature(node: Node) -> str:
    """The plan's op names as a tree: what a saved state must match to restore."""
    children = ",".join(structure_signature(c) for c in node.inputs())
    return f"{node.op_name}({children})"


def add_cardinalities(counts) -> int:
    """Sum of cardinalities, honouring ``INFINITE`` and ``UNKNOWN``."""
    counts = list(counts)
    if INFINITE in counts:
        return INFINITE
    if UNKNOWN in counts:
        return UNKNOWN
    return sum(counts)


def min_cardinality(counts) -> int:
    """The cardinality of zipped inputs: the shortest one."""
    counts = list(counts)
    finite = [c for c in counts if c >= 0]
    if finite and (min(finite) == 0 or UNKNOWN not in counts):
        return min(finite)
    if UNKNOWN in counts:
        return UNKNOWN
    return INFINITE
