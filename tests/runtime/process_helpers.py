"""Helpers of the process-engine tests: segments, process liveness, scripts, deadlines."""

from __future__ import annotations

import glob
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from typing import NamedTuple

import numpy as np

import jdata
from jdata.runtime import outcomes, pool, processes, segments

PROCESSES = jdata.Options(engine="processes")
DEADLINE_SEC = 20.0
SCRIPT_TIMEOUT_SEC = 120


def fork_server_ready() -> None:
    """Returns once this process's fork server answers (it imports jdata when it starts,
    most of a second of CPU that would skew a measurement of the engine running beside
    it): a worker is started and stopped."""
    executor = processes.ProcessExecutor(_identity, 1)
    try:
        assert executor.submit([1]).result(SCRIPT_TIMEOUT_SEC)[0][0].get() == 1
    finally:
        executor.shutdown()


def _identity(items):
    return [outcomes.Outcome(item) for item in items]


def my_segments(pid: int | None = None) -> list[str]:
    """The shared-memory segments of user process ``pid`` (this one by default)."""
    return glob.glob(os.path.join(segments.SEGMENT_DIR, f"jdata_{pid or os.getpid()}_*"))


def gone(pid: int) -> bool:
    """True once ``pid`` has exited and been reaped (it is neither running nor a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "X"
    except (FileNotFoundError, ProcessLookupError):  # reaped, maybe while we read
        return True


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_until(condition, what: str) -> None:
    # Exits and reaping are asynchronous: poll with a deadline.
    deadline = time.monotonic() + DEADLINE_SEC
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def kill_leftovers(pids) -> None:
    """SIGKILLs what a failed test left running of the processes it started."""
    for pid in pids:
        if not gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def pool_of(it: jdata.DatasetIterator) -> pool.Pool:
    stage = it._root
    while not hasattr(stage, "_pool"):  # under the prefetch the optimizer adds
        stage = stage._input
    return stage._pool


def python_work(x):
    total = 0
    for i in range(2000):
        total += i * int(x)
    return {"x": x, "total": np.int64(total), "image": np.full((64, 64), x, np.float32)}


def read_line(proc: subprocess.Popen) -> str:
    """The next line ``proc`` prints, waiting at most the script timeout."""
    ready, _, _ = select.select([proc.stdout], [], [], SCRIPT_TIMEOUT_SEC)
    assert ready, "the script printed nothing in time"
    return proc.stdout.readline()


_RUNNING_JOB = """
    import threading
    import numpy as np
    import jdata

    ds = jdata.range(100).map(lambda x: np.full(100_000, x, np.float32), num_parallel_calls=2)
    it = ds.with_options(jdata.Options(engine="processes")).iterator()
    next(it)
    print("running", flush=True)
    threading.Event().wait()
"""


def signal_running_job(tmp_path, sig: int, shm_dir=None) -> subprocess.Popen:
    """Starts a job running a process-engine pipeline, sends ``sig`` to its process
    group once its segments exist (in ``shm_dir``, by default /dev/shm), and waits
    until every process of the group is gone."""
    shm_dir = str(shm_dir or segments.SEGMENT_DIR)
    script = write_script(tmp_path, _RUNNING_JOB, name="running_job.py")
    job = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                           cwd=os.getcwd(), start_new_session=True,
                           env=dict(os.environ, JDATA_SHM_DIR=shm_dir))
    try:
        assert read_line(job).strip() == "running"
        assert glob.glob(os.path.join(shm_dir, f"jdata_{job.pid}_*"))
        os.killpg(job.pid, sig)
        job.wait(SCRIPT_TIMEOUT_SEC)
        wait_until(lambda: group_gone(job.pid), "every process of the job exits")
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        job.stdout.close()
    return job


def write_script(tmp_path, body: str, name: str = "script.py"):
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    return script


class ScriptResult(NamedTuple):
    pid: int
    returncode: int
    stdout: str
    stderr: str


def run_script(script, env: dict | None = None, prefix: tuple = ()) -> ScriptResult:
    """Runs ``script`` to its end in its own process group, and waits until the group is gone.

    ``prefix`` may wrap the interpreter in commands that exec it (it keeps the pid).
    Past the timeout, the group (the script and the processes it started) is killed.
    """
    proc = subprocess.Popen([*prefix, sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=os.getcwd(),
                            start_new_session=True,
                            env=None if env is None else dict(os.environ, **env))
    try:
        stdout, stderr = proc.communicate(timeout=SCRIPT_TIMEOUT_SEC)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    wait_until(lambda: group_gone(proc.pid), "every process the script started exits")
    return ScriptResult(proc.pid, proc.returncode, stdout, stderr)
