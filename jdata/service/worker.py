"""The worker role: runs the part of a plan above ``distribute`` for clients.

A worker is a Ray actor (one per worker, ``num_cpus`` declared so that a Ray
autoscaler can add nodes for it). It runs jdata's own runtime, threads and
worker processes included, and hands out **blocks** of elements
(``_worker_reads``), stacked where they can be (``_blocks``): Ray serializes
them with pickle protocol 5, so NumPy arrays travel through the object store
without copies on one node and arrive read-only, as elements are values.
Reads are streaming generators with backpressure: the worker produces a few
blocks ahead of the client, no more.

What it reads (``ReadSpec``): a **split** of a job (``dynamic``/``static``), or a
**slot** (``off``): the whole pipeline with randomness of the slot's own, a pure
function of the key, the epoch and the slot (slot 0 is the local pipeline's
stream, so one slot gives the local stream bit for bit). Shared and coordinated
jobs keep a buffer per (job, slot) here (``_worker_buffers``). A job the
dispatcher removed is stopped (``stop_job``): its reads end at their next block.

Plans travel once per job: the client puts the cloudpickled plan in the
object store and the worker keeps the decoded plan by job, never by
fingerprint (two pipelines a fingerprint mistook for one would run each
other's plan). A job's plan goes with the job (``stop_job``), and any plan
no read used for ``PLAN_IDLE_SEC`` goes at the next ping (a later read of
its job decodes it again): a worker's memory does not grow with the jobs it
ever ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time

import cloudpickle

from jdata import _random
from jdata.runtime import segments
from jdata.service import _blocks, _rounds, _worker_buffers, _worker_reads, splits
from jdata.service._status import memory_bytes
from jdata.service._worker_reads import BLOCK_BYTES as BLOCK_BYTES
from jdata.service._worker_reads import BLOCK_ELEMENTS as BLOCK_ELEMENTS
from jdata.service._worker_reads import BLOCK_SEC as BLOCK_SEC
from jdata.service._worker_reads import FIRST_BLOCK as FIRST_BLOCK
from jdata.service._worker_reads import next_block_size as next_block_size

# Reads one worker runs at once (its actor's thread pool).
MAX_READS = 16
# Blocks a read produces ahead of what its client took (Ray's generator backpressure).
READ_AHEAD = 2
_SLOT_SALT = _random.salt("service.slot")
# A stopped job is remembered this long (a read of it that starts late ends at once).
_STOPPED_SEC = 3600.0
# A plan no read used for this long is dropped (a named job without clients keeps its
# ledger for an hour; its plan, which may hold a source's arrays, need not wait).
PLAN_IDLE_SEC = 120.0


def slot_epoch(epoch: int, slot: int) -> int:
    """The epoch a slot's stream runs: slot 0 the job's own, the others mixed with theirs."""
    return epoch if slot == 0 else _random.mix_epoch(epoch, _SLOT_SALT, slot)


@dataclasses.dataclass(frozen=True)
class ReadSpec:
    """One read: ``unit`` of job ``job_id`` (a ``splits.Split`` as a dict, or a slot
    number) from its ``skip``-th outcome. ``checked``: pickle each element before
    sending it (a read that failed on this side is tried again so)."""

    job_id: str
    fingerprint: str
    plan_ref: list
    epoch: int
    unit: dict | int
    skip: int = 0
    compression: str | None = None
    checked: bool = False
    put: tuple | None = None  # autocache: (store, cache fingerprint) to write the split to


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """A worker's answer to a ping: who it is and its totals since it started."""

    worker_id: str
    pid: int
    node_id: str
    counters: dict  # elements, bytes, tasks, active, busy_sec, active_sec, plans, memory_bytes
    windows: dict  # (job id) -> a shared window's or rounds buffer's figures


