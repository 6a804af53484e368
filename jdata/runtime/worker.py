"""The body of a process-engine worker (see ``jdata.runtime.processes``).

A worker receives its job once (a cloudpickled callable from a list of work
items to a list of ``Outcome``), then loops: receive ``(task_id, items)``,
compute, send the outcomes back. NumPy arrays in the outcomes travel out of
band (pickle protocol 5) through shared-memory segments the worker owns
(``jdata.runtime.segments``): a ring of ``SLOTS`` segments, so a segment is
rewritten only after the parent has copied out what it held (the parent
keeps at most ``SLOTS - 1`` tasks outstanding per worker). A task whose
results find no room in shared memory fails alone, with a
``SharedMemoryError``. The worker unlinks its segments when it exits,
whether told to, orphaned (its parent died: the task pipe reaches EOF) or
terminated (SIGTERM ends it from its handler, never as an exception in
whatever code it interrupted); the fork server
(``jdata.runtime.forkserver``) unlinks what a crashed worker left.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import signal
import sys
import time
import traceback

import cloudpickle

from jdata.runtime import heap
from jdata.runtime.outcomes import Outcome
from jdata.runtime.segments import Segment, SharedMemoryError, segment_name

SLOTS = 3
# A segment is made this much larger than the results it must hold, so it is not
# replaced for every slightly larger chunk.
SEGMENT_SLACK = 1.25
# Arrays smaller than this travel inside the pickle: a segment copy costs more.
_OUT_OF_BAND_MIN_BYTES = 1024
_ALIGN = 64
_MIN_SEGMENT_BYTES = 1 << 20


class _Arena:
    """The worker's ring of shared-memory segments, grown on demand.

    The names of segments it replaced (``retired``) go to the parent with
    the next message, so that it unmaps them too.
    """

    def __init__(self, session: str):
        self._session = session
        self._segments: list[Segment | None] = [None] * SLOTS
        self._slot = 0
        self._serial = itertools.count()
        self._retired: list[str] = []
        self.largest = 0  # bytes: the largest task's results

    def write(self, buffers: list[pickle.PickleBuffer]) -> tuple[str | None, list]:
        """Copies ``buffers`` into the next segment: ``(name, spans)``."""
        if not buffers:
            return None, []
        views = [b.raw() for b in buffers]
        total = sum(_aligned(v.nbytes) for v in views)
        self.largest = max(self.largest, total)
        slot, self._slot = self._slot, (self._slot + 1) % SLOTS
        segment = self._segments[slot]
        if segment is None or segment.size < total:
            segment = self._segments[slot] = self._replace(slot, total)
        spans, offset = [], 0
        for view in views:
            segment.buf[offset:offset + view.nbytes] = view.cast("B")
            spans.append((offset, view.nbytes))
            offset += _aligned(view.nbytes)
        return segment.name, spans

    def _replace(self, slot: int, total: int) -> Segment:
        # The old segment goes first: on a small /dev/shm its room may be what the new one needs.
        old, self._segments[slot] = self._segments[slot], None
        if old is not None:
            self._retired.append(old.name)
            _release(old)
        name = segment_name(self._session, os.getpid(), next(self._serial))
        return Segment.create(name, max(_MIN_SEGMENT_BYTES, int(total * SEGMENT_SLACK)),
                              "the results of a task in a worker")

    def take_retired(self) -> list[str]:
        retired, self._retired = self._retired, []
        return retired

    def unlink(self) -> None:
        """Removes the segments' names only: safe while a write into them is interrupted."""
        for segment in self._segments:
            if segment is not None:
                segment.unlink()

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
    name, spans = arena.write(buffers)
    return name, spans, arena.take_retired(), payload


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


def _import_failure(error: ImportError) -> str:
    """Why a job that names a module this process cannot import does not start, and the
    ways out, before the traceback (cloudpickle sends a UDF of an importable module by
    name: the user's process imported it from where this worker does not look)."""
    module = error.name
    by_value = (f"import {module}; cloudpickle.register_pickle_by_value({module})"
                if module else "cloudpickle.register_pickle_by_value(<the module>)")
    return (f"it cannot import {module or 'a module'!r}, which the pipeline's functions come "
            f"from ({type(error).__name__}: {error}): the user's process imports it, its "
            "worker processes do not find it (they look where the user's process looked, "
            "sys.path, when its first worker process started). Import it from a directory on "
            "sys.path, put there before the first pipeline on processes starts; or send its "
            f"functions by value: {by_value}; or run the map on threads: "
            "jdata.Options(engine='threads')\n"
            + traceback.format_exc())


def _result_message(task_id: int, outcomes: list, arena: _Arena, timing: tuple) -> tuple:
    try:
        return ("result", task_id, *encode(outcomes, arena), timing)
    except SharedMemoryError as e:  # this task fails; later, smaller ones may fit
        return ("failed", task_id, arena.take_retired(), e)


def _terminated(arena: _Arena) -> None:
    """SIGTERM (a UDF still running at shutdown) ends the worker here, in the handler.
    Raised as ``SystemExit``, it would surface in whatever code runs at that moment, and
    where that is a callback (JAX's ``_xla_gc_callback``, a ``__del__``) Python prints
    the exception, swallows it and runs on, until SIGKILL."""
    arena.unlink()
    for stream in (sys.stdout, sys.stderr):  # what the UDF printed; os._exit drops it
        # Interrupted mid-write, a stream refuses (a reentrant call): its buffer is lost.
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def main(tasks, results, session: str) -> None:
    """Runs until its task pipe closes (shutdown, or the parent died) or it is terminated.

    Its segments are named after ``session``, the user process's.
    """
    # Ctrl-C reaches the whole process group; the parent decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    heap.keep_freed_pages()  # forked from the fork server, a fresh interpreter: glibc's defaults
    arena = _Arena(session)
    signal.signal(signal.SIGTERM, lambda *_: _terminated(arena))
    try:
        try:
            job = _load_job(cloudpickle.loads(tasks.recv_bytes()))
        except (EOFError, OSError):
            return
        except ImportError as e:
            results.send_bytes(cloudpickle.dumps(("fatal", _import_failure(e))))
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
            results.send_bytes(cloudpickle.dumps(_result_message(task_id, outcomes, arena,
                                                                 timing)))
            # A task frees its elements together (batched): the heap keeps their pages.
            heap.keep_at_least(2 * arena.largest)
    finally:
        arena.release()
