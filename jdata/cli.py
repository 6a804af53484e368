"""The ``jdata`` command line: start, inspect and stop a data service.

    jdata service start                       # a local Ray on 127.0.0.1, in the foreground
    jdata service status --address 127.0.0.1:PORT
    jdata service stop --address 127.0.0.1:PORT
    jdata service start --address ray://head:10001 --num-workers 8   # on a cluster, detached

A service started without ``--address`` lives in an embedded Ray, which dies
with the process that started it: ``start`` then stays in the foreground,
prints the address clients use, and stops the service on Ctrl-C, SIGTERM or
``jdata service stop``. With ``--address`` it starts (or finds) the detached
dispatcher on that cluster and returns. Also ``python -m jdata``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

# How often a foreground ``start`` checks that its dispatcher was not stopped from elsewhere.
_WATCH_SEC = 1.0
_AUTO = "auto"


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
    except (ConnectionError, RuntimeError, ValueError, ImportError) as e:
        print(f"jdata service {args.action}: {e}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jdata", description="The jdata command line.")
    parser.set_defaults(usage=parser.print_help)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    group = commands.add_parser(
        "service", help="the data service (jdata.service) on Ray",
        description="Start, inspect and stop the jdata data service (docs/service.md).")
    group.set_defaults(usage=group.print_help)
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
        _common(action, os.environ.get("RAY_ADDRESS", _AUTO),
                "the cluster's address, as `start` printed it (default: $RAY_ADDRESS, else "
                "the Ray cluster started on this machine)")
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
    if args.address is not None:
        return 0  # detached on the cluster: it outlives this process
    print(f"clients: service.connect({address!r}); status: jdata service status --address "
          f"{address}; Ctrl-C or `jdata service stop --address {address}` stops it", flush=True)
    reason = _serve_until_stopped(args.namespace)
    svc.stop()
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

    _ray.send_local_token(args.address)
    svc = service.connect(args.address, args.namespace)
    print(f"jdata service at {args.address} (namespace {args.namespace})")
    print(svc.status())
    return 0


def _stop(args) -> int:
    from jdata import service
    from jdata.service import _ray

    _ray.send_local_token(args.address)
    service.connect(args.address, args.namespace).stop()
    print(f"jdata service stopped at {args.address} (namespace {args.namespace})")
    return 0
