"""What a client's readers need of Ray, in one place: dispatcher calls retried while Ray
restarts the dispatcher, worker handles, reads opened with backpressure, waits that
check a silent worker still lives, and errors sorted into "the worker was lost" (read
the unit elsewhere) and "the read failed on the worker" (read it again, checked).
"""

from __future__ import annotations

import time

from jdata.service import _ray
from jdata.service.dispatcher import NAME as DISPATCHER_NAME

# A dispatcher call is retried this long while Ray restarts the dispatcher.
_CALL_DEADLINE_SEC = 60.0
_CALL_TIMEOUT_SEC = 30.0
_CALL_RETRY_SEC = 0.2
# A read waiting longer than this for its next block checks that its worker lives (a
# read from a worker whose node went away may never fail by itself).
LIVENESS_CHECK_SEC = 2.0


class Transport:
    """One client's link to a service (``ServiceRef``): not thread-safe, one per reader."""

    def __init__(self, ref):
        ray = _ray.ray_module()
        if not ray.is_initialized():
            if ref.address is None:
                raise RuntimeError(
                    "distribute: this process is not connected to the service's Ray; iterate "
                    "where service.start() ran, or pass its address to service.start/connect")
            _ray.init_remote(ref.address, ref.namespace)
        from ray.util.client import ray as ray_client

        if ray_client.is_connected():
            raise RuntimeError(
                "distribute: reading through Ray Client (a ray:// address) is not supported: it "
                "cannot stream actor results. Run the trainer inside the cluster "
                "(service.connect('auto')); ray:// works for status, scale and stop")
        self.ray = ray
        self.namespace = ref.namespace
        self.dispatcher = ray.get_actor(DISPATCHER_NAME, namespace=ref.namespace)
        self._handles: dict = {}
        lost = ray.exceptions
        self._lost = (lost.ActorDiedError, lost.ActorUnavailableError, lost.ObjectLostError,
                      lost.OwnerDiedError, lost.NodeDiedError, lost.WorkerCrashedError)

    def live(self) -> bool:
        return self.ray.is_initialized()

    def call(self, method: str, *args):
        """A dispatcher call, retried while the dispatcher restarts."""
        deadline = time.monotonic() + _CALL_DEADLINE_SEC
        errors = self.ray.exceptions
        while True:
            try:
                return self.ray.get(getattr(self.dispatcher, method).remote(*args),
                                    timeout=_CALL_TIMEOUT_SEC)
            except (errors.ActorDiedError, errors.ActorUnavailableError,
                    errors.GetTimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(_CALL_RETRY_SEC)
            except errors.RayTaskError as e:  # the dispatcher refused: its own error
                raise cause(e) from None

    def ask(self, method: str, *args, timeout: float = 5.0):
        """A dispatcher call that may fail (a background thread's): its answer or None."""
        try:
            return self.ray.get(getattr(self.dispatcher, method).remote(*args), timeout=timeout)
        except Exception:  # the dispatcher restarting, or the cluster gone: next time
            return None

    def tell(self, method: str, *args) -> None:
        """A dispatcher call whose answer nobody waits for (heartbeats, goodbyes)."""
        try:
            getattr(self.dispatcher, method).remote(*args)
        except Exception:  # the dispatcher restarting, or the cluster gone
            pass

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


def cause(error: BaseException) -> BaseException:
    """The worker's or dispatcher's own exception inside a Ray task error."""
    inner = getattr(error, "cause", None)
    return inner if isinstance(inner, BaseException) else error
