"""Operating a service from its clients (issue 24): versions checked at connect, joining
without stopping what another process started, readers of a stopped service, a
dispatcher that cannot start. A real local Ray (127.0.0.1), one service per module."""

import os
import pathlib
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import jdata
from jdata.service import _ray, _version
from jdata.service.dispatcher import NAME as DISPATCHER_NAME

# Ray starts its processes with fork+exec while JAX's threads run: JAX warns, harmlessly.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]

ROOT = pathlib.Path(__file__).resolve().parents[2]
_WAIT_SEC = 120.0  # generous: two shared cores


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    from jdata import service

    ray = _ray.ray_module()
    assert not ray.is_initialized(), "another test left a Ray running"
    started = service.start(num_workers=1, worker_cpus=0.25, split_elements=5, num_cpus=2,
                            work_dir=str(tmp_path_factory.mktemp("journal")))
    yield started
    started.stop()
    assert not ray.is_initialized()


def _ints(elements):
    return [int(x) for x in elements]


# ------------------------------------------------------------------ versions


def test_a_client_of_another_protocol_gets_one_error_naming_both_versions(svc, monkeypatch):
    from jdata import service

    theirs = _version.PROTOCOL_VERSION
    monkeypatch.setattr(_version, "PROTOCOL_VERSION", theirs + 1)
    expected = (rf"this jdata speaks protocol {theirs + 1} \(jdata {jdata.__version__}\); "
                rf"the service at 127\.0\.0\.1:\d+ \(namespace 'jdata'\) speaks protocol "
                rf"{theirs} \(jdata {jdata.__version__}\): install the service's jdata "
                rf"{jdata.__version__} where this process runs, or restart the service with "
                "this one")
    with pytest.raises(jdata.ServiceVersionError, match=f"service.connect: {expected}"):
        service.connect(namespace=svc.ref.namespace)
    with pytest.raises(jdata.ServiceVersionError, match=f"service.start: {expected}"):
        service.start(namespace=svc.ref.namespace)  # it would join: it checks first
    with pytest.raises(jdata.ServiceVersionError, match=f"distribute: {expected}"):
        next(iter(jdata.range(10).distribute(svc)))
    monkeypatch.undo()
    assert _ints(jdata.range(10).distribute(svc)) == list(range(10))


class _OldDispatcher:
    """A dispatcher of an older protocol, as far as joining asks it."""

    def version(self) -> dict:
        return {"jdata": "0.0.9", "protocol": 0}

    def workers(self) -> list:
        return []

    def split_elements(self):
        return None


class _OlderDispatcher:
    """A dispatcher from before versions: it has no ``version``."""

    def workers(self) -> list:
        return []

    def split_elements(self):
        return None


@pytest.mark.parametrize("kind, speaks", [
    (_OldDispatcher, (r"speaks protocol 0 \(jdata 0\.0\.9\): install the service's jdata "
                      r"0\.0\.9 where this process runs")),
    (_OlderDispatcher, (r"speaks an older protocol, from before versions were checked .*: "
                        r"install the service's jdata version where this process runs")),
], ids=["older-protocol", "no-version-method"])
def test_a_dispatcher_of_another_protocol_is_refused_by_name(svc, request, kind, speaks):
    from jdata import service

    ray = _ray.ray_module()
    namespace = f"jdata-{kind.__name__.lower()}"
    old = ray.remote(kind).options(name=DISPATCHER_NAME, namespace=namespace,
                                   num_cpus=0).remote()
    request.addfinalizer(lambda: ray.kill(old))
    ray.get(old.workers.remote(), timeout=_WAIT_SEC)  # it runs
    where = rf"the service at 127\.0\.0\.1:\d+ \(namespace '{namespace}'\) "
    ours = rf"this jdata speaks protocol {_version.PROTOCOL_VERSION} \(jdata "
    for call, what in ((service.connect, "service.connect"), (service.start, "service.start")):
        with pytest.raises(jdata.ServiceVersionError) as info:
            call(namespace=namespace)
        assert info.match(rf"^{what}: {ours}.*; {where}{speaks}")
        assert info.match(f"restart the service with this one \\(jdata {jdata.__version__}\\)")
    assert ray.get_actor(DISPATCHER_NAME, namespace=namespace)  # start made none of its own


def test_a_dispatcher_stopped_while_joining_is_service_not_found(svc, monkeypatch):
    """The race `jdata service start`'s watch loop met in CI: `stop` killed the dispatcher
    after `connect` looked it up and before it asked its version (an ActorDiedError)."""
    from jdata import service

    ray = _ray.ray_module()
    namespace = "jdata-stopped-while-joining"
    stub = ray.remote(_OldDispatcher).options(name=DISPATCHER_NAME, namespace=namespace,
                                              num_cpus=0).remote()
    ray.get(stub.workers.remote(), timeout=_WAIT_SEC)  # it runs, under its name
    lookup = ray.get_actor

    def found_then_stopped(name, namespace=None):
        handle = lookup(name, namespace=namespace)
        ray.kill(handle, no_restart=True)
        # ray.kill only asks: until the actor is dead, connect's version() could still
        # reach it (and see protocol 0). Wait for the death, not for a time.
        deadline = time.monotonic() + _WAIT_SEC
        while time.monotonic() < deadline:
            try:
                ray.get(handle.workers.remote(), timeout=_WAIT_SEC)
            except ray.exceptions.RayActorError:
                return handle
        raise AssertionError(f"the killed stub still answered after {_WAIT_SEC} s")

    monkeypatch.setattr(ray, "get_actor", found_then_stopped)
    with pytest.raises(jdata.ServiceNotFoundError,
                       match=r"^service.connect: the jdata dispatcher in namespace "
                             r"'jdata-stopped-while-joining' at this process's Ray was "
                             r"stopped while this process joined it"):
        service.connect(namespace=namespace)
    monkeypatch.undo()
    assert ray.is_initialized()  # the Ray connect did not make is not shut down
    assert _ints(jdata.range(7).distribute(svc)) == list(range(7))


