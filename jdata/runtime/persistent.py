"""Worker processes kept for a dataset's later iterators.

Starting an iterator's worker processes costs a fork per worker and the job
pickled and shipped to them (a UDF holding a vocabulary, an in-memory
source), tens of milliseconds at each epoch of a ``for epoch ...: for batch
in ds:`` loop. So the process executor of a subtree read by index (whose job
does not depend on the epoch: tasks carry it) is parked when its iterator
ends (its stream ends, or it is dropped or closed), under the dataset's plan
(its ``home``), and the next iterator of the same subtree takes it over.
Processes still starting when their iterator goes are parked as they are
(anything with ``usable()`` and ``shutdown()``): the next iterator waits for
them instead of starting more.

Parked workers are released:

- when ``close()`` is called on the last open iterator of the dataset
  (iterators merely dropped, as a ``for`` loop drops them, park theirs);
- when the dataset's plan is garbage-collected (parked executors never
  refer to it: they hold the job pickled, in shared memory);
- at interpreter exit, with every executor (``processes._shutdown_all``).

After ``os.fork()`` a child never takes over its parent's executors.
"""

from __future__ import annotations

import threading
import weakref

# Reentrant: an iterator's finalizer (``closed``) may run in a garbage collection that an
# allocation under the lock set off, on the same thread.
_lock = threading.RLock()
# home -> {(subtree, options): executor}; one parked executor per subtree.
_parked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# home -> iterators opened and not yet closed.
_open: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def opened(home) -> None:
    """An iterator of ``home``'s dataset starts."""
    with _lock:
        _open[home] = _open.get(home, 0) + 1


def closed(home, release: bool) -> None:
    """An iterator of ``home``'s dataset ends; ``release`` (its ``close()`` was called)
    stops the parked workers if no other iterator of the dataset is open."""
    with _lock:
        left = _open[home] = max(0, _open.get(home, 0) - 1)
        stop = list(_parked.pop(home, {}).values()) if release and left == 0 else []
    for executor in stop:
        executor.shutdown()


def take(home, key):
    """The executor parked for ``key`` under ``home``, now the caller's, or ``None``."""
    if home is None:
        return None
    with _lock:
        executor = _parked.get(home, {}).pop(key, None)
    if executor is not None and not executor.usable():
        executor.shutdown()
        return None
    return executor


def park(home, key, executor) -> bool:
    """Keeps ``executor`` for the next iterator; ``False`` (the caller shuts it down)
    where it cannot serve one, or another is parked for ``key`` already.

    ``key`` must not refer to ``home``: it is kept, strongly, as long as ``home``
    lives, so a key that keeps ``home`` alive keeps both, and the workers, for the
    life of the process (refer to plan nodes by ``weakref.ref``: a live one equals
    another of an equal node, a dead one only itself).

    At most ``MAX_PER_HOME`` are kept per dataset, the oldest stopped first: the
    datasets an ``interleave`` or ``flat_map`` builds per element are new subtrees
    each time, whose workers no later iterator could take over.
    """
    if home is None or not executor.usable():
        return False
    with _lock:
        parked = _parked.setdefault(home, {})
        if key in parked:
            return False
        parked[key] = executor
        evicted = [parked.pop(k) for k in list(parked)[:max(0, len(parked) - MAX_PER_HOME)]]
    for old in evicted:
        old.shutdown()
    return True


MAX_PER_HOME = 4


def parked_count(home) -> int:
    """How many executors are parked under ``home`` (for statistics and tests)."""
    with _lock:
        return len(_parked.get(home, {}))
