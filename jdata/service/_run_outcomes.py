"""Coordinated reads: the consumers' agreement on each run of rounds (the dispatcher's).

A worker hands a round to every consumer or to none (``_rounds.RoundBuffer``), but its
replies to a run's requests leave one by one: a worker killed between two of them
leaves some consumers with the run and the others without. Those must skip it, and so
must the ones that have it, or the consumers fall out of lock-step. So each consumer
reports whether it received a run (as soon as its reply arrives, and again before using
it), and the run is used only once every consumer that takes part has received it; it
is skipped by all as soon as one lost it. A consumer that has not reported for
``timeout_sec`` is counted out (as a worker counts it out of its rounds) until it reports
again; a consumer that joined later takes no part in the runs before its first one.
Nothing here imports Ray.
"""

from __future__ import annotations

import collections

USE, SKIP, WAIT = "use", "skip", "wait"
# Runs whose outcome is kept (a consumer restored a little behind reads it again).
_KEPT_RUNS = 1024


class Outcomes:
    """One coordinated job's runs: who received each, and what all do with it."""

    def __init__(self, timeout_sec: float):
        self.timeout_sec = timeout_sec
        self._first: dict[str, int] = {}  # consumer -> the first run it reported
        self._last: dict[str, float] = {}  # consumer -> when it last reported
        self._runs: collections.OrderedDict = collections.OrderedDict()

    def report(self, consumer: str, start: int, received: bool, now: float,
               live: set) -> str:
        """``consumer`` received the run from round ``start`` (or lost it, its worker
        gone). Returns ``USE``, ``SKIP``, or ``WAIT`` (ask again): others have yet to
        report. ``live``: the job's consumers now."""
        self._first[consumer] = min(self._first.get(consumer, start), start)
        self._last[consumer] = now
        run = self._runs.get(start)
        if run is None:
            run = self._runs[start] = {"got": set(), "lost": False, "since": now,
                                       "decided": None}
            while len(self._runs) > _KEPT_RUNS:
                self._runs.popitem(last=False)
        if run["decided"] is None:
            run["lost"] |= not received
            if received:
                run["got"].add(consumer)
            run["decided"] = self._decide(run, start, now, live)
        return run["decided"] or WAIT

    def _decide(self, run: dict, start: int, now: float, live: set) -> str | None:
        if run["lost"]:
            return SKIP
        # Those yet to report that take part in this run and are not silent too long (a
        # consumer never heard from counts from the run's first report).
        waiting = [c for c in live - run["got"] if self._first.get(c, start) <= start
                   and now - self._last.get(c, run["since"]) <= self.timeout_sec]
        return None if waiting else USE
