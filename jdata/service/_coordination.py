"""The dispatcher's coordinated jobs: which (slot, worker) serves which rounds, and the
consumers' agreement on each run of rounds (``_run_outcomes``).

A schedule is a list of entries ``(first round, ((slot, worker id)...))``, kept in the
ledger (``state.RoundsScheduled``, journaled: a restarted dispatcher serves the same
rounds from the same buffers): round ``r`` is read from
``placed[(r // ROUNDS_PER_READ) % len(placed)]`` of the last entry that starts at or
before ``r``. When the workers change, a new entry starts ``ROUND_LEAD`` rounds past
the furthest consumer, so every consumer learns of it before it applies (they ask
every ``ROUND_LEAD // 4`` rounds): they all read each round from the same place. A
worker keeps its slot across entries; a new worker takes the next slot number (never
a dead worker's, whose stream's start was read), so a slot's stream (its randomness)
never depends on which worker runs it. The rounds consumers reported are kept here
only: a restarted dispatcher learns them again from the consumers' next asks, and adds
no entry before every live consumer has told it its round (a consumer restored far
behind the others may ask first: an entry past it alone could start behind the
others' requests).
"""

from __future__ import annotations

import threading
import time

from jdata.service import _rounds, _run_outcomes
from jdata.service._updates import RoundsScheduled

# A coordinated job's rounds go to workers in runs of this many (one request of a client
# reads a run); a new schedule entry starts this many rounds past its furthest client.
ROUNDS_PER_READ = 8
ROUND_LEAD = 64


def next_entry(job_id: str, schedule: list, furthest: int | None,
               alive: list[str]) -> RoundsScheduled | None:
    """The entry a job's ``schedule`` needs for workers ``alive`` (None: it has it, or
    it must wait), with consumers up to round ``furthest`` (None: none reported one to
    this dispatcher yet; a restarted one then keeps the schedule as it is, as an entry
    must start past every consumer)."""
    if not alive or (schedule and furthest is None):
        return None
    furthest = furthest or 0
    slots = {worker_id: slot for _, placed in schedule for slot, worker_id in placed}
    fresh = max(slots.values(), default=-1) + 1
    for worker_id in alive:
        if worker_id not in slots:
            slots[worker_id], fresh = fresh, fresh + 1
    placed = tuple((slots[worker_id], worker_id) for worker_id in alive)
    run = ROUNDS_PER_READ
    if not schedule:
        first = furthest // run * run
    elif schedule[-1][1] != placed:
        first = -(-max(furthest + ROUND_LEAD, schedule[-1][0] + run) // run) * run
    else:
        return None
    return RoundsScheduled(job_id=job_id, first_round=first, placements=placed)


class Coordination:
    def __init__(self):
        self._lock = threading.Lock()  # guards everything below (a leaf lock)
        self._reported = threading.Condition(self._lock)  # consumers' reports on runs
        self._seen: dict[str, dict[str, int]] = {}  # job -> client -> its round
        self._outcomes: dict[str, _run_outcomes.Outcomes] = {}

    def furthest(self, job_id: str, client_id: str, round_index: int | None) -> int | None:
        """The furthest round the job's consumers reported, this one's ``round_index``
        (None: it knows none yet) included; None if none reported one."""
        with self._lock:
            seen = self._seen.setdefault(job_id, {})
            if round_index is not None:
                seen[client_id] = max(round_index, seen.get(client_id, 0))
            return max(seen.values(), default=None)

    def placing_round(self, job_id: str, clients) -> int | None:
        """The furthest round reported, if every one of the job's live ``clients``
        reported one to this dispatcher (None: a new entry must wait for them)."""
        with self._lock:
            seen = self._seen.get(job_id, {})
            if any(client_id not in seen for client_id in clients):
                return None
            return max(seen.values(), default=None)

    def run_outcome(self, job_id: str, client_id: str, start: int, received: bool,
                    wait_sec: float, live: set) -> str:
        """A consumer received the run from round ``start`` (or lost it with its worker):
        ``"use"`` it, ``"skip"`` it, or ``"wait"`` and ask again, so that all consumers do
        the same. Waits up to ``wait_sec`` (at most 1 s) for the others' reports;
        ``live``: the job's consumers (when the call came)."""
        deadline = time.monotonic() + min(wait_sec, 1.0)
        with self._reported:
            outcomes = self._outcomes.get(job_id)
            if outcomes is None:
                outcomes = self._outcomes[job_id] = _run_outcomes.Outcomes(
                    _rounds.CONSUMER_TIMEOUT_SEC)
            self._reported.notify_all()  # the waiting see this report once we wait
            while True:
                outcome = outcomes.report(client_id, start, received, time.monotonic(), live)
                left = deadline - time.monotonic()
                if outcome != _run_outcomes.WAIT or left <= 0:
                    return outcome
                self._reported.wait(left)

    def keep(self, job_ids) -> None:
        """Forgets the jobs not in ``job_ids`` (removed)."""
        with self._lock:
            for job_id in (set(self._seen) | set(self._outcomes)) - set(job_ids):
                for table in (self._seen, self._outcomes):
                    table.pop(job_id, None)
