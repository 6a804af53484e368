"""The ``jdata`` command line: argument errors here, and a real service on loopback in
subprocesses (``python -m jdata service start|status|stop``)."""

from __future__ import annotations

import os
import pathlib
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import textwrap
import time

import pytest

import jdata
from jdata import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
_START_TIMEOUT_SEC = 120
_COMMAND_TIMEOUT_SEC = 120


def test_no_command_prints_the_usage_and_fails(capsys):
    assert cli.main([]) == 2
    assert "service" in capsys.readouterr().err
    assert cli.main(["service"]) == 2
    err = capsys.readouterr().err
    assert all(action in err for action in ("start", "status", "stop"))


@pytest.mark.parametrize("argv", [["service", "start", "--help"],
                                  ["service", "status", "--help"]])
def test_help_names_every_option(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--address" in out and "--namespace" in out
    if "start" in argv:
        assert all(o in out for o in ("--num-workers", "--worker-cpus", "--work-dir"))


@pytest.mark.parametrize("option, value, message", [
    ("--num-workers", "0", "--num-workers: 0 must be > 0"),
    ("--num-workers", "two", "--num-workers: 'two' is not a number"),
    ("--worker-cpus", "-1", "--worker-cpus: -1 must be >= 0"),
    ("--max-workers", "0", "--max-workers: 0 must be > 0"),
])
def test_bad_start_arguments_are_usage_errors(option, value, message, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["service", "start", option, value])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_worker_count_is_the_autoscalers_unless_given():
    parse = cli._parser().parse_args
    assert parse(["service", "start"]).num_workers == jdata.AUTOTUNE
    assert parse(["service", "start", "--num-workers", "auto"]).num_workers == jdata.AUTOTUNE
    args = parse(["service", "start", "--num-workers", "3", "--max-workers", "5"])
    assert (args.num_workers, args.max_workers) == (3, 5)


@pytest.mark.parametrize("scheme", ["", "ray://"])
@pytest.mark.parametrize("action", ["status", "stop"])
def test_an_address_where_nothing_listens_fails_at_once(scheme, action, capsys):
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        address = f"{scheme}127.0.0.1:{bound.getsockname()[1]}"
        started = time.monotonic()
        assert cli.main(["service", action, "--address", address]) == 1
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert f"jdata service {action}:" in err
    assert f"no Ray cluster answers at address={address!r}" in err


def test_the_command_line_imports_ray_for_loopback_only():
    # Its token step imported Ray before the loopback switch was set: an embedded service
    # started later in the same process would have listened on the external address.
    code = textwrap.dedent("""
        import socket
        from jdata import cli
        with socket.socket() as bound:
            bound.bind(("127.0.0.1", 0))
            cli.main(["service", "status", "--address", f"127.0.0.1:{bound.getsockname()[1]}"])
        from ray._private import ray_constants
        print("cluster mode:", ray_constants.ENABLE_RAY_CLUSTER)
    """)
    env = {k: v for k, v in _env().items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert "cluster mode: False" in done.stdout, done.stdout + done.stderr


class _Start:
    """A ``jdata service start`` subprocess whose stdout lines arrive on a queue."""

    def __init__(self, tmp_path: pathlib.Path, *args: str, **env_vars: str):
        env = _env(**env_vars)
        self.stderr = tmp_path / "start.err"
        with open(self.stderr, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jdata", "service", "start", "--num-workers", "1",
                 "--worker-cpus", "0.1", "--work-dir", str(tmp_path / "journal"), *args],
                stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=tmp_path)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: str, timeout: float = _START_TIMEOUT_SEC) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                raise AssertionError(f"no line matching {pattern!r} in {self.seen}; stderr: "
                                     f"{self.stderr.read_text()[-3000:]}")
            self.seen.append(line)
            if match := re.search(pattern, line):
                return match

    def finish(self):
        """Kills the process (by its pid) if a test left it running."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def started(tmp_path):
    start = _Start(tmp_path)
    yield start
    start.finish()


def _env(**env_vars: str) -> dict:
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), **env_vars)


def _jdata(*argv: str, **env_vars: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jdata", *argv], capture_output=True,
                          text=True, env=_env(**env_vars), timeout=_COMMAND_TIMEOUT_SEC)


_ADDRESS = r"jdata service running at (127\.0\.0\.1:\d+) \(namespace jdata\)"


@pytest.mark.slow
def test_start_status_stop_on_loopback(started, request):
    address = started.wait_for(_ADDRESS).group(1)
    started.wait_for(r"^1 workers:$")
    # Ray refuses a client without the token only after ~20 s of retries: run it meanwhile.
    tokenless = subprocess.Popen(
        [sys.executable, "-m", "jdata", "service", "status", "--address", address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(RAY_AUTH_MODE="disabled"))
    request.addfinalizer(lambda: tokenless.poll() is None and tokenless.kill())

    status = _jdata("service", "status", "--address", address)
    assert status.returncode == 0, status.stderr
    assert f"jdata service at {address} (namespace jdata)" in status.stdout
    assert "no authentication" not in status.stderr  # it sent this machine's token
    assert re.search(r"dispatcher pid \d+", status.stdout)
    assert re.search(r"1 workers:\n  jdata-worker-\w+ pid \d+: 0 reads", status.stdout)

    missing = _jdata("service", "status", "--address", address, "--namespace", "elsewhere")
    assert missing.returncode == 1
    assert "no jdata dispatcher in namespace 'elsewhere'" in missing.stderr

    # A second, detached service on the same cluster: `start --address` returns at once.
    detached = _jdata("service", "start", "--address", address, "--namespace", "second",
                      "--num-workers", "2", "--worker-cpus", "0.1", "--split-elements", "7")
    assert detached.returncode == 0, detached.stderr
    assert f"jdata service running at {address} (namespace second)" in detached.stdout
    assert "2 workers:" in detached.stdout
    # Its clients' jobs are cut in splits of 7, unless they say otherwise.
    client = subprocess.run(
        [sys.executable, "-c", "import sys; from jdata import service; print(service.connect("
         "sys.argv[1], namespace='second').ref.split_elements)", address],
        capture_output=True, text=True, env=_env(RAY_AUTH_MODE="token"),
        timeout=_COMMAND_TIMEOUT_SEC)
    assert client.stdout.strip() == "7", client.stderr
    assert _jdata("service", "stop", "--address", address, "--namespace", "second"
                  ).returncode == 0
    assert _jdata("service", "status", "--address", address, "--namespace", "second"
                  ).returncode == 1
    assert started.proc.poll() is None  # the first one still runs

    out, err = tokenless.communicate(timeout=_COMMAND_TIMEOUT_SEC)
    assert tokenless.returncode == 1 and "dispatcher pid" not in out
    assert f"Failed to connect to Ray cluster at {address}: if the cluster uses token " in err

    stop = _jdata("service", "stop", "--address", address)
    assert stop.returncode == 0, stop.stderr
    assert f"jdata service stopped at {address}" in stop.stdout
    started.wait_for(r"jdata service stopped \(its dispatcher was stopped\)")
    assert started.proc.wait(timeout=60) == 0


@pytest.mark.slow
def test_joining_without_authentication_warns_and_sigterm_stops_a_start(tmp_path):
    started = _Start(tmp_path, RAY_AUTH_MODE="disabled")
    try:
        _without_authentication_then_sigterm(started)
    finally:
        started.finish()


def _without_authentication_then_sigterm(started):
    address = started.wait_for(_ADDRESS).group(1)
    started.wait_for(r"^clients: service\.connect")
    status = _jdata("service", "status", "--address", address, RAY_AUTH_MODE="disabled")
    assert status.returncode == 0, status.stderr
    assert f"the Ray cluster at {address!r} has no authentication" in status.stderr
    started.proc.send_signal(signal.SIGTERM)
    started.wait_for(r"jdata service stopped \(SIGTERM\)")
    assert started.proc.wait(timeout=60) == 0
    host, port = address.split(":")
    with pytest.raises(OSError):  # the embedded Ray went with it
        socket.create_connection((host, int(port)), timeout=5).close()


def test_the_console_script_is_main():
    import importlib
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["jdata"].partition(":")
    assert getattr(importlib.import_module(module), name) is cli.main


def test_version_is_the_distributions_else_the_packages(monkeypatch, capsys):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.8.7")  # installed
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == "jdata 9.8.7\n"

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)  # a source tree
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out == f"jdata {jdata.__version__}\n"


@pytest.mark.parametrize("argv", [[], ["service"], ["service", "start"], ["service", "status"],
                                  ["service", "stop"], ["inspect"], ["inspect-state"]])
def test_help_points_to_the_docs_site_not_to_files_a_wheel_lacks(argv, capsys):
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    out = capsys.readouterr().out
    assert "docs/" not in out and ".md" not in out
    if argv in ([], ["service"]):
        assert "https://jdata-jax.readthedocs.io" in out


def test_no_message_or_docstring_of_the_cli_and_service_names_a_docs_file():
    # A wheel has no docs/ directory: messages name the site and a section instead.
    sources = [ROOT / "jdata" / "cli.py", *sorted((ROOT / "jdata" / "service").glob("*.py"))]
    named = [str(p.relative_to(ROOT)) for p in sources if "docs/" in p.read_text()]
    assert named == []
