"""The ``jdata`` command line: start, inspect and stop a data service.

    jdata service start                       # a local Ray on 127.0.0.1, in the foreground
    jdata service status --address 127.0.0.1:PORT
    jdata service stop --address 127.0.0.1:PORT
    jdata service start --address ray://head:10001 --num-workers 8   # on a cluster, detached
    jdata inspect PATH            # a directory of Dataset.save, cache(filename) or snapshot(path)
    jdata inspect-state FILE      # an iterator state (get_state() as JSON, or an Orbax checkpoint)
    jdata --version

A service started without ``--address`` lives in an embedded Ray, which dies
with the process that started it: ``start`` then stays in the foreground,
prints the address clients use, and stops the service on Ctrl-C, SIGTERM or
``jdata service stop``. With ``--address`` it starts (or finds) the detached
dispatcher on that cluster and returns. Also ``python -m jdata``.

``start`` records the service's address for this user (``$XDG_STATE_HOME/jdata``,
else ``~/.jdata``: ``services.json``, by namespace), and ``status``/``stop``
without ``--address`` act on that service (or on ``$RAY_ADDRESS``), saying which on
stderr; never on whichever Ray cluster started last on the machine, which may be
another user's (``--address auto`` still asks for that one explicitly).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import sys
import threading

from jdata import _inspect
from jdata._constants import DOCS_URL

# How often a foreground ``start`` checks that its dispatcher was not stopped from elsewhere.
_WATCH_SEC = 1.0
_AUTO = "auto"
_RECORDS = "services.json"


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0 done, 1 failed, 2 bad usage).

    >>> main(["service"])  # no action: the usage goes to stderr
    2
    """
    args = _parser().parse_args(argv)
    if not hasattr(args, "run"):  # `jdata` or `jdata service` alone
        args.usage(sys.stderr)
        return 2
    try:
        return args.run(args)
    except (OSError, RuntimeError, ValueError, ImportError) as e:  # OSError: a path too
        # One line: jdata's errors say what happened and what to do (a dispatcher's own
        # error, such as a journal of another version, is unwrapped by service.start).
        print(f"{args.label(args)}: {e}", file=sys.stderr)
        return 1


def _version() -> str:
    """The version of the installed distribution that holds the ``jdata`` package;
    ``jdata.__version__`` where jdata runs from a source tree that was never installed."""
    import importlib.metadata

    names = importlib.metadata.packages_distributions().get("jdata", [])
    for name in dict.fromkeys([*names, "jdata-jax", "jdata"]):  # its name, once renamed
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    import jdata

    return jdata.__version__


class _Version(argparse.Action):
    """``--version``: looked up only when asked (the lookup reads every installed
    distribution's metadata)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print jdata's version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"jdata {_version()}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jdata", description=f"The jdata command line. Documentation: {DOCS_URL}")
    parser.add_argument("--version", action=_Version)
    parser.set_defaults(usage=parser.print_help)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _inspect.add_commands(commands)
    group = commands.add_parser(
        "service", help="the data service (jdata.service) on Ray",
        description="Start, inspect and stop the jdata data service (the guide 'The data "
                    f"service' at {DOCS_URL}).")
    group.set_defaults(usage=group.print_help,
                       label=lambda args: f"jdata service {args.action}")
    actions = group.add_subparsers(dest="action", metavar="ACTION")

    start = actions.add_parser(
        "start", help="start a service (or join the one running in --namespace)",
        description="Without --address: a local Ray on 127.0.0.1 with token authentication, "
                    "in the foreground until Ctrl-C, SIGTERM or `jdata service stop`; it "
                    "prints the address clients pass to service.connect(). With --address: "
                    "a detached service on that cluster, and this command returns.")
    _common(start, None, "a running Ray cluster ('auto', 'host:6379', 'ray://host:10001'); "
                         "default: start a local one")
    start.add_argument("--num-workers", type=_workers, default="auto", metavar="N",
                       help="worker actors to keep running, or 'auto' (the default): "
                            "Cachew's autoscaler sets the count")
    start.add_argument("--max-workers", type=_positive(int), default=None, metavar="N",
                       help="the autoscaler's bound (default: what the cluster's CPUs hold)")
    start.add_argument("--worker-cpus", type=_positive(float, zero=True), default=1.0,
                       metavar="C", help="CPUs each worker declares to Ray (default 1)")
    start.add_argument("--work-dir", default=None, metavar="DIR",
                       help="where the dispatcher journals (default: a temporary directory)")
    start.add_argument("--split-elements", type=_positive(int), default=None, metavar="N",
                       help="elements per split of the jobs whose clients give none "
                            "(default: measured, about 0.2 s of work each)")
    start.set_defaults(run=_start)
    for name, run, text in (("status", _status, "print the workers, their rates and the jobs"),
                            ("stop", _stop, "stop the workers and the dispatcher")):
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:])
        _common(action, None,
                "the cluster's address, as `start` printed it (default: $RAY_ADDRESS, else "
                "the service `jdata service start` recorded for this user in this "
                "namespace; 'auto': the Ray cluster started last on this machine, whoever's)")
        action.set_defaults(run=run)
    return parser


def _common(action: argparse.ArgumentParser, address: str | None, address_help: str) -> None:
    action.add_argument("--address", default=address, help=address_help)
    action.add_argument("--namespace", default="jdata", metavar="NS",
                        help="the Ray namespace of the service (default 'jdata')")


def _positive(kind, zero: bool = False):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{text} must be {'>= 0' if zero else '> 0'}")
        return value
    return parse


def _workers(text: str) -> int:
    from jdata._constants import AUTOTUNE

    return AUTOTUNE if text == "auto" else _positive(int)(text)


def _start(args) -> int:
    from jdata import service
    from jdata.service import _ray

    if args.address is not None:
        _ray.send_local_token(args.address)
    svc = service.start(args.address, num_workers=args.num_workers,
                        max_workers=args.max_workers, work_dir=args.work_dir,
                        namespace=args.namespace, worker_cpus=args.worker_cpus,
                        split_elements=args.split_elements)
    address = _resolved(args.address, _ray.ray_module())
    print(f"jdata service running at {address} (namespace {args.namespace})")
    print(svc.status(), flush=True)
    _record(args.namespace, address, embedded=args.address is None)
    if args.address is not None:
        return 0  # detached on the cluster: it outlives this process
    print(f"clients: service.connect({address!r}); status: jdata service status --address "
          f"{address}; Ctrl-C or `jdata service stop --address {address}` stops it", flush=True)
    try:
        reason = _serve_until_stopped(args.namespace)
        svc.stop()
    finally:
        _forget(args.namespace, address)
    print(f"jdata service stopped ({reason})", flush=True)
    return 0


def _resolved(address: str | None, ray) -> str:
    """The address other processes use: the GCS's for an embedded Ray or ``"auto"``."""
    if address not in (None, _AUTO):
        return address
    return ray.get_runtime_context().gcs_address


