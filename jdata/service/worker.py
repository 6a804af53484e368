"""The worker role: runs the part of a plan above ``distribute`` over leased splits.

A worker is a Ray actor (one per worker, ``num_cpus`` declared so that a Ray
autoscaler can add nodes for it). It runs jdata's own runtime, threads and
worker processes included, and hands out **blocks** of elements, read with
``next_many`` (one tight loop per block) and stacked where they can be
(``jdata.service._blocks``): Ray serializes them with pickle protocol 5, so
NumPy arrays travel through the object store without copies on one node and
arrive read-only, as elements are values. Blocks grow while they are cheap
to produce, so a cheap pipeline's elements travel by the ten thousand and a
costly one's first elements come early. Reads are streaming generators: the
worker produces ahead while the client consumes.

Plans travel once per job: the client puts the cloudpickled plan in the
object store and the worker keeps the decoded plan by fingerprint.
"""

from __future__ import annotations

import os
import threading
import time

import cloudpickle

from jdata.service import _blocks, splits

# A job's first block has FIRST_BLOCK elements (the client starts early, and an element's
# size is not known yet); blocks then double while one takes less than BLOCK_SEC to
# produce, up to BLOCK_ELEMENTS and BLOCK_BYTES (a Ray object's overhead is then small
# against its elements). A job's next reads start at the size its last read reached.
FIRST_BLOCK = 1
BLOCK_ELEMENTS = 1 << 16
BLOCK_BYTES = 4 << 20
BLOCK_SEC = 0.02
# Reads one worker runs at once (its actor's thread pool).
MAX_READS = 16


def next_block_size(size: int, produced: int, nbytes: int, seconds: float) -> int:
    """Elements to ask for next, after a block of ``produced`` elements (of the ``size``
    asked) that took ``seconds`` and weighs ``nbytes``."""
    if produced >= size and seconds < BLOCK_SEC:
        size *= 2
    elif seconds > 4 * BLOCK_SEC:  # the elements got costlier: the client waits less
        size //= 2
    if nbytes and produced:
        size = min(size, max(1, BLOCK_BYTES * produced // nbytes))
    return max(1, min(size, BLOCK_ELEMENTS))


def _exact(it, n: int) -> tuple[list, tuple]:
    """Up to ``n`` outcomes of ``it`` one by one: the elements, with a ``Failure`` in the
    place of each that raised ``UDFError``, and those places."""
    from jdata._errors import UDFError

    elements, failures = [], []
    while len(elements) < n:
        try:
            elements.append(next(it))
        except StopIteration:
            break
        except UDFError as e:
            failures.append(len(elements))
            elements.append(_blocks.Failure(e))
    return elements, tuple(failures)


class WorkerStats:
    """Counters for ``Service.status()``: thread-safe, cheap."""

    def __init__(self):
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.elements = self.bytes = self.tasks = self.active = 0
        self.busy_sec = 0.0  # producing blocks (the dispatcher turns it into a load)

    def add(self, elements: int, nbytes: int, seconds: float) -> None:
        with self._lock:
            self.elements += elements
            self.bytes += nbytes
            self.busy_sec += seconds

    def task(self, delta: int) -> None:
        with self._lock:
            self.active += delta
            self.tasks += max(delta, 0)

    def snapshot(self) -> dict:
        """Totals since the worker started (the dispatcher derives recent rates)."""
        with self._lock:
            return {"elements": self.elements, "bytes": self.bytes, "tasks": self.tasks,
                    "active": self.active, "busy_sec": self.busy_sec}


class Worker:
    """The actor class (wrapped with ``ray.remote`` by ``jdata.service``)."""

    def __init__(self, worker_id: str):
        self.worker_id = worker_id
        self._plans: dict[str, tuple] = {}
        self._lock = threading.Lock()
        self._stats = WorkerStats()
        self._block_sizes: dict[str, int] = {}  # by plan fingerprint

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
        """The blocks of one split of the job's plan past ``skip`` outcomes (a streaming
        generator)."""
        node, options = self._plan(fingerprint, plan_ref)
        split = splits.Split(**split)
        yield from self._stream(
            lambda at: splits.read_split(node, options, split, epoch, at), skip, compression,
            fingerprint)

    def read_all(self, fingerprint: str, plan_ref: list, epoch: int, skip: int,
                 compression: str | None = None):
        """The blocks of the whole plan past ``skip`` outcomes (processing mode "off")."""
        from jdata import _planner
        from jdata.runtime.context import Context

        node, options = self._plan(fingerprint, plan_ref)

        def open_at(at: int):
            it = _planner.make_iterator(node, Context(options=options), epoch)
            try:
                while at > 0:
                    passed = len(_exact(it, min(at, BLOCK_ELEMENTS))[0])
                    if not passed:
                        break
                    at -= passed
            except BaseException:
                it.close()
                raise
            return it

        yield from self._stream(open_at, skip, compression, fingerprint)

    def _stream(self, open_at, skip: int, compression: str | None, fingerprint: str):
        """Blocks of the iterator ``open_at(skip)``, read with ``next_many``.

        ``next_many`` may lose the elements of its call before a failing one, so
        on a ``UDFError`` the read opens again past the elements sent
        (``open_at``) and goes on element by element: every outcome is sent
        once, in order.
        """
        from jdata._errors import UDFError

        self._stats.task(1)
        it = None
        sent, exact = skip, False
        size = self._block_sizes.get(fingerprint, FIRST_BLOCK)
        try:
            it = open_at(skip)
            while True:
                began = time.perf_counter()
                failures: tuple = ()
                if exact:
                    elements, failures = _exact(it, size)
                else:
                    try:
                        elements = it.next_many(size)
                    except UDFError:
                        it.close()
                        it, exact = open_at(sent), True
                        continue
                if not elements:
                    return
                sent += len(elements)
                payload = _blocks.encode(elements, failures)
                nbytes = _blocks.nbytes(payload, elements)
                seconds = time.perf_counter() - began
                self._stats.add(len(elements), nbytes, seconds)
                size = next_block_size(size, len(elements), nbytes, seconds)
                self._block_sizes[fingerprint] = size
                yield _blocks.pack(payload, failures, nbytes, compression)
        finally:
            if it is not None:
                it.close()
            self._stats.task(-1)
