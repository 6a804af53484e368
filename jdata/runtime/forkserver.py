"""jdata's fork server: starts worker processes in milliseconds, safely.

Forking the user's process would copy a multi-threaded JAX runtime (a
deadlock risk), and ``multiprocessing``'s spawn and forkserver methods re-run
the user's ``__main__`` module in every worker (scripts without an
``if __name__ == "__main__":`` guard would recurse). jdata needs neither: jobs
are cloudpickled. So one server process per user process, started with a
clean interpreter that imports jdata once, forks workers on request: a
request passes a worker's two pipe ends (``socket.send_fds``) and gets back
its pid.

The server reaps its workers, unlinks the shared-memory segments of any
worker that died without doing so, and exits (unlinking whatever is left)
when the user's process closes the connection or dies.
"""

from __future__ import annotations

import glob
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback

from jdata.runtime import worker

_PID = struct.Struct("q")


def _unlink_segments(pattern: str) -> None:
    for path in glob.glob(os.path.join(worker.SEGMENT_DIR, pattern)):
        worker.unlink(os.path.basename(path))


def serve(fd: int, parent_pid: int) -> None:
    """The server's main loop (runs in the server process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)

    def reap(*_):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            _unlink_segments(worker.segment_name(parent_pid, pid, "*"))

    signal.signal(signal.SIGCHLD, reap)
    try:
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(sock, 1, 2)
            except OSError:
                break
            if len(fds) != 2:
                break  # EOF: the user's process closed the connection or died
            pid = os.fork()
            if pid == 0:
                sock.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _run_worker(fds, parent_pid)
            for child_fd in fds:
                os.close(child_fd)
            sock.sendall(_PID.pack(pid))
    finally:
        _unlink_segments(worker.segment_name(parent_pid, "*", "*"))


def _run_worker(fds: list[int], parent_pid: int) -> None:
    from multiprocessing.connection import Connection

    code = 0
    try:
        worker.main(Connection(fds[0], writable=False), Connection(fds[1], readable=False),
                    parent_pid)
    except SystemExit as e:  # SIGTERM
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


class Server:
    """The user-process side: one per process (``get()``), started on first use."""

    _lock = threading.Lock()
    _instance: Server | None = None

    @classmethod
    def get(cls) -> Server:
        with cls._lock:
            if cls._instance is None or cls._instance.pid != os.getpid():
                cls._instance = Server()
            return cls._instance

    def __init__(self):
        self.pid = os.getpid()
        self._sock, theirs = socket.socketpair()
        path = [os.getcwd() if p == "" else p for p in sys.path]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
        code = (f"from jdata.runtime import forkserver; "
                f"forkserver.serve({theirs.fileno()}, {self.pid})")
        self._process = subprocess.Popen([sys.executable, "-c", code], env=env,
                                         pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self._request_lock = threading.Lock()

    def fork(self, fds: list[int]) -> int:
        """Starts a worker holding ``fds`` (its task reader, its result writer); its pid."""
        with self._request_lock:
            try:
                socket.send_fds(self._sock, [b"w"], fds)
                reply = b""
                while len(reply) < _PID.size:
                    chunk = self._sock.recv(_PID.size - len(reply))
                    if not chunk:
                        raise OSError("the server closed the connection")
                    reply += chunk
            except OSError as e:
                raise RuntimeError(
                    f"jdata: the worker fork server (pid {self._process.pid}) is gone "
                    f"(exit code {self._process.poll()}): {e}") from e
        return _PID.unpack(reply)[0]

    def close(self, timeout: float) -> None:
        self._sock.close()
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def shutdown(timeout: float = 5.0) -> None:
    """Stops this process's server, if it runs (at exit, after the executors)."""
    with Server._lock:
        server, Server._instance = Server._instance, None
    if server is not None and server.pid == os.getpid():
        server.close(timeout)
