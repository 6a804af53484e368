"""What a client's readers need of Ray, in one place: dispatcher calls retried while Ray
restarts the dispatcher, worker handles, reads opened with backpressure, waits that
check a silent worker still lives, and errors sorted into "the worker was lost" (read
the unit elsewhere) and "the read failed on the worker" (read it again, checked).

A dispatcher that is gone for good (stopped: killed, its name free) is told from one
that Ray restarts: calls to it raise ``ServiceStoppedError`` at once instead of being
retried. A ``Service`` that stops its dispatcher marks this process's transports of it
stopped first (``stop_readers``), and one that shuts its Ray down waits for the
reader threads inside a call to leave (``wait_for_readers``): Ray aborts the process
when it shuts down under a thread inside a call.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
import weakref

from jdata._errors import (
    ServiceConnectionError,
    ServiceNotFoundError,
    ServiceStoppedError,
    ServiceUnavailableError,
)
from jdata.service import _ray, _version
from jdata.service.dispatcher import NAME as DISPATCHER_NAME

# A dispatcher call is retried this long while Ray restarts the dispatcher.
_CALL_DEADLINE_SEC = 60.0
_CALL_TIMEOUT_SEC = 30.0
_CALL_RETRY_SEC = 0.2
# A call refused because the dispatcher cannot journal waits this long for it to recover
# (a full disk freed by hand) before the reader raises ``ServiceUnavailableError``.
UNAVAILABLE_WAIT_SEC = 600.0
_UNAVAILABLE_RETRY_SEC = 0.5
# A read waiting longer than this for its next block checks that its worker lives (a
# read from a worker whose node went away may never fail by itself).
LIVENESS_CHECK_SEC = 2.0
_READERS_POLL_SEC = 0.05

# This process's transports, for ``stop_readers``; ``_LOCK`` guards their ``_inside`` and
# ``_stopped`` (a reader enters, a stopping Service marks: never one between the other).
_LIVE: weakref.WeakSet = weakref.WeakSet()
_LOCK = threading.Lock()


class Transport:
    """One client's link to a service (``ServiceRef``): not thread-safe, one per reader."""

    def __init__(self, ref):
        ray = _ray.ray_module()
        if not ray.is_initialized():
            if ref.address is None:
                raise ServiceConnectionError(
                    "distribute: this process is not connected to the service's Ray; iterate "
                    "where service.start() ran, or pass its address to service.start/connect")
            _ray.init_remote(ref.address, ref.namespace)
        from ray.util.client import ray as ray_client

        if ray_client.is_connected():
            raise ServiceConnectionError(
                "distribute: reading through Ray Client (a ray:// address) is not supported: it "
                "cannot stream actor results. Run the trainer inside the cluster "
                "(service.connect('auto')); ray:// works for status, scale and stop")
        self.ray = ray
        self.namespace = ref.namespace
        self.where = _ray.describe(ref.address, ref.namespace)
        try:
            self.dispatcher = ray.get_actor(DISPATCHER_NAME, namespace=ref.namespace)
        except ValueError:
            raise ServiceNotFoundError(f"distribute: no jdata service runs at {self.where}; "
                                       "start one with service.start()") from None
        _version.check(ray, self.dispatcher, self.where, "distribute")
        self._unavailable_since: float | None = None  # when the dispatcher began refusing
        self._inside = 0  # reader threads inside a call of this transport (``entered``)
        self._stopped = False
        with _LOCK:
            _LIVE.add(self)
        self._handles: dict = {}
        lost = ray.exceptions
        self._lost = (lost.ActorDiedError, lost.ActorUnavailableError, lost.ObjectLostError,
                      lost.OwnerDiedError, lost.NodeDiedError, lost.WorkerCrashedError)

    def live(self) -> bool:
        return self.ray.is_initialized()

    @contextlib.contextmanager
    def entered(self):
        """Around a reader's step: ``ServiceStoppedError`` at once if the service was
        stopped (or this process's Ray shut down), else counted inside until it leaves."""
        if not self._enter():
            raise self.stopped_error()
        try:
            yield
        finally:
            self._leave()

    def _enter(self) -> bool:
        with _LOCK:
            if self._stopped or not self.live():
                return False
            self._inside += 1
            return True

    def _leave(self) -> None:
        with _LOCK:
            self._inside -= 1

    def gone(self) -> bool:
        """Whether the dispatcher is gone for good: this process's Ray is shut down, or the
        actor is dead and not restarting (its name is free, or another service's)."""
        if self._stopped or not self.live():
            return True
        try:
            named = self.ray.get_actor(DISPATCHER_NAME, namespace=self.namespace)
        except ValueError:
            return True
        except Exception:  # the cluster does not answer: nothing known
            return False
        return named._actor_id != self.dispatcher._actor_id

    def stopped(self) -> bool:
        """``gone``, or stopping: ``stop`` ran, its kill comes next (a request meanwhile
        fails on the closed journal)."""
        if self.gone():
            return True
        try:
            answer = self.ray.get(self.dispatcher.version.remote(), timeout=_CALL_TIMEOUT_SEC)
        except Exception:  # restarting, or too old to say
            return False
        return bool(answer.get("stopping"))

    def known_stopped(self) -> bool:
        """Whether this process already knows the service stopped (no call needed)."""
        return self._stopped

    def ended(self) -> ServiceStoppedError:
        """Marks the service stopped for this transport (every later call raises at once)
        and returns the error to raise."""
        with _LOCK:
            self._stopped = True
        return self.stopped_error()

    def stopped_error(self) -> ServiceStoppedError:
        return ServiceStoppedError(
            f"distribute: the service at {self.where} was stopped (svc.stop() or `jdata "
            "service stop`), not restarted: this iterator can go no further; start a service "
            "again and restore the iterator from its last checkpoint (ds.iterator(state))")

    def call(self, method: str, *args):
        """A dispatcher call, retried while the dispatcher restarts; ``ServiceStoppedError``
        once it is stopped."""
        deadline = time.monotonic() + _CALL_DEADLINE_SEC
        errors = self.ray.exceptions
        while True:
            if self._stopped:
                raise self.stopped_error()
            try:
                answer = self.ray.get(getattr(self.dispatcher, method).remote(*args),
                                      timeout=_CALL_TIMEOUT_SEC)
                self._unavailable_since = None
                return answer
            except (errors.ActorDiedError, errors.ActorUnavailableError,
                    errors.GetTimeoutError):
                if self.gone():
                    raise self.ended() from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(_CALL_RETRY_SEC)
            except errors.RayTaskError as e:  # the dispatcher refused: its own error
                if self.stopped():  # e.g. its journal, closed by ``stop``
                    raise self.ended() from None
                refused = cause(e)
                if not self._wait_unavailable(method, refused):
                    raise refused from None

    def _wait_unavailable(self, method: str, error: BaseException) -> bool:
        """Whether to ask again: the dispatcher cannot journal (a full disk) and the call
        carries on a job (not a new one), for up to ``UNAVAILABLE_WAIT_SEC`` per
        outage, with one warning: a trainer waits out the disk rather than dying."""
        if not isinstance(error, ServiceUnavailableError) or method == "register":
            return False
        now = time.monotonic()
        if self._unavailable_since is None:
            self._unavailable_since = now
            warnings.warn(f"jdata.service: waiting (up to {UNAVAILABLE_WAIT_SEC:g} s) for the "
                          f"dispatcher at {self.where} to journal again: {error}",
                          stacklevel=4)
        if now - self._unavailable_since > UNAVAILABLE_WAIT_SEC:
            return False
        time.sleep(_UNAVAILABLE_RETRY_SEC)  # the dispatcher retries its journal each 0.5 s
        return True

    def ask(self, method: str, *args, timeout: float = 5.0):
        """A dispatcher call that may fail (a background thread's): its answer or None
        (at once once the service is stopped: counted inside, like a reader's step)."""
        if not self._enter():
            return None
        try:
            return self.ray.get(getattr(self.dispatcher, method).remote(*args), timeout=timeout)
        except Exception:  # the dispatcher restarting, or the cluster gone: next time
            return None
        finally:
            self._leave()

    def tell(self, method: str, *args) -> None:
        """A dispatcher call whose answer nobody waits for (heartbeats, goodbyes); none
        once the service is stopped."""
        if not self._enter():
            return
        try:
            getattr(self.dispatcher, method).remote(*args)
        except Exception:  # the dispatcher restarting, or the cluster gone
            pass
        finally:
            self._leave()

    def alive_workers(self) -> list:
        return self.call("workers")

    def handle(self, worker_id: str):
        """The worker's actor; ``ValueError`` if it is gone."""
        handle = self._handles.get(worker_id)
        if handle is None:
            handle = self._handles[worker_id] = self.ray.get_actor(worker_id,
                                                                   namespace=self.namespace)
        return handle

    def forget(self, worker_id: str) -> None:
        self._handles.pop(worker_id, None)

    def stream(self, worker_id: str, method: str, *args, ahead: int = 2):
        """A streaming read on the worker, producing at most ``ahead`` blocks before the
        client takes them; ``None`` if the worker is gone."""
        try:
            handle = self.handle(worker_id)
        except ValueError:
            return None
        return getattr(handle, method).options(
            num_returns="streaming", _generator_backpressure_num_objects=ahead).remote(*args)

    def request(self, worker_id: str, method: str, *args):
        """A plain call on a worker; ``None`` if the worker is gone."""
        try:
            handle = self.handle(worker_id)
        except ValueError:
            return None
        return getattr(handle, method).remote(*args)

    def ready(self, ref, worker_id: str) -> bool:
        """Waits until ``ref`` (a reply or a stream's next block) is ready; False if its
        worker is lost meanwhile (the dispatcher pings every worker)."""
        while True:
            if self.ray.wait([ref], num_returns=1, timeout=LIVENESS_CHECK_SEC)[0]:
                return True
            if worker_id not in self.alive_workers():
                return False

    def lost(self, error: BaseException) -> bool:
        """Whether a read's error means its worker (or node) is gone."""
        return isinstance(error, self._lost)

    def cancel(self, ref) -> None:
        """Stops a read on its worker (it ends at its next block)."""
        try:
            self.ray.cancel(ref)
        except Exception:  # finished already, or the worker is gone
            pass


def stop_readers(dispatcher) -> list:
    """Marks this process's transports of ``dispatcher`` stopped (their readers raise
    ``ServiceStoppedError`` at their next call); returns them."""
    actor_id = dispatcher._actor_id
    with _LOCK:
        mine = [t for t in _LIVE if t.dispatcher._actor_id == actor_id]
        for transport in mine:
            transport._stopped = True
    return mine


def wait_for_readers(transports: list, deadline: float) -> None:
    """Until no reader thread is inside a call of ``transports`` (they leave at their next
    call, a worker's read at most ``LIVENESS_CHECK_SEC`` away), or ``deadline``."""
    while time.monotonic() < deadline:
        with _LOCK:
            if not any(t._inside for t in transports):
                return
        time.sleep(_READERS_POLL_SEC)


def cause(error: BaseException) -> BaseException:
    """The worker's or dispatcher's own exception inside a Ray task error."""
    inner = getattr(error, "cause", None)
    return inner if isinstance(inner, BaseException) else error
