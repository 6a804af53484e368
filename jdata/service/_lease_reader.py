"""The reader of jobs of leased units (``dynamic``, ``static``, ``off``): ``LeaseCore``'s I/O.

It registers the job (a named job's plan is the first client's; an ``off``
job's slots are the workers alive when it starts), then does what the core
says: leases units (reporting those yielded whole), keeps up to two reads per
worker running, each a Ray streaming generator of blocks read past what it has
received, and yields. A read whose worker died is read again elsewhere past
what was received; one that failed on the worker's side (an element Ray could
not pickle) is read again *checked*, each element sent alone or as an
``ElementError`` in its place. A named job's ``get_state()`` commits the
position to the dispatcher, so a killed client's units go back from there.
A client found expired (it was paused past its timeout) resumes where it is
if no other client took its units meanwhile, else raises ``ServiceError``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
import weakref

from jdata._errors import ServiceError, WorkerImportError
from jdata.runtime import states
from jdata.service import _lease_reads, _reader_states, _session, splits
from jdata.service._lease_core import Action, LeaseCore
from jdata.service._messages import (Commit, JobPlan, LeaseRequest, Mode, Position, Register,
                                     Release, Resume, Standing)
from jdata.service.worker import ReadSpec

READS_PER_WORKER = 2  # one being consumed, one producing ahead
# While nothing can be read (workers being replaced, other clients holding the last
# units), ask again after this long, doubling to at most the second (a pod's clients
# waiting at an epoch's end must not flood the dispatcher).
_WAIT_SEC, _WAIT_MAX_SEC = 0.02, 0.5
# With no worker at all for this long, the iterator gives up (ServiceError).
_NO_WORKER_SEC = 120.0
# The readers of this process, by job: one waiting for units another holds while idle
# (two iterators of a named job alternated on one thread) takes them over at once.
_LOCAL: dict[str, weakref.WeakSet] = {}


def _reason(error: BaseException) -> BaseException:
    """What to raise for a failed element: a worker that cannot decode the job's plan
    fails every read of it alike (its units are not lost one by one, the job cannot run)."""
    cause = error.__cause__
    return cause if isinstance(cause, WorkerImportError) else error


class LeaseReader:
    def __init__(self, dnode, ctx, epoch: int, stats):
        self._dnode, self._ctx, self._epoch, self.stats = dnode, ctx, epoch, stats
        self._mode = Mode(dnode.processing_mode)
        deterministic = dnode.deterministic if dnode.deterministic is not None else \
            ctx.options.deterministic
        order = "turns" if self._mode is Mode.OFF else "order" if deterministic else "any"
        self.core = LeaseCore(order, READS_PER_WORKER)
        self._lineage: str | None = None
        self._resume: Position | None = None
        self._committed = Position()  # where a death rolls back to (named jobs)
        self._units: int | None = None
        # Slots are whole streams: an off job has no split size, whatever the service's.
        self._split_elements = None if self._mode is Mode.OFF else dnode.service.split_elements
        self._split_plan = None
        self._backoff = _WAIT_SEC
        self._no_worker_since: float | None = None
        self._waiting_on = 0
        self._ended = False
        self.session = None
        # Held while the consumer is inside this reader (next_many, a state, close); the
        # heartbeat's hand-off only takes it when free, so it never races a yield.
        self._lock = threading.Lock()

    # ------------------------------------------------------------ start

    def start(self) -> None:
        opened = _session.open_job(self._dnode, self._ctx, self.stats, self._epoch,
                                   weakref.WeakMethod(self.hand_off))
        self.session, self.transport = opened.session, opened.session.transport
        self._reads = _lease_reads.Reads(self.transport, self.core, self.stats,
                                         self.session.report, self._dnode.compression,
                                         self._spec)
        self._node, self._options, note = opened.node, self._ctx.options, opened.note
        self._fingerprint, self._plan_ref = opened.fingerprint, opened.plan_ref
        fresh = self._lineage is None
        self._lineage = self._lineage or uuid.uuid4().hex
        plan = self._known_plan()
        if plan is None and self._dnode.job_name is None and self._mode is not Mode.OFF:
            plan = self._cut()
        reply = self._register(plan, None if fresh else Resume(self._epoch, self._resume))
        if reply.need_plan:
            reply = self._register(self._cut(), None)
        self._joined(reply, note)

    def _known_plan(self) -> JobPlan | None:
        if self._units is not None or (self._mode is Mode.OFF and self._resume is not None):
            return JobPlan(self._units, self._split_elements)
        return None

    def _cut(self) -> JobPlan:
        self._split_plan = splits.plan_splits(self._node, self._options, epoch=self._epoch,
                                              target_elements=self._split_elements)
        return JobPlan(self._split_plan.num_splits, self._split_plan.target_elements)

    def _register(self, plan, resume, exact_only: bool = False):
        return self.session.register(Register(
            self._dnode.job_name, self._fingerprint, self._mode, self._epoch, self._lineage,
            plan, resume, exact_only))

    def _joined(self, reply, note: str = "") -> None:
        if reply.refused is not None:
            raise ServiceError(
                f"distribute: this iterator was silent for more than its client timeout "
                f"({reply.client_timeout:g} s: paused, or stopped in a debugger) and "
                f"{reply.refused}: it cannot go on exactly. Restore it from your last "
                "checkpoint (ds.iterator(state)), or start the service with a longer "
                "client_timeout")
        self._epoch, plan = reply.epoch, reply.plan
        _LOCAL.setdefault(reply.job_id, weakref.WeakSet()).add(self)
        if self._units is not None and plan.num_units != self._units:
            raise ValueError(f"distribute: the state has {self._units} units, the job "
                             f"{plan.num_units}")
        self._units, self._split_elements = plan.num_units, plan.split_elements
        if self._mode is not Mode.OFF and (self._split_plan is None or
                                           self._split_plan.num_splits != plan.num_units):
            self._split_plan = splits.plan_splits(self._node, self._options, epoch=self._epoch,
                                                  target_elements=self._split_elements)
        self.core.keep_only(reply.leased)
        counted = self.session.report
        counted.duplicated += sum(c.where == "duplicated" for c in reply.conflicts)
        counted.lost += sum(c.where == "lost" for c in reply.conflicts)
        what = "slots" if self._mode is Mode.OFF else "splits"
        self.stats.engine_reason = (f"jdata.service job {reply.job_id}, {self._mode.value}, "
                                    f"epoch {self._epoch}, {self._units} {what}{note}")

    # ------------------------------------------------------------ iteration

    def next_many(self, n: int) -> list:
        if self._ended:
            return []
        activity = self.session.activity
        with self._lock:
            activity.enter()
            try:
                return self._next_many(n)
            finally:
                activity.leave()

    def _next_many(self, n: int) -> list:
        if self.session.give_back:  # a heartbeat asked: slots above this client's share
            units, self.session.give_back = self.session.give_back, ()
            for unit in units:
                self._reads.stop(unit)
            self.core.give_back(units)
            self._lease()  # tells the dispatcher, at once
        while True:
            action, unit = self.core.step()
            if action is Action.YIELD:
                if not self.session.valid():  # paused past half its timeout: it may be
                    self._lease()  # expired, its units given to others: ask first
                    continue
                return self._yield(unit, n)
            if action is Action.PULL:
                self._reads.pull(unit)
            elif action is Action.PULL_ANY:
                self._reads.pull_any()
            elif action is Action.LEASE:
                self._lease()
            elif action is Action.WAIT:
                self._wait()
            elif action is Action.COMMIT:
                self._settle()
            else:
                self._end()
                return []

    def _yield(self, unit: int, n: int) -> list:
        out, failed = self.core.held[unit].buffer.take(n)
        self.core.taken(unit, len(out))
        self.stats.elements += len(out)
        self.stats.buffered -= len(out)
        if failed:
            raise _reason(out[0].error)
        return out

    def _lease(self) -> None:
        core, membership = self.core, self.session.membership
        want, max_held = core.lease_size()
        sent = time.monotonic()
        reply = self.transport.call("lease", LeaseRequest(
            membership.job_id, membership.client_id, want, max_held, tuple(core.to_report),
            tuple(core.to_return), waiting=not any(h.buffer for h in core.held.values()),
            held=core.on_workers()))
        if reply.standing is not Standing.OK:
            self._rejoin(reply.standing)
            return
        self.session.confirmed(sent)
        core.returned()
        for grant in reply.grants:
            core.granted(grant.unit, grant.offset)
            if core.held[grant.unit].reading:
                self._reads.start(grant.unit, grant.worker_id)
        core.leased(len(reply.grants), reply.finished, reply.workers, reply.give_back,
                    reply.drained)
        for unit in reply.give_back:
            self._reads.stop(unit)
        self.stats.parallelism = reply.workers
        self.session.report.capacity = core.capacity * (self._split_elements or 1)
        if reply.grants:
            self._backoff = _WAIT_SEC
        if reply.workers:
            self._no_worker_since = None
        self._waiting_on = reply.waiting_on

    def _spec(self, unit: int, skip: int, checked: bool) -> tuple[str, ReadSpec]:
        if self._mode is Mode.OFF:
            method, what = "read_slot", unit
        else:
            method, what = "read_split", dataclasses.asdict(self._split_plan.split(unit))
        return method, ReadSpec(self.session.membership.job_id, self._fingerprint,
                                self._plan_ref, self._epoch, what, skip,
                                self._dnode.compression, checked, self._dnode.cache_put)

    def _wait(self) -> None:
        """Nothing to read now. Workers are being replaced, or other clients hold the last
        units (they give them back if they die, or hand them off if idle): wait, then ask
        again. Readers of this process that hold them idle hand them off at once."""
        if self._waiting_on and self._take_local():
            self.core.retry()
            return
        if self.stats.parallelism == 0:
            now = time.monotonic()
            self._no_worker_since = self._no_worker_since or now
            if now - self._no_worker_since > _NO_WORKER_SEC:
                raise ServiceError(f"distribute: no worker for {_NO_WORKER_SEC:.0f} s: the "
                                   "service has no worker that can run this job (see "
                                   "service.status())")
        time.sleep(self._backoff)
        self._backoff = min(_WAIT_MAX_SEC, 2 * self._backoff)
        self.core.retry()

    def _rejoin(self, standing: Standing) -> None:
        if standing is Standing.SUPERSEDED:
            raise ServiceError("distribute: this iterator's state was restored into another "
                               "iterator, which took over its job; this one can go no further")
        for unit in self._reads.units():  # the reads belong to the job as it was
            self._reads.stop(unit)
            self.core.lost(unit)
        self._joined(self._register(JobPlan(self._units, self._split_elements),
                                    Resume(self._epoch, self.core.position(), self._committed),
                                    exact_only=True))

    def _settle(self) -> None:
        """Every unit is done: this client commits what it yielded (the others wait until
        no client could roll back units it did, as a death before its commit would)."""
        membership = self.session.membership
        position = self.core.position()
        self.transport.call("commit", Commit(membership.job_id, membership.client_id,
                                             position, tuple(self.core.to_report)))
        self.core.to_report = []
        self.core.settled = True
        self._committed = position

    def _take_local(self) -> bool:
        """Hands this job's units held by idle readers of this process to this one (they are
        on this thread, or on none: waiting for them would never end). True if any came."""
        job_id = self.session.membership.job_id
        given = False
        for other in list(_LOCAL.get(job_id, ())):
            if other is not self and other.session.membership.job_id == job_id:
                given |= other.hand_off()
        return given

    def _end(self) -> None:
        self._ended = True
        self._release()

    def hand_off(self) -> bool:
        """This consumer is idle while a peer waits for the units it holds (the heartbeat
        says so, or a reader of this process waits): they go back at what it yielded (its
        parts kept), read again when asked. True if it gave any."""
        if not self._lock.acquire(blocking=False):
            return False  # the consumer is inside the reader: not idle after all
        try:
            if self._ended or not self.core.held or self.session is None:
                return False
            core = self.core
            self._reads.stop_all()
            position = core.position()  # committed with the hand-off: the units it yielded
            # part of go on elsewhere, past that part (kept until the dispatcher has them:
            # else the next lease or release says it)
            core.to_return += [(u, h.yielded) for u, h in sorted(core.held.items())]
            core.handed(list(core.held))
            membership = self.session.membership
            reply = self.transport.ask("return_units", Release(
                membership.job_id, membership.client_id, tuple(core.to_return),
                tuple(core.to_report), position if self._dnode.job_name else None))
            if reply is Standing.OK:
                core.returned()
                core.to_report = []
                self._committed = position
            return True
        finally:
            self._lock.release()

    # ------------------------------------------------------------ state and close

    def snapshot(self):
        done_count, partial = self.core.capture()
        return states.Deferred(self._state, done_count, partial)

    def _state(self, done_count: int, partial: tuple) -> dict:
        with self._lock:
            return self._state_locked(done_count, partial)

    def _state_locked(self, done_count: int, partial: tuple) -> dict:
        position = self.core.position(done_count, partial)
        membership = self.session.membership if self.session else None
        if membership and membership.client_id and self._dnode.job_name and not self._ended:
            self.transport.call("commit", Commit(membership.job_id, membership.client_id,
                                                 position, tuple(self.core.to_report)))
            self._committed = position
        return _reader_states.lease_state(self._lineage, self._epoch if self.session else None,
                                          self._units, self._split_elements, position)

    def set_state(self, state) -> None:
        lineage, epoch, units, elements, position = _reader_states.read_lease_state(state)
        if self._mode is Mode.OFF:  # a slot is the whole pipeline: no part runs past it
            _reader_states.check_within(position, self._dnode.input.cardinality())
        if epoch is not None and self._dnode.job_name is not None:
            self._epoch = epoch
        self._lineage, self._units = lineage, units
        if units is not None:  # the state's cut is the job's (None for slots and files)
            self._split_elements = elements
        if lineage is not None:
            self._resume = self._committed = position
            self.core.restore(position)

    def close(self) -> None:
        if self.session is None or not self.session.closing():
            return
        with self._lock:
            self._reads.stop_all()
            if not self._ended:
                self._release()

    def _release(self) -> None:
        membership = self.session.membership
        local = _LOCAL.get(membership.job_id)
        if local is not None:
            local.discard(self)
            if not local:
                _LOCAL.pop(membership.job_id, None)
        self.session.stop()
        self.transport.tell("release", Release(membership.job_id, membership.client_id,
                                               self.core.offsets() + tuple(self.core.to_return),
                                               tuple(self.core.to_report)))
