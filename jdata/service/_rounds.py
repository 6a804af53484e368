"""Coordinated reads on one worker (``distribute(num_consumers=C, consumer_index=i)``).

Synchronous data-parallel training waits every step for its slowest replica; with
variable-length inputs that is the replica with the longest sequences. With
coordinated reads the C consumers read in **rounds**: every consumer reads round r
from the same worker, which hands consumer i the i-th element of a group of C
consecutive elements of its stream. Batches that are consecutive there come from one
bucket (``bucket_by_sequence_length(C * b).rebatch(b)`` above ``distribute``), so a
step's batches have similar lengths.

Rounds go to workers in runs of ``ROUNDS_PER_READ`` (``dispatcher.schedule``), so one
request of a consumer reads a run: a Ray call per step would cost more than the step
saves. A worker produces groups ahead on a thread of its own. A round gets the oldest ready
group once every live consumer has asked for it (so a worker that dies has handed it
to all or to none); when none is ready within ``bound_sec`` of that, the round is
skipped, and every consumer is told so: they skip it together, in lock-step. A
consumer that stops asking holds the others for ``consumer_timeout`` seconds, then is
counted out. Elements are never lost to a skipped round: the group goes to the next
round. A consumer's requests run on the worker's threads in any order (Ray keeps no
order for a threaded actor): each carries its turn (``(reader, n)``: the reader's
``n``-th request to this worker), and a request's rounds are asked for only after the
reader's earlier requests' were, so groups go to rounds in round order. Nothing here
imports Ray.
"""

from __future__ import annotations

import collections
import threading
import time

# A consumer that asks nothing for this long is counted out (here, and by the
# dispatcher's agreement on runs, ``_run_outcomes``).
CONSUMER_TIMEOUT_SEC = 10.0
# Rounds handed out are forgotten this long after their first request (a consumer that
# died never takes its element)...
_ROUND_TTL_SEC = 120.0
# ... and rounds every consumer took are kept this many more: a consumer restored from a
# state taken just before (its reads ahead were lost with it) reads them again.
_KEEP_TAKEN = 16


