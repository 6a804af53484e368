"""Operating a service from the command line and by address (issue 24): which cluster
``status``/``stop`` act on, addresses where something other than Ray listens, a stop
that ends its trainers with ``ServiceStoppedError``, a journal of another version."""

from __future__ import annotations

import json
import os
import queue
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import jdata
from jdata import cli
from tests.test_cli import _COMMAND_TIMEOUT_SEC, ROOT, _env, _jdata, _Start

_FAST_SEC = 30  # what "fails fast" means here: ray.init waited 9+ minutes


@pytest.fixture
def state(tmp_path, monkeypatch):
    """This user's records in a directory of the test's, and no $RAY_ADDRESS."""
    path = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return path


def _no_ray_here() -> bool:
    return "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def _refused_port() -> int:
    """A port where nothing listens (bound then closed: connections are refused)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        return bound.getsockname()[1]


def _namespace() -> str:
    # Never "jdata": if a regression fell back on Ray's "auto", it must not find (let
    # alone stop) the service of someone else's cluster on this machine.
    return f"jdata-cli-test-{os.getpid()}-{time.monotonic_ns()}"


# ------------------------------------------------------------------ which cluster


@pytest.mark.parametrize("action", ["status", "stop"])
def test_without_an_address_nor_a_record_status_and_stop_refuse(state, action, capsys):
    namespace = _namespace()
    assert cli.main(["service", action, "--namespace", namespace]) == 1
    err = capsys.readouterr().err
    assert (f"jdata service {action}: no --address, no $RAY_ADDRESS, and no service of yours "
            f"recorded in namespace {namespace!r} ({state / 'jdata' / 'services.json'}): "
            "pass --address") in err
    assert "`--address auto` takes the Ray cluster started last on this machine" in err
    assert _no_ray_here()  # it asked no cluster


def test_a_recorded_service_or_ray_address_is_used_and_named_on_stderr(state, monkeypatch,
                                                                        capsys):
    namespace, port = _namespace(), _refused_port()
    cli._record(namespace, f"127.0.0.1:{port}", embedded=False)
    assert cli.main(["service", "status", "--namespace", namespace]) == 1
    err = capsys.readouterr().err
    assert (f"jdata service status: the service at 127.0.0.1:{port} (namespace {namespace}), "
            f"recorded by `jdata service start` in {state / 'jdata' / 'services.json'}") in err
    assert f"no Ray cluster answers at address='127.0.0.1:{port}'" in err
    other = _refused_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{other}")
    assert cli.main(["service", "stop", "--namespace", namespace]) == 1
    err = capsys.readouterr().err
    assert f"the service at 127.0.0.1:{other} (namespace {namespace}), from $RAY_ADDRESS" in err
    assert _no_ray_here()


def test_the_record_of_a_start_that_died_is_dropped(state, capsys):
    namespace = _namespace()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    cli._record(namespace, "127.0.0.1:1", embedded=True)
    records = state / "jdata" / "services.json"
    saved = json.loads(records.read_text())
    saved[namespace]["pid"] = int(gone.stdout)  # its embedded Ray died with it
    records.write_text(json.dumps(saved))
    assert cli.main(["service", "status", "--namespace", namespace]) == 1
    assert "no service of yours recorded" in capsys.readouterr().err
    assert namespace not in json.loads(records.read_text())


# ------------------------------------------------------------------ not Ray at the address


class _Listener:
    """A TCP server on 127.0.0.1 that is not Ray: ``silent`` accepts and says nothing,
    ``http`` answers every connection as a web server would."""

    def __init__(self, kind: str):
        self.kind = kind
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True, name="test-listener")
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed by close()
                return
            self.accepted.append(conn)
            if self.kind == "http":
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                conn.close()

    def close(self):
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        except OSError:
            pass
        self.server.close()
        for conn in self.accepted:
            conn.close()
        self.thread.join(10)


@pytest.fixture(params=["silent", "http"])
def listener(request):
    server = _Listener(request.param)
    request.addfinalizer(server.close)
    return server


@pytest.mark.parametrize("how", ["service.connect", "status", "stop"])
def test_an_address_where_something_else_listens_fails_fast(listener, how, state, capsys):
    from jdata import service

    assert _no_ray_here(), "another test left a Ray running"
    started = time.monotonic()
    if how == "service.connect":
        with pytest.raises(jdata.ServiceConnectionError) as info:
            service.connect(address=listener.address)
        assert isinstance(info.value, ConnectionError)  # what it was before: still caught
        message = str(info.value)
    else:
        assert cli.main(["service", how, "--address", listener.address]) == 1
        message = capsys.readouterr().err
    assert time.monotonic() - started < _FAST_SEC
    assert (f"something listens at address={listener.address!r} but it is not a Ray cluster "
            "(it ") in message
    said = "gave no answer within 5 s" if listener.kind == "silent" else \
        "answered b'HTTP/1.1 400 Bad Request"
    assert said in message
    assert listener.accepted  # it reached the listener, which is what it judged
    assert _no_ray_here()  # nothing half-connected stays behind


# ------------------------------------------------------------------ start, status, stop


_TRAINER = textwrap.dedent("""
    import sys, time
    import jdata
    from jdata import service

    def slowly(x):
        time.sleep(0.01)
        return x

    svc = service.connect(sys.argv[1], namespace=sys.argv[2])
    try:
        for n, _ in enumerate(jdata.range(100_000).map(slowly).distribute(svc)):
            if n == 10:
                print("READING", flush=True)
    except jdata.ServiceStoppedError as e:
        print("STOPPED", e, flush=True)
        sys.exit(0)
    except BaseException as e:
        print("FAILED", type(e).__name__, e, flush=True)
        sys.exit(3)
    print("ENDED", flush=True)
