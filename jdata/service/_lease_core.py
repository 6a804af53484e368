"""A consumer of leased units, without Ray: what it holds, received and yielded, and what
to do next (``LeaseCore.step``). ``jdata.service._lease_reader`` does the I/O.

Events come in (``granted``, ``arrived``, ``ended``, ``lost``, ``taken``...) and
``step`` names the next action: ``YIELD`` a buffered unit's elements, ``PULL``
the next block of a unit's read (or ``PULL_ANY``), ``LEASE`` more units (reporting
the ones yielded whole), ``WAIT`` (nothing to read now: workers are being
replaced, or other clients hold the last units), ``COMMIT`` (every unit is
done: it commits what it yielded, so that the others need not wait on its
death), or ``END`` (the epoch is over: every unit is done, by this client or
another, and no other client could still roll back what it did).

Offsets are counted from a unit's start: a unit granted past ``offset``
elements (others hold those) has received and yielded ``offset`` already.
The position (``position()``) is the units yielded whole and how far into the
others: exactly what a restore needs, since elements received but not yielded
are read again. Yield order: ``"order"`` (the lowest unit held first: the
local pipeline's stream for a client of its own), ``"turns"`` (a block from
each held unit in turn: ``off`` mode's slots, which never end) or ``"any"``
(whatever arrived first).
"""

from __future__ import annotations

import collections
import enum

from jdata.service import _units
from jdata.service._messages import Position


class Action(enum.Enum):
    YIELD = "yield"
    PULL = "pull"
    PULL_ANY = "pull_any"
    LEASE = "lease"
    COMMIT = "commit"
    WAIT = "wait"
    END = "end"


ORDERS = ("order", "turns", "any")


class Buffer:
    """A unit's received elements not yet yielded: blocks, consumed from the front; a
    block's failures (``_blocks.Failure`` places) come one at a time."""

    __slots__ = ("blocks", "offset", "size")

    def __init__(self):
        self.blocks: collections.deque = collections.deque()  # (elements, failure places)
        self.offset = 0  # into the first block
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, elements: list, failures: tuple) -> None:
        self.blocks.append((elements, failures))
        self.size += len(elements)

    def take(self, n: int) -> tuple[list, bool]:
        """Up to ``n`` next elements of the first block, ending before its next failure;
        a failure comes alone: ``([failure], True)``."""
        elements, failures = self.blocks[0]
        start = self.offset
        stop = min(start + n, len(elements))
        failed = False
        for place in failures:
            if place >= start:
                failed = place == start
                stop = min(stop, max(place, start + 1))
                break
        out = elements[start:stop]
        self.size -= len(out)
        if stop == len(elements):
            self.blocks.popleft()
            self.offset = 0
        else:
            self.offset = stop
        return out, failed

    def failure_first(self) -> bool:
        """Whether the next element is a failure (it comes alone)."""
        elements, failures = self.blocks[0]
        return self.offset in failures

    def clear(self) -> int:
        dropped, self.size = self.size, 0
        self.blocks.clear()
        self.offset = 0
        return dropped


class Held:
    """A unit leased to this consumer: counts from the unit's start; it keeps the elements
    ``[start, yielded)`` (others kept those before ``start``)."""

    __slots__ = ("start", "received", "yielded", "ended", "buffer", "reading")

    def __init__(self, start: int, yielded: int | None = None):
        self.start = start
        self.received = self.yielded = start if yielded is None else yielded
        self.ended = False  # received whole
        self.buffer = Buffer()
        self.reading = False  # a read of it runs