class RoundBuffer:
    """One coordinated job's rounds on one worker; thread-safe.

    ``produce(n)`` returns ``(elements, failure places, bytes)`` with at most ``n``
    elements (empty: the stream ended).
    """

    def __init__(self, produce, num_consumers: int, bound_sec: float, ahead: int = 16,
                 consumer_timeout: float = CONSUMER_TIMEOUT_SEC):
        self._produce, self._c, self._bound = produce, num_consumers, bound_sec
        self._ahead, self._consumer_timeout = ahead, consumer_timeout
        self._seen: dict[int, float] = {}  # consumer -> when it last asked for a round
        # One lock; the producer waits for room on ``_room``, a round's consumers on their
        # round's own condition (waking every waiter at each request cost more than the
        # rounds saved).
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._turn = threading.Condition(self._lock)  # a reader's next request may go on
        self._turns: dict[str, list] = {}  # reader -> [its next request's turn, last seen]
        self._ready: collections.deque = collections.deque()  # groups not yet in a round
        # round -> [group or None or "skipped", taken by, first asked, asked by, all asked at,
        #           its condition]
        self._rounds: dict[int, list] = {}
        self._taken: collections.deque = collections.deque()  # rounds every consumer took
        # Rounds below this were taken by every consumer and forgotten: a consumer that asks
        # for one (restored from an older state) finds it skipped, never a new group.
        self._floor = 0
        self._ended = False
        self._stop = False
        self.last_read = time.monotonic()
        self.stats = {"rounds": 0, "skipped_rounds": 0, "groups": 0}
        threading.Thread(target=self._run, daemon=True, name="jdata-rounds").start()

    def _run(self) -> None:
        carry: list = []
        while True:
            with self._lock:
                while len(self._ready) >= self._ahead and not self._stop:
                    self._room.wait()
                if self._stop:
                    return
            try:
                elements = self._produce(self._c - len(carry))[0]
            except BaseException:  # the pipeline itself broke: no more rounds
                elements = []
            with self._lock:
                if not elements:
                    self._ended = True
                    self._wake_waiting()
                    return
                carry += elements
                while len(carry) >= self._c:
                    self._ready.append(carry[:self._c])
                    carry = carry[self._c:]
                    self.stats["groups"] += 1
                self._wake_waiting()

    def take(self, round_index: int, consumer: int) -> tuple:
        """``(element, skipped, ended)`` of consumer ``consumer`` in round ``round_index``:
        its element of the round's group; or ``skipped``; or ``ended`` (the stream ended).

        A round is handed out once every consumer that lives has asked for it, so
        that a worker that dies hands it to all or to none (the consumers stay in
        lock-step). A consumer lives from its first request until it has asked for
        nothing for ``consumer_timeout`` seconds. Once all asked, a round with no
        group ready within ``bound_sec`` is skipped, for all of them.
        """
        with self._lock:
            entry = self._ask(round_index, consumer)
            if entry is None:
                self.stats["skipped_rounds"] += 1
                return None, True, False
            while entry[0] is None:
                now = time.monotonic()
                waiting_for = self._live(now) - entry[3]
                if waiting_for:  # until it asks, or it is gone
                    wake = min(self._seen[c] for c in waiting_for) + self._consumer_timeout
                    entry[5].wait(timeout=max(0.01, wake - now))
                    continue
                if entry[4] is None:
                    entry[4] = now
                if self._ready and self._oldest_waiting() == round_index:
                    entry[0] = self._ready.popleft()
                    self.stats["rounds"] += 1
                    self._resolved(entry)
                    break
                if self._ended and not self._ready:
                    return None, False, True
                left = entry[4] + self._bound - now
                if left <= 0:
                    entry[0] = "skipped"
                    self.stats["skipped_rounds"] += 1
                    self._resolved(entry)
                    break
                entry[5].wait(timeout=left)
            if entry[0] == "skipped":
                return None, True, False
            if consumer not in entry[1]:
                entry[1].add(consumer)
                if len(entry[1]) == self._c:
                    self._taken.append(round_index)
                    while len(self._taken) > _KEEP_TAKEN:
                        gone = self._taken.popleft()
                        self._rounds.pop(gone, None)
                        self._floor = max(self._floor, gone + 1)
            return entry[0][consumer], False, False

    def _ask(self, round_index: int, consumer: int) -> list | None:
        """Records that ``consumer`` asked for the round: its entry (None: forgotten)."""
        self.last_read = now = time.monotonic()
        self._seen[consumer] = now
        entry = self._rounds.get(round_index)
        if entry is None and round_index < self._floor:
            return None
        if entry is None:
            entry = self._rounds[round_index] = [None, set(), now, set(), None,
                                                 threading.Condition(self._lock)]
            self._expire(now)
        entry[3].add(consumer)
        entry[5].notify_all()  # the others of this round, waiting for this request
        return entry

    def _live(self, now: float) -> set:
        return {c for c, seen in self._seen.items() if now - seen <= self._consumer_timeout}

    def take_many(self, first_round: int, count: int, consumer: int,
                  turn: tuple[str, int] | None = None) -> list:
        """``take`` of rounds ``first_round .. first_round + count - 1`` in turn (to the end
        of the stream), all asked for at once: in ``turn`` (``(reader, n)``), after the
        reader's requests ``0 .. n - 1``, or ``bound_sec`` seconds after it came (those
        race it to the worker's lock; a buffer made again never sees them)."""
        with self._lock:
            if turn is not None:
                self._wait_turn(*turn)
            for r in range(first_round, first_round + count):
                self._ask(r, consumer)
        out = []
        for r in range(first_round, first_round + count):
            out.append(self.take(r, consumer))
            if out[-1][2]:
                break
        return out

    def _wait_turn(self, reader: str, n: int) -> None:
        now = time.monotonic()
        deadline = now + self._bound
        while (turn := self._turns.setdefault(reader, [0, now]))[0] < n and (
                left := deadline - time.monotonic()) > 0:
            self._turn.wait(left)
        turn[0], turn[1] = max(turn[0], n + 1), time.monotonic()
        self._turn.notify_all()

    def _resolved(self, entry: list) -> None:
        """A round got its group (or was skipped): its consumers, the producer (room for
        another group) and the next round (now the oldest waiting) go on."""
        entry[5].notify_all()
        self._room.notify_all()
        self._wake_waiting()

    def _wake_waiting(self) -> None:
        for entry in self._rounds.values():
            if entry[0] is None:
                entry[5].notify_all()

    def _oldest_waiting(self) -> int:
        return min(r for r, e in self._rounds.items() if e[0] is None)

    def _expire(self, now: float) -> None:
        # A round still waiting for its group keeps it: its consumers are in ``take``.
        for r in [r for r, e in self._rounds.items()
                  if e[0] is not None and now - e[2] > _ROUND_TTL_SEC]:
            del self._rounds[r]
        for reader in [k for k, (_, seen) in self._turns.items() if now - seen > _ROUND_TTL_SEC]:
            del self._turns[reader]

    def close(self) -> None:
        with self._lock:
            self._stop = True
            self._room.notify_all()
            self._wake_waiting()

    def snapshot(self) -> dict:
        with self._lock:
            return {**self.stats, "ready_groups": len(self._ready)}
