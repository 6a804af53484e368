"""jdata.service: the tf.data service on Ray — a dispatcher and workers that run the part of
a pipeline above ``Dataset.distribute`` on other CPUs, with exactly-once delivery.

Ray gives the cluster, placement, object transfer, actor restarts and
authentication; jdata adds the service's semantics as Ray actors. Nothing of
Ray is imported outside this package, and only when a service is started or
joined (``pip install 'jdata-jax[service]'``).

    from jdata import service
    with service.start(num_workers=2) as svc:           # a local Ray on 127.0.0.1
        for batch in jdata.range(1000).map(f).distribute(svc).batch(32):
            ...

(The guides at https://jdata-jax.readthedocs.io: "The data service" describes the
roles; "Migrating from tf.data" compares them with tf.data's service.)

A ``Service`` stops only what it started: ``stop()`` (or leaving its ``with``)
stops the dispatcher and workers if this ``Service`` created the dispatcher;
one that joined a running service (``service.connect``, or ``service.start``
finding a dispatcher in its namespace, which it warns about) only disconnects,
and ``stop(force=True)`` stops the service for every client.
"""

from __future__ import annotations

import numbers
import re
import shutil
import tempfile
import time
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, Self

from jdata import errors as _errors
from jdata._constants import AUTOTUNE
from jdata._validate import as_int
from jdata.service import _ray, _version, transport
from jdata.service._status import AutocacheStatus as AutocacheStatus
from jdata.service._status import AutoscalerStatus as AutoscalerStatus
from jdata.service._status import JobStatus as JobStatus
from jdata.service._status import ProcessInfo as ProcessInfo
from jdata.service._status import ScalingDecision as ScalingDecision
from jdata.service._status import ServiceStatus as ServiceStatus
from jdata.service._status import WorkerStatus as WorkerStatus
from jdata.service.client import ServiceRef
from jdata.service.dispatcher import NAME as _DISPATCHER

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# A client silent for this long (no lease, no heartbeat) loses its leases.
CLIENT_TIMEOUT_SEC = 60.0
# start() and scale() wait this long for their workers to run, then warn.
_WORKERS_WAIT_SEC = 60.0
# A Service that shuts down its embedded Ray after stopping the service first waits this
# long for the clients to leave: a trainer whose cluster goes under it is killed without
# a word, one that left first could raise ServiceStoppedError (they learn it within
# transport.LIVENESS_CHECK_SEC when reading, at their next element otherwise).
_CLIENTS_GRACE_SEC = 10.0
_CLIENTS_POLL_SEC = 0.1