""")


def _lines(proc) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)
    threading.Thread(target=pump, daemon=True).start()
    return lines


def _first(lines: queue.Queue, prefix: str, timeout: float = _COMMAND_TIMEOUT_SEC) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is None:
            raise AssertionError(f"no line starting {prefix!r}: {seen}")
        seen.append(line)
        if line.startswith(prefix):
            return line


@pytest.mark.slow
def test_start_records_its_service_for_status_and_stop_which_ends_its_trainers(
        tmp_path, monkeypatch, request):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    state, namespace = tmp_path / "state", _namespace()
    records = state / "jdata" / "services.json"
    started = _Start(tmp_path, "--namespace", namespace, XDG_STATE_HOME=str(state))
    request.addfinalizer(started.finish)
    address = started.wait_for(rf"jdata service running at (127\.0\.0\.1:\d+) \(namespace "
                               rf"{namespace}\)").group(1)
    started.wait_for(r"^clients: service\.connect")
    assert json.loads(records.read_text())[namespace]["address"] == address

    status = _jdata("service", "status", "--namespace", namespace, XDG_STATE_HOME=str(state))
    assert status.returncode == 0, status.stderr
    assert (f"jdata service status: the service at {address} (namespace {namespace}), "
            f"recorded by `jdata service start` in {records}") in status.stderr
    assert "1 workers:" in status.stdout

    with open(tmp_path / "trainer.err", "w") as err:
        trainer = subprocess.Popen([sys.executable, "-c", _TRAINER, address, namespace],
                                   stdout=subprocess.PIPE, stderr=err, text=True,
                                   env=_env(RAY_AUTH_MODE="token"), cwd=ROOT)
    request.addfinalizer(lambda: trainer.poll() is None and trainer.kill())
    lines = _lines(trainer)
    assert _first(lines, "READING"), (tmp_path / "trainer.err").read_text()

    stop = _jdata("service", "stop", "--namespace", namespace, XDG_STATE_HOME=str(state))
    assert stop.returncode == 0, stop.stderr
    assert f"the service at {address} (namespace {namespace}), recorded by" in stop.stderr
    stopped = _first(lines, "STOPPED")  # from the trainer's next(), before its Ray went
    assert stopped.startswith(f"STOPPED distribute: the service at {address} (namespace "
                              f"'{namespace}') was stopped")
    assert trainer.wait(timeout=_COMMAND_TIMEOUT_SEC) == 0
    started.wait_for(r"jdata service stopped \(its dispatcher was stopped\)")
    assert started.proc.wait(timeout=_COMMAND_TIMEOUT_SEC) == 0
    assert namespace not in json.loads(records.read_text())


@pytest.mark.slow
def test_a_journal_of_another_version_is_one_line_not_a_traceback(tmp_path):
    from jdata.service import journal

    work_dir = tmp_path / "journal"
    work_dir.mkdir()
    journal.Journal(work_dir / "journal.sqlite").close()
    db = sqlite3.connect(work_dir / "journal.sqlite")
    db.execute("UPDATE jdata_journal SET value = '99' WHERE key = 'version'")
    db.commit()
    db.close()
    state = tmp_path / "state"
    done = _jdata("service", "start", "--num-workers", "1", "--worker-cpus", "0.1",
                  "--work-dir", str(work_dir), "--namespace", _namespace(),
                  XDG_STATE_HOME=str(state))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("jdata service")]
    assert len(ours) == 1, done.stderr
    assert ours[0].startswith(f"jdata service start: {work_dir / 'journal.sqlite'} is a "
                              "journal of ")
    assert "version '99'; this jdata reads" in ours[0]
    assert not (state / "jdata" / "services.json").exists()  # no service: nothing recorded
