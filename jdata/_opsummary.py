"""From tallies to per-op statistics: each op's own time, and its share of the
consumer's wait (``PipelineStats.ops`` and ``PipelineStats.bottleneck``).

An op's time is the time inside its calls less the time inside its inputs'
calls made from them; a stage's is its workers' busy time (less its inputs'
for a prefetch, whose thread pulls them). The consumer's time inside
``next()`` is then split down the plan: at each op, between the op's own
time and the time spent in each input, and a by-index stage's share among
its ops by their times (they run together on its workers).
"""

from __future__ import annotations

import collections

from jdata._constants import AUTOTUNE
from jdata._opregistry import OpRegistry
from jdata._plan import Node, walk
from jdata.runtime.stats import OpStats

CONSUMER = "the consumer's thread"
SERVICE = "the service's workers"
# Worker threads on CPU this much of their time, over the share one of them gets when
# all take turns at the GIL, are waiting for the GIL whenever they are not on CPU.
_GIL_BOUND = 0.8


class _Plan:
    """One moment's numbers of a registry, by node id."""

    def __init__(self, ops: OpRegistry):
        self.ops = ops
        self.nodes = ops.nodes()
        self.inputs = {id(n): list({id(c): c for c in n.inputs()}.values()) for n in self.nodes}
        self.inner = {id(n): ops.tallies(n) for n in self.nodes}
        # Ops above a distribute run on the service: not counted here.
        self.remote = {id(m) for n in self.nodes if self._on_service(n)
                       for c in n.inputs() for m in walk(c)}
        self.cpu = self._gil_bound()
        self.called = {id(n): sum(t.seconds(id(n) in self.cpu and id(n) not in ops.by_index)
                                  for t in ops.tallies(n, callers=True))
                       for n in self.nodes}
        self.work = {id(n): self._work(n) for n in self.nodes}

    def _gil_bound(self) -> set[int]:
        """The ops timed by CPU time: those of a stage whose worker threads take turns at
        the GIL. There, the wall time of an op that lets go of the GIL (NumPy does) would
        hold the other workers' turns."""
        out = set()
        for root in self.ops.by_index_roots():
            stage = self.ops.stages[id(root)]
            if stage.engine == "threads" and stage.parallelism > 1 and (
                    stage.cpu_sec >= _GIL_BOUND * stage.busy_sec / stage.parallelism):
                out.update(id(n) for n in walk(root))
        return out

    def _on_service(self, node: Node) -> bool:
        stage = self.ops.stages.get(id(node))
        return stage is not None and stage.engine == "service"

    def stage(self, node: Node) -> OpStats | None:
        return self.ops.stages.get(id(node))

    def unmeasured(self, node: Node) -> Node | None:
        """The root of the by-index stage ``node`` is in if its readers run in worker
        processes (not counted there; after a switch from threads, counted in part), else
        None."""
        for root in self.ops.by_index_roots():
            if any(n is node for n in walk(root)) and (
                    self.ops.stages[id(root)].engine == "processes" or not any(
                        t.elements for n in walk(root) for t in self.inner.get(id(n), ()))):
                return root
        return None

    def _work(self, node: Node) -> float:
        root = self.unmeasured(node)
        if root is not None:
            # Timed as one in the processes: the stage's time goes to the ops whose UDFs
            # asked for its workers (or to its root).
            udf_ops = [n for n in walk(root) if n.parallel_udf() is not None and n.parallel
                       and n.num_parallel_calls is not None] or [root]
            owners = {id(n) for n in udf_ops}
            return self.stage(root).busy_sec / len(owners) if id(node) in owners else 0.0
        inputs = sum(self.called[id(c)] for c in self.inputs[id(node)])
        stage = self.stage(node)
        if stage is not None and id(node) not in self.ops.by_index:
            # A pool's chunks hold the UDF alone; a prefetch thread's pulls hold the inputs.
            work = stage.busy_sec - (inputs if stage.kind == "prefetch" else 0.0)
        else:
            work = sum(t.seconds(id(node) in self.cpu) for t in self.inner[id(node)]) - inputs
        return max(0.0, work)

    def elements(self, node: Node) -> int | None:
        if id(node) in self.remote:
            return None
        root = self.unmeasured(node)
        if root is not None:  # only the stage's output is counted
            return self.stage(root).elements if node is root else None
        return sum(t.elements for t in self.inner[id(node)])

    def shares(self) -> dict[int, float]:
        """Each op's part of the consumer's time in ``next()``, in seconds."""
        shares: collections.Counter = collections.Counter()
        stack = [(self.ops.plan, self.called[id(self.ops.plan)])]
        while stack:
            node, amount = stack.pop()
            if amount <= 0:
                continue
            parts = self._parts(node)
            total = sum(p for _, p, _ in parts)
            if total <= 0:
                shares[id(node)] += amount
                continue
            for n, part, recurse in parts:
                if recurse:
                    stack.append((n, amount * part / total))
                else:
                    shares[id(n)] += amount * part / total
        return shares

    def _parts(self, node: Node) -> list[tuple[Node, float, bool]]:
        """``(node, seconds, whether to split further)``: where ``node``'s time went."""
        if id(node) in self.ops.by_index:
            subtree = {id(n): n for n in walk(node)}.values()
            return [(n, self.work[id(n)], False) for n in subtree]
        inputs = [(c, self.called[id(c)], True) for c in self.inputs[id(node)]]
        stage = self.stage(node)
        if stage is not None and stage.kind != "prefetch":
            # Its inputs are pulled on the consumer's thread: the rest is waiting for the pool.
            own = max(0.0, self.called[id(node)] - sum(p for _, p, _ in inputs))
        else:
            own = self.work[id(node)]
        return [(node, own, False)] + inputs


