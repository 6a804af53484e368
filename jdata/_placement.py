"""Where a plan's parallel ops run: the plan's side of the engine choice.

``Options(engine=...)`` and each op's ``num_parallel_calls`` say which ops run
on threads, on processes, or measure (``"auto"``); ``jdata.runtime.engine``
measures and decides. The key that lets a later iterator of the same pipeline
code reuse a decision is computed here, from the plan.
"""

from __future__ import annotations

import functools
from typing import Callable

from jdata import _fingerprint
from jdata._constants import AUTOTUNE
from jdata._plan import Node, walk
from jdata.runtime.context import Context


def op_engine(node: Node, ctx: Context) -> str:
    """Where an op's parallel UDF calls run: ``"threads"``, ``"processes"`` or ``"auto"``.

    ``Options(engine=...)`` decides, except that its default ``"auto"``
    measures only for ``num_parallel_calls=AUTOTUNE`` and keeps explicit
    counts on threads, as tf.data does. Ops whose parallel work is no UDF of
    the user's (stacking, prefetching) release the GIL: always threads.
    """
    if node.parallel_udf() is None or not node.parallel or node.num_parallel_calls is None:
        return "threads"
    engine = ctx.options.engine
    if engine != "auto":
        return engine
    return "auto" if node.num_parallel_calls == AUTOTUNE else "threads"


def subtree_engine(node: Node, ctx: Context) -> str:
    """The engine of a random-access subtree run by index: the most capable its ops ask.

    ``"auto"`` stays on threads where the subtree runs JAX (a ``vectorize=True``
    map): XLA releases the GIL, and each worker process would compile again.
    """
    nodes = list(walk(node))
    engines = {op_engine(n, ctx) for n in nodes}
    if "processes" in engines:
        return "processes"
    if "auto" in engines and not any(n.runs_jax() for n in nodes):
        return "auto"
    return "threads"


def engine_key(node: Node) -> Callable[[], str]:
    """What an engine decision depends on: the ops and the fingerprints of their UDFs.

    Rebuilding the same pipeline gives the same key, so a decision measured
    once serves later iterators; a wrong match would only cost speed. UDFs
    are told apart by content (code, closures, defaults, globals read), so
    fused maps, ``declare``d UDFs and ``functools.partial``s of different
    functions, which share a ``__call__``, do not share a decision. The key
    is computed on demand (``initial_engine`` needs it only for
    ``engine="auto"``).
    """
    return functools.partial(_udf_fingerprint, node)


def _udf_fingerprint(node: Node) -> str:
    # Shallow: what the UDFs hold (a vocabulary, a table) would cost up to
    # seconds per iterator to hash, and decides nothing about the GIL.
    return _fingerprint.fingerprint_value(
        [(type(n), [v for v in n.params().values() if callable(v)]) for n in walk(node)],
        shallow=True)


def describe_engine(node: Node, ctx: Context) -> str:
    """What ``explain()`` says about where a parallel op runs, or ``""``."""
    if not node.parallel or node.num_parallel_calls is None:
        return ""
    engine = op_engine(node, ctx)
    if engine == "auto":
        return "engine: auto (threads if the UDF releases the GIL, else processes; measured)"
    return f"engine: {engine}"
