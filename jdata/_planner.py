"""The planner: a registry from logical node type to physical factories.

Each op module registers its node type with an iterator factory and, when the
op can serve elements by index, a reader factory. Factories take
``(node, ctx, epoch)``. Later stages (parallel variants, process engine)
register alternative factories here without touching the nodes.
"""

from __future__ import annotations

import functools
import weakref
from typing import Callable

from jdata import _placement
from jdata._constants import AUTOTUNE
from jdata._plan import Node, op_label, walk
from jdata.runtime import executors, parallel
from jdata.runtime.context import Context
from jdata.runtime.iterator import IndexIterator, Iterator, Reader, Tunable

IteratorFactory = Callable[[Node, Context, int], Iterator]
ReaderFactory = Callable[[Node, Context, int], Reader]

_ITERATORS: dict[type, IteratorFactory] = {}
_READERS: dict[type, ReaderFactory] = {}


def register(node_type: type, *, iterator: IteratorFactory | None = None,
             reader: ReaderFactory | None = None) -> None:
    if iterator is not None:
        _ITERATORS[node_type] = iterator
    if reader is not None:
        _READERS[node_type] = reader


def make_reader(node: Node, ctx: Context, epoch: int) -> Reader:
    """A reader of a node whose ``random_access()`` is true (counted: ``ctx.ops``)."""
    reader = _READERS[type(node)](node, ctx, epoch)
    ops = getattr(ctx, "ops", None)  # None: a reader built alone, with no context
    return reader if ops is None else ops.reader(node, reader)


def make_iterator(node: Node, ctx: Context, epoch: int = 0) -> Iterator:
    """The physical iterator of ``node`` for one epoch.

    Random-access nodes iterate through their reader, so their state is an
    index. If an op of that random-access subtree asks for parallelism
    (``num_parallel_calls``), the whole subtree runs on workers (threads or
    processes), element by element by index (e.g. ``map(f, num_parallel_calls=4).batch(32)``
    computes whole batches in parallel), with the same state.
    """
    if node.random_access() and type(node) in _READERS:
        parallelism, deterministic = subtree_parallelism(node, ctx)
        if parallelism:
            return _parallel_subtree(node, ctx, epoch, parallelism, deterministic)
        return IndexIterator(make_reader(node, ctx, epoch), node.op_name)
    try:
        factory = _ITERATORS[type(node)]
    except KeyError:
        raise NotImplementedError(f"no iterator registered for {type(node).__name__}") from None
    iterator = factory(node, ctx, epoch)
    stage = None
    if isinstance(iterator, Tunable):
        ctx.autotuner().register(iterator, _label(node, ctx),
                                 node.parallel and node.num_parallel_calls == AUTOTUNE,
                                 node.tunable_buffer and node.buffer_size == AUTOTUNE)
        stage = iterator.stats
    return iterator if ctx.ops is None else ctx.ops.iterator(node, iterator, stage)


def _label(node: Node, ctx: Context) -> str:
    """A stage's name: its op's, as ``explain()`` prints it."""
    name = ctx.ops.name(node) if ctx.ops is not None else None
    return name or op_label(node)


def _parallel_subtree(node: Node, ctx: Context, epoch: int, parallelism: int,
                      deterministic: bool) -> Iterator:
    options = ctx.options
    # Workers build their readers from the options alone (the context holds
    # the autotuner's thread, which cannot travel to worker processes). The
    # epoch comes with each task, so the workers serve the dataset's later
    # iterators too (parked under its plan: jdata.runtime.persistent). Their key holds
    # the subtree by a weak reference (equal to another of an equal live subtree):
    # unoptimized, the subtree is the plan itself, which a strong key kept alive for ever.
    iterator = parallel.ParallelIndexIterator(
        functools.partial(_subtree_reader, node, options,
                          ctx.ops.workers() if ctx.ops is not None else None),
        parallelism, deterministic,
        _placement.subtree_engine(node, ctx), options.cpu_budget, _placement.engine_key(node),
        node.op_name, epoch, ctx.pool_home, (weakref.ref(node), options))
    ops = " <- ".join(_label(n, ctx) for n in walk(node))
    autotuned = any(n.parallel and n.num_parallel_calls == AUTOTUNE for n in walk(node))
    ctx.autotuner().register(iterator, f"{ops} (by index)", autotuned, False)
    if ctx.ops is None:
        return iterator
    return ctx.ops.by_index_stage(node, iterator, iterator.stats)


def _subtree_reader(node: Node, options, ops, epoch: int):
    # ``ops`` counts the readers' ops on worker threads; it reaches a process as None.
    return make_reader(node, Context(options, ops=ops), epoch)


def parallel_map(node: Node, ctx: Context, epoch: int, fn: Callable, threads: int,
                 deterministic: bool) -> Iterator:
    """``fn(element, position)`` over ``node.input`` on the op's engine (``map``,
    ``random_map``)."""
    return parallel.ParallelMapIterator(
        make_iterator(node.input, ctx, epoch), fn, threads, deterministic,
        _placement.op_engine(node, ctx), ctx.options.cpu_budget, _placement.engine_key(node),
        node.op_name)


def op_parallelism(node: Node, ctx: Context) -> tuple[int | None, bool]:
    """An op's own ``(threads or None, deterministic)`` from its arguments and options."""
    if not node.parallel:
        return None, ctx.options.deterministic
    requested, deterministic = node.num_parallel_calls, node.deterministic
    if deterministic is None:
        deterministic = ctx.options.deterministic
    if requested is None:
        return None, deterministic
    return executors.resolve_parallelism(requested), deterministic


def subtree_parallelism(node: Node, ctx: Context) -> tuple[int | None, bool]:
    """The most threads any op of a random-access subtree asks for, and its order.

    The subtree is deterministic unless one of its parallel ops is not.
    """
    best, deterministic = None, True
    stack = [node]
    while stack:
        current = stack.pop()
        threads, ordered = op_parallelism(current, ctx)
        if threads:
            best = max(best or 0, threads)
            deterministic = deterministic and ordered
        stack.extend(current.inputs())
    return best, deterministic
