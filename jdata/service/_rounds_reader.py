"""The reader of a coordinated job (``distribute(num_consumers=C, consumer_index=i)``).

Consumers read in **rounds**: every consumer reads round ``r`` from the same
(slot, worker), which hands consumer ``i`` the ``i``-th element of a group of
``C`` consecutive elements of the slot's stream (``_rounds.RoundBuffer``). The
dispatcher's schedule says which (slot, worker) serves which rounds; a slot's
stream has its own randomness (a pure function of the key, the epoch and the
slot, never of a worker's id). Rounds are read in runs of ``ROUNDS_PER_READ``
(one request each), the next runs requested while one is read. A worker killed
between its replies to a run leaves it with some consumers only: every consumer
reports each run it received (or lost), and all use it or all skip it
(``_run_outcomes``). A consumer's state is its next round.
"""

from __future__ import annotations

import functools
import time
import uuid

from jdata._errors import ServiceError
from jdata.service import _blocks, _reader_states, _rounds, _session, _waits
from jdata.service._messages import Mode, Register, Release
from jdata.service.transport import cause
from jdata.service.worker import ReadSpec

# A round whose group is not ready this long after its first request is skipped by
# every consumer.
ROUND_BOUND_SEC = 2.0
# Runs of rounds a consumer requests ahead, the one it reads included.
_RUNS_AHEAD = 3
# A consumer whose run the others have yet to report waits this long on the dispatcher
# for their reports, then asks again (a bounded wait holds a dispatcher thread briefly).
_AGREE_WAIT_SEC = 0.05


