"""One memory budget per process, for everything jdata holds.

``Options.ram_budget`` bounds the bytes jdata keeps: prefetch buffers,
elements in flight on worker pools, the process engine's shared memory.
Every live pipeline of a process draws on the same budget: the smallest
``ram_budget`` a live pipeline set, else half the memory available when the
process first needed one. Three iterators with ``ram_budget=1 GiB`` hold
1 GiB together, not 3.

Each asynchronous stage reports what it holds in its ``OpStats.held_bytes``
(a plain attribute its own thread writes: no lock on the hot path). Stages
ask ``room(stats)``: the budget less what every other stage holds now.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref

from jdata.runtime.stats import OpStats

_lock = threading.Lock()
_holders: weakref.WeakSet = weakref.WeakSet()  # OpStats of live stages
_claims: dict[int, int] = {}  # serial of a live Claim -> its bytes
_released: list[int] = []  # serials of Claims collected, still in _claims
_serials = itertools.count()
_default: int | None = None
_limit: int | None = None  # computed again when a claim comes or goes


class Claim:
    """A pipeline's ``ram_budget`` (or None for the default), for as long as it lives."""

    def __init__(self, ram_budget: int | None):
        if ram_budget is not None:
            serial = next(_serials)
            with _lock:
                _claims[serial] = ram_budget
            _forget_limit()
            weakref.finalize(self, _release, serial)


def _release(serial: int) -> None:
    # A finalizer: a garbage collection that an allocation under _lock set off runs it on
    # the thread holding _lock, so it takes no lock (the thread would wait for itself
    # forever, and every pipeline of the process after it). list.append is atomic.
    _released.append(serial)
    _forget_limit()


def _forget_limit() -> None:
    global _limit
    _limit = None


def limit() -> int:
    """The process's budget now: the smallest claimed, else the default."""
    global _limit
    current = _limit
    if current is None:
        with _lock:
            while _released:
                _claims.pop(_released.pop(), None)
            claimed = list(_claims.values())
        current = _limit = min(claimed) if claimed else _default_budget()
    return current


def _default_budget() -> int:
    global _default
    if _default is None:
        try:
            _default = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
        except (ValueError, OSError, AttributeError):
            _default = 1 << 30
    return _default


def track(stats: OpStats) -> None:
    """Counts ``stats.held_bytes`` against the budget while the stage lives."""
    with _lock:
        _holders.add(stats)


def held(excluding=()) -> int:
    """Bytes held by every live stage, less those in ``excluding``."""
    with _lock:
        holders = list(_holders)
    return sum(h.held_bytes for h in holders if h not in excluding)


def room(stats: OpStats) -> int:
    """What ``stats``' stage may hold: the budget less what the others hold (may be < 0)."""
    return limit() - held((stats,))
