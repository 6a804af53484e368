"""Operating a service for weeks, on a real local Ray (127.0.0.1): the journal stays the
size of the live state, a full disk is survived, a work_dir is one service's, workers
drop the plans of jobs that ended."""

import collections
import itertools
import os
import subprocess
import threading
import time
import warnings

import numpy as np
import pytest

import jdata
from jdata import service
from jdata.service import _ray

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]

_WAIT_SEC = 120.0


def _wait_for(what: str, check, timeout: float = _WAIT_SEC):
    """``check()``'s first true answer, polled; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.1)  # polling a state another process changes


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    ray = _ray.ray_module()
    assert not ray.is_initialized(), "another test left a Ray running"
    started = service.start(num_workers=2, worker_cpus=0.5, split_elements=1,
                            work_dir=str(tmp_path_factory.mktemp("journal")), num_cpus=2)
    yield started
    started.stop()
    assert not ray.is_initialized()


def test_a_long_run_compacts_its_journal_to_the_live_state_and_restarts_from_it(svc):
    """Before: every lease a service granted stayed in the journal, and a restart replayed
    all of it. 2,500 one-element splits (5,000 records) later, the journal was compacted
    and is far below what it took; a dispatcher killed then restores from the snapshot and
    the named job goes on exactly once."""
    ray = _ray.ray_module()
    ds = jdata.range(2500).distribute(svc, job_name="long")
    it = ds.iterator()
    got = [int(next(it)) for _ in range(2000)]
    journal = svc.status().journal
    assert journal.compactions >= 1 and journal.writable, journal
    assert journal.file_bytes < 1_000_000, journal
    ray.kill(svc._dispatcher, no_restart=False)  # Ray restarts it; it restores
    got += [int(x) for x in it]
    assert sorted(got) == list(range(2500))
    assert _wait_for("the restarted dispatcher", lambda: svc.status().journal).writable


_SOURCE_BYTES = 16 << 20


def _big(k: int):
    # 16 MB of a value of its own: two jobs' plans have the same shapes, never the same data.
    return jdata.from_tensor_slices(np.full((16, _SOURCE_BYTES // 16), k, np.uint8))


def test_workers_drop_the_plans_of_ended_jobs_and_never_run_another_jobs_plan(svc):
    """Before: a worker kept each job's decoded plan by fingerprint, forever (its private
    memory grew by each job's source: +10 MB a job over 8 MB sources, measured), and two
    pipelines one fingerprint mistook for one ran each other's plan. Now a worker holds
    none of their plans once the jobs ended (``benchmarks/service_soak.py`` measures its
    memory over thousands of jobs), and each job reads its own data."""

    def running():
        workers = [w for w in svc.status().workers if w.state == "running"]
        return len(workers) == 2 and workers

    # Other tests' named jobs outlive them (job_timeout): their plans may be held.
    held = max(w.plans for w in _wait_for("two workers", running))
    for k in range(10):
        firsts = {int(x[0]) for x in _big(k).distribute(svc)}
        assert firsts == {k}, (k, firsts)
    workers = _wait_for("the ended jobs' plans to go", lambda: (
        (now := running()) and all(w.plans <= held for w in now) and now))
    assert all(w.memory_bytes > 0 for w in workers)


def test_a_second_service_on_the_same_work_dir_is_refused_naming_the_first(svc):
    """Before: two services shared a journal without complaint, and the next restart of
    either could not replay it."""
    work_dir = os.path.dirname(svc.status().journal.path)
    with pytest.raises(jdata.errors.WorkDirInUseError,
                       match=rf"work_dir '{work_dir}' is in use by the dispatcher of pid "
                             rf"{svc.status().dispatcher.pid} .*namespace 'jdata'"):
        service.start(namespace="jdata-second", num_workers=1, worker_cpus=0.1,
                      work_dir=work_dir)
    assert svc.status().journal.writable  # the first goes on
    assert sorted(int(x) for x in jdata.range(20).distribute(svc)) == list(range(20))


# ------------------------------------------------------------ a full disk


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory):
    """A 2 MB tmpfs of its own (this machine's tests run as root)."""
    mount = tmp_path_factory.mktemp("disk")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                   check=True, timeout=30)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True, timeout=30)


