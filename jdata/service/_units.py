"""A job's units: each free, leased or done, and who kept which part of it.

A unit's elements ``[0, end)`` are kept by lineages in consecutive
*segments*. Most units have none but their last: leased from 0 by one
client, then done by its lineage. A client that leaves (or dies) partway
closes a segment ``[from, to)`` of its lineage, and the unit's next read
starts at its *tail* (the end of the last closed segment). A done unit's
last segment, ``[tail, end)``, is its ``done_by`` lineage's. Restores move
tails back and forth (``Job.restore``); everything else only appends.

Jobs reach 10^6 units and the dispatcher 10^5 leases/s, so nothing here is
O(units) per update: a ``bytearray`` holds each unit's status, a NumPy array
the lineage that did each done unit, a dict the few units with closed
segments, and the lowest free units come from a frontier plus a short sorted
pool. The frontier only moves forward: every unit below it is leased, done
or in the pool (freed after a lease), so ``bytearray.find`` from the
frontier finds the next never-leased unit in amortized O(1). An unbounded
job (a files reader under ``repeat()``) grows its arrays as units are leased.
"""

from __future__ import annotations

import bisect

import numpy as np

FREE, LEASED, DONE = 0, 1, 2
NOBODY = -1  # a segment no lineage kept: a restore left a gap (counted as lost)
_GROW = 1024


class Units:
    """``count`` units (``None``: unbounded). Callers check before they change (``check``)."""

    def __init__(self, count: int | None):
        self.count = count
        size = count if count is not None else _GROW
        self.status = bytearray(size)
        self.done_by = np.full(size, NOBODY, np.int32)  # the lineage that did it
        self.segments: dict[int, list[list[int]]] = {}  # unit -> [[lineage, from, to]...]
        self.done = 0
        self._frontier = 0
        self._pool: list[int] = []  # free units below the frontier, sorted

    def check(self, unit: int, where: str) -> None:
        if self.count is not None and unit >= self.count:
            raise ValueError(f"{where} has {self.count} units; unit {unit} is out of range")

    def state(self, unit: int) -> int:
        return self.status[unit] if unit < len(self.status) else FREE

    def tail(self, unit: int) -> int:
        """Where the next read of the unit starts (its closed segments' end)."""
        segments = self.segments.get(unit)
        return segments[-1][2] if segments else 0

    def _grow(self, unit: int) -> None:
        if unit >= len(self.status):
            more = max(unit + 1 - len(self.status), len(self.status), _GROW)
            self.status.extend(bytes(more))
            self.done_by = np.concatenate([self.done_by, np.full(more, NOBODY, np.int32)])

    def lowest_free(self, count: int) -> list[int]:
        """The ``count`` lowest free units (fewer if a bounded job has fewer)."""
        units = self._pool[:count]  # all below the frontier, so below every fresh unit
        start = self._frontier
        while len(units) < count:
            found = self.status.find(FREE, start)
            if found < 0:
                if self.count is not None:
                    break
                found = max(start, len(self.status))
            units.append(found)
            start = found + 1
        return units

    def take(self, unit: int) -> int:
        """A free unit is leased; returns its tail, where the read starts."""
        self._grow(unit)
        self.status[unit] = LEASED
        if unit < self._frontier:
            del self._pool[bisect.bisect_left(self._pool, unit)]
        elif unit == self._frontier:
            found = self.status.find(FREE, unit + 1)
            self._frontier = len(self.status) if found < 0 else found
        return self.tail(unit)

    def close(self, unit: int, lineage: int, to: int) -> None:
        """A leased (or done) unit is free again, the lineage's trailing part ending at
        ``to`` (the next read starts there): it kept from the tail up to ``to``, or, where
        ``to`` is below the tail, what it kept past ``to`` goes back (a death rolling back
        to a commit; never below another lineage's part)."""
        start = self.tail(unit)
        if self.status[unit] == DONE:
            self.done -= 1
            self.done_by[unit] = NOBODY
        self.status[unit] = FREE
        if to > start:
            self.append(unit, lineage, start, to)
        elif to < start:
            self._truncate(unit, lineage, to)
        if unit < self._frontier:  # at or above it, the frontier's scan finds it
            bisect.insort(self._pool, unit)

    def _truncate(self, unit: int, lineage: int, to: int) -> None:
        segments = self.segments[unit]
        while segments and segments[-1][0] == lineage and segments[-1][2] > to:
            if segments[-1][1] >= to:
                segments.pop()
            else:
                segments[-1][2] = to
        if not segments:
            del self.segments[unit]

    def append(self, unit: int, lineage: int, start: int, to: int) -> None:
        segments = self.segments.setdefault(unit, [])
        if segments and segments[-1][0] == lineage and segments[-1][2] == start:
            segments[-1][2] = to
        else:
            segments.append([lineage, start, to])

    def mark_done(self, unit: int, lineage: int) -> None:
        """A leased (or free: a restore) unit is done: ``lineage`` kept it from its tail."""
        self._grow(unit)
        if self.status[unit] == FREE:
            self.take(unit)
        self.status[unit] = DONE
        self.done_by[unit] = lineage
        self.done += 1

    def rewrite(self, unit: int, segments: list, done_by: int | None) -> None:
        """Sets a free or done unit's closed ``segments`` and, if it is done, who did its
        last one (a restore's)."""
        self._grow(unit)
        was = self.status[unit]
        if was == DONE:
            self.done -= 1
            self.done_by[unit] = NOBODY
            self.status[unit] = FREE
            if unit < self._frontier:
                bisect.insort(self._pool, unit)
        if segments:
            self.segments[unit] = segments
        else:
            self.segments.pop(unit, None)
        if done_by is not None:
            self.mark_done(unit, done_by)

    def done_by_lineage(self, lineage: int) -> list[int]:
        """The units that lineage did (sorted)."""
        return np.flatnonzero(self.done_by == lineage).tolist()

    def finished(self) -> bool:
        return self.count is not None and self.done == self.count


def in_ranges(unit: int, ranges: tuple, starts: list) -> bool:
    """Whether ``unit`` is in the sorted ``[start, stop)`` ``ranges`` (``starts``: their
    starts, for bisect)."""
    i = bisect.bisect_right(starts, unit) - 1
    return i >= 0 and unit < ranges[i][1]


def expand(ranges: tuple) -> list[int]:
    return [u for start, stop in ranges for u in range(start, stop)]