class LeaseCore:
    def __init__(self, order: str, reads_per_worker: int = 2):
        if order not in ORDERS:
            raise ValueError(f"order={order!r} must be one of {ORDERS}")
        self.order, self.reads_per_worker = order, reads_per_worker
        self.held: dict[int, Held] = {}
        self.done_order: list[int] = []  # append-only: positions slice it lazily
        self.done: set[int] = set()
        self.done_start: dict[int, int] = {}  # done units it kept from past their start
        self.kept: dict[int, tuple[int, int]] = {}  # parts of units others went on with
        self.to_report: list[int] = []
        self.to_return: list[tuple[int, int]] = []
        self.finished = False  # the epoch is over for it: END
        self.drained = False  # every unit is done; others may still roll some back
        self.settled = False  # it committed at the end of the epoch (COMMIT done)
        self.workers = 0
        self.starved = False  # the last lease gave nothing to read: wait, then ask again
        self._turn = 0

    # ------------------------------------------------------------ events

    def restore(self, position: Position) -> None:
        """Starts from a position (``position()``'s, checked by the caller)."""
        self.done_order = _units.expand(position.done) + [u for u, _ in position.done_from]
        self.done = set(self.done_order)
        self.done_start = dict(position.done_from)
        for unit, start, stop in position.partial:
            self.held[unit] = Held(start, stop)

    def keep_only(self, units) -> None:
        """After a restore or a resume: the held units the dispatcher did not lease back
        go (others go on with them; its part of each is kept)."""
        keep = set(units)
        self.handed([unit for unit in self.held if unit not in keep])
        for held in self.held.values():
            held.reading = False  # the reads belong to the job as it was

    def handed(self, units) -> None:
        """A restore found others going on with these units: its part of each is kept, and
        it reads them no more."""
        for unit in units:
            held = self.held.pop(unit, None)
            if held is not None:
                held.buffer.clear()
                if held.yielded > held.start:
                    self.kept[unit] = (held.start, held.yielded)

    def granted(self, unit: int, offset: int) -> None:
        """A lease (or the re-issue of one whose worker was lost): a read of it starts."""
        held = self.held.get(unit)
        if held is None:
            start, _ = self.kept.pop(unit, (offset, offset))  # its own part, given back
            held = self.held[unit] = Held(start if _ == offset else offset, offset)
        held.reading = not held.ended

    def arrived(self, unit: int, elements: list, failures: tuple) -> None:
        held = self.held.get(unit)
        if held is None:  # handed off while its block was on the way
            return
        held.buffer.add(elements, failures)
        held.received += len(elements)

    def ended(self, unit: int) -> None:
        held = self.held[unit]
        held.ended, held.reading = True, False

    def lost(self, unit: int) -> None:
        """Its read failed (its worker died): the next lease re-issues it past ``received``."""
        self.held[unit].reading = False

    def leased(self, granted: int, finished: bool, workers: int, give_back: tuple,
               drained: bool = False) -> None:
        """A lease reply, after its ``granted`` grants: whether the job is done, the workers
        alive, and units to return (at what this consumer yielded; its buffer dropped).
        A reply that granted nothing leaves the consumer starved: it reads what it has,
        or waits, before it asks again (``retry``)."""
        self.finished, self.workers, self.drained = finished, workers, drained or finished
        self.to_report = []
        self.starved = granted == 0
        self.give_back(give_back)

    def give_back(self, units) -> None:
        """Units go back at what this consumer yielded (another client of an ``off`` job
        has fewer slots than its share): it keeps its part, drops its buffer, and the
        next lease tells the dispatcher."""
        for unit in units:
            if unit in self.held:
                self.to_return.append((unit, self.held[unit].yielded))
        self.handed(units)

    def retry(self) -> None:
        """After a wait: ask again."""
        self.starved = False

    def returned(self) -> None:
        self.to_return = []

    def taken(self, unit: int, count: int) -> None:
        """``count`` elements of ``unit`` were yielded."""
        held = self.held[unit]
        held.yielded += count
        if held.ended and not held.buffer:
            self._finish(unit)

    def _finish(self, unit: int) -> None:
        held = self.held.pop(unit)
        if held.start:
            self.done_start[unit] = held.start
        self.starved = False  # room for another unit
        self.done_order.append(unit)
        self.done.add(unit)
        self.to_report.append(unit)

    # ------------------------------------------------------------ decisions

    def on_workers(self) -> tuple[int, ...]:
        """The held units it reads or read whole: any other lease the dispatcher holds
        for it on a worker reached it in no reply (``LeaseRequest.held``)."""
        return tuple(u for u, h in self.held.items() if h.reading or h.ended)

    @property
    def capacity(self) -> int:
        return self.reads_per_worker * max(self.workers, 1)

    def reads(self) -> int:
        return sum(h.reading for h in self.held.values())

    def lease_size(self) -> tuple[int, int]:
        """``(want, max_held)`` for the next lease: reads to fill, at least the orphans."""
        orphans = sum(not h.reading and not h.ended for h in self.held.values())
        return max(self.capacity - self.reads(), orphans, 1), self.capacity

    def step(self) -> tuple[Action, int | None]:
        """The next action, and the unit it is about."""
        for unit in [u for u, h in self.held.items() if h.ended and not h.buffer]:
            self._finish(unit)  # empty units, or ones given back as received
        if self.order == "order":
            return self._step_in_order()
        return self._step_any()

    def _step_in_order(self) -> tuple[Action, int | None]:
        if not self.held:
            return self._when_empty()
        unit = min(self.held)
        held = self.held[unit]
        if held.buffer:
            return Action.YIELD, unit
        if self.to_report:  # reported at once: the next unit is granted while reads run
            return Action.LEASE, None
        if not held.reading:  # its worker was lost: re-issued by the next lease
            return (Action.WAIT if self.starved else Action.LEASE), None
        if not self.starved and self.reads() < self.capacity:
            return Action.LEASE, None
        return Action.PULL, unit

    def _step_any(self) -> tuple[Action, int | None]:
        ready = [u for u, h in self.held.items() if h.buffer]
        if ready:
            if self.order == "turns":
                ready.sort()
                self._turn += 1
                return Action.YIELD, ready[self._turn % len(ready)]
            return Action.YIELD, ready[0]
        if not self.held:
            return self._when_empty()
        if self.to_report or (not self.starved and self.reads() < self.capacity):
            return Action.LEASE, None
        if not self.reads():
            return Action.WAIT, None
        return Action.PULL_ANY, None

    def _when_empty(self) -> tuple[Action, None]:
        if self.to_report:
            return Action.LEASE, None
        if self.finished:
            return Action.END, None
        if self.drained and not self.settled:
            # Every unit is done; the others wait for what this one did to be safe
            # from its death, and it for theirs: each commits what it yielded.
            return Action.COMMIT, None
        return (Action.WAIT if self.starved else Action.LEASE), None

    # ------------------------------------------------------------ position

    def capture(self) -> tuple[int, tuple]:
        """The position now, cheaply (no copy of the done units: they only grow):
        ``position(*capture())`` later gives it."""
        parts = [(u, h.start, h.yielded) for u, h in self.held.items() if h.yielded > h.start]
        parts += [(u, start, stop) for u, (start, stop) in self.kept.items()]
        return len(self.done_order), tuple(sorted(parts))

    def position(self, done_count: int | None = None, partial: tuple | None = None
                 ) -> Position:
        """What this consumer kept: now, or as ``capture`` took it."""
        if done_count is None:
            done_count, partial = self.capture()
        done = self.done_order[:done_count]
        starts = self.done_start
        return Position(ranges(u for u in done if u not in starts),
                        tuple(sorted((u, starts[u]) for u in done if u in starts)), partial)

    def offsets(self) -> tuple[tuple[int, int], ...]:
        """How far into each held unit this consumer got (for a release)."""
        return tuple(sorted((u, h.yielded) for u, h in self.held.items()))


def ranges(values) -> tuple[tuple[int, int], ...]:
    """Ints as sorted ``[start, stop)`` ranges: a done set of a million units stays small."""
    out: list[list[int]] = []
    for v in sorted(values):
        if out and out[-1][1] == v:
            out[-1][1] = v + 1
        else:
            out.append([v, v + 1])
    return tuple((start, stop) for start, stop in out)
