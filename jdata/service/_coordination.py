"""The dispatcher's coordinated jobs: which (worker, slot) serves which rounds, and the
consumers' agreement on each run of rounds (``_run_outcomes``). Not journaled: after a
restart, schedules start again from the rounds the consumers report.

A schedule is a list of entries ``(first round, [(worker id, slot)...])``: round
``r`` is read from ``placed[(r // ROUNDS_PER_READ) % len(placed)]`` of the last entry
that starts at or before ``r``. When the workers change, a new entry starts
``ROUND_LEAD`` rounds past the furthest consumer, so every consumer learns of it
before it applies (they ask every ``ROUND_LEAD // 4`` rounds): they all read each
round from the same place. A worker keeps its slot across entries; a new worker
takes the next slot number, so a slot's stream (its randomness) never depends on
which worker runs it.
"""

from __future__ import annotations

import threading
import time

from jdata.service import _rounds, _run_outcomes

# A coordinated job's rounds go to workers in runs of this many (one request of a client
# reads a run); a new schedule entry starts this many rounds past its furthest client.
ROUNDS_PER_READ = 8
ROUND_LEAD = 64


class Coordination:
    def __init__(self):
        self._lock = threading.Lock()  # guards everything below (a leaf lock)
        self._reported = threading.Condition(self._lock)  # consumers' reports on runs
        self._schedules: dict[str, list] = {}
        self._slots: dict[str, dict[str, int]] = {}  # job -> worker -> its slot
        self._seen: dict[str, dict[str, int]] = {}  # job -> client -> its round
        self._outcomes: dict[str, _run_outcomes.Outcomes] = {}

    def schedule(self, job_id: str, client_id: str, round_index: int | None,
                 alive: list[str]) -> tuple[list, int]:
        """The job's schedule and the furthest round a client reported (see the module)."""
        with self._lock:
            seen = self._seen.setdefault(job_id, {})
            if round_index is not None:
                seen[client_id] = max(round_index, seen.get(client_id, 0))
            furthest = max(seen.values(), default=0)
            entries = self._schedules.setdefault(job_id, [])
            slots = self._slots.setdefault(job_id, {})
            for worker_id in alive:
                slots.setdefault(worker_id, len(slots))
            placed = [(worker_id, slots[worker_id]) for worker_id in alive]
            run = ROUNDS_PER_READ
            if placed and not entries:
                entries.append((furthest // run * run, placed))
            elif placed and entries[-1][1] != placed:
                start = max(furthest + ROUND_LEAD, entries[-1][0] + run)
                entries.append((-(-start // run) * run, placed))
            return list(entries), furthest

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

    def coordinated(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._schedules

    def keep(self, job_ids) -> None:
        """Forgets the jobs not in ``job_ids`` (removed)."""
        with self._lock:
            for job_id in set(self._schedules) - set(job_ids):
                for table in (self._schedules, self._slots, self._seen, self._outcomes):
                    table.pop(job_id, None)