@pytest.fixture(scope="module")
def on_small_disk(svc, small_disk):
    """A second service (svc's Ray) journaling on the small disk."""
    full = service.start(namespace="jdata-full-disk", num_workers=2, worker_cpus=0.1,
                         split_elements=5, work_dir=str(small_disk / "service"))
    yield full
    full.stop()


def _fill(disk) -> str:
    """Fills ``disk`` to its last byte; returns the filler's path."""
    path = os.path.join(disk, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:  # no space left: full
        pass
    finally:
        os.close(fd)
    return path


_MODES = {"dynamic": {}, "static": {"processing_mode": "static"},
          "off": {"processing_mode": "off"},
          "shared": {"job_name": "full-disk-shared", "sharing": True},
          "coordinated": {"job_name": "full-disk-coordinated", "num_consumers": 1,
                          "consumer_index": 0}}


@pytest.mark.parametrize("mode", _MODES)
def test_a_full_journal_disk_refuses_changes_says_so_and_recovers_when_space_returns(
        on_small_disk, small_disk, mode):
    """Before: the monitor thread died at the first failed write, for good: killed workers
    were never replaced, clients never expired, new jobs hung after space was freed, and
    status() said nothing. Now the dispatcher refuses what it cannot journal with a clear
    error, says so in status(), goes on pinging, and takes requests again by itself once
    the disk has room. A trainer mid-epoch waits the outage out (with a warning) rather
    than dying, and keeps its mode's promise through it, a worker killed meanwhile too."""
    full, ray = on_small_disk, _ray.ray_module()
    coordinated = mode == "coordinated"  # reads rounds of an endless pipeline
    source = jdata.range(400).repeat() if coordinated else jdata.range(400)
    it = source.distribute(full, **_MODES[mode]).iterator()
    got = [int(next(it)) for _ in range(20)]
    filler = _fill(small_disk)
    reader = threading.Thread(target=lambda: got.extend(
        int(x) for x in (itertools.islice(it, 380) if coordinated else it)))
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        reader.start()
        with pytest.raises(jdata.errors.ServiceUnavailableError,
                           match=r"cannot write its journal .*journal.sqlite .*(full|space)"):
            for _ in jdata.range(50).distribute(full):  # a new job
                pass
        if mode in ("dynamic", "static"):  # they lease split after split
            _wait_for("the trainer's refused lease", lambda: any(
                "waiting (up to 600 s) for the dispatcher" in str(w.message) for w in warned))
    journal = full.status().journal
    assert not journal.writable and journal.since is not None, journal
    assert "CANNOT WRITE" in str(full.status())
    killed = full.status().workers[0].worker_id
    ray.kill(ray.get_actor(killed, namespace="jdata-full-disk"))
    os.unlink(filler)
    _wait_for("the journal to take writes", lambda: full.status().journal.writable)
    _wait_for("the killed worker's replacement", lambda: [
        w.worker_id for w in full.status().workers if w.state == "running"
        and w.worker_id != killed][1:])
    reader.join(timeout=_WAIT_SEC)
    assert not reader.is_alive()
    counts = collections.Counter(got)
    if mode == "off":  # exactly once per slot
        assert set(counts) == set(range(400)) and len(set(counts.values())) == 1, counts
    elif mode == "shared":  # a slot per worker, each the whole stream; a moved one may skip
        assert set(counts) <= set(range(400)) and max(counts.values()) <= 2, counts
        assert sum(counts.values()) >= 400, counts
    elif coordinated:  # its rounds went on (a moved slot's rounds are skipped together)
        assert len(got) == 400 and set(counts) <= set(range(400)), counts
    else:
        assert sorted(got) == list(range(400))
    it.close()
    assert sorted(int(x) for x in jdata.range(50).distribute(full)) == list(range(50))
    assert full.status().monitor_errors == {}


def test_ray_init_arguments_that_cannot_apply_are_said_not_dropped(svc):
    """Found by a probe: ``service.start(runtime_env=...)`` in a process whose Ray already
    ran dropped the runtime_env without a word (the workers then lacked the code it was
    to ship)."""
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        joined = service.start(runtime_env={"env_vars": {"X": "1"}})  # joins svc
        joined.stop()  # a joined service only disconnects
    assert any("['runtime_env'] for ray.init are not applied" in str(w.message)
               for w in warned), [str(w.message) for w in warned]
    assert sorted(int(x) for x in jdata.range(10).distribute(svc)) == list(range(10))
