"""The client role: ``Dataset.distribute`` and the iterator that reads from the workers.

The iterator registers its job with the dispatcher, leases splits in
batches (reporting the ones it has received whole with the next request),
and keeps up to ``outstanding`` reads running on the workers, each a Ray
streaming generator of blocks. It knows how many elements of each split it
has received, so a split whose worker died is read again elsewhere past
them: every element of an epoch arrives exactly once. With
``deterministic=True`` splits are yielded in split order, so an index-based
pipeline gives the local pipeline's stream bit for bit.

Its state (``get_state``) is the splits yielded whole (as ranges) and the
elements yielded of the others; buffered elements are not in it, and a
restore reads those splits again past what was yielded.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import threading
import time
import uuid
import warnings
from typing import ClassVar

import cloudpickle

from jdata import _fingerprint, _planner
from jdata._constants import INFINITE, UNKNOWN
from jdata._plan import Node
from jdata.runtime import states
from jdata.runtime.iterator import Tunable
from jdata.runtime.stats import OpStats
from jdata.service import _blocks, _ray, _rounds, autocache, splits
from jdata.service import dispatcher as dispatcher_module
from jdata.service.dispatcher import NAME as DISPATCHER_NAME

MODES = ("off", "dynamic", "static")
_LOGGER = logging.getLogger("jdata")
# Writing a cache logs its progress this often.
_PROGRESS_SEC = 10.0
_OP = "distribute"
# Reads kept running per worker: one being consumed, one producing ahead.
_READS_PER_WORKER = 2
# Heartbeats also carry the reports the autoscaler samples (every 4 s).
_HEARTBEAT_SEC = 2.0
# While no lease comes (workers being replaced), ask again this often, for at most this long.
_LEASE_RETRY_SEC = 0.05
_NO_WORKER_SEC = 120.0
# A read waiting longer than this for its next block checks that its worker lives.
_LIVENESS_CHECK_SEC = 2.0
# Elements per read of a shared job's window (a block's worth at most).
_SHARED_BLOCK = 4096
# Coordinated reads: a round whose group is not ready this long after its first request
# is skipped by every consumer.
_ROUND_BOUND_SEC = 2.0
# Runs of rounds a consumer requests ahead, the one it reads included.
_RUNS_AHEAD = 3
# A consumer whose run the others have yet to report waits this long on the dispatcher
# for their reports, then asks again (a bounded wait holds a dispatcher thread briefly).
_AGREE_WAIT_SEC = 0.05


@dataclasses.dataclass(frozen=True)
class ServiceRef:
    """Where a service is (what a plan holds, rather than Ray handles)."""

    address: str | None
    namespace: str
    split_elements: int | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class DistributeNode(Node):
    """See ``Dataset.distribute``."""

    input: Node
    service: ServiceRef
    processing_mode: str = "dynamic"
    job_name: str | None = None
    deterministic: bool | None = None
    compression: str | None = None
    sharing: bool = False
    num_consumers: int | None = None
    consumer_index: int | None = None
    # Autocache: (store, cache fingerprint): each split is written as that cache's part,
    # and the element read for it is the part's summary (see ``_put_cache``).
    cache_put: tuple | None = None
    op_name: ClassVar[str] = _OP

    def cardinality(self) -> int:
        if self.sharing or self.num_consumers is not None:
            return INFINITE
        return UNKNOWN if self.processing_mode == "off" else self.input.cardinality()

    def compute_spec(self):
        return self.input.element_spec()

    def __str__(self):
        return (f"Distribute(processing_mode={self.processing_mode!r}, "
                f"job_name={self.job_name!r}, deterministic={self.deterministic}, "
                f"compression={self.compression!r}, sharing={self.sharing}, "
                f"num_consumers={self.num_consumers}, consumer_index={self.consumer_index})")


def check_splittable(node: Node, mode: str) -> None:
    """A ``ValueError`` when ``node`` cannot be cut into splits, with the way out."""
    reason = splits.splittable(node)
    if reason is not None:
        raise ValueError(f"{_OP}(processing_mode={mode!r}): {reason}; or distribute it with "
                         "processing_mode='off' (every worker runs the whole pipeline)")


def ranges(values) -> list[list[int]]:
    """Sorted ints as ``[start, stop)`` ranges: a done set of a million splits stays small."""
    out: list[list[int]] = []
    for v in sorted(values):
        if out and out[-1][1] == v:
            out[-1][1] = v + 1
        else:
            out.append([v, v + 1])
    return out


def _error_kind(ray, error) -> str:
    """"lost" (the worker or its node went away: read the split elsewhere) or "udf"."""
    lost = (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError,
            ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError,
            ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError)
    return "lost" if isinstance(error, lost) else "udf"


class _Read:
    """One split being read from one worker."""

    __slots__ = ("split", "worker_id", "generator")

    def __init__(self, split: int, worker_id: str, generator):
        self.split, self.worker_id, self.generator = split, worker_id, generator


class _Buffer:
    """A split's received elements not yet yielded: blocks, consumed from the front."""

    __slots__ = ("blocks", "offset", "size")

    def __init__(self):
        self.blocks: collections.deque = collections.deque()  # (elements, failure places)
        self.offset = 0  # into the first block
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, elements: list, failures: tuple) -> None:
        self.blocks.append((elements, failures))
        self.size += len(elements)

    def take(self, n: int) -> list:
        """Up to ``n`` next elements of the first block, ending before its next failure; a
        failure comes alone (``[Failure]``)."""
        elements, failures = self.blocks[0]
        start = self.offset
        stop = min(start + n, len(elements))
        for place in failures:
            if place >= start:
                stop = min(stop, max(place, start + 1))
                break
        out = elements[start:stop]
        self.size -= len(out)
        if stop == len(elements):
            self.blocks.popleft()
            self.offset = 0
        else:
            self.offset = stop
        return out