class Service:
    """A running service: pass it to ``Dataset.distribute``. A context manager, which
    stops the service on exit if it started it (see ``stop``)."""

    def __init__(self, dispatcher: Any, ref: ServiceRef, owned: bool,
                 temp_dir: str | None = None, *, started: bool = False,
                 embedded: bool = False) -> None:
        self._dispatcher = dispatcher
        self.ref = ref
        self._owned = owned  # this process's Ray connection was made for this Service
        self._started = started  # this Service created the dispatcher
        self._embedded = embedded  # the Ray is this process's own: it goes with it
        self._temp_dir = temp_dir  # the journal's directory, when start() made it

    def status(self) -> ServiceStatus:
        """The dispatcher, each worker (pid, node, reads, rates) and each job."""
        status: ServiceStatus = _connected_get(self._dispatcher.status, "svc.status()")
        return status

    def _repr_html_(self) -> str:
        """A notebook's view: the address, then the status's tables (or, for a service
        that cannot answer, why: a repr never raises)."""
        from jdata.service import _html

        try:
            return _html.service_html(self.ref, self.status())
        except Exception as e:  # noqa: BLE001 - stopped, unreachable: said in the view
            return _html.service_html(self.ref, error=f"{type(e).__name__}: {e}")

    def scale(self, num_workers: int, *, timeout: float = 60.0) -> None:
        """Sets a fixed number of workers (a removed worker's leases are read elsewhere),
        which stops the autoscaler; ``jdata.AUTOTUNE`` hands the count back to it.

        Waits up to ``timeout`` seconds for new workers to run, then warns: the
        others get leases once they start (when the cluster has room for them).
        """
        num_workers = _check_workers(num_workers, "scale")
        _connected_get(lambda: self._dispatcher.scale.remote(num_workers), "svc.scale()")
        if num_workers != AUTOTUNE:
            _wait_for_workers(self._dispatcher, num_workers, "scale", timeout)

    def plot_scaling(self, path: str | None = None) -> Figure:
        """The autoscaler's decisions as a figure (``pip install 'jdata-jax[plot]'``): the
        worker count and the consumers' batch time over time, a marker per decision.
        Saved to ``path`` when given; returns the matplotlib ``Figure``."""
        from jdata.runtime.stats_plot import new_figure

        scaling = self.status().autoscaler
        if scaling is None:
            raise ValueError("plot_scaling: this service has a fixed worker count; start it "
                             "with num_workers=jdata.AUTOTUNE (or svc.scale(jdata.AUTOTUNE))")
        decisions = scaling.decisions
        t0 = decisions[0].time if decisions else 0.0
        times = [d.time - t0 for d in decisions]
        fig: Figure = new_figure("plot_scaling", path, (8, 4))
        workers_ax = fig.subplots()
        workers_ax.step(times, [d.target for d in decisions], where="post", color="C0",
                        label="workers decided")
        workers_ax.plot(times, [d.workers for d in decisions], "o", color="C0",
                        label="workers measured")
        workers_ax.set_xlabel("seconds")
        workers_ax.set_ylabel("workers")
        batch_ax = workers_ax.twinx()
        batch_ax.plot(times, [d.batch_sec * 1e3 for d in decisions], "s--", color="C1",
                      label="batch time (ms per element)")
        batch_ax.set_ylabel("ms per element")
        fig.legend(loc="upper right")
        workers_ax.set_title(f"jdata.service autoscaler: {scaling.phase}, "
                             f"{scaling.target} workers")
        fig.tight_layout()
        if path is not None:
            fig.savefig(path)
        return fig

    def stop(self, force: bool = False) -> None:
        """Stops the workers and the dispatcher if this ``Service`` started them (and the
        embedded Ray this process started); their clients' iterators raise
        ``ServiceStoppedError``.

        A ``Service`` that joined a running service (``service.connect``, or
        ``service.start`` that found one) does not stop it: other trainers may read
        from it. It only disconnects (ends the Ray connection it made), and warns;
        ``force=True`` stops the service for every client (``jdata service stop``).
        """
        if not (self._started or force):
            where = _ray.describe(self.ref.address, self.ref.namespace)
            warnings.warn(
                f"svc.stop(): not stopping the service at {where}: this Service joined it, "
                "another process started it (and other trainers may read from it); this "
                "process only disconnects. svc.stop(force=True) stops it for every client",
                stacklevel=2)
        self._close(self._started or force)

    def _close(self, stop_service: bool) -> None:
        ray = _ray.ray_module()
        if ray.is_initialized():
            readers = []
            if stop_service:
                readers = transport.stop_readers(self._dispatcher)
                _stop_dispatcher(ray, self._dispatcher)
            if self._owned:
                deadline = time.monotonic() + _CLIENTS_GRACE_SEC
                transport.wait_for_readers(readers, deadline)
                if stop_service and self._embedded:
                    _wait_for_other_drivers(ray, deadline)
                ray.shutdown()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close(self._started)  # a joined service: disconnects (its start warned)


def _stop_dispatcher(ray: ModuleType, dispatcher: Any) -> None:
    try:
        ray.get(dispatcher.stop.remote(), timeout=30)
    except Exception:  # already gone; killed all the same
        pass
    try:
        ray.kill(dispatcher)  # for good: no restart
    except Exception:
        pass


