"""jdata.service: the tf.data service on Ray — a dispatcher and workers that run the part of
a pipeline above ``Dataset.distribute`` on other CPUs, with exactly-once delivery.

Ray gives the cluster, placement, object transfer, actor restarts and
authentication; jdata adds the service's semantics as Ray actors. Nothing of
Ray is imported outside this package, and only when a service is started or
joined (``pip install 'jdata[service]'``).

    from jdata import service
    with service.start(num_workers=2) as svc:           # a local Ray on 127.0.0.1
        for batch in jdata.range(1000).map(f).distribute(svc).batch(32):
            ...

(``docs/design.md`` describes the roles; ``docs/migration.md`` compares
them with tf.data's service.)
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
import warnings

from jdata.service import _ray
from jdata.service.client import ServiceRef
from jdata.service.dispatcher import NAME as _DISPATCHER

# A client silent for this long (no lease, no heartbeat) loses its leases.
CLIENT_TIMEOUT_SEC = 60.0
# start() and scale() wait this long for their workers to run, then warn.
_WORKERS_WAIT_SEC = 60.0


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    pid: int | None
    node_id: str | None


@dataclasses.dataclass(frozen=True)
class WorkerStatus:
    """A worker: ``state`` "running", "starting" (waiting for its process, maybe for a
    node with room: it gets leases once up) or "unreachable" (it missed a ping: lost
    soon); ``tasks`` reads served, ``active`` running now, ``elements``/``bytes``
    produced in all; the rates and ``busy`` (the share of a CPU spent producing blocks)
    are over the last 10 s."""

    worker_id: str
    pid: int | None
    node_id: str | None
    state: str = "running"
    tasks: int = 0
    active: int = 0
    elements: int = 0
    bytes: int = 0
    elements_per_sec: float = 0.0
    bytes_per_sec: float = 0.0
    busy: float = 0.0


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """A job: its splits (done, leased, orphaned by lost workers) and clients; and from
    the clients' reports, the elements they yielded, hold buffered (the queue's fill),
    their rates over the last 10 s and the share of time they waited for workers.

    A shared job (``distribute(sharing=True)``): ``shared_hit_rate``, the share of its
    clients' reads served from the workers' windows without computing; ``skipped``,
    the elements they lost by falling behind a window; ``window_bytes``, the windows'
    size on the workers; ``computed``, the elements the workers computed for it.

    A coordinated job (``num_consumers=``): ``rounds`` its consumers read (summed),
    ``skipped_rounds`` they skipped together (no element ready within the bound), and
    ``round_wait_sec``, the mean wait for a round's element.
    """

    job_id: str
    name: str | None
    epoch: int
    mode: str
    num_splits: int
    done: int
    leased: int
    orphaned: int
    clients: int
    elements: int = 0
    buffered: int = 0
    elements_per_sec: float = 0.0
    bytes_per_sec: float = 0.0
    wait_fraction: float = 0.0
    shared: bool = False
    shared_hit_rate: float = 0.0
    skipped: int = 0
    window_bytes: int = 0
    computed: int = 0
    coordinated: bool = False
    rounds: int = 0
    skipped_rounds: int = 0
    round_wait_sec: float = 0.0


@dataclasses.dataclass(frozen=True)
class ServiceStatus:
    dispatcher: ProcessInfo
    workers: list
    jobs: list

    def __str__(self):
        lines = [f"dispatcher pid {self.dispatcher.pid} on node {self.dispatcher.node_id}",
                 f"{len(self.workers)} workers:"]
        lines += [f"  {w.worker_id} pid {w.pid}: {w.active} reads running ({w.tasks} in "
                  f"all), {w.elements_per_sec:,.0f} elements/s, "
                  f"{w.bytes_per_sec / 1e6:,.1f} MB/s, {w.busy:.0%} busy"
                  if w.state == "running" else f"  {w.worker_id}: {w.state}"
                  for w in self.workers]
        lines.append(f"{len(self.jobs)} jobs:")
        lines += [f"  {j.job_id} ({j.name or 'unnamed'}, {j.mode}, epoch {j.epoch}): "
                  f"{j.done}/{j.num_splits} splits done, {j.leased} leased, "
                  f"{j.orphaned} orphaned, {j.clients} clients; {j.elements:,} elements "
                  f"yielded, {j.elements_per_sec:,.0f} elements/s, "
                  f"{j.bytes_per_sec / 1e6:,.1f} MB/s, {j.buffered:,} buffered, "
                  f"{j.wait_fraction:.0%} of the time waiting"
                  + (f"; shared: {j.shared_hit_rate:.0%} of reads from the windows "
                     f"({j.window_bytes / 1e6:,.1f} MB), {j.computed:,} elements computed, "
                     f"{j.skipped:,} skipped" if j.shared else "")
                  + (f"; coordinated: {j.rounds:,} rounds read, {j.skipped_rounds:,} skipped, "
                     f"{j.round_wait_sec * 1e3:,.1f} ms mean wait" if j.coordinated else "")
                  for j in self.jobs]
        return "\n".join(lines)


class Service:
    """A running service: pass it to ``Dataset.distribute``. A context manager."""

    def __init__(self, dispatcher, ref: ServiceRef, owned: bool, temp_dir: str | None = None):
        self._dispatcher = dispatcher
        self.ref = ref
        self._owned = owned
        self._temp_dir = temp_dir  # the journal's directory, when start() made it

    def status(self) -> ServiceStatus:
        """The dispatcher, each worker (pid, node, reads, rates) and each job."""
        ray = _ray.ray_module()
        raw = ray.get(self._dispatcher.status.remote())
        names = {f.name for f in dataclasses.fields(WorkerStatus)}
        workers = [WorkerStatus(**{k: v for k, v in w.items() if k in names})
                   for w in raw["workers"]]
        return ServiceStatus(ProcessInfo(**raw["dispatcher"]), workers,
                             [JobStatus(**j) for j in raw["jobs"]])

    def scale(self, num_workers: int, *, timeout: float = 60.0) -> None:
        """Sets the number of workers (a removed worker's leases are read elsewhere).

        Waits up to ``timeout`` seconds for new workers to run, then warns: the
        others get leases once they start (when the cluster has room for them).
        """
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"scale: num_workers={num_workers!r} must be an int >= 1")
        _ray.ray_module().get(self._dispatcher.scale.remote(num_workers))
        _wait_for_workers(self._dispatcher, num_workers, "scale", timeout)

    def stop(self) -> None:
        """Stops the workers and the dispatcher (and the embedded Ray this process started)."""
        ray = _ray.ray_module()
        if not ray.is_initialized():
            return
        try:
            ray.get(self._dispatcher.stop.remote(), timeout=30)
            ray.kill(self._dispatcher)
        except Exception:  # already gone
            pass
        if self._owned:
            ray.shutdown()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start(address: str | None = None, num_workers: int = 1, max_workers: int | None = None,
          work_dir: str | None = None, namespace: str = "jdata", *, worker_cpus: float = 1.0,
          split_elements: int | None = None, client_timeout: float = CLIENT_TIMEOUT_SEC,
          window_bytes: int | None = None, **ray_init_kw) -> Service:
    """Starts the service (or joins the dispatcher that runs in ``namespace``, as it is:
    with a warning when its worker count differs from ``num_workers``).

    Args:
      address: ``None`` for an embedded local Ray on 127.0.0.1 with token
        authentication; or a cluster's address (``"auto"``, ``"ray://host:10001"``).
      num_workers: worker actors to keep running.
      max_workers: reserved for the autoscaler (must be >= ``num_workers``).
      work_dir: where the dispatcher journals (SQLite WAL); a temporary
        directory by default.
      namespace: the Ray namespace of the dispatcher and workers.
      worker_cpus: CPUs each worker actor declares (what a Ray autoscaler adds
        nodes for).
      split_elements: elements per split; ``None`` sizes splits at a few
        hundred milliseconds of work each, measured.
      client_timeout: seconds after which a silent client's leases are released (and
        a shared job's window no client reads is dropped).
      window_bytes: the sliding window of a shared job (``distribute(sharing=True)``)
        on each worker; ``None``: 5% of the worker's node memory, at least 64 MB.
      **ray_init_kw: passed to ``ray.init``.
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"service.start: num_workers={num_workers!r} must be an int >= 1")
    if max_workers is not None and max_workers < num_workers:
        raise ValueError(f"service.start: max_workers={max_workers} < num_workers={num_workers}")
    if window_bytes is not None and (isinstance(window_bytes, bool)
                                     or not isinstance(window_bytes, int) or window_bytes < 1):
        raise ValueError(f"service.start: window_bytes={window_bytes!r} must be an int >= 1")
    if not isinstance(worker_cpus, (int, float)) or worker_cpus < 0:
        raise ValueError(f"service.start: worker_cpus={worker_cpus!r} must be >= 0")
    ray = _ray.ray_module()
    owned = not ray.is_initialized()
    if address is None:
        _ray.init_local(namespace, **ray_init_kw)
    else:
        _ray.init_remote(address, namespace, **ray_init_kw)
    temp_dir = tempfile.mkdtemp(prefix="jdata-service-") if work_dir is None and \
        address is None else None
    work_dir = work_dir or temp_dir or tempfile.mkdtemp(prefix="jdata-service-")
    try:
        running = ray.get_actor(_DISPATCHER, namespace=namespace)
    except ValueError:
        running = None
    if running is not None:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
        workers = len(ray.get(running.workers.remote()))
        if workers != num_workers:
            warnings.warn(
                f"service.start: a dispatcher already runs in namespace {namespace!r} with "
                f"{workers} workers: joined it as it is (num_workers={num_workers} and the "
                "other settings are not applied); svc.scale(n) changes its worker count, or "
                "start another service with namespace=...", stacklevel=2)
        return Service(running, ServiceRef(address, namespace, split_elements), owned)
    head = _head_node(ray)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from jdata.service import dispatcher as dispatcher_module

    actor = ray.remote(dispatcher_module.Dispatcher).options(
        name=_DISPATCHER, namespace=namespace, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=-1, max_concurrency=32, num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=head, soft=False))
    handle = actor.remote(work_dir, namespace, num_workers, float(worker_cpus),
                          float(client_timeout), window_bytes)
    _wait_for_workers(handle, num_workers, "service.start", _WORKERS_WAIT_SEC)
    return Service(handle, ServiceRef(address, namespace, split_elements), owned, temp_dir)


