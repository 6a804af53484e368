"""The worker role: runs the part of a plan above ``distribute`` over leased splits.

A worker is a Ray actor (one per worker, ``num_cpus`` declared so that a Ray
autoscaler can add nodes for it). It runs jdata's own runtime, threads and
worker processes included, and hands out **blocks** of elements: lists that
Ray serializes with pickle protocol 5, so NumPy arrays travel through the
object store without copies on one node and arrive read-only, as elements
are values. Reads are streaming generators: Ray keeps a few blocks buffered
ahead of the client (``BUFFERED_BLOCKS``) while the worker goes on.

Plans travel once per job: the client puts the cloudpickled plan in the
object store and the worker keeps the decoded plan by fingerprint.
"""

from __future__ import annotations

import os
import pickle
import threading
import time

import cloudpickle

from jdata.service import splits

# Elements and bytes per block: small enough for the client to start early,
# big enough that a block's overhead (a Ray object) is amortized.
BLOCK_ELEMENTS = 256
BLOCK_BYTES = 4 << 20
# Blocks a worker keeps produced ahead of the client, per read.
BUFFERED_BLOCKS = 4
# Reads one worker runs at once (its actor's thread pool).
MAX_READS = 16


def element_bytes(element) -> int:
    """A cheap size estimate: the arrays' and strings' bytes of a pytree."""
    if isinstance(element, dict):
        return sum(element_bytes(v) for v in element.values())
    if isinstance(element, (tuple, list)):
        return sum(element_bytes(v) for v in element)
    if isinstance(element, (bytes, str)):
        return len(element)
    return getattr(element, "nbytes", 8)


class Failure:
    """An element whose user function raised (a ``jdata.UDFError``), sent in its place.

    The client raises it where the element would have been, and its split
    goes on after it, as a local iterator does (``ignore_errors`` below
    ``distribute`` skips it); it counts as received for a re-read's ``skip``.
    """

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error

    def __reduce__(self):
        return (Failure, (self.error,))


def outcomes(it):
    """An iterator's elements, with a ``Failure`` for each element that raised ``UDFError``."""
    from jdata._errors import UDFError

    while True:
        try:
            yield next(it)
        except StopIteration:
            return
        except UDFError as e:
            yield Failure(e)


def blocks(elements):
    """Groups an iterator's elements into lists of at most BLOCK_ELEMENTS / BLOCK_BYTES."""
    block, size = [], 0
    for element in elements:
        block.append(element)
        size += 64 if isinstance(element, Failure) else element_bytes(element)
        if len(block) >= BLOCK_ELEMENTS or size >= BLOCK_BYTES:
            yield block
            block, size = [], 0
    if block:
        yield block


CODECS = ("lz4", "zstd")


def _codec(name: str):
    try:
        if name == "lz4":
            import lz4.frame as lz4_frame

            return lz4_frame.compress, lz4_frame.decompress
        import zstandard

        return zstandard.ZstdCompressor().compress, zstandard.ZstdDecompressor().decompress
    except ImportError as e:
        raise ImportError(f"compression={name!r} needs its codec: pip install "
                          "'jdata[service]'") from e


def pack(block: list, compression: str | None):
    """What a worker sends: the block itself (Ray moves its arrays without copies on a
    node), or its pickle compressed for links between nodes."""
    if compression is None:
        return block
    return _codec(compression)[0](pickle.dumps(block, protocol=pickle.HIGHEST_PROTOCOL))


def unpack(payload, compression: str | None) -> list:
    if compression is None:
        return payload
    return pickle.loads(_codec(compression)[1](payload))


class WorkerStats:
    """Counters for ``Service.status()``: thread-safe, cheap."""

    def __init__(self):
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.elements = self.bytes = self.tasks = self.active = 0

    def add(self, block: list) -> None:
        with self._lock:
            self.elements += len(block)
            self.bytes += sum(element_bytes(e) for e in block)

    def task(self, delta: int) -> None:
        with self._lock:
            self.active += delta
            self.tasks += max(delta, 0)

    def snapshot(self) -> dict:
        with self._lock:
            seconds = max(time.monotonic() - self.started, 1e-9)
            return {"elements": self.elements, "bytes": self.bytes, "tasks": self.tasks,
                    "active": self.active, "elements_per_sec": self.elements / seconds,
                    "bytes_per_sec": self.bytes / seconds}


class Worker:
    """The actor class (wrapped with ``ray.remote`` by ``jdata.service``)."""

    def __init__(self, worker_id: str):
        self.worker_id = worker_id
        self._plans: dict[str, tuple] = {}
        self._lock = threading.Lock()
        self._stats = WorkerStats()

    def info(self) -> dict:
        import ray

        return {"worker_id": self.worker_id, "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id(), **self._stats.snapshot()}

    def _plan(self, fingerprint: str, plan_ref: list) -> tuple:
        with self._lock:
            plan = self._plans.get(fingerprint)
        if plan is None:
            import ray

            plan = cloudpickle.loads(ray.get(plan_ref[0]))
            with self._lock:
                self._plans[fingerprint] = plan
        return plan

    def read_split(self, fingerprint: str, plan_ref: list, split: dict, epoch: int, skip: int,
                   compression: str | None = None):
        """The blocks of one split of the job's plan (a streaming generator)."""
        node, options = self._plan(fingerprint, plan_ref)
        it = splits.read_split(node, options, splits.Split(**split), epoch, skip)
        try:
            yield from self._stream(outcomes(it), compression)
        finally:
            it.close()

    def read_all(self, fingerprint: str, plan_ref: list, epoch: int, skip: int,
                 compression: str | None = None):
        """The blocks of the whole plan (processing mode "off")."""
        from jdata import _planner
        from jdata.runtime.context import Context

        node, options = self._plan(fingerprint, plan_ref)
        it = _planner.make_iterator(node, Context(options=options), epoch)
        try:
            stream = outcomes(it)
            for _ in range(skip):
                if next(stream, None) is None:
                    return
            yield from self._stream(stream, compression)
        finally:
            it.close()

    def _stream(self, elements, compression: str | None):
        self._stats.task(1)
        try:
            for block in blocks(elements):
                self._stats.add(block)
                yield pack(block, compression)
        finally:
            self._stats.task(-1)
