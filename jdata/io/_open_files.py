"""The open files of a random-access file source: few, shared, and closed when unused.

A source of many files (ArrayRecord shards, Parquet files) read in any order
(a full shuffle) would either reopen a file per record (60 us against 3 us
for a read, for ArrayRecord) or keep every file open (1100 shards exceed
the usual limit of 1024 descriptors). So each source keeps its
``capacity()`` most recently used files open, in one set shared by all of
its readers in the process: a parallel pipeline builds a reader per worker
thread, and sharing keeps the bound per source rather than per thread.

Files are closed by dropping their handles, not by ``close()``: the native
readers (ArrayRecord's, pyarrow's) close their file when the last reference
goes. That reference may be a thread still reading a file that another
thread has just evicted, so reads of open files take no lock here (a lock around
each read cost a full shuffle 12%; Parquet's reader locks per file, as pyarrow's
file readers cannot be read by two threads at once), and the set, with every file in it, goes
when the last reader of the source does (``IndexIterator.close()`` lets go
of its reader).
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Any, Callable

# Most files a source keeps open, and the share of the process's descriptor limit
# it may take (several sources and pipelines may run at once).
_MAX_OPEN_FILES = 128
_SHARE_OF_LIMIT = 8


def capacity() -> int:
    try:
        import resource
    except ImportError:  # not a Unix: no limit to read
        return _MAX_OPEN_FILES
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _MAX_OPEN_FILES
    return max(1, min(_MAX_OPEN_FILES, soft // _SHARE_OF_LIMIT))


class OpenFiles:
    """``paths[i]`` by index ``i``, opened by ``open_file(path)`` on first use and kept
    while among the ``capacity()`` most recently used.

    Threads share the set: a hit is two ``OrderedDict`` operations, which the
    GIL makes atomic; misses (opening, evicting) take turns, so two threads
    missing one file open it once.
    """

    def __init__(self, paths: tuple, open_file: Callable[[str], Any]):
        self._paths, self._open = paths, open_file
        self._capacity = capacity()
        self._handles: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._opening = threading.Lock()

    def get(self, index: int):
        """File ``index``'s handle; the caller's reference keeps it open while it reads."""
        handle = self._handles.get(index)
        if handle is None:
            return self._open_once(index)
        try:
            self._handles.move_to_end(index)  # now the most recently used
        except KeyError:  # evicted meanwhile by another thread: this read still holds it
            pass
        return handle

    def _open_once(self, index: int):
        with self._opening:
            handle = self._handles.get(index)  # opened by another thread meanwhile?
            if handle is None:
                while len(self._handles) >= self._capacity:
                    self._handles.popitem(last=False)  # closed once its last reader is done
                handle = self._handles[index] = self._open(self._paths[index])
            return handle


_SHARED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared(node, paths: tuple, open_file: Callable[[str], Any]) -> OpenFiles:
    """The open files of ``node``'s source in this process, made on first use.

    ``open_file`` must not refer to a reader: the set would keep it alive."""
    with _SHARED_LOCK:
        files = _SHARED.get(node)
        if files is None:
            files = _SHARED[node] = OpenFiles(paths, open_file)
        return files
