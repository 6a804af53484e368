"""A client's membership in a job: it registers, heartbeats while it lives, and leaves.

The heartbeat thread tells the dispatcher the client lives (a training step, or
an evaluation, may take longer than its client timeout) and carries the totals
the job's statistics and the autoscaler read. It holds the ``Membership`` (ids
that change when the client resumes) and the statistics, never the reader: an
abandoned iterator is collected, and its collection closes it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings

from jdata.service import _waits
from jdata.service._messages import Register, Registered

# Heartbeats also carry the reports the autoscaler samples (every 4 s).
HEARTBEAT_SEC = 2.0


@dataclasses.dataclass
class Membership:
    job_id: str | None = None
    client_id: str | None = None


class Activity:
    """Whether the consumer is inside the reader now, and since when it is not."""

    def __init__(self):
        self.busy = False
        self.since = time.monotonic()

    def enter(self) -> None:
        self.busy = True

    def leave(self) -> None:
        self.busy, self.since = False, time.monotonic()

    def idle_sec(self) -> float:
        return 0.0 if self.busy else time.monotonic() - self.since


@dataclasses.dataclass
class ClientReport:
    """A client's totals, sent with each heartbeat (the dispatcher derives rates)."""

    elements: int = 0
    wait_sec: float = 0.0
    buffered: int = 0
    time: float = 0.0
    consumer_wait_sec: float = 0.0
    bytes: int = 0
    reads: int = 0
    hits: int = 0
    skipped: int = 0
    rounds: int = 0
    skipped_rounds: int = 0
    round_wait_sec: float = 0.0
    capacity: int = 1  # the elements its reads in flight can hold (the queue fill's scale)
    lost: int = 0  # elements the mode allowed to be lost, counted (the service guide's contract)
    duplicated: int = 0
    idle_sec: float = 0.0  # since its consumer last asked for an element


class Session:
    """``hand_off``: a ``weakref.WeakMethod`` the heartbeat calls when the dispatcher says
    this idle client should hand its units to a waiting peer (None: never)."""

    def __init__(self, transport, stats, tuner, hand_off=None):
        self.transport, self.stats, self._tuner = transport, stats, tuner
        self.membership = Membership()
        self.activity = Activity()
        self._hand_off = hand_off
        self.report = ClientReport()
        self.client_timeout = 60.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The client's units are its own until this (monotonic): half a client timeout
        # after a call that the dispatcher answered as from a live client was sent.
        self.valid_until = 0.0
        # Slots the dispatcher asked back through a heartbeat (the reader gives them at
        # its next step: the heartbeat's thread leaves the reader's state alone).
        self.give_back: tuple[int, ...] = ()

    def confirmed(self, sent: float) -> None:
        """A call sent at ``sent`` found this client alive on the dispatcher."""
        self.valid_until = max(self.valid_until, sent + self.client_timeout / 2)

    def valid(self) -> bool:
        """Whether the client's leases are surely still its own (a client paused past its
        timeout is expired, and its units go to others: it must not yield them)."""
        return time.monotonic() < self.valid_until

    def register(self, request: Register) -> Registered:
        """Registers (``need_plan`` replies come back to the caller, which cuts a plan)."""
        sent = time.monotonic()
        reply = self.transport.call("register", request)
        if reply.client_id is not None:
            self.membership.job_id, self.membership.client_id = reply.job_id, reply.client_id
            self.client_timeout = reply.client_timeout
            self.confirmed(sent)
            if self._thread is None:
                self._start()
        return reply

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=_heartbeat, daemon=True, name="jdata-distribute-heartbeat",
            args=(self, min(HEARTBEAT_SEC, self.client_timeout / 4), self._tuner,
                  self._hand_off))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def closing(self) -> bool:
        """Stops the heartbeat; whether the service is still there to say goodbye to."""
        self.stop()
        return self.transport.live()


@dataclasses.dataclass
class Opened:
    """A job's pipeline as a client sends it: the plan this epoch runs (autocache's
    choice), its fingerprint, the plan in Ray's object store, and a note for stats."""

    session: Session
    node: object
    fingerprint: str
    plan_ref: list
    note: str


def open_job(dnode, ctx, stats, epoch: int, hand_off=None) -> Opened:
    """Connects to ``dnode``'s service and readies the job's plan (see ``Opened``)."""
    import cloudpickle

    from jdata import _fingerprint
    from jdata.service import _autocache_runner
    from jdata.service.transport import Transport

    transport = Transport(dnode.service)
    session = Session(transport, stats, ctx.autotuner(), hand_off)
    node, note = _autocache_runner.plan_for_epoch(dnode.input, dnode, ctx.options, transport,
                                                  epoch)
    plan_ref = [transport.ray.put(cloudpickle.dumps((node, ctx.options)))]
    return Opened(session, node, _fingerprint.fingerprint(node), plan_ref, note)


def _heartbeat(session: Session, period: float, tuner, hand_off) -> None:
    """The consumer's wait is the wait of the pipeline's outermost stage (the last one
    built): the user's loop is its consumer. (The session holds no reader.)"""
    transport, membership, stats = session.transport, session.membership, session.stats
    report, activity = session.report, session.activity
    while not session._stop.wait(period):
        if not transport.live() or transport.known_stopped():
            return  # the service stopped: a call would start (or join) another Ray
        stages = tuner.live()
        consumer = stages[-1].stats if stages else stats
        # The wait under way too, at the instant of the client's clock that the dispatcher
        # divides it by (see _waits).
        report.time, report.wait_sec = _waits.waited(stats)
        report.elements, report.buffered = stats.elements, stats.buffered
        report.consumer_wait_sec = consumer.wait_sec
        report.idle_sec = activity.idle_sec()
        sent = time.monotonic()
        reply = transport.ask("heartbeat", membership.job_id, membership.client_id,
                              dataclasses.replace(report))
        if reply is None and _stopped_meanwhile(transport):
            return
        if reply is not None and reply.standing == "ok":
            session.confirmed(sent)
            session.give_back = reply.give_back
        if reply is not None and reply.hand_off and hand_off is not None:
            method = hand_off()
            if method is not None:  # else the reader is collected: its close releases
                method()


def _stopped_meanwhile(transport) -> bool:
    """Whether the service was stopped; warns if this heartbeat is the first to find it
    (not this process's stop, nor a reader): said now, not only at the next element, as
    a trainer busy with a long step may be ended by its cluster's shutdown before."""
    if transport.known_stopped():
        return True
    if not transport.gone():
        return False
    warnings.warn(str(transport.ended()), RuntimeWarning, stacklevel=1)
    return True
