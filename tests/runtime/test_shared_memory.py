"""The process engine's shared memory: a small /dev/shm, another directory, leftovers.

The small-/dev/shm probes run in a child with its own mount namespace and a
64 MB tmpfs on /dev/shm (Docker's and Kubernetes' default size): root
unshares it directly, another user through a user namespace. The tmpfs
lives as long as the namespace's processes, so it is gone when the probe's
process group is.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from jdata.runtime import segments
from tests.runtime.process_helpers import (
    ScriptResult,
    my_segments,
    run_script,
    signal_running_job,
    write_script,
)

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow

_SMALL_SHM_MOUNT = "jdata-test-small-shm"


def _with_small_shm() -> tuple:
    """The command prefix that runs a command with a 64 MB tmpfs on /dev/shm."""
    as_root = [] if os.geteuid() == 0 else ["--map-root-user"]
    mount = f"mount -t tmpfs -o size=64m {_SMALL_SHM_MOUNT} /dev/shm && exec \"$@\""
    return ("unshare", "--mount", *as_root, "sh", "-c", mount, "sh")


def _run_with_small_shm(tmp_path, body: str) -> ScriptResult:
    result = run_script(write_script(tmp_path, body), prefix=_with_small_shm())
    with open("/proc/self/mounts") as f:
        assert _SMALL_SHM_MOUNT not in f.read()  # never visible outside the probe
    return result


_NO_ROOM = ["SharedMemoryError", "of shared memory in /dev/shm", "JDATA_SHM_DIR"]


def test_an_in_memory_source_bigger_than_free_shared_memory_is_a_clear_error(tmp_path):
    # The job (with its 96 MB source) used to be written into a sparse
    # segment: SIGBUS killed the user's process without a message.
    result = _run_with_small_shm(tmp_path, """
        import numpy as np
        import jdata

        data = np.ones((96, 1 << 20), np.uint8)
        ds = jdata.from_tensor_slices(data).map(lambda x: x.sum(), num_parallel_calls=2)
        next(iter(ds.with_options(jdata.Options(engine="processes"))))
    """)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert all(part in result.stderr for part in _NO_ROOM), result.stderr
    assert "for the job" in result.stderr and "needs 96.0 MB" in result.stderr


def test_results_bigger_than_free_shared_memory_fail_the_task_clearly(tmp_path):
    # 12 MB elements: each worker's ring of result segments outgrows 64 MB.
    # Workers used to die of SIGBUS, reported as "killed, out of memory?".
    result = _run_with_small_shm(tmp_path, """
        import os
        import numpy as np
        import jdata

        ds = jdata.range(40).map(lambda x: np.full(12_000_000, x, np.uint8),
                                 num_parallel_calls=2)
        it = ds.with_options(jdata.Options(engine="processes")).iterator()
        try:
            for x in it:
                pass
        except Exception as e:
            print(type(e).__name__, e)
        it.close()
        print("left:", os.listdir("/dev/shm"))
    """)
    assert result.returncode == 0, result.stderr
    assert all(part in result.stdout for part in _NO_ROOM), result.stdout
    assert "for the results of a task in a worker" in result.stdout
    assert "(the chunk held the " in result.stdout
    assert "died" not in result.stdout
    assert "left: []" in result.stdout  # close() released every segment


# A GIL-bound UDF holding BIG, on processes under AUTOTUNE: too big for /dev/shm are
# its results (12 MB each, a worker keeps a ring of them), or the job itself. Outputs of
# 12 MB for 10 ms of work no longer make the engine choice try processes at all (moving
# them would cost half their time), so there processes come from a decision an earlier
# iterator of the pipeline took, as a later epoch starts with it.
@pytest.mark.parametrize("big_bytes, returned, what, earlier", [
    (12_000_000, "BIG", "for the results of a task in a worker", True),
    (96 << 20, "BIG[:8]", "for the job", False),
], ids=["results", "job"])
def test_autotune_falls_back_to_threads_when_shared_memory_is_full(tmp_path, big_bytes,
                                                                    returned, what, earlier):
    result = _run_with_small_shm(tmp_path, f"""
        import json
        import numpy as np
        import jdata
        from jdata import _placement
        from jdata.runtime import engine

        BIG = np.zeros({big_bytes}, np.uint8)

        def gil_bound(x):
            total = 0
            for i in range(200_000):
                total += i
            return x, {returned}

        ds = (jdata.range(10 ** 6).map(gil_bound, num_parallel_calls=jdata.AUTOTUNE)
              .with_options(jdata.Options(cpu_budget=2)))
        if {earlier}:
            engine.remember(_placement.engine_key(ds._node)(), ("processes", "measured"))
        with ds.iterator() as it:
            stage = it._root
            while not hasattr(stage, "_pool"):
                stage = stage._input
            pool = stage._pool
            got, after = [], 0
            for x, big in it:  # until the engine is decided (and processes tried), then 20
                got.append((int(x), big.shape))
                after += not pool.deciding
                if after == 20:
                    break
            complete = got == [(x, {returned}.shape) for x in range(len(got))]
            print(json.dumps({{"complete": complete, "engine": pool.engine,
                              "reason": pool.engine_reason}}))
    """)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["complete"]
    assert report["engine"] == "threads"
    assert "would not fit in shared memory" in report["reason"], report["reason"]
    assert "in /dev/shm " + what in report["reason"]


def test_segments_live_in_the_directory_jdata_shm_dir_names(tmp_path):
    # For machines whose /dev/shm is small: a bigger tmpfs elsewhere.
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    script = write_script(tmp_path, """
        import json
        import os
        import numpy as np
        import jdata

        ds = jdata.range(20).map(lambda x: np.full(100_000, x, np.float32),
                                 num_parallel_calls=2)
        with ds.with_options(jdata.Options(engine="processes")).iterator() as it:
            assert int(next(it)[0]) == 0
            print(json.dumps(sorted(os.listdir(os.environ["JDATA_SHM_DIR"]))))
    """)
    result = run_script(script, env={"JDATA_SHM_DIR": str(shm_dir)})
    assert result.returncode == 0, result.stderr
    during = json.loads(result.stdout)
    prefix = f"jdata_{result.pid}_"
    assert any(name.startswith(prefix) and "_job_" in name for name in during), during
    assert len(during) > 1  # the job and the workers' result segments
    assert os.listdir(shm_dir) == []
    assert my_segments(result.pid) == []  # nothing went to /dev/shm


def test_segments_of_killed_processes_are_swept_by_the_next_process(tmp_path):
    # SIGKILL of a whole process group (the OOM killer, a job scheduler) kills
    # the fork server too: nobody is left to unlink the segments. (A private
    # directory: any other jdata process starting meanwhile would sweep /dev/shm.)
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    victim = signal_running_job(tmp_path, signal.SIGKILL, shm_dir)
    leftovers = os.listdir(shm_dir)
    assert leftovers and all(name.startswith(f"jdata_{victim.pid}_") for name in leftovers)
    next_job = write_script(tmp_path, """
        import jdata
        ds = jdata.range(4).map(lambda x: x + 1, num_parallel_calls=2)
        print(sum(int(x) for x in ds.with_options(jdata.Options(engine="processes"))))
    """, name="next_job.py")
    result = run_script(next_job, env={"JDATA_SHM_DIR": str(shm_dir)})
    assert result.returncode == 0 and result.stdout.split() == ["10"], result.stderr
    assert os.listdir(shm_dir) == []


def test_names_never_collide_with_leftovers_of_an_earlier_process_with_the_same_pid(tmp_path):
    # After pid reuse, an earlier process's leftovers carry this process's
    # pid; creating the job segment failed with FileExistsError.
    script = write_script(tmp_path, """
        import os
        import jdata
        from jdata.runtime import segments

        leftovers = [os.path.join(segments.SEGMENT_DIR, f"jdata_{os.getpid()}_{kind}_{serial}")
                     for kind in ("job", os.getpid() + 1) for serial in range(4)]
        for path in leftovers:
            open(path, "wb").close()
        try:
            ds = jdata.range(4).map(lambda x: x * 2, num_parallel_calls=2)
            print(sum(int(x) for x in ds.with_options(jdata.Options(engine="processes"))))
        finally:
            for path in leftovers:
                os.unlink(path)
    """)
    result = run_script(script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["12"]
    assert my_segments(result.pid) == []


def test_a_segment_in_use_is_never_swept(tmp_path):
    # Its user process may be in another pid namespace (docker --ipc=host):
    # the creator's lock, not its pid, tells that it is in use.
    name = segments.segment_name("jdata_999999999_abcd", "job", 0)  # no such pid here
    segment = segments.Segment.create(name, 4096, "a test")
    try:
        segments.sweep(segments.session())
        assert os.path.exists(os.path.join(segments.SEGMENT_DIR, name))
    finally:
        segment.close()
    segments.sweep(segments.session())
    assert not os.path.exists(os.path.join(segments.SEGMENT_DIR, name))


@pytest.mark.parametrize("size", [1, 3 << 20])
def test_a_segment_is_reserved_when_created(size):
    # Its blocks are allocated up front, not page by page as they are written.
    name = segments.segment_name(segments.session(), "test", size)
    segment = segments.Segment.create(name, size, "a test")
    try:
        stat = os.stat(os.path.join(segments.SEGMENT_DIR, name))
        assert stat.st_size == size and stat.st_blocks * 512 >= size
    finally:
        segment.close()
        segment.unlink()