def _wait_for_workers(dispatcher, num_workers: int, what: str, timeout: float) -> None:
    """Until ``num_workers`` workers run (joined); after ``timeout`` seconds a warning
    (the cluster may be adding nodes for them: they join when up)."""
    ray = _ray.ray_module()
    deadline = time.monotonic() + timeout
    while True:
        running = len(ray.get(dispatcher.workers.remote()))
        if running >= num_workers:
            return
        if time.monotonic() > deadline:
            warnings.warn(f"{what}: {running} of {num_workers} workers run after "
                          f"{timeout:g} s; the others wait for room in the "
                          "cluster (each asks for worker_cpus CPUs) and join when they start; "
                          "see svc.status()", stacklevel=3)
            return
        time.sleep(0.05)  # polling the dispatcher, which starts them


def connect(address: str | None = None, namespace: str = "jdata", **ray_init_kw) -> Service:
    """Joins a running service (``address=None``: the Ray this process already runs)."""
    ray = _ray.ray_module()
    if not ray.is_initialized():
        if address is None:
            raise RuntimeError("service.connect: no Ray in this process; pass the cluster's "
                               "address")
        _ray.init_remote(address, namespace, **ray_init_kw)
    try:
        handle = ray.get_actor(_DISPATCHER, namespace=namespace)
    except ValueError:
        raise RuntimeError(f"service.connect: no jdata dispatcher in namespace {namespace!r}; "
                           "start one with service.start()") from None
    return Service(handle, ServiceRef(address, namespace), owned=False)


def _head_node(ray) -> str:
    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return node["NodeID"]
    return ray.get_runtime_context().get_node_id()


__all__ = ["start", "connect", "Service", "ServiceStatus", "ProcessInfo", "WorkerStatus",
           "JobStatus"]