class _SharedStream:
    """A shared job's stream on one worker: requests in flight and elements received;
    ``base`` is the worker's position of the next element to yield."""

    __slots__ = ("handle", "pending", "buffer", "base", "resume", "seq")

    def __init__(self, handle, resume: int | None):
        self.handle, self.resume = handle, resume
        self.seq = 0  # reads requested: the worker serves them in this order
        self.pending: collections.deque = collections.deque()
        self.buffer = _Buffer()
        self.base = resume or 0


class _DistributeIterator(Tunable):
    # A stage of it.stats() (elements/s, time waited, workers); no knob for the autotuner:
    # the service sizes itself (Tunable's set_parallelism and set_buffer_size do nothing).
    def __init__(self, node: DistributeNode, ctx, epoch: int):
        # A shared job is one infinite stream, whichever iterator of the dataset reads it:
        # every iterator that names the job joins it (the epoch is not part of its name).
        self._node, self._ctx = node, ctx
        self._epoch = 0 if node.sharing or node.num_consumers is not None else epoch
        self._deterministic = node.deterministic if node.deterministic is not None else \
            ctx.options.deterministic
        self._started = False
        self._closed = False
        self._done: set[int] = set()       # splits yielded whole
        self._yielded: dict[int, int] = {}  # elements yielded of splits not done
        self._received: dict[int, int] = {}
        self._buffers: dict[int, _Buffer] = {}
        self._finished: set[int] = set()    # received whole, maybe not yet yielded
        self._to_report: list[int] = []
        self._held: set[int] = set()  # leased to this client, not yet yielded whole
        self._exhausted = False  # the dispatcher has no split left for this client
        self._split_elements = node.service.split_elements
        self._num_splits: int | None = None
        self._waiting_since: float | None = None
        # Received, for the dispatcher's job statistics; shared jobs' reads, hits, skips.
        # "capacity": the elements its reads in flight can hold (the queue fill's scale).
        self._counters = {"bytes": 0, "reads": 0, "hits": 0, "skipped": 0, "rounds": 0,
                          "skipped_rounds": 0, "round_wait_sec": 0.0, "capacity": 1}
        self._round = 0  # coordinated reads: the next round to read
        self._round_restored = False
        self._round_refs: dict = {}  # a run's first round -> (its request, worker id)
        self._round_results: dict = {}  # a run's first round -> its results
        self._schedule: list | None = None
        self._schedule_until = 0
        self._shared: dict[str, _SharedStream] = {}  # by worker id
        self._shared_positions: dict[str, int] = {}  # a restored state's
        self._shared_ended: set[str] = set()
        self._turn = 0
        self._autocache_note = ""  # for it.stats(): how autocache runs this epoch
        # A stage of its own in it.stats(): elements/s, time waited, workers, job progress.
        self.stats = OpStats("workers", parallelism=0, buffer_size=_READS_PER_WORKER,
                             engine="service", engine_reason="not started")
        ctx.autotuner().register(self, _OP, False, False)

    # ------------------------------------------------------------ start-up

    def _start(self) -> None:
        ray = _ray.ray_module()
        if not ray.is_initialized():
            if self._node.service.address is None:
                raise RuntimeError(
                    "distribute: this process is not connected to the service's Ray; iterate "
                    "where service.start() ran, or pass its address to service.start/connect")
            _ray.init_remote(self._node.service.address, self._node.service.namespace)
        from ray.util.client import ray as ray_client

        if ray_client.is_connected():
            raise RuntimeError(
                f"{_OP}: reading through Ray Client (a ray:// address) is not supported: it "
                "cannot stream actor results. Run the trainer inside the cluster "
                "(service.connect('auto')); ray:// works for status, scale and stop")
        self._ray = ray
        node, options = self._node.input, self._ctx.options
        self._dispatcher = ray.get_actor(DISPATCHER_NAME, namespace=self._node.service.namespace)
        node = self._autocache(node, options)
        self._fingerprint = _fingerprint.fingerprint(node)
        mode = self._node.processing_mode
        if mode == "off":
            self._split_plan = None
            self._num_splits = 0
        else:
            self._split_plan = splits.plan_splits(node, options,
                                                  target_elements=self._split_elements,
                                                  epoch=self._epoch)
            self._split_elements = self._split_plan.target_elements
            if self._num_splits is not None and self._num_splits != self._split_plan.num_splits:
                raise ValueError(f"{_OP}: the state has {self._num_splits} splits, this "
                                 f"pipeline {self._split_plan.num_splits}")
            self._num_splits = self._split_plan.num_splits
        self._plan_ref = [ray.put(cloudpickle.dumps((node, options)))]
        self._client_id = uuid.uuid4().hex
        self._job_id, client_timeout = ray.get(self._dispatcher.register.remote(
            self._node.job_name, self._fingerprint, self._epoch, self._num_splits, mode,
            self._client_id, ranges(self._done)))
        self._num_workers = len(self._call(self._dispatcher.workers))
        self.stats.parallelism = self._num_workers
        self.stats.engine_reason = (f"jdata.service job {self._job_id}, {mode}, "
                                    f"{self._num_splits} splits{self._autocache_note}")
        self._reads: dict[int, _Read] = {}
        self._handles: dict = {}
        self._to_report = []
        self._off_streams: list = []
        self._started = True
        self._last_call = time.monotonic()
        self._stop_heartbeat = threading.Event()
        # Not a method: the thread must not keep an abandoned iterator alive (its
        # DatasetIterator's collection closes it, which releases the job).
        threading.Thread(target=_heartbeat, daemon=True, name="jdata-distribute-heartbeat",
                         args=(ray, self._dispatcher, self._job_id, self._client_id,
                               self._stop_heartbeat, min(_HEARTBEAT_SEC, client_timeout / 4),
                               self.stats, self._counters, self._ctx.autotuner())).start()

    # ------------------------------------------------------------ autocache

    def _autocache(self, node: Node, options) -> Node:
        """The plan this epoch runs, for a pipeline with an ``autocache()`` marker: as it
        is ("compute"), or with the marker's prefix (or the whole plan) read from a cache,
        written first when the dispatcher says to put it (``Dispatcher.autocache``)."""
        marker = autocache.find_marker(node)
        if marker is None or self._node.cache_put is not None:
            return node
        if self._node.processing_mode == "off" or self._node.sharing or \
                self._node.num_consumers is not None:
            warnings.warn(f"{_OP}: autocache() has no effect in a job with processing_mode="
                          f"'off', sharing or num_consumers: it computes every epoch",
                          stacklevel=2)
            return node
        allowed = autocache.allowed_modes(autocache.cache_points(node))
        if marker.mode is not None:
            autocache.decide(None, allowed, marker.mode)  # a mode that cannot be: raise now
        prefixes = autocache.prefixes(node, marker)
        keys = {point: _fingerprint.fingerprint(prefixes[point])
                for point in ("marker", "output") if allowed[point] is None}
        whole = _fingerprint.fingerprint(node)
        answer = self._call(self._dispatcher.autocache, whole, keys, allowed, marker.mode,
                            [self._ray.put(cloudpickle.dumps((node, options)))], self._epoch)
        point = answer["point"]
        self._autocache_note = f"; autocache: {answer['action']}" + (
            f" at the {point}" if point else "") + f" ({answer['reason']})"
        if answer["action"] == "compute":
            return node
        store, key = answer["store"], keys[point]
        if answer["action"] == "put":
            try:
                self._put_cache(prefixes[point], options, store, key, whole, point)
            except Exception as e:  # an element failed, or cannot be stored: compute, and
                # the error (if it is an element's) comes in its place as without a cache
                why = f"writing the cache of the {point} failed ({type(e).__name__}: {e})"
                self._call(self._dispatcher.autocache_failed, whole, why)
                self._autocache_note = f"; autocache: compute ({why})"
                return node
        return self._cached_plan(node, marker, point, store, key)

    @staticmethod
    def _cached_plan(node: Node, marker, point: str, store: str, key: str) -> Node:
        """``node`` reading the cache of ``point``: the whole plan, or the marker's subtree,
        becomes one random-access node over the cache (positions kept: the ops above the
        marker see the same positions, so their randomness is the local pipeline's)."""
        cached = autocache.load_node(store, key, autocache.read_manifest(store, key))
        return cached if point == "output" else autocache.replace(node, marker, cached)

    def _put_cache(self, prefix: Node, options, store: str, key: str, whole: str,
                   point: str) -> None:
        """Writes the cache of ``prefix`` through the service: a job over its splits whose
        workers write each split as a part; then the manifest that completes it."""
        from jdata.runtime.context import Context

        began = time.perf_counter()
        put = dataclasses.replace(self._node, input=prefix, job_name=None, deterministic=False,
                                  cache_put=(store, key))
        ctx = Context(options=options)
        it = _planner.make_iterator(put, ctx, self._epoch)
        parts, logged = 0, time.monotonic()
        try:
            for _ in it:  # one summary per split: exactly once, so one per part
                parts += 1
                if time.monotonic() - logged > _PROGRESS_SEC:
                    logged = time.monotonic()
                    _LOGGER.info("autocache: writing the cache of the %s to %s: %d parts, "
                                 "%.0f s", point, store, parts, time.perf_counter() - began)
        finally:
            it.close()
            ctx.stop_tuner()
        manifest = autocache.write_manifest(store, key, parts)
        self._call(self._dispatcher.autocache_written, whole, point, {
            "elements": manifest["elements"], "bytes": manifest["bytes"],
            "parts": parts, "seconds": time.perf_counter() - began})

    def _handle(self, worker_id: str):
        handle = self._handles.get(worker_id)
        if handle is None:
            handle = self._ray.get_actor(worker_id, namespace=self._node.service.namespace)
            self._handles[worker_id] = handle
        return handle

    # ------------------------------------------------------------ leasing and reading

    def _call(self, method, *args):
        """A dispatcher call, retried while the dispatcher restarts (Ray restarts it)."""
        deadline = time.monotonic() + 60.0
        while True:
            try:
                return self._ray.get(method.remote(*args), timeout=30.0)
            except (self._ray.exceptions.ActorDiedError,
                    self._ray.exceptions.ActorUnavailableError,
                    self._ray.exceptions.GetTimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _lease(self, at_least: int = 0) -> None:
        outstanding = _READS_PER_WORKER * max(self._num_workers, 1)
        # at_least: the split to yield next has no read (its worker died before the read
        # started): its lease comes back orphaned even when the reads are full.
        want = max(outstanding - len(self._reads), at_least)
        if want <= 0 and not self._to_report:
            return
        granted, self._exhausted, self._num_workers = self._call(
            self._dispatcher.lease, self._job_id, self._client_id, max(want, 0), outstanding,
            self._to_report)
        self._to_report = []
        self.stats.parallelism = self._num_workers
        self._counters["capacity"] = outstanding * (self._split_elements or 1)
        for split, worker_id in granted:
            self._held.add(split)
            if split not in self._finished:  # an orphan received whole needs no read
                self._start_read(split, worker_id)

    def _start_read(self, split: int, worker_id: str) -> None:
        try:
            handle = self._handle(worker_id)
        except ValueError:  # it died after the grant, before the dispatcher noticed: once
            self._call(self._dispatcher.report_lost, worker_id)  # it has, the lease is
            return  # orphaned and granted again (``_lease(at_least=1)``)
        self._waiting_since = None
        spec = dataclasses.asdict(self._split_plan.split(split))
        generator = handle.read_split.options(num_returns="streaming").remote(
            self._fingerprint, self._plan_ref, spec, self._epoch,
            self._received.get(split, 0), self._node.compression, self._node.cache_put)
        self._reads[split] = _Read(split, worker_id, generator)

    def _wait_ready(self, read: _Read) -> bool:
        """Waits for the read's next block; False if its worker is lost meanwhile.

        A read from a worker whose node went away may never fail by itself, so a
        long wait asks the dispatcher (which pings every worker) whether the
        worker is still alive.
        """
        while True:
            ready, _ = self._ray.wait([read.generator], num_returns=1,
                                      timeout=_LIVENESS_CHECK_SEC)
            if ready:
                return True
            if read.worker_id not in self._call(self._dispatcher.workers):
                return False

    def _lost(self, read: _Read) -> None:
        """A read failed: its split is read again past what was received, on the same
        worker if that is alive, else on the one the dispatcher re-issues it to."""
        del self._reads[read.split]
        self._handles.pop(read.worker_id, None)
        self._call(self._dispatcher.report_lost, read.worker_id)
        alive = self._call(self._dispatcher.workers)
        self._num_workers = self.stats.parallelism = len(alive)
        if read.worker_id in alive:  # the read failed, not the worker: read on past it
            self._start_read(read.split, read.worker_id)

    def _pull(self, read: _Read) -> bool:
        """Receives the read's next block into its split's buffer; False at its end."""
        started = time.perf_counter()
        if not self._wait_ready(read):
            self._lost(read)
            return True
        try:
            ref = next(read.generator)
            block, failures, nbytes = _blocks.unpack(self._ray.get(ref),
                                                     self._node.compression)
        except StopIteration:
            del self._reads[read.split]
            self._finished.add(read.split)
            return False
        except self._ray.exceptions.RayError as e:
            if _error_kind(self._ray, e) == "udf":
                raise _cause(e) from None
            self._lost(read)
            return True
        if block:
            buffer = self._buffers.get(read.split)
            if buffer is None:
                buffer = self._buffers[read.split] = _Buffer()
            buffer.add(block, failures)
            self._received[read.split] = self._received.get(read.split, 0) + len(block)
            self._counters["bytes"] += nbytes
            self.stats.buffered += len(block)
            if not failures:
                self.stats.record_bytes(block[0])
        self.stats.wait_sec += time.perf_counter() - started
        return True

    # ------------------------------------------------------------ iteration

    def __next__(self):
        out = self.next_many(1)
        if not out:
            raise StopIteration
        return out[0]

    def next_many(self, n: int) -> list:
        """Up to ``n`` next elements, from one block (a slice of it): what ``batch`` above
        asks for. A user function's error is raised in its element's place, and the
        elements before it come first, so nothing is lost."""
        if self._closed:
            return []
        if not self._started:
            self._start()
        if self._node.sharing:
            return self._next_shared(n)
        if self._node.num_consumers is not None:
            return self._next_coordinated()
        if self._node.processing_mode == "off":
            return self._next_off(n)
        split = self._ready_in_order() if self._deterministic else self._ready_any()
        if split is None:
            return []
        out = self._buffers[split].take(n)
        k = len(out)
        stats = self.stats
        stats.elements += k
        stats.buffered -= k
        self._yielded[split] = self._yielded.get(split, 0) + k
        if not self._buffers[split] and split in self._finished:
            self._split_yielded(split)
        if type(out[0]) is _blocks.Failure:
            raise out[0].error
        return out

    def _split_yielded(self, split: int) -> None:
        self._held.discard(split)
        self._done.add(split)
        self._to_report.append(split)
        self._yielded.pop(split, None)
        self._buffers.pop(split, None)
        self._finished.discard(split)
        # Reported now, so the dispatcher grants the next split while this one's reads
        # are still full: otherwise one read per worker would be lost to the wait.
        if len(self._reads) < _READS_PER_WORKER * self._num_workers:
            self._lease()

    def _ready_in_order(self) -> int | None:
        """The split to yield from next (it has elements buffered); None at the end.

        Splits in order: the lowest split this client holds (a job of its own
        holds them all in turn; clients of a named job each see theirs in order).
        """
        while True:
            if not self._held:
                self._lease()
                if not self._held:
                    if self._exhausted:
                        return self._finish()
                    self._wait_for_workers()
                    continue
            split = min(self._held)
            if self._buffers.get(split):
                return split
            if split in self._finished:  # an empty split, or one yielded up to its end
                self._split_yielded(split)
                continue
            read = self._reads.get(split)
            if read is None:
                self._lease(at_least=1)
                if split not in self._reads:
                    self._wait_for_workers()
                continue
            self._pull(read)
            if len(self._reads) < _READS_PER_WORKER * self._num_workers:
                self._lease()

    def _ready_any(self) -> int | None:
        """A split with elements buffered (whichever arrived first); None at the end."""
        while True:
            for split, buffer in self._buffers.items():
                if buffer:
                    return split
            for split in list(self._finished):
                self._split_yielded(split)
            self._lease()
            if not self._reads:
                if not self._held and self._exhausted:
                    return self._finish()
                self._wait_for_workers()
                continue
            generators = [r.generator for r in self._reads.values()]
            ready, _ = self._ray.wait(generators, num_returns=1, timeout=1.0)
            for read in list(self._reads.values()):
                if ready and read.generator is ready[0]:
                    self._pull(read)
                    break

    def _wait_for_workers(self) -> None:
        """No lease came: every worker of ours was lost and replacements are starting."""
        if self._waiting_since is None:
            self._waiting_since = time.monotonic()
        elif time.monotonic() - self._waiting_since > _NO_WORKER_SEC:
            raise RuntimeError(f"{_OP}: no lease for {_NO_WORKER_SEC:.0f} s: the service has "
                               "no worker that can run this job (see service.status())")
        time.sleep(_LEASE_RETRY_SEC)

    def _finish(self) -> None:
        """The end of the epoch: the last splits reported, the heartbeat stopped."""
        self._stop_heartbeat.set()
        if self._to_report:
            self._call(self._dispatcher.lease, self._job_id, self._client_id, 0, 0,
                       self._to_report)
            self._to_report = []

    # ------------------------------------------------------------ coordinated reads

    def _next_coordinated(self) -> list:
        """This consumer's element of the next round that is not skipped (one element:
        usually a batch). Rounds are read in runs of ``ROUNDS_PER_READ`` (one request
        each), the next runs requested while this one is read."""
        run = dispatcher_module.ROUNDS_PER_READ
        counters = self._counters
        counters["capacity"] = _RUNS_AHEAD * run
        while True:
            if self._schedule is None or self._round >= self._schedule_until:
                self._refresh_schedule()
            r = self._round
            start = r - r % run
            for ahead in range(start, start + _RUNS_AHEAD * run, run):
                if ahead not in self._round_refs:
                    self._round_refs[ahead] = self._request_run(ahead)
            results = self._round_results.get(start)
            began = time.perf_counter()
            if results is None:
                results, received = self._receive_run(start)
                if self._agree(start, received) == "skip":  # another consumer lost it
                    results = [(None, True, False)] * run
                self._round_results[start] = results
            wait = time.perf_counter() - began
            self.stats.wait_sec += wait
            counters["round_wait_sec"] += wait
            packed, skipped, ended = results[r - start] if r - start < len(results) else \
                (None, False, True)
            self._round += 1
            if self._round % run == 0:  # the run is read: its results go
                self._round_results.pop(start, None)
                self._round_refs.pop(start, None)
            if ended:
                return []
            if skipped:
                counters["skipped_rounds"] += 1
                self._update_round_reason()
                continue
            counters["rounds"] += 1
            block, failures, nbytes = _blocks.unpack(packed, self._node.compression)
            counters["bytes"] += nbytes
            self.stats.elements += len(block)
            self._update_round_reason()
            if failures:
                raise block[0].error
            return block

    def _receive_run(self, start: int) -> tuple[list, bool]:
        """The results of the run of rounds from ``start``, and whether they came: when its
        worker is gone every round is skipped (``_agree`` makes every consumer skip it)."""
        run = dispatcher_module.ROUNDS_PER_READ
        ref, worker_id = self._round_refs[start]
        try:
            if ref is None:
                raise self._ray.exceptions.ActorDiedError()
            while not self._ray.wait([ref], timeout=_LIVENESS_CHECK_SEC)[0]:
                if worker_id not in self._call(self._dispatcher.workers):
                    raise self._ray.exceptions.ActorDiedError()
            return self._ray.get(ref), True
        except self._ray.exceptions.RayError as e:
            if _error_kind(self._ray, e) == "udf":
                raise _cause(e) from None
            self._schedule_until = self._round  # learn the new workers at once
            return [(None, True, False)] * run, False

    def _agree(self, start: int, received: bool) -> str:
        """What every consumer does with the run from ``start``: "use" or "skip". A worker
        killed between its replies to a run leaves it with some consumers only; they all
        skip it (``Dispatcher.run_outcome``)."""
        # Bounded: the others may never report a run (this consumer was restored far behind
        # them, past what the dispatcher keeps): then what it has decides.
        deadline = time.monotonic() + _rounds.CONSUMER_TIMEOUT_SEC
        while time.monotonic() < deadline:  # each call waits up to _AGREE_WAIT_SEC
            outcome = self._call(self._dispatcher.run_outcome, self._job_id, self._client_id,
                                 start, received, _AGREE_WAIT_SEC)
            if outcome != "wait":
                return outcome
        return "use" if received else "skip"

    def _refresh_schedule(self) -> None:
        entries, furthest = self._call(self._dispatcher.schedule, self._job_id,
                                       self._client_id,
                                       self._round if self._schedule is not None else None)
        if self._schedule is None and not self._round_restored:
            self._round = furthest  # a consumer joining a running job starts with the others
        self._schedule = entries
        self._num_workers = self.stats.parallelism = len(entries[-1][1]) if entries else 0
        self._schedule_until = self._round + max(1, dispatcher_module.ROUND_LEAD // 4)
        if not entries:
            self._schedule = None
            self._wait_for_workers()

    def _request_run(self, start: int):
        """The request of the run of rounds from ``start`` to the worker the schedule names
        for it; ``None`` for a worker that is gone (its rounds are skipped, as by every
        consumer)."""
        run = dispatcher_module.ROUNDS_PER_READ
        workers = self._schedule[0][1]
        for first, entry_workers in self._schedule:
            if first <= start:
                workers = entry_workers
        worker_id = workers[(start // run) % len(workers)]
        try:
            handle = self._handle(worker_id)
        except ValueError:
            return None, worker_id
        ref = handle.read_rounds.remote(
            self._job_id, self._fingerprint, self._plan_ref, self._epoch,
            self._node.num_consumers, self._node.consumer_index, start, run,
            _ROUND_BOUND_SEC, self._node.compression)
        # Its arrival is reported as it comes (on Ray's thread), not when this consumer
        # reaches the run: the others' ``_agree`` need not wait for this one to get there
        # (one thread driving several replicas reaches them one after another).
        ref.future().add_done_callback(functools.partial(
            _report_arrival, self._dispatcher, self._job_id, self._client_id, start))
        return ref, worker_id

    def _update_round_reason(self) -> None:
        c = self._counters
        self.stats.engine_reason = (
            f"jdata.service coordinated job {self._job_id}: consumer "
            f"{self._node.consumer_index} of {self._node.num_consumers}, round {self._round}; "
            f"{c['rounds']} rounds read, {c['skipped_rounds']} skipped, "
            f"{1e3 * c['round_wait_sec'] / max(1, c['rounds'] + c['skipped_rounds']):.1f} ms "
            "mean wait")

    # ------------------------------------------------------------ shared jobs

    def _next_shared(self, n: int) -> list:
        """A shared job (``sharing=True``): each worker's window in turn, a block's worth
        (up to ``n``) from each; a worker lost is left out, new ones are read too."""
        while True:
            if not self._shared or self._turn % 64 == 0:
                alive = self._refresh_shared()
                if not self._shared and alive and set(alive) <= self._shared_ended:
                    return []  # every worker's stream ended (a pipeline that was not infinite)
            if not self._shared:
                self._wait_for_workers()
                continue
            self._waiting_since = None
            worker_id = list(self._shared)[self._turn % len(self._shared)]
            self._turn += 1
            stream = self._shared[worker_id]
            if not stream.buffer and not self._pull_shared(worker_id, stream):
                continue
            out = stream.buffer.take(n)
            stream.base += len(out)
            self.stats.elements += len(out)
            self.stats.buffered -= len(out)
            if type(out[0]) is _blocks.Failure:
                raise out[0].error
            return out

    def _refresh_shared(self) -> list:
        """Streams for the workers that run now (kept for those that still do); returns
        those workers."""
        alive = self._call(self._dispatcher.workers)
        self._num_workers = self.stats.parallelism = len(alive)
        self._counters["capacity"] = _READS_PER_WORKER * len(alive) * _SHARED_BLOCK
        for worker_id in list(self._shared):
            if worker_id not in alive:
                self._drop_shared(worker_id)
        for worker_id in alive:
            if worker_id not in self._shared and worker_id not in self._shared_ended:
                try:
                    handle = self._handle(worker_id)
                except ValueError:  # gone already: the dispatcher will notice
                    continue
                self._shared[worker_id] = _SharedStream(
                    handle, self._shared_positions.pop(worker_id, None))
        return alive

    def _drop_shared(self, worker_id: str) -> None:
        stream = self._shared.pop(worker_id)
        self.stats.buffered -= len(stream.buffer)
        self._handles.pop(worker_id, None)

    def _request_shared(self, stream: "_SharedStream") -> None:
        # The first request says where a restored iterator stood; then the worker's cursor.
        stream.pending.append(stream.handle.read_shared.remote(
            self._job_id, self._fingerprint, self._plan_ref, self._epoch, self._client_id,
            _SHARED_BLOCK, stream.resume, self._node.compression, stream.seq))
        stream.resume = None
        stream.seq += 1

    def _pull_shared(self, worker_id: str, stream: "_SharedStream") -> bool:
        """Receives the stream's next block (two requests kept in flight); False if the
        worker was lost or its stream ended."""
        while len(stream.pending) < _READS_PER_WORKER:
            self._request_shared(stream)
        started = time.perf_counter()
        ref = stream.pending.popleft()
        try:
            while not self._ray.wait([ref], timeout=_LIVENESS_CHECK_SEC)[0]:
                if worker_id not in self._call(self._dispatcher.workers):
                    raise self._ray.exceptions.ActorDiedError()
            packed, skipped, hit, after = self._ray.get(ref)
            block, failures, nbytes = _blocks.unpack(packed, self._node.compression)
        except self._ray.exceptions.RayError as e:
            if _error_kind(self._ray, e) == "udf":
                raise _cause(e) from None
            self._drop_shared(worker_id)
            return False
        self.stats.wait_sec += time.perf_counter() - started
        counters = self._counters
        counters["bytes"] += nbytes
        counters["reads"] += 1
        counters["hits"] += hit
        counters["skipped"] += skipped
        if not block:  # a finite pipeline ended on this worker
            self._drop_shared(worker_id)
            self._shared_ended.add(worker_id)
            return False
        stream.base = after - len(block) - len(stream.buffer)
        stream.buffer.add(block, failures)
        self.stats.buffered += len(block)
        self.stats.engine_reason = (
            f"jdata.service shared job {self._job_id}: {counters['hits']} of "
            f"{counters['reads']} reads from the windows, {counters['skipped']} elements "
            "skipped (fell behind)")
        return True

    def _next_off(self, n: int) -> list:
        # Every worker runs the whole pipeline (tf.data's OFF): their streams in turn, a
        # block's worth (up to n) from each.
        if not self._off_streams:
            workers = self._call(self._dispatcher.workers)
            self._off_counts = getattr(self, "_off_counts", [0] * len(workers))
            self._off_streams = [
                [self._handle(w).read_all.options(num_returns="streaming").remote(
                    self._fingerprint, self._plan_ref, self._epoch, self._off_counts[i],
                    self._node.compression), _Buffer()]
                for i, w in enumerate(workers)]
            self._turn = 0
        while any(s is not None for s in self._off_streams):
            slot = self._turn % len(self._off_streams)
            self._turn += 1
            stream = self._off_streams[slot]
            if stream is None:
                continue
            if not stream[1]:
                try:
                    block, failures, nbytes = _blocks.unpack(self._ray.get(next(stream[0])),
                                                             self._node.compression)
                    stream[1].add(block, failures)
                    self._counters["bytes"] += nbytes
                except StopIteration:
                    self._off_streams[slot] = None
                    continue
                except self._ray.exceptions.RayError as e:
                    raise _cause(e) from None
                if not stream[1]:
                    continue
            out = stream[1].take(n)
            self._off_counts[slot] += len(out)
            self.stats.elements += len(out)
            if type(out[0]) is _blocks.Failure:
                raise out[0].error
            return out
        return []

    # ------------------------------------------------------------ state

    def snapshot(self):
        if self._node.num_consumers is not None:  # the next round to read
            return {"round": self._round}
        if self._node.sharing:  # where each worker's stream stands, for this consumer
            positions = dict(self._shared_positions)
            positions.update({w: s.base for w, s in self._shared.items()})
            return {"shared": positions}
        if self._node.processing_mode == "off":
            return {"counts": list(getattr(self, "_off_counts", []))}
        return {"split_elements": self._split_elements, "num_splits": self._num_splits,
                "done": ranges(self._done),
                "partial": sorted([s, n] for s, n in self._yielded.items() if n)}

    def set_state(self, state):
        if self._started:
            raise ValueError(f"{_OP}: restore into a new iterator (ds.iterator(state))")
        if self._node.num_consumers is not None:
            self._round = states.Fields(state, _OP, ("round",)).int("round")
            self._round_restored = True
            return
        if self._node.sharing:
            positions = states.Fields(state, _OP, ("shared",)).state["shared"]
            if not isinstance(positions, dict) or len(positions) > 100_000 or \
                    not all(isinstance(k, str) for k in positions):
                raise states.invalid(_OP, "shared", "is not a map of worker ids to positions")
            self._shared_positions = {k: states.check_int(v, _OP, "shared")
                                      for k, v in positions.items()}
            return
        if self._node.processing_mode == "off":
            fields = states.Fields(state, _OP, ("counts",))
            self._off_counts = fields.ints("counts")
            return
        fields = states.Fields(state, _OP, ("split_elements", "num_splits", "done", "partial"))
        elements = state["split_elements"]
        if elements is not None:
            elements = fields.int("split_elements", 1)
        if state["num_splits"] is None:  # taken before the first element: nothing to skip
            fields.list("done", length=0), fields.list("partial", length=0)
            self._split_elements = elements
            return
        num_splits = fields.int("num_splits")
        done = set()
        for pair in fields.list("done", max_length=num_splits):
            pair = states.check_ints(pair, _OP, "done", 0, num_splits)
            if len(pair) != 2 or pair[0] >= pair[1]:
                raise states.invalid(_OP, "done", f"{pair} is not a [start, stop) range")
            done.update(range(*pair))
        partial = {}
        for pair in fields.list("partial", max_length=num_splits):
            pair = states.check_ints(pair, _OP, "partial")
            if len(pair) != 2 or not pair[0] < num_splits or pair[0] in done:
                raise states.invalid(_OP, "partial", f"{pair} is not [split, elements yielded]")
            partial[pair[0]] = pair[1]
        self._split_elements, self._num_splits = elements, num_splits
        self._done, self._yielded = done, partial
        self._received = dict(partial)

    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._started:
            self._stop_heartbeat.set()
            if not self._ray.is_initialized():
                return
            for worker_id, stream in self._shared.items():  # our cursors go
                try:
                    stream.handle.leave_shared.remote(self._job_id, self._client_id)
                except Exception:  # the worker is gone
                    pass
            for read in self._reads.values():  # workers stop producing for us
                try:
                    self._ray.cancel(read.generator)
                except Exception:  # finished, or not cancellable: it ends by itself
                    pass
            self._reads = {}
            try:
                self._dispatcher.release.remote(self._job_id, self._client_id)
            except Exception:  # the cluster is gone: nothing to release
                pass


def _heartbeat(ray, dispatcher, job_id: str, client_id: str, stop: threading.Event,
               period: float, stats: OpStats, counters: dict, tuner) -> None:
    """Tells the dispatcher that the client lives (a training step, or an evaluation, may
    take longer than its client timeout), with its totals for the job's statistics and
    the autoscaler: its clock, and the time its consumer waited, which is the wait of the
    pipeline's outermost stage (the last one built), the user's loop its consumer."""
    while not stop.wait(period):
        if not ray.is_initialized():
            return  # the service stopped: a call would start (or join) another Ray
        stages = tuner.live()
        consumer = stages[-1].stats if stages else stats
        report = {"elements": stats.elements, "wait_sec": stats.wait_sec,
                  "buffered": stats.buffered, "time": time.monotonic(),
                  "consumer_wait_sec": consumer.wait_sec, **counters}
        try:
            dispatcher.heartbeat.remote(job_id, client_id, report)
        except Exception:  # the dispatcher restarting: the next call retries
            pass


def _report_arrival(dispatcher, job_id: str, client_id: str, start: int, future) -> None:
    """A coordinated run's reply came: tell the dispatcher, without waiting (a failed reply
    is reported when the consumer reaches the run)."""
    try:
        if future.exception() is None:
            dispatcher.run_outcome.remote(job_id, client_id, start, True)
    except Exception:  # cancelled, or the service is gone: the consumer reports it itself
        pass


def _cause(error):
    """The user's exception inside a Ray task error (a UDFError from the worker's plan)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


_planner.register(DistributeNode, iterator=_DistributeIterator)
