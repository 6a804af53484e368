"""The reader of a shared job (``distribute(job_name=..., sharing=True)``).

A shared job's stream is cut in *slots*, one per worker alive when it starts:
slot ``s`` is the whole pipeline with the slot's own randomness (a pure function
of the key, the epoch and ``s``), computed once on the worker the dispatcher
places it on and kept there in a sliding window (``_window.SharedWindow``) that
every consumer of the job reads at its own pace. A consumer reads the slots in
turn, a block's worth from each. Its position in each slot is all its state, so
the same program with the same keys reads the same streams; a slot whose worker
died is placed elsewhere and read on from the consumer's position. A slot whose
stream ends (a finite pipeline) is read no more; the iterator ends with the last.
"""

from __future__ import annotations

import collections
import time
import uuid

from jdata.service import _blocks, _reader_states, _session, _waits
from jdata.service._lease_core import Buffer
from jdata.service._messages import Mode, Register, Release
from jdata.service.transport import cause
from jdata.service.worker import ReadSpec

# Elements per read of a shared job's window (a block's worth at most).
SHARED_BLOCK = 4096
_READS_AHEAD = 2
# The placements are asked again every this many turns (new placements after a loss).
_REFRESH_TURNS = 64
_WAIT_SEC = 0.05


class _Slot:
    """A consumer's reading of one slot: requests in flight, elements received; ``base``
    is the slot position of the next element to yield."""

    __slots__ = ("worker_id", "pending", "buffer", "base", "resume", "seq", "token")

    def __init__(self, worker_id: str, position: int | None):
        self.worker_id, self.resume = worker_id, position
        self.seq = 0  # reads requested: the worker serves them in this order
        self.token = None  # the worker's window this reads (a new one knows no cursor)
        self.pending: collections.deque = collections.deque()
        self.buffer = Buffer()
        self.base = position or 0


