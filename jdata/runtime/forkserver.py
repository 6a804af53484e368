"""jdata's fork server: starts worker processes in milliseconds, safely.

Forking the user's process would copy a multi-threaded JAX runtime (a
deadlock risk), and ``multiprocessing``'s spawn and forkserver methods re-run
the user's ``__main__`` module in every worker (scripts without an
``if __name__ == "__main__":`` guard would recurse). jdata needs neither: jobs
are cloudpickled. So one server process per user process, started with a
clean interpreter that imports jdata once, forks workers on request: a
request passes a worker's two pipe ends (``socket.send_fds``) and gets back
its pid. ``fork`` starts a new server if the last one died.

- The server and its workers see no accelerator (``_CPU_ONLY_ENV``): each
  worker that initialized one would claim device memory of its own (JAX
  preallocates most of a GPU's), and a TPU chip admits a single process.
- Each worker's native thread pools (OpenBLAS, MKL, BLIS, OpenMP, numexpr) have one
  thread (``_ONE_NATIVE_THREAD_ENV``), as PyTorch's DataLoader and Ray give their
  workers: the workers are the parallelism. Left at one thread per core, every
  worker's NumPy/SciPy call woke a pool of its own, and on 2 cores Cedar's ASR
  pipeline ran at 0.8x one process where one thread each makes it 2.05x.
- At start the server sweeps the shared-memory segments dead processes left
  (``segments.sweep``); it reaps its workers and unlinks the segments of any
  that died without doing so.
- Nothing outlives the user's process: when it dies (a pidfd, so even while
  a forked child of it holds the connection open) or closes the connection,
  the server kills its workers, unlinks what they left and exits; a worker
  dies with the server (``PR_SET_PDEATHSIG``), even inside a UDF that never
  returns.
"""

from __future__ import annotations

import ctypes
import glob
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback

from jdata.runtime import segments, worker

_PID = struct.Struct("q")
# Hide GPUs and TPUs from JAX, CUDA (PyTorch, TensorFlow, CuPy...) and ROCm in
# the server and so in every worker; the user's process keeps its own environment.
_CPU_ONLY_ENV = {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}
# Read by each library as it loads: the server imports NumPy before its first fork.
# OpenCV's own pool (``jdata.ops.image``) otherwise splits each call over a thread per
# core, which the other workers' calls keep busy (SimCLR's two views per element, one run
# each: 7.0 batches/s on 2 workers with the pool, 8.5 without).
_ONE_NATIVE_THREAD_ENV = {name: "1" for name in (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "OPENCV_FOR_THREADS_NUM")}
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _unlink_segments(pattern: str) -> None:
    for path in glob.glob(os.path.join(segments.SEGMENT_DIR, pattern)):
        segments.unlink(os.path.basename(path))


class _Workers:
    """The server's children: reaped as they exit, killed when the user's process is gone."""

    def __init__(self, session: str):
        self.session = session
        self.pids: set[int] = set()

    def reap(self, *_) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.pids.discard(pid)
            _unlink_segments(segments.segment_name(self.session, pid, "*"))

    def kill_all(self) -> None:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # reaped here from now on
        running = [pid for pid in self.pids if _running_child(pid)]
        for pid in running:
            os.kill(pid, signal.SIGKILL)
        for pid in running:
            os.waitpid(pid, 0)
        _unlink_segments(self.session + "_*")


def _running_child(pid: int) -> bool:
    """Whether ``pid`` is a child not yet exited (so not a pid reused by another process).

    ``pids`` may hold a child reaped before it was added, as the handler can
    run between the fork and the addition.
    """
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    except ChildProcessError:
        return False


def serve(fd: int, session: str, user_pid: int) -> None:
    """The server's main loop (runs in the server process)."""
    # Ctrl-C, and SIGTERM to the process group (Jupyter stopping a kernel, a
    # shell's job control), would kill the server before it cleans up; it
    # outlives the user's process by as long as that takes (as
    # multiprocessing's resource tracker does). Workers handle SIGTERM themselves.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    user_gone = _watch(user_pid)
    workers = _Workers(session)
    server_pid = os.getpid()
    signal.signal(signal.SIGCHLD, workers.reap)
    segments.sweep(session)
    try:
        while True:
            ready, _, _ = select.select([sock] + ([user_gone] if user_gone else []), [], [])
            if user_gone in ready:
                break
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
                _run_worker(fds, session, server_pid)
            workers.pids.add(pid)
            for child_fd in fds:
                os.close(child_fd)
            sock.sendall(_PID.pack(pid))
    finally:
        workers.kill_all()


def _watch(pid: int) -> int | None:
    """A descriptor readable once ``pid`` exits (None where pidfds are missing)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3; the connection's EOF still tells
        return None


def _die_with(server_pid: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:  # the server died before the request took effect
        os._exit(1)


def _run_worker(fds: list[int], session: str, server_pid: int) -> None:
    from multiprocessing.connection import Connection

    code = 0
    try:
        _die_with(server_pid)
        worker.main(Connection(fds[0], writable=False), Connection(fds[1], readable=False),
                    session)
    except SystemExit as e:  # SIGTERM
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


class ServerGone(RuntimeError):
    """The fork server died or closed its connection."""


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

    @classmethod
    def replace(cls, dead: Server) -> None:
        """Forgets ``dead`` (unless another thread replaced it already): ``get`` starts anew."""
        with cls._lock:
            if cls._instance is dead:
                cls._instance = None
        dead.close(0)

    def __init__(self):
        self.pid = os.getpid()
        self._sock, theirs = socket.socketpair()
        path = [os.getcwd() if p == "" else p for p in sys.path]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), **_CPU_ONLY_ENV,
                   **_ONE_NATIVE_THREAD_ENV)
        code = (f"from jdata.runtime import forkserver; "
                f"forkserver.serve({theirs.fileno()}, {segments.session()!r}, {self.pid})")
        self._process = subprocess.Popen([sys.executable, "-c", code], env=env,
                                         pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self._request_lock = threading.Lock()
        self.answered = False  # it has started a worker: its imports are done

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
                raise ServerGone(
                    f"jdata: the worker fork server (pid {self._process.pid}) is gone "
                    f"(exit code {self._process.poll()}): {e}") from e
        self.answered = True
        return _PID.unpack(reply)[0]

    def close(self, timeout: float) -> None:
        self._sock.close()
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()  # it kills its workers only when it can run: they die with it
            self._process.wait()


def ready() -> bool:
    """Whether this process's server is up and has answered: starting workers then takes
    milliseconds, where a first start waits for its imports (most of a second)."""
    server = Server._instance
    return server is not None and server.pid == os.getpid() and server.answered


def fork(fds: list[int]) -> int:
    """Starts a worker holding ``fds`` through this process's server; its pid.

    A server found dead (killed, out of memory) is replaced, so that the
    process engine does not stay broken for the life of the process.
    """
    server = Server.get()
    try:
        return server.fork(fds)
    except ServerGone:
        Server.replace(server)
        return Server.get().fork(fds)


def shutdown(timeout: float = 5.0) -> None:
    """Stops this process's server, if it runs (at exit, after the executors)."""
    with Server._lock:
        server, Server._instance = Server._instance, None
    if server is not None and server.pid == os.getpid():
        server.close(timeout)