def summarize(ops: OpRegistry) -> tuple[list[dict], str | None]:
    """One dict per op of the plan, output first (see ``PipelineStats.ops``), and the
    bottleneck hint: the op that takes most of the consumer's wait, or None."""
    plan = _Plan(ops)
    shares = plan.shares()
    total = sum(shares.values())
    where = _where(plan)
    rows = []
    for node in plan.nodes:
        elements = plan.elements(node)
        per_element = max((t.bytes_per_element for t in plan.inner[id(node)]), default=0.0)
        rows.append({"op": ops.names[id(node)], "elements": elements,
                     "time_sec": plan.work[id(node)], "bytes_per_element": per_element,
                     "bytes": per_element * (elements or 0),
                     "wait_share": shares[id(node)] / total if total > 0 else 0.0,
                     "runs_in": SERVICE if id(node) in plan.remote else where[id(node)]})
    shares_by_row = [r["wait_share"] for r in rows]
    if not rows or max(shares_by_row) <= 0:
        return rows, None
    top = shares_by_row.index(max(shares_by_row))
    row = rows[top]
    return rows, (f"`{row['op']}` takes {row['wait_share']:.0%} of the time the consumer "
                  f"waits for elements; {_advice(plan, plan.nodes[top], row['runs_in'])}")


def _where(plan: _Plan) -> dict[int, str]:
    """The stage each op runs in (its nearest stage at or above it), by node id."""
    where = {}
    stack = [(plan.ops.plan, CONSUMER)]
    while stack:
        node, label = stack.pop()
        stage = plan.stage(node)
        if stage is not None:
            label = stage.label
        where.setdefault(id(node), label)
        if id(node) in plan.ops.by_index:
            for n in walk(node):
                where.setdefault(id(n), label)
            continue
        # A pool's inputs are pulled by its consumer; a prefetch's by its thread.
        below = label if stage is None or stage.kind == "prefetch" else where_consumer(
            plan, node)
        stack.extend((c, below) for c in plan.inputs[id(node)])
    return where


def where_consumer(plan: _Plan, node: Node) -> str:
    """Where the consumer of ``node``'s stage runs: the stage above it, else the consumer."""
    for n in plan.nodes:
        if any(c is node for c in plan.inputs[id(n)]):
            stage = plan.stage(n)
            return stage.label if stage is not None else where_consumer(plan, n)
    return CONSUMER


def _advice(plan: _Plan, node: Node, runs_in: str) -> str:
    service = "move it to the service (ds.distribute(...), see docs/service.md)"
    if plan._on_service(node):
        return ("the service's workers do not keep up: give it more workers "
                "(service.start(num_workers=...)) or make the ops they run cheaper")
    if node.parallel and getattr(node, "num_parallel_calls", None) is None:
        return f"parallelize it (num_parallel_calls=jdata.AUTOTUNE) or {service}"
    if node.parallel and node.num_parallel_calls != AUTOTUNE:
        return (f"raise its num_parallel_calls={node.num_parallel_calls} (or use "
                f"jdata.AUTOTUNE) or {service}")
    if node.parallel:
        return ("it already runs on as many workers as the autotuner finds useful: give it "
                f"more cores (Options(cpu_budget=...)), make it cheaper, or {service}")
    if not node.inputs():
        return ("read ahead in parallel (interleave(..., num_parallel_calls=jdata.AUTOTUNE) "
                f"over files) or {service}")
    if runs_in == CONSUMER:
        return ("it runs on the consumer's thread: add .prefetch(jdata.AUTOTUNE) after it "
                f"so that it overlaps the consumer, or {service}")
    return f"make it cheaper or {service}"