def _wait_for_other_drivers(ray: ModuleType, deadline: float) -> None:
    """Until no other process is connected to this process's Ray (its trainers left), or
    ``deadline``."""
    try:
        from ray._private import state  # the GCS's job table: needs no dashboard

        own = ray.get_runtime_context().get_job_id()
        while time.monotonic() < deadline and any(
                not job["IsDead"] and job["JobID"] != own for job in state.jobs()):
            time.sleep(_CLIENTS_POLL_SEC)
    except Exception:  # a Ray without that table: shut down without waiting
        pass


def _check_workers(num_workers: int, what: str) -> int:
    """``num_workers`` as a Python int (a NumPy integer is one), once checked."""
    count = as_int(num_workers)
    if count is None or (count < 1 and count != AUTOTUNE):
        raise ValueError(f"{what}: num_workers={num_workers!r} must be an int >= 1 or "
                         "jdata.AUTOTUNE")
    return count


def start(address: str | None = None, num_workers: int = AUTOTUNE,
          max_workers: int | None = None,
          work_dir: str | None = None, namespace: str = "jdata", *, worker_cpus: float = 1.0,
          split_elements: int | None = None, client_timeout: float = CLIENT_TIMEOUT_SEC,
          window_bytes: int | None = None, cache_dir: str | None = None,
          job_timeout: float | None = None, **ray_init_kw: Any) -> Service:
    """Starts the service, or joins the dispatcher that runs in ``namespace`` as it is,
    with a warning (its settings stay; the ``Service`` returned then does not stop it,
    see ``Service.stop``; a ``ServiceVersionError`` if its jdata speaks another
    protocol). A dispatcher that cannot start raises its own error (a ``JournalError``
    for a ``work_dir`` whose journal is of another version), else ``ServiceStartError``.

    Args:
      address: ``None`` for an embedded local Ray on 127.0.0.1 with token
        authentication; or a cluster's address (``"auto"``, ``"ray://host:10001"``).
      num_workers: worker actors to keep running; ``jdata.AUTOTUNE`` (the default)
        starts one and lets Cachew's autoscaler set the count from the clients'
        batch times (see ``svc.status().autoscaler`` and ``svc.plot_scaling()``).
      max_workers: the autoscaler's bound; ``None``: as many as the cluster's CPUs
        hold (its CPUs over ``worker_cpus``, when the service starts). Must be >=
        ``num_workers``.
      work_dir: where the dispatcher journals (SQLite WAL); a temporary
        directory by default.
      namespace: the Ray namespace of the dispatcher and workers.
      worker_cpus: CPUs each worker actor declares (what a Ray autoscaler adds
        nodes for).
      split_elements: elements per split, for the jobs of clients that give none
        (``service.connect(split_elements=...)``); ``None`` sizes splits at a few
        hundred milliseconds of work each, measured.
      client_timeout: seconds after which a silent client's leases go back (from its
        last ``get_state()``: what it yielded since died with it), and a shared job's
        window no client reads is dropped.
      job_timeout: seconds a named job with no client left is kept, so that its clients'
        restores find it as they left it (exactly once across them); ``None``: an hour.
      window_bytes: the sliding window of a shared job (``distribute(sharing=True)``)
        on each worker; ``None``: 5% of the worker's node memory, at least 64 MB.
      cache_dir: autocache's store (``Dataset.autocache()``): a directory, or an fsspec
        URL, that the workers and clients all reach; caches are kept under their
        prefix's fingerprint, so later jobs and runs with the same prefix read them.
        ``None``: ``<work_dir>/autocache``.
      **ray_init_kw: passed to ``ray.init``.
    """
    num_workers = _check_workers(num_workers, "service.start")
    if max_workers is not None:
        max_count = as_int(max_workers)
        if max_count is None or max_count < max(num_workers, 1):
            raise ValueError(f"service.start: max_workers={max_workers!r} must be an int >= "
                             f"num_workers ({num_workers}) and >= 1")
        max_workers = max_count
    if window_bytes is not None:
        window_count = as_int(window_bytes)
        if window_count is None or window_count < 1:
            raise ValueError(f"service.start: window_bytes={window_bytes!r} must be an int >= 1")
        window_bytes = window_count
    if isinstance(worker_cpus, bool) or not isinstance(worker_cpus, numbers.Real) or \
            not worker_cpus >= 0:
        raise ValueError(f"service.start: worker_cpus={worker_cpus!r} must be >= 0")
    split_elements = _check_split_elements(split_elements, "service.start")
    for name, value in (("client_timeout", client_timeout), ("job_timeout", job_timeout)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                  or not value > 0):
            raise ValueError(f"service.start: {name}={value!r} must be a number of seconds > 0")
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
        _check_version(ray, running, address, namespace, "service.start", owned)
        _warn_joined(ray, running, address, namespace, num_workers)
        split_elements = split_elements or ray.get(running.split_elements.remote())
        return Service(running, ServiceRef(address, namespace, split_elements), owned)
    head = _head_node(ray)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from jdata.service import dispatcher as dispatcher_module

    actor = ray.remote(dispatcher_module.Dispatcher).options(
        name=_DISPATCHER, namespace=namespace, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=-1, max_concurrency=32, num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=head, soft=False))
    handle = actor.remote(work_dir, namespace, num_workers, float(worker_cpus),
                          float(client_timeout), window_bytes, max_workers, cache_dir,
                          None if job_timeout is None else float(job_timeout), split_elements)
    try:
        _wait_for_workers(handle, max(num_workers, 1), "service.start", _WORKERS_WAIT_SEC)
    except ray.exceptions.RayActorError as e:  # its constructor raised: it will not restart
        if owned:
            ray.shutdown()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
        raise _start_error(e) from None
    return Service(handle, ServiceRef(address, namespace, split_elements), owned, temp_dir,
                   started=True, embedded=owned and address is None)


