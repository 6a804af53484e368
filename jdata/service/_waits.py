"""A client's time waiting for workers, as its heartbeats report it (``wait_sec``).

A reader adds a wait to its stage's ``wait_sec`` when the wait ends; a heartbeat that
read that counter alone would report a long wait whole in the interval where it ended,
and the dispatcher's ``wait_fraction`` over its last 10 s would exceed 1 (it read 155%).
So a reader waits inside ``waiting(stats)``, and ``waited(stats)`` adds the wait under
way: the counter reported grows with the time spent waiting, as it passes.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref

_LOCK = threading.Lock()  # the readers' and the heartbeats': a wait ends or is read whole
_SINCE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # stats -> wait began


@contextlib.contextmanager
def waiting(stats):
    """Counts the time inside into ``stats.wait_sec`` (an ``OpStats``)."""
    with _LOCK:  # the clock is read under the lock, as in ``waited``
        _SINCE[stats] = time.perf_counter()
    try:
        yield
    finally:
        with _LOCK:
            stats.wait_sec += time.perf_counter() - _SINCE.pop(stats)


def waited(stats) -> tuple[float, float]:
    """``(now, seconds waited until now)``: ``stats.wait_sec`` with the wait under way, on
    the clock of the waits (``time.perf_counter()``), read while no wait begins or ends."""
    with _LOCK:
        now, since = time.perf_counter(), _SINCE.get(stats)
        return now, stats.wait_sec + (0.0 if since is None else now - since)
