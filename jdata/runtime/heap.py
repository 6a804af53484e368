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
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_USER_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")

_lock = threading.Lock()
_done: bool | None = None  # None: not tried yet in this process


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


def _set_thresholds() -> bool:
    if os.environ.get("JDATA_KEEP_FREED_PAGES", "1") == "0":
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if (any(name in os.environ for name in _USER_VARIABLES)
            or any(name in tunables for name in _USER_TUNABLES)):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt returns 1 on success; the trim threshold first, so that a heap never
    # trims below what the mmap threshold now sends to it.
    return bool(mallopt(_M_TRIM_THRESHOLD, THRESHOLD)) and bool(
        mallopt(_M_MMAP_THRESHOLD, THRESHOLD))

