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

import dataclasses
import functools
import os
import threading
import time
import zlib

import cloudpickle

from jdata.service import _blocks, _rounds, _window, splits

# A job's first block has FIRST_BLOCK elements (the client starts early, and an element's
# size is not known yet); blocks then double while one takes less than BLOCK_SEC to
# produce, up to BLOCK_ELEMENTS and BLOCK_BYTES (a Ray object's overhead is then small
# against its elements). A job's next reads start at the size its last read reached.
FIRST_BLOCK = 1
BLOCK_ELEMENTS = 1 << 16
BLOCK_BYTES = 4 << 20
BLOCK_SEC = 0.02
# A shared job's blocks are read by every consumer, one call each: longer blocks (its
# consumers keep reads in flight, so only the first elements come later).
SHARED_BLOCK_SEC = 0.1
# Reads one worker runs at once (its actor's thread pool).
MAX_READS = 16
_SHARED_SALT = 0x5A4ED


def default_window_bytes() -> int:
    """A shared job's window on a worker: 5% of its node's memory, at least 64 MB."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        memory = 8 << 30
    return max(64 << 20, memory // 20)


def next_block_size(size: int, produced: int, nbytes: int, seconds: float,
                    block_sec: float = BLOCK_SEC) -> int:
    """Elements to ask for next, after a block of ``produced`` elements (of the ``size``
    asked) that took ``seconds`` and weighs ``nbytes``."""
    if produced >= size and seconds < block_sec:
        size *= 2
    elif seconds > 4 * block_sec:  # the elements got costlier: the client waits less
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
        self.busy_sec = 0.0  # producing blocks, summed over reads (a load)
        # Wall time with a read running: elements over it is what the worker makes per
        # second when it is kept busy (its reads run side by side), the autoscaler's rate.
        self.active_sec = 0.0
        self._active_since = 0.0

    def add(self, elements: int, nbytes: int, seconds: float) -> None:
        with self._lock:
            self.elements += elements
            self.bytes += nbytes
            self.busy_sec += seconds

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
            active_sec = self.active_sec
            if self.active:
                active_sec += time.monotonic() - self._active_since
            return {"elements": self.elements, "bytes": self.bytes, "tasks": self.tasks,
                    "active": self.active, "busy_sec": self.busy_sec,
                    "active_sec": active_sec}


class Worker:
    """The actor class (wrapped with ``ray.remote`` by ``jdata.service``)."""

    def __init__(self, worker_id: str, window_bytes: int | None = None,
                 idle_sec: float = 60.0):
        self.worker_id = worker_id
        self._plans: dict[str, tuple] = {}
        self._lock = threading.Lock()
        self._stats = WorkerStats()
        self._block_sizes: dict[str, int] = {}  # by plan fingerprint
        self._window_bytes = window_bytes or default_window_bytes()
        self._idle_sec = idle_sec
        self._windows: dict[str, tuple] = {}  # shared job id -> (window, its iterator)

    def info(self) -> dict:
        """Totals, and each shared window's (idle ones are dropped here: it is pinged)."""
        import ray

        self._drop_idle_windows()
        with self._lock:  # shared windows, and coordinated jobs' rounds
            windows = {job_id: w.snapshot() for job_id, (w, _) in self._windows.items()}
        return {"worker_id": self.worker_id, "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id(), **self._stats.snapshot(),
                "windows": windows}

    # ------------------------------------------------------------ shared jobs

    def read_shared(self, job_id: str, fingerprint: str, plan_ref: list, epoch: int,
                    consumer: str, max_elements: int, position: int | None = None,
                    compression: str | None = None, seq: int = 0) -> tuple:
        """A consumer's next block of a shared job's stream (``distribute(sharing=True)``):
        ``(packed block, skipped, hit, position after)``; see ``_window.SharedWindow``."""
        window = self._window(job_id, fingerprint, plan_ref, epoch)
        elements, failures, nbytes, skipped, hit, after = window.read(consumer, max_elements,
                                                                      position, seq)
        payload = _blocks.encode(elements, failures)
        return _blocks.pack(payload, failures, nbytes, compression), skipped, hit, after

    def leave_shared(self, job_id: str, consumer: str) -> None:
        """A consumer closed its iterator: its cursor goes (the window stays for others)."""
        with self._lock:
            entry = self._windows.get(job_id)
        if entry is not None:
            entry[0].forget(consumer)

    def _window(self, job_id: str, fingerprint: str, plan_ref: list, epoch: int):
        return self._job_buffer(job_id, fingerprint, plan_ref, epoch, lambda produce:
                                _window.SharedWindow(produce, self._window_bytes, FIRST_BLOCK,
                                                     functools.partial(
                                                         next_block_size,
                                                         block_sec=SHARED_BLOCK_SEC)))

    def _job_buffer(self, job_id: str, fingerprint: str, plan_ref: list, epoch: int, make):
        """The buffer of a shared or coordinated job on this worker (made on its first
        read by ``make(produce)``): ``produce(n)`` gives the next at most ``n`` outcomes of
        the job's stream one by one, a failing element kept in its place, as
        ``(elements, failure places, bytes)``."""
        with self._lock:
            entry = self._windows.get(job_id)
        if entry is not None:
            return entry[0]
        it = self._stream_of(fingerprint, plan_ref, epoch)

        def produce(n: int):
            began = time.perf_counter()
            elements, failures = _exact(it, n)
            nbytes = _blocks.nbytes(elements, elements)
            self._stats.add(len(elements), nbytes, time.perf_counter() - began)
            return elements, failures, nbytes

        buffer = make(produce)
        with self._lock:
            entry = self._windows.setdefault(job_id, (buffer, it))
        if entry[0] is not buffer:  # another read made it first
            buffer.close()
            it.close()
        return entry[0]

    # ------------------------------------------------------------ coordinated reads

    def read_rounds(self, job_id: str, fingerprint: str, plan_ref: list, epoch: int,
                    num_consumers: int, consumer_index: int, first_round: int, count: int,
                    bound_sec: float, compression: str | None = None) -> list:
        """Consumer ``consumer_index``'s elements of ``count`` rounds of a coordinated job
        from ``first_round`` on: ``[(packed block of the element, skipped, ended)...]``;
        see ``_rounds.RoundBuffer``."""
        rounds = self._rounds_of(job_id, fingerprint, plan_ref, epoch, num_consumers,
                                 bound_sec)
        out = []
        for element, skipped, ended in rounds.take_many(first_round, count, consumer_index):
            block = [] if element is None else [element]
            failures = (0,) if block and isinstance(element, _blocks.Failure) else ()
            out.append((_blocks.pack(block, failures, _blocks.nbytes(block, block),
                                     compression), skipped, ended))
        return out

    def _rounds_of(self, job_id: str, fingerprint: str, plan_ref: list, epoch: int,
                   num_consumers: int, bound_sec: float):
        return self._job_buffer(job_id, fingerprint, plan_ref, epoch, lambda produce:
                                _rounds.RoundBuffer(produce, num_consumers, bound_sec))

    def _stream_of(self, fingerprint: str, plan_ref: list, epoch: int):
        """The whole plan's iterator, with randomness of this worker's own."""
        from jdata import _planner, _random
        from jdata.runtime.context import Context

        node, options = self._plan(fingerprint, plan_ref)
        # Each worker its own random stream (its own shuffle order and keys), as each
        # worker of tf.data's OFF mode: the consumers read them in turn.
        epoch = _random.mix_epoch(epoch, _SHARED_SALT, zlib.crc32(self.worker_id.encode()))
        return _planner.make_iterator(node, Context(options=options), epoch)

    def _drop_idle_windows(self) -> None:
        now = time.monotonic()
        with self._lock:
            idle = [job_id for job_id, (w, _) in self._windows.items()
                    if now - w.last_read > self._idle_sec]
            dropped = [self._windows.pop(job_id) for job_id in idle]
        for buffer, it in dropped:
            buffer.close()
            it.close()

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
                   compression: str | None = None, put: tuple | None = None):
        """The blocks of one split of the job's plan past ``skip`` outcomes (a streaming
        generator). With ``put=(store, cache fingerprint)`` (autocache) the split's
        elements are written as that cache's part ``split.index`` instead, and the one
        element sent is the part's summary."""
        node, options = self._plan(fingerprint, plan_ref)
        split = splits.Split(**split)
        if put is not None:
            yield self._put(node, options, split, epoch, *put)
            return
        yield from self._stream(
            lambda at: splits.read_split(node, options, split, epoch, at), skip, compression,
            fingerprint)

    def _put(self, node, options, split, epoch: int, store: str, cache_fp: str):
        from jdata.service import autocache

        self._stats.task(1)
        began = time.perf_counter()
        try:
            with splits.read_split(node, options, split, epoch) as it:
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

        node, options = self._plan(fingerprint, plan_ref)
        return dataclasses.asdict(autocache.profile(node, options, store))

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
