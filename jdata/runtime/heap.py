"""Freed buffers kept in the heap, so the next element's arrays reuse warm pages.

A pipeline allocates and frees arrays of the same sizes element after element
(a decoded image, its resized copy, a jitter's output: 0.1-2 MB each).
glibc's malloc serves any block over ``M_MMAP_THRESHOLD`` (128 KiB at first)
with a fresh ``mmap`` and returns it on free, and trims a heap whose free top
exceeds ``M_TRIM_THRESHOLD``: either way the next array of that size starts
on pages the kernel must fault in and zero again, one fault per 4 KiB. On
SimCLR's view (224x224x3 ``float32``) that was most of the time of the
resize and of the color jitter (a bicubic resize: 2.4 ms with the faults,
0.29 ms without).

``keep_freed_pages()`` raises both thresholds to 32 MiB (glibc's largest
mmap threshold): blocks under 32 MiB come from the heap, and a heap keeps
up to 32 MiB of free pages before it gives them back. It is what a user
would get from ``MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=33554432``
in the environment, done once per process when its first iterator starts
(and in each worker process). The cost is memory the process keeps: at
most 32 MiB of free pages per malloc arena (glibc makes up to 8 arenas per
core for threads that allocate at once).

A process-engine worker frees a whole task's elements at once when it has
batched them (SimCLR's 64 pairs: 77 MB), and a heap whose free top is over
the trim threshold gives the excess back: the next task faults it in again
(4,000-4,500 faults a batch, 0.15 of a core in the kernel, and in some
workers only, by where their heap's blocks happened to lie: SimCLR's rounds
swung from 417 to 552 pairs/s). ``keep_at_least(n)`` raises the trim
threshold to ``n`` (at most ``MAX_KEPT``): a worker asks for twice its
largest task's results, so its heap keeps what each task uses again.

It does nothing where the C library is not glibc, where the user set either
threshold (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, or
``glibc.malloc.mmap_threshold``/``trim_threshold`` in ``GLIBC_TUNABLES``) or where
``JDATA_KEEP_FREED_PAGES=0``.
"""

from __future__ import annotations

import ctypes
import os
import threading

THRESHOLD = 32 << 20
MAX_KEPT = 1 << 30
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_USER_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")

_lock = threading.Lock()
_done: bool | None = None  # None: not tried yet in this process
_trim_threshold = THRESHOLD


def keep_freed_pages() -> bool:
    """Raises glibc's thresholds once per process (see the module docs); whether they
    are jdata's now (False: not glibc, the user's settings, or turned off)."""
    global _done
    if _done is not None:
        return _done
    with _lock:
        if _done is None:
            _done = _set_thresholds()
    return _done


def keep_at_least(nbytes: int) -> None:
    """Raises the trim threshold to ``nbytes`` (at most ``MAX_KEPT``) where the thresholds
    are jdata's (``keep_freed_pages``); never lowers it."""
    global _trim_threshold
    wanted = min(int(nbytes), MAX_KEPT)
    if wanted > _trim_threshold and keep_freed_pages():
        with _lock:
            if wanted > _trim_threshold and _mallopt()(_M_TRIM_THRESHOLD, wanted):
                _trim_threshold = wanted


def _mallopt():
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def _set_thresholds() -> bool:
    if os.environ.get("JDATA_KEEP_FREED_PAGES", "1") == "0":
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if (any(name in os.environ for name in _USER_VARIABLES)
            or any(name in tunables for name in _USER_TUNABLES)):
        return False
    try:
        mallopt = _mallopt()
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return False
    # mallopt returns 1 on success; the trim threshold first, so that a heap never
    # trims below what the mmap threshold now sends to it.
    return bool(mallopt(_M_TRIM_THRESHOLD, THRESHOLD)) and bool(
        mallopt(_M_MMAP_THRESHOLD, THRESHOLD))

