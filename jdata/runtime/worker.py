"""The body of a process-engine worker (see ``jdata.runtime.processes``).

A worker receives its job once (a cloudpickled callable from a list of work
items to a list of ``Outcome``), then loops: receive ``(task_id, items)``,
compute, send the outcomes back. NumPy arrays in the outcomes travel out of
band (pickle protocol 5) through shared-memory segments the worker owns: a
ring of ``SLOTS`` segments, so a segment is rewritten only after the parent
has copied out what it held (the parent keeps at most ``SLOTS - 1`` tasks
outstanding per worker). The worker unlinks its segments when it exits,
whether told to, orphaned (its parent died: the task pipe reaches EOF) or
terminated (SIGTERM becomes ``SystemExit``).

Segments are files under ``SEGMENT_DIR`` (``/dev/shm``: POSIX shared memory)
named after the user's process, mapped by both sides; they bypass
``multiprocessing``'s resource tracker, whose bookkeeping goes wrong when
one process creates a segment and another unlinks it. The fork server
(``jdata.runtime.forkserver``) unlinks what a crashed worker left.
"""

from __future__ import annotations

import itertools
import mmap
import os
import pickle
import signal
import sys
import tempfile
import time
import traceback

import cloudpickle

from jdata.runtime.outcomes import Outcome

SLOTS = 3
SEGMENT_PREFIX = "jdata_"
SEGMENT_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
# Arrays smaller than this travel inside the pickle: a segment copy costs more.
_OUT_OF_BAND_MIN_BYTES = 1024
_ALIGN = 64
_MIN_SEGMENT_BYTES = 1 << 20


def segment_name(parent_pid, worker_pid, serial) -> str:
    """Segments are named after the user's process and the worker, so leaks can be found."""
    return f"{SEGMENT_PREFIX}{parent_pid}_{worker_pid}_{serial}"


class Segment:
    """A named shared-memory file mapped into this process."""

    def __init__(self, name: str, size: int | None = None):
        self.name = name
        path = os.path.join(SEGMENT_DIR, name)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if size is not None else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if size is not None:
                os.ftruncate(fd, size)
            self.size = os.fstat(fd).st_size
            self._mmap = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        self.buf = memoryview(self._mmap)

    def close(self) -> None:
        self.buf.release()
        self._mmap.close()

    def unlink(self) -> None:
        unlink(self.name)


def unlink(name: str) -> None:
    try:
        os.unlink(os.path.join(SEGMENT_DIR, name))
    except FileNotFoundError:  # already gone: the other side cleaned up
        pass


class _Arena:
    """The worker's ring of shared-memory segments, grown on demand."""

    def __init__(self, parent_pid: int):
        self._parent_pid = parent_pid
        self._segments: list[Segment | None] = [None] * SLOTS
        self._slot = 0
        self._serial = itertools.count()

    def write(self, buffers: list[pickle.PickleBuffer]) -> tuple[str | None, list, list]:
        """Copies ``buffers`` into the next segment: ``(name, spans, retired names)``."""
        if not buffers:
            return None, [], []
        views = [b.raw() for b in buffers]
        total = sum(_aligned(v.nbytes) for v in views)
        slot, self._slot = self._slot, (self._slot + 1) % SLOTS
        segment, retired = self._segments[slot], []
        if segment is None or segment.size < total:
            if segment is not None:
                retired.append(segment.name)
                _release(segment)
            segment = Segment(segment_name(self._parent_pid, os.getpid(), next(self._serial)),
                              max(_MIN_SEGMENT_BYTES, total + total // 4))
            self._segments[slot] = segment
        spans, offset = [], 0
        for view in views:
            segment.buf[offset:offset + view.nbytes] = view.cast("B")
            spans.append((offset, view.nbytes))
            offset += _aligned(view.nbytes)
        return segment.name, spans, retired

    def release(self) -> None:
        for segment in self._segments:
            if segment is not None:
                _release(segment)
        self._segments = [None] * SLOTS


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _release(segment: Segment) -> None:
    segment.close()
    segment.unlink()


def encode(outcomes: list, arena: _Arena) -> tuple:
    """``(segment name, spans, retired, payload)``: outcomes pickled, arrays out of band."""
    buffers: list[pickle.PickleBuffer] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        if buffer.raw().nbytes < _OUT_OF_BAND_MIN_BYTES:
            return True  # in band
        buffers.append(buffer)
        return False

    try:
        payload = cloudpickle.dumps(outcomes, protocol=5, buffer_callback=out_of_band)
    except Exception:
        buffers.clear()
        payload = cloudpickle.dumps([_sendable(o) for o in outcomes], protocol=5,
                                    buffer_callback=out_of_band)
    name, spans, retired = arena.write(buffers)
    return name, spans, retired, payload


def _sendable(outcome):
    """The outcome, or an error outcome saying why it cannot leave the worker."""
    try:
        cloudpickle.dumps(outcome, protocol=5)
        return outcome
    except Exception as e:
        return Outcome(error=TypeError(
            f"a worker process computed an element it cannot send back ({e}); elements must "
            "be pytrees of NumPy arrays, NumPy scalars, bytes and str"))


def _load_job(segment_name: str):
    segment = Segment(segment_name)
    try:
        return cloudpickle.loads(segment.buf)
    finally:
        segment.close()


def main(tasks, results, parent_pid: int) -> None:
    """Runs until its task pipe closes (shutdown, or the parent died) or it is terminated."""
    # Ctrl-C reaches the whole process group; the parent decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    arena = _Arena(parent_pid)
    try:
        try:
            job = _load_job(cloudpickle.loads(tasks.recv_bytes()))
        except (EOFError, OSError):
            return
        except BaseException:
            results.send_bytes(cloudpickle.dumps(("fatal", traceback.format_exc())))
            return
        while True:
            try:
                task_id, items = cloudpickle.loads(tasks.recv_bytes())
            except (EOFError, OSError):
                return  # the parent closed the pipe (shutdown) or is gone
            start, cpu_start = time.perf_counter(), time.thread_time()
            outcomes = job(items)
            timing = (start, time.perf_counter(), time.thread_time() - cpu_start)
            message = (task_id, *encode(outcomes, arena), timing)
            results.send_bytes(cloudpickle.dumps(message))
    finally:
        arena.release()