class RoundsReader:
    def __init__(self, dnode, ctx, epoch: int, stats):
        self._dnode, self._ctx, self.stats = dnode, ctx, stats
        self._round = 0  # the next round to read
        self._restored = False
        self._refs: dict = {}  # a run's first round -> (its request, worker id)
        self._results: dict = {}  # a run's first round -> its results
        self._schedule: list | None = None
        self._schedule_until = 0
        self._reader = uuid.uuid4().hex  # its requests' turns on each worker:
        self._sent: dict[str, int] = {}  # worker id -> the requests sent to it
        self.session = None

    def start(self) -> None:
        from jdata.service.dispatcher import ROUND_LEAD, ROUNDS_PER_READ

        self._run, self._lead = ROUNDS_PER_READ, ROUND_LEAD
        opened = _session.open_job(self._dnode, self._ctx, self.stats, 0)
        self.session, self.transport = opened.session, opened.session.transport
        self._fingerprint, self._plan_ref = opened.fingerprint, opened.plan_ref
        reply = self.session.register(Register(self._dnode.job_name, self._fingerprint,
                                               Mode.COORDINATED, 0, uuid.uuid4().hex, None))
        self._epoch = reply.epoch
        self.session.report.capacity = _RUNS_AHEAD * self._run

    def next_many(self, n: int) -> list:
        """This consumer's element of the next round that is not skipped (one element:
        usually a batch)."""
        run, report = self._run, self.session.report
        while True:
            if self._schedule is None or self._round >= self._schedule_until:
                self._refresh_schedule()
            r = self._round
            start = r - r % run
            for ahead in range(start, start + _RUNS_AHEAD * run, run):
                if ahead not in self._refs:
                    self._refs[ahead] = self._request_run(ahead)
            results = self._results.get(start)
            began = time.perf_counter()
            with _waits.waiting(self.stats):
                if results is None:
                    results, received = self._receive_run(start)
                    if self._agree(start, received) == "skip":  # another consumer lost it
                        results = [(None, True, False)] * run
                    self._results[start] = results
            report.round_wait_sec += time.perf_counter() - began
            packed, skipped, ended = results[r - start] if r - start < len(results) else \
                (None, False, True)
            self._round += 1
            if self._round % run == 0:  # the run is read: its results go
                self._results.pop(start, None)
                self._refs.pop(start, None)
            if ended:
                return []
            if skipped:
                report.skipped_rounds += 1
                self._update_reason()
                continue
            report.rounds += 1
            block, failures, nbytes = _blocks.unpack(packed, self._dnode.compression)
            report.bytes += nbytes
            self.stats.elements += len(block)
            self._update_reason()
            if failures:
                raise block[0].error
            return block

    def _refresh_schedule(self) -> None:
        membership = self.session.membership
        reply = self.transport.call("schedule", membership.job_id, membership.client_id,
                                    reported_round(self._round, self._schedule is not None,
                                                   self._restored))
        if reply is None:
            raise ServiceError(
                f"distribute: coordinated job {membership.job_id} is gone from the service "
                "(its consumers were silent past its job_timeout); restore every consumer "
                "from a checkpoint to run it again")
        entries, furthest = reply
        if self._schedule is None and not self._restored:
            self._round = furthest  # a consumer joining a running job starts with the others
        self._schedule = entries
        self.stats.parallelism = len(entries[-1][1]) if entries else 0
        self._schedule_until = self._round + max(1, self._lead // 4)
        if not entries:
            self._schedule = None
            time.sleep(0.05)  # no worker yet: they are being replaced

    def _request_run(self, start: int):
        """The request of the run of rounds from ``start`` to the (slot, worker) the
        schedule names for it; ``None`` for a worker that is gone (its rounds are skipped,
        as by every consumer)."""
        placed = self._schedule[0][1]
        for first, entry in self._schedule:
            if first <= start:
                placed = entry
        slot, worker_id = placed[(start // self._run) % len(placed)]
        membership = self.session.membership
        spec = ReadSpec(membership.job_id, self._fingerprint, self._plan_ref, self._epoch, slot,
                        0, self._dnode.compression)
        turn = self._sent.get(worker_id, 0)
        ref = self.transport.request(worker_id, "read_rounds", spec, self._dnode.num_consumers,
                                     self._dnode.consumer_index, start, self._run,
                                     ROUND_BOUND_SEC, (self._reader, turn))
        if ref is not None:
            self._sent[worker_id] = turn + 1
            # Its arrival is reported as it comes (on Ray's thread), not when this consumer
            # reaches the run: the others' ``_agree`` need not wait for this one to get there.
            ref.future().add_done_callback(functools.partial(
                _report_arrival, self.transport, membership.job_id, membership.client_id,
                start))
        return ref, worker_id

    def _receive_run(self, start: int) -> tuple[list, bool]:
        """The results of the run from ``start``, and whether they came: when its worker is
        gone every round is skipped (``_agree`` makes every consumer skip it)."""
        ref, worker_id = self._refs[start]
        transport = self.transport
        try:
            if ref is None or not transport.ready(ref, worker_id):
                raise transport.ray.exceptions.ActorDiedError()
            return transport.ray.get(ref), True
        except transport.ray.exceptions.RayError as e:
            if not transport.lost(e):
                raise cause(e) from None
            self._schedule_until = self._round  # learn the new workers at once
            return [(None, True, False)] * self._run, False

    def _agree(self, start: int, received: bool) -> str:
        """What every consumer does with the run from ``start``: "use" or "skip"."""
        # Bounded: the others may never report a run (this consumer was restored far behind
        # them, past what the dispatcher keeps): then what it has decides.
        deadline = time.monotonic() + _rounds.CONSUMER_TIMEOUT_SEC
        membership = self.session.membership
        while time.monotonic() < deadline:  # each call waits up to _AGREE_WAIT_SEC
            outcome = self.transport.call("run_outcome", membership.job_id,
                                          membership.client_id, start, received,
                                          _AGREE_WAIT_SEC)
            if outcome != "wait":
                return outcome
        return "use" if received else "skip"

    def _update_reason(self) -> None:
        report = self.session.report
        self.stats.engine_reason = (
            f"jdata.service coordinated job {self.session.membership.job_id}: consumer "
            f"{self._dnode.consumer_index} of {self._dnode.num_consumers}, round {self._round}; "
            f"{report.rounds} rounds read, {report.skipped_rounds} skipped, "
            f"{1e3 * report.round_wait_sec / max(1, report.rounds + report.skipped_rounds):.1f}"
            " ms mean wait")

    def snapshot(self):
        return _reader_states.rounds_state(self._round)

    def set_state(self, state) -> None:
        self._round = _reader_states.read_rounds_state(state)
        self._restored = True

    def close(self) -> None:
        if self.session is not None and self.session.closing():
            membership = self.session.membership
            self.transport.tell("release", Release(membership.job_id, membership.client_id))


def reported_round(round_index: int, reading: bool, restored: bool) -> int | None:
    """The round a consumer reports when it asks for the schedule: its own once it reads
    or was restored (a restarted dispatcher places new workers past it), None for one
    that joins a running job (it starts at the furthest consumer's)."""
    return round_index if reading or restored else None


def _report_arrival(transport, job_id: str, client_id: str, start: int, future) -> None:
    """A coordinated run's reply came: tell the dispatcher, without waiting (a failed reply
    is reported when the consumer reaches the run)."""
    try:
        if future.exception() is None:
            transport.tell("run_outcome", job_id, client_id, start, True)
    except Exception:  # cancelled, or the service is gone: the consumer reports it itself
        pass