class SharedReader:
    def __init__(self, dnode, ctx, epoch: int, stats):
        self._dnode, self._ctx, self.stats = dnode, ctx, stats
        self._positions: dict[int, int] = {}  # a restored state's
        self._slots: dict[int, _Slot] = {}
        self._ended: set[int] = set()
        self._num_slots = 0
        self._placements: dict[int, str] = {}
        self._turn = 0
        self._refreshed = 0.0
        self.session = None

    def start(self) -> None:
        opened = _session.open_job(self._dnode, self._ctx, self.stats, 0)
        self.session, self.transport = opened.session, opened.session.transport
        self._fingerprint, self._plan_ref = opened.fingerprint, opened.plan_ref
        self._register(0)

    def _register(self, epoch: int) -> None:
        """Joins the job (again, after the dispatcher expired this client: it was paused
        past its timeout); the reads go on from its positions, skips counted."""
        reply = self.session.register(Register(self._dnode.job_name, self._fingerprint,
                                               Mode.SHARED, epoch, uuid.uuid4().hex, None))
        self._epoch, self._num_slots = reply.epoch, reply.plan.num_units
        self.session.report.capacity = _READS_AHEAD * self._num_slots * SHARED_BLOCK

    def next_many(self, n: int) -> list:
        while True:
            unplaced = len(self._slots) + len(self._ended) < self._num_slots
            if self._turn % _REFRESH_TURNS == 0 or (
                    unplaced and time.monotonic() - self._refreshed > _WAIT_SEC * 10):
                self._refresh()
            live = sorted(self._slots)
            if not live:
                if len(self._ended) == self._num_slots:
                    return []  # every slot's stream ended (a finite pipeline)
                time.sleep(_WAIT_SEC)  # a slot waits for a worker to be placed on
                self._turn = 0
                continue
            slot = live[self._turn % len(live)]
            self._turn += 1
            out = self._take(slot, n)
            if out is None:
                continue
            if type(out) is not list:
                raise out
            return out

    def _take(self, slot: int, n: int):
        """``n`` elements of the slot (fewer only where its stream ends), so the stream a
        consumer reads depends on the keys and its calls, never on how blocks arrived; an
        element's error comes alone, after the elements before it. None: nothing (the
        worker was lost, or the slot's stream ended)."""
        out: list = []
        while len(out) < n:
            stream = self._slots.get(slot)
            if stream is None or (not stream.buffer and not self._pull(slot, stream)):
                break
            if out and stream.buffer.failure_first():
                break
            piece, failed = stream.buffer.take(n - len(out))
            stream.base += len(piece)
            self.stats.elements += len(piece)
            self.stats.buffered -= len(piece)
            if failed:
                return piece[0].error
            out += piece
        return out or None

    def _refresh(self) -> None:
        """Streams for the slots as placed now (a slot moved to another worker is read on
        from this consumer's position there)."""
        membership = self.session.membership
        self._refreshed = time.monotonic()
        placements = self.transport.call("slots", membership.job_id, membership.client_id)
        if placements is None:  # expired: the cursors on the workers are its old self's
            for slot in list(self._slots):
                self._drop(slot, keep_position=True)
            self._register(self._epoch)  # the epoch it reads, not a next one
            placements = self.transport.call("slots", self.session.membership.job_id,
                                              self.session.membership.client_id) or {}
        self._placements = placements
        self.stats.parallelism = len(set(self._placements.values()))
        for slot, stream in list(self._slots.items()):
            if self._placements.get(slot) != stream.worker_id:
                self._drop(slot, keep_position=True)
        for slot, worker_id in self._placements.items():
            if slot not in self._slots and slot not in self._ended:
                self._slots[slot] = _Slot(worker_id, self._positions.pop(slot, None))

    def _drop(self, slot: int, keep_position: bool) -> None:
        stream = self._slots.pop(slot)
        self.stats.buffered -= len(stream.buffer)
        self.transport.forget(stream.worker_id)
        if keep_position:
            self._positions[slot] = stream.base

    def _spec(self, slot: int) -> ReadSpec:
        return ReadSpec(self.session.membership.job_id, self._fingerprint, self._plan_ref,
                        self._epoch, slot, 0, self._dnode.compression)

    def _pull(self, slot: int, stream: _Slot) -> bool:
        """The slot's next block (two requests kept in flight); False if its worker was
        lost or its stream ended."""
        transport, client_id = self.transport, self.session.membership.client_id
        while len(stream.pending) < _READS_AHEAD:
            # The first request says where a restored (or moved) consumer stood.
            ref = transport.request(stream.worker_id, "read_shared", self._spec(slot),
                                    client_id, SHARED_BLOCK, stream.resume, stream.seq,
                                    stream.token)
            if ref is None:
                self._drop(slot, keep_position=True)
                return False
            stream.pending.append(ref)
            stream.resume = None
            stream.seq += 1
        ref = stream.pending.popleft()
        try:
            with _waits.waiting(self.stats):
                if not transport.ready(ref, stream.worker_id):
                    raise transport.ray.exceptions.ActorDiedError()
                packed, skipped, hit, after, token = transport.ray.get(ref)
        except transport.ray.exceptions.RayError as e:
            if not transport.lost(e):
                raise cause(e) from None
            self._drop(slot, keep_position=True)
            self.transport.tell("report_lost", stream.worker_id)
            return False
        if packed is None:  # the worker made the window again: read on from our position
            self._drop(slot, keep_position=True)
            return False
        stream.token = token
        block, failures, nbytes = _blocks.unpack(packed, self._dnode.compression)
        report = self.session.report
        report.bytes += nbytes
        report.reads += 1
        report.hits += hit
        report.skipped += skipped
        report.lost += skipped
        if not block:  # a finite pipeline's slot ended
            self._drop(slot, keep_position=False)
            self._ended.add(slot)
            return False
        stream.base = after - len(block) - len(stream.buffer)
        stream.buffer.add(block, failures)
        self.stats.buffered += len(block)
        self.stats.engine_reason = (
            f"jdata.service shared job {self.session.membership.job_id}: {report.hits} of "
            f"{report.reads} reads from the windows, {report.skipped} elements skipped (fell "
            "behind)")
        return True

    def snapshot(self):
        positions = dict(self._positions)
        positions.update({slot: s.base for slot, s in self._slots.items()})
        return _reader_states.shared_state(positions)

    def set_state(self, state) -> None:
        self._positions = _reader_states.read_shared_state(state,
                                                           self._dnode.input.cardinality())

    def close(self) -> None:
        if self.session is None or not self.session.closing():
            return
        membership = self.session.membership
        for slot, stream in self._slots.items():  # our cursors go
            self.transport.request(stream.worker_id, "leave_shared", membership.job_id,
                                   membership.client_id)
        self.transport.tell("release", Release(membership.job_id, membership.client_id))
