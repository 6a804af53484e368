"""The process engine's shared-memory segments: where they live, their names,
their reservation, their owners, and the sweep of what dead processes left.

A segment is a file under ``SEGMENT_DIR`` mapped by the processes that use
it: ``/dev/shm`` (POSIX shared memory), or the directory the environment
variable ``JDATA_SHM_DIR`` names, read at import (for machines whose
``/dev/shm`` is small, as Docker's and Kubernetes' 64 MB default: a bigger
tmpfs). Segments bypass ``multiprocessing``'s resource tracker, whose
bookkeeping goes wrong when one process creates a segment and another
unlinks it.

- Reserved: a segment's memory is allocated when it is created
  (``posix_fallocate``). A sparse file gets its pages as they are first
  written, and a full tmpfs answers that write with SIGBUS, which kills a
  worker or the user's process without a word; a full directory is a
  ``SharedMemoryError`` naming it and the size needed instead.
- Named ``jdata_<user pid>_<token>_<worker pid or "job">_<serial>``: the
  token, random per user process, keeps names apart from leftovers of a dead
  process whose pid came back, and from processes of another pid namespace
  that share the directory (``docker run --ipc=host``).
- Owned: a segment's creator holds a shared ``flock`` on it while it lives.
  ``sweep`` unlinks the segments nobody holds: leftovers of processes killed
  together with their fork server (SIGKILL of a process group, the OOM
  killer). A lock tells liveness across pid namespaces, which a pid cannot.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import secrets
import tempfile

from jdata._errors import SharedMemoryError as SharedMemoryError

SEGMENT_PREFIX = "jdata_"
SEGMENT_DIR = os.environ.get("JDATA_SHM_DIR") or (
    "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
_MB = float(1 << 20)


_session: tuple[int, str] | None = None


def session() -> str:
    """The prefix of this process's segment names (a new one in a forked child)."""
    global _session
    if _session is None or _session[0] != os.getpid():
        _session = (os.getpid(), f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(4)}")
    return _session[1]


def segment_name(session_prefix: str, creator, serial) -> str:
    """A segment of a user process's session, made by ``creator`` (a worker pid, or "job")."""
    return f"{session_prefix}_{creator}_{serial}"


def _path(name: str) -> str:
    return os.path.join(SEGMENT_DIR, name)


class Segment:
    """A named shared-memory file mapped into this process.

    ``Segment(name)`` maps one that exists; ``Segment.create`` makes one,
    reserved and owned (locked) until ``close``.
    """

    def __init__(self, name: str, fd: int | None = None):
        self.name = name
        self._owner_fd = fd
        if fd is None:
            fd = os.open(_path(name), os.O_RDWR)
            try:
                self._map(fd)
            finally:
                os.close(fd)
        else:
            self._map(fd)

    def _map(self, fd: int) -> None:
        self.size = os.fstat(fd).st_size
        self._mmap = mmap.mmap(fd, self.size)
        self.buf = memoryview(self._mmap)

    @classmethod
    def create(cls, name: str, size: int, contents: str) -> Segment:
        """A new segment of ``size`` bytes; ``contents`` says what for, in the error if no room."""
        fd = _create_owned(name, size, contents)
        try:
            return cls(name, fd)
        except BaseException:
            os.close(fd)
            unlink(name)
            raise

    def close(self) -> None:
        self.buf.release()
        self._mmap.close()
        if self._owner_fd is not None:
            os.close(self._owner_fd)  # releases the lock
            self._owner_fd = None

    def unlink(self) -> None:
        unlink(self.name)


def unlink(name: str) -> None:
    try:
        os.unlink(_path(name))
    except FileNotFoundError:  # already gone: the other side cleaned up
        pass


def _create_owned(name: str, size: int, contents: str) -> int:
    """Creates, locks and reserves segment ``name``: its open descriptor."""
    while True:
        fd = os.open(_path(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if os.fstat(fd).st_nlink:
            break
        # A sweep took the file between its creation and the lock: the name is free again.
        os.close(fd)
    try:
        _reserve(fd, size, contents)
    except BaseException:
        os.close(fd)
        unlink(name)
        raise
    return fd


def _reserve(fd: int, size: int, contents: str) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except AttributeError:  # macOS: no posix_fallocate, and no small tmpfs to fill
        os.ftruncate(fd, size)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a JDATA_SHM_DIR that cannot reserve
            os.ftruncate(fd, size)
        elif e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise SharedMemoryError(_no_room_message(size, contents)) from e
        else:
            raise


def _no_room_message(size: int, contents: str) -> str:
    try:
        stats = os.statvfs(SEGMENT_DIR)
        free = f"{stats.f_bavail * stats.f_frsize / _MB:.1f} MB"
    except OSError:
        free = "less"
    return (f"jdata: the process engine needs {size / _MB:.1f} MB of shared memory in "
            f"{SEGMENT_DIR} for {contents}, but {free} is free there. Give it room "
            "(docker run --shm-size=4g; Kubernetes: an emptyDir volume with medium: Memory "
            "mounted at /dev/shm), set the environment variable JDATA_SHM_DIR to a directory "
            "on a bigger tmpfs, or keep the UDFs on threads: Options(engine='threads').")


def sweep(own_session: str) -> None:
    """Unlinks the segments left by dead processes.

    A segment nobody holds is a leftover if it is ``own_session``'s (its
    live segments are held) or if its user process is gone: a live process
    of a jdata version that did not lock its segments keeps them.
    """
    try:
        entries = list(os.scandir(SEGMENT_DIR))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(SEGMENT_PREFIX) and (
                entry.name.startswith(own_session + "_") or _user_gone(entry.name)):
            _unlink_unheld(entry.name)


def _user_gone(name: str) -> bool:
    try:
        pid = int(name[len(SEGMENT_PREFIX):].split("_", 1)[0])
        os.kill(pid, 0)
    except ValueError:  # not a name of ours
        return False
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def _unlink_unheld(name: str) -> None:
    try:
        fd = os.open(_path(name), os.O_RDONLY)
    except OSError:  # gone, or another user's
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: in use
        return
    else:
        unlink(name)
    finally:
        os.close(fd)