def _serve_until_stopped(namespace: str) -> str:
    """Blocks until a signal arrives or the dispatcher is gone; says which."""
    from jdata import service

    stop = threading.Event()
    received = []

    def on_signal(signum, _frame):
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(_WATCH_SEC):
            try:
                service.connect(namespace=namespace)
            except RuntimeError:
                return "its dispatcher was stopped"
        return received[0]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _status(args) -> int:
    from jdata import service
    from jdata.service import _ray

    address = _address_for(args)
    _ray.send_local_token(address)
    svc = service.connect(address, args.namespace)
    print(f"jdata service at {address} (namespace {args.namespace})")
    print(svc.status())
    return 0


def _stop(args) -> int:
    from jdata import service
    from jdata.service import _ray

    address = _address_for(args)
    _ray.send_local_token(address)
    service.connect(address, args.namespace).stop(force=True)
    _forget(args.namespace, address)
    print(f"jdata service stopped at {address} (namespace {args.namespace})")
    return 0


def _address_for(args) -> str:
    """The cluster ``status``/``stop`` act on: ``--address``, else ``$RAY_ADDRESS``, else
    the service this user's ``start`` recorded in the namespace (said on stderr)."""
    if args.address is not None:
        return args.address
    chosen, source = os.environ.get("RAY_ADDRESS"), "from $RAY_ADDRESS"
    if not chosen:
        chosen = _recorded(args.namespace)
        source = f"recorded by `jdata service start` in {_records_path()}"
    if not chosen:
        from jdata.errors import ServiceNotFoundError

        raise ServiceNotFoundError(
            f"no --address, no $RAY_ADDRESS, and no service of yours recorded in namespace "
            f"{args.namespace!r} ({_records_path()}): pass --address, as `jdata service "
            "start` printed it (`--address auto` takes the Ray cluster started last on this "
            "machine, whoever's it is)")
    print(f"jdata service {args.action}: the service at {chosen} (namespace "
          f"{args.namespace}), {source}", file=sys.stderr)
    return chosen


def _records_path() -> pathlib.Path:
    """This user's record of the services ``start`` started, by namespace."""
    state = os.environ.get("XDG_STATE_HOME")
    base = pathlib.Path(state) / "jdata" if state else pathlib.Path.home() / ".jdata"
    return base / _RECORDS


def _records() -> dict:
    try:
        records = json.loads(_records_path().read_text())
    except (OSError, ValueError):  # none yet, or unreadable: nothing recorded
        return {}
    return records if isinstance(records, dict) else {}


def _write_records(records: dict) -> None:
    path = _records_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(records, indent=1, sort_keys=True))
    os.replace(partial, path)  # whole or not at all: a reader never sees half a file


def _record(namespace: str, address: str, embedded: bool) -> None:
    records = _records()
    records[namespace] = {"address": address, "pid": os.getpid(), "embedded": embedded}
    _write_records(records)


def _recorded(namespace: str) -> str | None:
    """The recorded address, unless its service died with its ``start`` (an embedded one
    whose process is gone: the record is dropped)."""
    record = _records().get(namespace)
    if not isinstance(record, dict) or not isinstance(record.get("address"), str):
        return None
    if record.get("embedded") and not _process_lives(record.get("pid")):
        _forget(namespace, record["address"])
        return None
    return record["address"]


def _forget(namespace: str, address: str) -> None:
    records = _records()
    if records.get(namespace, {}).get("address") == address:
        del records[namespace]
        _write_records(records)


def _process_lives(pid) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process by that pid: not this start
        return False
    return True