def _check_version(ray: ModuleType, dispatcher: Any, address: str | None, namespace: str,
                   what: str, owned: bool) -> None:
    """``_version.check``; a Ray connected only for this is disconnected when it fails."""
    try:
        _version.check(ray, dispatcher, _ray.describe(address, namespace), what)
    except _errors.ServiceVersionError:
        if owned:
            ray.shutdown()
        raise


def _warn_joined(ray: ModuleType, running: Any, address: str | None, namespace: str,
                 num_workers: int) -> None:
    workers = len(ray.get(running.workers.remote()))
    where = _ray.describe(address, namespace)
    if workers != num_workers and num_workers != AUTOTUNE:
        ignored = (f"num_workers={num_workers} and the other settings are not applied; "
                   "svc.scale(n) changes its worker count")
    else:
        ignored = "the settings given here are not applied"
    warnings.warn(
        f"service.start: a dispatcher already runs at {where} with {workers} workers: "
        f"joined it as it is ({ignored}). Another process started it: this Service does not "
        "stop it on stop() or exit, it only disconnects (svc.stop(force=True) stops it for "
        "every client); start a service of your own with namespace=...", stacklevel=3)


# The last line of a traceback in Ray's report of a failed actor: "module.Class: message".
_RAISED = re.compile(r"^(?:\w+\.)*(\w+): (.+)$", re.MULTILINE)