class WorkerStats:
    """Counters for ``Service.status()``: thread-safe, cheap."""

    def __init__(self):
        self._lock = threading.Lock()
        self.elements = self.bytes = self.tasks = self.active = 0
        self.busy_sec = 0.0  # producing blocks, summed over reads (a load)
        # Wall time with a read running: elements over it is what the worker makes per
        # second when it is kept busy (its reads run side by side), the autoscaler's rate.
        self.active_sec = 0.0
        self._active_since = 0.0
        # Wall time with at least one block in production (``busy`` in the status: a share
        # of the time, at most 1), and the same time weighted by how many were (``load``:
        # above 1 where reads produce side by side). Accrued as it passes, so a window of
        # the status counts the production within it, not whole blocks finished in it.
        self.producing_sec = self.load_sec = 0.0
        self._producing, self._producing_since = 0, time.monotonic()

    def add(self, elements: int, nbytes: int, seconds: float) -> None:
        with self._lock:
            self.elements += elements
            self.bytes += nbytes
            self.busy_sec += seconds

    @contextlib.contextmanager
    def producing(self):
        """Around the making of a block (or an autocache part)."""
        self._count_producing(1)
        try:
            yield
        finally:
            self._count_producing(-1)

    def _count_producing(self, delta: int) -> None:
        with self._lock:
            self._accrue(time.monotonic())
            self._producing += delta

    def _accrue(self, now: float) -> None:
        """Adds the time since the last change of ``_producing`` (the lock held)."""
        if self._producing:
            self.producing_sec += now - self._producing_since
            self.load_sec += self._producing * (now - self._producing_since)
        self._producing_since = now

    def task(self, delta: int) -> None:
        with self._lock:
            now = time.monotonic()
            if self.active:
                self.active_sec += now - self._active_since
            self._active_since = now
            self.active += delta
            self.tasks += max(delta, 0)

    def snapshot(self) -> dict:
        """Totals since the worker started (the dispatcher derives recent rates)."""
        with self._lock:
            now = time.monotonic()
            active_sec = self.active_sec
            if self.active:
                active_sec += now - self._active_since
            self._accrue(now)
            # ``clock``: the dispatcher's rates of these divide by the worker's own time.
            return {"elements": self.elements, "bytes": self.bytes, "tasks": self.tasks,
                    "active": self.active, "busy_sec": self.busy_sec,
                    "active_sec": active_sec, "producing_sec": self.producing_sec,
                    "load_sec": self.load_sec, "clock": now}


def _decode_plan(plan_ref: list) -> tuple:
    """The job's ``(node, options)`` from the object store."""
    import ray

    try:
        return cloudpickle.loads(ray.get(plan_ref[0]))
    except ImportError as e:
        # A UDF of a module only the trainer has comes by name: every read of the job
        # fails alike, so the client is told what is missing and how to ship it.
        from jdata._errors import WorkerImportError

        raise WorkerImportError(e.name, f"{type(e).__name__}: {e}") from e


class _Plan:
    """A job's decoded plan, ``(node, options)``, and when a read last asked for it. A read
    keeps its own reference: dropping the entry never disturbs a running read."""

    __slots__ = ("plan", "used")

    def __init__(self, plan: tuple):
        self.plan, self.used = plan, time.monotonic()


# A shared or coordinated buffer nobody read for this many consumer timeouts (or the
# client timeout, if longer) goes.
BUFFER_IDLE_FACTOR = 3


