"""One dispatcher per ``work_dir``: an advisory lock on ``<work_dir>/dispatcher.lock``.

Two dispatchers journaling into one file interleave records that neither's
state produced; the next restart of either cannot replay them and stays
down. So a dispatcher takes an exclusive ``flock`` on the directory's lock
file for as long as its process lives (the kernel lets go when it exits,
killed or not: a restarted dispatcher takes it again), and writes who it is
into the file for the next one's error message. A lock still held a few
seconds after a restart began is another service's.
"""

from __future__ import annotations

import json
import os
import socket
import time

from jdata._errors import WorkDirInUseError

LOCK_NAME = "dispatcher.lock"
# A restarted dispatcher may start while its killed predecessor's process still exits.
_TAKE_SEC = 3.0
_RETRY_SEC = 0.1


def take(work_dir: str, namespace: str, wait_sec: float = _TAKE_SEC):
    """The lock on ``work_dir`` (an open file: keep it for the process's life), or
    ``WorkDirInUseError`` naming its holder after ``wait_sec`` seconds."""
    import fcntl

    path = os.path.join(work_dir, LOCK_NAME)
    f = open(path, "a+")  # noqa: SIM115 - held open for the process's life
    deadline = time.monotonic() + wait_sec
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                holder = _holder(f)
                f.close()
                raise WorkDirInUseError(
                    f"service.start: work_dir {work_dir!r} is in use by {holder}; a "
                    "journal is one service's alone: give this service a work_dir of its "
                    "own, or join the running one with "
                    "jdata.service.connect(namespace=...)") from None
            time.sleep(_RETRY_SEC)  # polling a lock the kernel gives no wait with a bound for
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                        "namespace": namespace, "since": time.time()}))
    f.flush()
    return f


def _holder(f) -> str:
    """Who holds the lock, in words (what it wrote; the file may be half-written)."""
    try:
        f.seek(0)
        who = json.loads(f.read())
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(who["since"])))
        return (f"the dispatcher of pid {int(who['pid'])} on host {who['host']!s} (Ray "
                f"namespace {who['namespace']!r}, since {since})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another dispatcher (it has not written who it is)"