def _start_error(error: BaseException) -> Exception:
    """The dispatcher's own error out of Ray's report that its constructor raised (a
    60-line traceback, as text): a jdata error as the dispatcher raised it (a journal of
    another version is a ``JournalError``), else a ``ServiceStartError`` with its line."""
    raised = _RAISED.findall(str(error))
    if not raised:
        return _errors.ServiceStartError(f"service.start: the dispatcher did not start: {error}")
    name, message = raised[-1]
    kind = getattr(_errors, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(message)
        except TypeError:  # an error built from more than its message
            pass
    return _errors.ServiceStartError(f"service.start: the dispatcher did not start: {name}: "
                                     f"{message}")


def _connected_get(call: Any, what: str) -> Any:
    """``ray.get`` of ``call.remote()`` (an actor method, or a function making the
    reference), refused once this process's Ray connection is closed: Ray would start a
    new local cluster of its own for the call (its auto-connect), where a thread still at
    work after ``svc.stop()`` (a planner's ``svc.scale`` waiting for workers) must stop."""
    ray = _ray.ray_module()
    if not ray.is_initialized():
        raise _errors.ServiceStoppedError(f"{what}: this process's connection to the "
                                          "service is closed (svc.stop() or ray.shutdown())")
    return ray.get(call.remote() if hasattr(call, "remote") else call())


def _wait_for_workers(dispatcher: Any, num_workers: int, what: str, timeout: float) -> None:
    """Until ``num_workers`` workers run (joined); after ``timeout`` seconds a warning
    (the cluster may be adding nodes for them: they join when up)."""
    deadline = time.monotonic() + timeout
    while True:
        running = len(_connected_get(dispatcher.workers, what))
        if running >= num_workers:
            return
        if time.monotonic() > deadline:
            warnings.warn(f"{what}: {running} of {num_workers} workers run after "
                          f"{timeout:g} s; the others wait for room in the "
                          "cluster (each asks for worker_cpus CPUs) and join when they start; "
                          "see svc.status()", stacklevel=3)
            return
        time.sleep(0.05)  # polling the dispatcher, which starts them


def _check_split_elements(split_elements: int | None, what: str) -> int | None:
    if split_elements is None:
        return None
    count = as_int(split_elements)
    if count is None or count < 1:
        raise ValueError(f"{what}: split_elements={split_elements!r} must be an int >= 1 "
                         "(elements per split), or None to measure")
    return count


def connect(address: str | None = None, namespace: str = "jdata", *,
            split_elements: int | None = None, **ray_init_kw: Any) -> Service:
    """Joins a running service (``address=None``: the Ray this process already runs).

    ``split_elements``: elements per split of the jobs this process starts (``None``: the
    service's, as ``service.start`` or ``jdata service start --split-elements`` set it,
    else measured). A named job is cut by its first client: the others adopt its splits.

    The versions are checked first: a ``ServiceVersionError`` names both when the
    service's jdata speaks another client protocol. The ``Service`` returned does not
    stop the service on ``stop()`` or exit (it only disconnects the Ray connection it
    made); ``stop(force=True)`` does.
    """
    split_elements = _check_split_elements(split_elements, "service.connect")
    ray = _ray.ray_module()
    owned = not ray.is_initialized()
    if owned:
        if address is None:
            raise _errors.ServiceConnectionError(
                "service.connect: no Ray in this process; pass the cluster's address")
        _ray.init_remote(address, namespace, **ray_init_kw)
    try:
        handle = ray.get_actor(_DISPATCHER, namespace=namespace)
    except ValueError:
        raise _not_found(ray, owned, address, namespace, "no jdata dispatcher in namespace "
                         "{namespace} at {at}") from None
    try:
        _check_version(ray, handle, address, namespace, "service.connect", owned)
        split_elements = split_elements or ray.get(handle.split_elements.remote())
    except ray.exceptions.RayActorError:  # stopped between the lookup and the first call
        raise _not_found(ray, owned, address, namespace, "the jdata dispatcher in namespace "
                         "{namespace} at {at} was stopped while this process joined it"
                         ) from None
    return Service(handle, ServiceRef(address, namespace, split_elements), owned)


def _not_found(ray: ModuleType, owned: bool, address: str | None, namespace: str,
               what: str) -> _errors.ServiceNotFoundError:
    """``service.connect``'s error for a dispatcher it cannot join (``what``, with the
    namespace and address filled in), after disconnecting a Ray connected only for it."""
    if owned:
        ray.shutdown()
    where = what.format(namespace=repr(namespace), at=address or "this process's Ray")
    return _errors.ServiceNotFoundError(
        f"service.connect: {where}; start one with service.start()")


def _head_node(ray: ModuleType) -> str:
    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return str(node["NodeID"])
    return str(ray.get_runtime_context().get_node_id())


__all__ = ["start", "connect", "Service", "ServiceStatus", "ProcessInfo", "WorkerStatus",
           "JobStatus", "AutoscalerStatus", "ScalingDecision", "AutocacheStatus"]