class Worker:
    """The actor class (wrapped with ``ray.remote`` by the dispatcher)."""

    def __init__(self, worker_id: str, window_bytes: int | None = None,
                 idle_sec: float = 60.0):
        self.worker_id = worker_id
        self._lock = threading.Lock()  # guards _plans and _stopped
        self._plans: dict[str, _Plan] = {}  # by job id
        self._stopped: dict[str, float] = {}  # job id -> when it was stopped
        self._stats = WorkerStats()
        self._block_sizes: dict[str, int] = {}  # by plan fingerprint
        # A coordinated job's buffer must outlive its consumers' wait for a missing peer:
        # made again, it would hand its rounds other groups than the ones it gave.
        self._buffers = _worker_buffers.Buffers(
            window_bytes, max(idle_sec, BUFFER_IDLE_FACTOR * _rounds.CONSUMER_TIMEOUT_SEC))
        # A worker killed may take its process engine's fork server along (Ray ends a dead
        # worker's children) before that unlinks the shared memory the worker's pipelines
        # left: the next worker to start on the machine does.
        segments.sweep(segments.session())

    def info(self) -> WorkerInfo:
        """Totals, and each shared or coordinated buffer's (idle ones go here: it is pinged,
        and so do plans no read used for ``PLAN_IDLE_SEC``)."""
        import ray

        now = time.monotonic()
        with self._lock:
            for job_id in [j for j, p in self._plans.items()
                           if now - p.used > PLAN_IDLE_SEC]:
                del self._plans[job_id]
            plans = len(self._plans)
        counters = {**self._stats.snapshot(), "plans": plans, "memory_bytes": memory_bytes()}
        return WorkerInfo(self.worker_id, os.getpid(), ray.get_runtime_context().get_node_id(),
                          counters, self._buffers.snapshot())

    def stop_job(self, job_id: str) -> None:
        """The job is gone: its reads end at their next block, its buffers go."""
        now = time.monotonic()
        with self._lock:
            self._stopped[job_id] = now
            self._plans.pop(job_id, None)
            for old in [j for j, t in self._stopped.items() if now - t > _STOPPED_SEC]:
                del self._stopped[old]
        self._buffers.drop_job(job_id)

    def _stopped_check(self, job_id: str):
        return lambda: job_id in self._stopped

    def _plan(self, job_id: str, plan_ref: list) -> tuple:
        with self._lock:
            plan = self._plans.get(job_id)
            if plan is not None:
                plan.used = time.monotonic()
                return plan.plan
        decoded = _decode_plan(plan_ref)
        with self._lock:
            if job_id not in self._stopped:
                self._plans.setdefault(job_id, _Plan(decoded))
        return decoded

    # ------------------------------------------------------------ splits and slots

    def read_split(self, spec: ReadSpec):
        """The blocks of one split past ``spec.skip`` outcomes (a streaming generator).
        With ``spec.put`` (autocache) the split is written as that cache's part instead,
        and the one element sent is the part's summary."""
        node, options = self._plan(spec.job_id, spec.plan_ref)
        split = splits.Split(**spec.unit)
        if spec.put is not None:
            yield self._put(node, options, split, spec.epoch, *spec.put)
            return
        yield from self._stream(spec, lambda at: splits.read_split(
            node, options, split, spec.epoch, at))

    def read_slot(self, spec: ReadSpec):
        """The blocks of a slot's stream (the whole plan, its randomness the slot's) past
        ``spec.skip`` outcomes (processing mode "off")."""
        node, options = self._plan(spec.job_id, spec.plan_ref)
        epoch = slot_epoch(spec.epoch, spec.unit)
        yield from self._stream(spec, lambda at: _worker_buffers.open_stream(
            node, options, epoch, at))

    def _stream(self, spec: ReadSpec, open_at):
        self._stats.task(1)
        try:
            yield from _worker_reads.stream(
                open_at, spec.skip, compression=spec.compression, stats=self._stats,
                stopped=self._stopped_check(spec.job_id), checked=spec.checked,
                size=self._block_sizes.get(spec.fingerprint, FIRST_BLOCK),
                sizes=self._block_sizes, key=spec.fingerprint)
        finally:
            self._stats.task(-1)

    def _put(self, node, options, split, epoch: int, store: str, cache_fp: str):
        from jdata.service import autocache

        self._stats.task(1)
        began = time.perf_counter()
        try:
            with self._stats.producing(), splits.read_split(node, options, split, epoch) as it:
                part = autocache.write_part(store, cache_fp, split.index, it)
        finally:
            self._stats.task(-1)
        self._stats.add(part["records"], part["bytes"], time.perf_counter() - began)
        summary = [{"part": split.index, "records": part["records"], "bytes": part["bytes"]}]
        return _blocks.pack(_blocks.encode(summary, ()), (), 64, None)

    def profile(self, fingerprint: str, plan_ref: list, store: str) -> dict:
        """Autocache's profile of the job's plan (``autocache.profile``), measured here
        with the store's probes."""
        from jdata.service import autocache

        node, options = _decode_plan(plan_ref)  # once: not kept
        return dataclasses.asdict(autocache.profile(node, options, store))

    # ------------------------------------------------------------ shared and coordinated

    def read_shared(self, spec: ReadSpec, consumer: str, max_elements: int,
                    position: int | None, seq: int, token: str | None = None) -> tuple:
        """A consumer's next block of a shared job's slot (``distribute(sharing=True)``):
        ``(packed block, skipped, hit, position after, the window's token)``; see
        ``_window.SharedWindow``. ``token``: the window the consumer read before; if this
        is another (that one went idle), the block is ``None``: the consumer asks again
        with its position."""
        window = self._buffers.window(spec, self._stream_of(spec), self._stats)
        if token is not None and token != window.token:
            return None, 0, False, None, window.token
        elements, failures, nbytes, skipped, hit, after = window.read(consumer, max_elements,
                                                                      position, seq)
        elements, failures = _worker_reads.sendable(elements, failures, after - len(elements))
        payload = _blocks.encode(elements, failures)
        return (_blocks.pack(payload, failures, nbytes, spec.compression), skipped, hit, after,
                window.token)

    def leave_shared(self, job_id: str, consumer: str) -> None:
        """A consumer closed its iterator: its cursors go (the windows stay for others)."""
        self._buffers.forget(job_id, consumer)

    def read_rounds(self, spec: ReadSpec, num_consumers: int, consumer_index: int,
                    first_round: int, count: int, bound_sec: float,
                    turn: tuple[str, int] | None = None) -> list:
        """Consumer ``consumer_index``'s elements of ``count`` rounds of a coordinated job
        from ``first_round`` on: ``[(packed block of the element, skipped, ended)...]``;
        ``turn``: ``(reader, n)``, its reader's ``n``-th request here; see
        ``_rounds.RoundBuffer``."""
        rounds = self._buffers.rounds(spec, self._stream_of(spec), self._stats, num_consumers,
                                      bound_sec)
        out = []
        for k, (element, skipped, ended) in enumerate(
                rounds.take_many(first_round, count, consumer_index, turn)):
            block = [] if element is None else [element]
            failures = (0,) if block and isinstance(element, _blocks.Failure) else ()
            block, failures = _worker_reads.sendable(block, failures, first_round + k)
            out.append((_blocks.pack(block, failures, _blocks.nbytes(block, block),
                                     spec.compression), skipped, ended))
        return out

    def _stream_of(self, spec: ReadSpec):
        """Opens the slot's whole-plan stream (once per buffer: called lazily)."""
        def open_it():
            node, options = self._plan(spec.job_id, spec.plan_ref)
            return _worker_buffers.open_stream(node, options,
                                               slot_epoch(spec.epoch, spec.unit), 0)
        return open_it