# ------------------------------------------------------------------ joining


def test_joining_warns_with_the_namespace_and_never_stops_what_it_did_not_start(svc):
    from jdata import service

    joined_warning = (r"a dispatcher already runs at 127\.0\.0\.1:\d+ \(namespace 'jdata'\) "
                      r"with 1 workers: joined it as it is .*does not stop it on stop\(\) or "
                      r"exit, it only disconnects \(svc\.stop\(force=True\) stops it")
    with pytest.warns(UserWarning, match=joined_warning), \
            service.start(namespace=svc.ref.namespace) as joined:
        assert _ints(jdata.range(7).distribute(joined)) == list(range(7))
    assert len(svc.status().workers) == 1  # exiting the second `with` left it running
    with pytest.warns(UserWarning, match=r"svc\.stop\(\): not stopping the service at .*"
                                         r"\(namespace 'jdata'\): this Service joined it"):
        service.connect(namespace=svc.ref.namespace).stop()
    assert _ints(jdata.range(7).distribute(svc)) == list(range(7))


# ------------------------------------------------------------------ a stopped service


def _slowly(x):
    import time

    time.sleep(0.01)  # a split takes a while: the reader is mid-read when the stop comes
    return x


def _read_in_thread(ds):
    """A thread iterating ``ds``: the error it ended with, an event set once it read ten
    elements (or ended), the thread and its iterator."""
    it = iter(ds)
    ended, reading = [], threading.Event()

    def loop():
        try:
            for n, _ in enumerate(it):
                if n == 10:
                    reading.set()
        except Exception as e:  # the test reads it
            ended.append(e)
        reading.set()

    thread = threading.Thread(target=loop, daemon=True, name="test-reader")
    thread.start()
    return ended, reading, thread, it


def test_a_stopped_service_ends_its_readers_with_service_stopped_error(svc, tmp_path):
    from jdata import service

    namespace = "jdata-stopped"
    other = service.start(namespace=namespace, num_workers=1, worker_cpus=0.25,
                          split_elements=5, work_dir=str(tmp_path / "journal"))
    try:
        ds = jdata.range(100_000).map(_slowly).distribute(other)
        ended, reading, thread, it = _read_in_thread(ds)
        assert reading.wait(_WAIT_SEC) and not ended, ended
    finally:
        other.stop()
    thread.join(_WAIT_SEC)
    assert not thread.is_alive()
    assert len(ended) == 1 and type(ended[0]) is jdata.ServiceStoppedError, ended
    message = str(ended[0])
    assert f"(namespace '{namespace}') was stopped" in message
    assert "restore the iterator from its last checkpoint" in message
    with pytest.raises(jdata.ServiceStoppedError):  # and again, at once
        next(it)
    assert _ints(jdata.range(7).distribute(svc)) == list(range(7))  # the other one runs


_EMBEDDED = textwrap.dedent("""
    import threading, time
    import jdata
    from jdata import service

    def slowly(x):
        time.sleep(0.01)
        return x

    svc = service.start(num_workers=1, worker_cpus=0.25, split_elements=5, num_cpus=2)
    it = iter(jdata.range(100_000).map(slowly).distribute(svc))
    reading, ended = threading.Event(), []

    def loop():
        try:
            for n, _ in enumerate(it):
                if n == 10:
                    reading.set()
        except BaseException as e:
            ended.append(e)
        reading.set()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    assert reading.wait(120) and not ended, ended
    svc.stop()  # shuts down this process's Ray under the reading thread
    thread.join(120)
    print("ENDED", [type(e).__name__ for e in ended], flush=True)
    try:
        next(it)
    except jdata.ServiceStoppedError as e:
        print("AGAIN", e, flush=True)
""")


def test_a_service_that_shuts_down_its_ray_under_a_reader_gives_it_the_error(svc, tmp_path):
    # In a process of its own: stopping an embedded service shuts its Ray down, which
    # aborted the process when a reader thread was inside a Ray call.
    done = subprocess.run([sys.executable, "-c", _EMBEDDED], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, check=False,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "ENDED ['ServiceStoppedError']" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "AGAIN distribute: the service at 127.0.0.1:" in done.stdout
    assert "was stopped" in done.stdout


# ------------------------------------------------------------------ a dispatcher that fails


def test_a_journal_of_another_version_is_its_one_line_journal_error(svc, tmp_path):
    from jdata import service
    from jdata.service import journal

    work_dir = tmp_path / "journal"
    work_dir.mkdir()
    path = work_dir / "journal.sqlite"
    journal.Journal(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE jdata_journal SET value = '99' WHERE key = 'version'")
    db.commit()
    db.close()
    namespace = "jdata-old-journal"
    with pytest.raises(jdata.JournalError) as info:
        service.start(namespace=namespace, num_workers=1, worker_cpus=0.25,
                      work_dir=str(work_dir))
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert info.match(rf"^{path} is a journal of .*version '99'; this jdata reads ")
    ray = _ray.ray_module()
    assert ray.is_initialized()  # the module's Ray, not this start's: it stays
    with pytest.raises(ValueError):
        ray.get_actor(DISPATCHER_NAME, namespace=namespace)
