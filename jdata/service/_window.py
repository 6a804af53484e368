"""The sliding window of a shared job on one worker (``distribute(sharing=True)``).

Jobs that name the same job and run the same pipeline (an infinite one)
read one stream per worker: the worker computes each element once and keeps
the recent ones in a window, and every job (a consumer) reads it at its own
pace from its own position. A consumer that reaches the window's end
extends it (computes the next block); the window drops blocks from its front
once it holds more than ``max_bytes``; a consumer that fell behind the
window's start moves to it, and the elements it skipped are counted and
reported to it (tf.data moves it silently). A new consumer starts at the
window's start, where the most elements are shared.

Nothing here imports Ray: the worker calls ``read`` from its actor threads.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid

# A read waits at most this long for the consumer's earlier reads (one lost on the way
# would otherwise hold the ones after it).
_TURN_WAIT_SEC = 30.0


class SharedWindow:
    """One shared job's stream on one worker; thread-safe.

    ``produce(n)`` returns the next block of the stream: ``(elements, failure
    places, bytes)``, at most ``n`` elements, never empty (the stream is
    infinite; an empty block ends it, and reads then return nothing).
    """

    def __init__(self, produce, max_bytes: int, first_block: int, next_size):
        self._produce, self._max_bytes = produce, max_bytes
        self._next_size, self._size = next_size, first_block
        self._lock = threading.Lock()  # the window and the cursors
        self._turns = threading.Condition(self._lock)  # a consumer's reads in its order
        self._producing = threading.Lock()  # one producer at a time, outside ``_lock``
        self._blocks: collections.deque = collections.deque()  # (start, elements, fails, bytes)
        self._start = self._end = 0  # positions of the window's first and next element
        self._bytes = 0
        self._ended = False
        self._cursors: dict[str, int] = {}
        self._next_seq: dict[str, int] = {}  # per consumer: the read to serve next
        self.last_read = time.monotonic()
        # Which window this is: an idle one goes, and one made again for the slot knows
        # none of its consumers' cursors (they must say where they stand).
        self.token = uuid.uuid4().hex
        self.stats = {"produced": 0, "produced_bytes": 0, "served": 0, "reads": 0,
                      "hits": 0, "skipped": 0}

    def read(self, consumer: str, max_elements: int, position: int | None = None,
             seq: int = 0) -> tuple:
        """The consumer's next elements (one block's worth, at most ``max_elements``):
        ``(elements, failure places in them, bytes, skipped, hit, position after)``.

        ``position``: where the consumer resumes (a restored iterator); else its
        cursor, or the window's start for a new consumer. ``skipped``: elements
        it lost because it fell behind the window; ``hit``: served from the
        window without computing. ``elements`` is empty only at the stream's end.
        ``seq``: the consumer's count of reads before this one; a consumer keeps
        several in flight, which the worker's threads may start in any order,
        so each waits for its turn (at most ``_TURN_WAIT_SEC``).
        """
        with self._turns:
            deadline = time.monotonic() + _TURN_WAIT_SEC
            while self._next_seq.get(consumer, 0) < seq and time.monotonic() < deadline:
                self._turns.wait(timeout=max(0.0, deadline - time.monotonic()))
        try:
            return self._read(consumer, max_elements, position)
        finally:
            with self._turns:
                self._next_seq[consumer] = max(self._next_seq.get(consumer, 0), seq + 1)
                self._turns.notify_all()

    def _read(self, consumer: str, max_elements: int, position: int | None) -> tuple:
        hit = True
        while True:
            with self._lock:
                self.last_read = time.monotonic()
                at = position if position is not None else \
                    self._cursors.get(consumer, self._start)
                position = None
                skipped = max(0, self._start - at)
                at += skipped
                if at < self._end:
                    out = self._slice(at, max_elements)
                    self._cursors[consumer] = at + len(out[0])
                    stats = self.stats
                    stats["reads"] += 1
                    stats["hits"] += hit
                    stats["served"] += len(out[0])
                    stats["skipped"] += skipped
                    return (*out, skipped, hit, at + len(out[0]))
                if self._ended:
                    self._cursors[consumer] = at
                    return [], (), 0, skipped, hit, at
                self._cursors[consumer] = at
            hit = False
            self._extend(at)
            position = at  # where it stood: its cursor may have moved meanwhile

    def _slice(self, at: int, n: int) -> tuple[list, tuple, int]:
        """Up to ``n`` elements from position ``at`` on, across blocks (a consumer behind
        the leader takes what the window has in one read)."""
        part: list = []
        fails: list = []
        nbytes = 0
        for start, elements, failures, block_bytes in self._blocks:
            stop = start + len(elements)
            if stop <= at:
                continue
            lo = max(at, start) - start
            hi = min(len(elements), lo + n - len(part))
            fails += [len(part) + f - lo for f in failures if lo <= f < hi]
            part += elements[lo:hi]
            nbytes += block_bytes * (hi - lo) // max(len(elements), 1)
            if len(part) >= n:
                break
        if not part:
            raise AssertionError(f"position {at} not in [{self._start}, {self._end})")
        return part, tuple(fails), nbytes

    def _extend(self, at: int) -> None:
        """Computes the next block, unless another consumer did meanwhile."""
        with self._producing:
            with self._lock:
                if at < self._end or self._ended:
                    return
                size = self._size
            began = time.perf_counter()
            elements, failures, nbytes = self._produce(size)
            seconds = time.perf_counter() - began
            with self._lock:
                if not elements:
                    self._ended = True
                    return
                self._blocks.append((self._end, elements, failures, nbytes))
                self._end += len(elements)
                self._bytes += nbytes
                self.stats["produced"] += len(elements)
                self.stats["produced_bytes"] += nbytes
                self._size = self._next_size(size, len(elements), nbytes, seconds)
                while self._bytes > self._max_bytes and len(self._blocks) > 1:
                    start, dropped, _, dropped_bytes = self._blocks.popleft()
                    self._bytes -= dropped_bytes
                    self._start = start + len(dropped)

    def close(self) -> None:
        """Nothing runs in a window between reads (its job's buffers close alike)."""

    def forget(self, consumer: str) -> None:
        with self._lock:
            self._cursors.pop(consumer, None)
            self._next_seq.pop(consumer, None)

    def snapshot(self) -> dict:
        with self._lock:
            return {**self.stats, "window_bytes": self._bytes,
                    "window_elements": self._end - self._start,
                    "consumers": len(self._cursors)}

