"""Steady state and time to first batch, as a long training run sees them.

For each system, each round runs one infinite stream (the workload's pipeline
over ``repeat()``) in a fresh process: the time from building the pipeline to
its first batch, then ``warmup`` seconds discarded, then items per second over
``measure`` seconds. Rounds interleave the systems (the order rotates) and
the table gives medians, with each system's ratio to the plain single-threaded
loop (``plain``: the workload's work with no framework) and jdata's ratio to
the best peer. A fresh process per measurement is what a training job's start
is: no fork server, pool or compiled function is warm.

    python -m benchmarks.steady nlp cv overhead --rounds 3
    python -m benchmarks.steady simclr ssd --quick   # a smoke run

Workload modules give ``SYSTEMS`` (name -> ``pipeline(data, repeat=False)``),
``plain_loop(data, repeat=False)``, ``prepare(scale)`` and optionally
``HAND_PICKED`` jdata configurations (``--tuning``), ``IMPORTS`` (system family ->
modules imported before the clock, over the defaults) and ``items_in(batch)`` (the
items of a batch that is not one array, e.g. ``(images, boxes)``; default ``len``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time

PLAIN = "plain"
# What each system imports before the clock starts: import time is not time to first batch.
_IMPORTS = {"jdata": ("jax", "jdata"), "tf.data": ("tensorflow",), "grain": ("grain",),
            "torch": ("torch.utils.data",)}
_CHILD_TIMEOUT_SEC = 180  # start-up, warm-up and measurement of one system, with room


class Forever:
    """A PyTorch sampler that cycles ``0..n-1`` forever: one epoch-less stream, as
    ``repeat()`` gives the others (a new epoch of a ``DataLoader`` restarts its workers'
    iteration and drains the pipeline at each boundary)."""

    def __init__(self, n: int):
        self.n = n

    def __iter__(self):
        while True:
            yield from range(self.n)

    def __len__(self):  # DataLoader asks; the stream never ends
        return sys.maxsize


def torch_loader(count: int, item, repeat: bool, **loader_kw):
    """A PyTorch ``DataLoader`` of ``item(i)`` for ``i`` in ``0..count-1`` (cycled forever
    with ``repeat``, see ``Forever``) on 2 worker processes, the best count on 2 cores, kept
    from one iteration to the next (``persistent_workers``: short epochs, ``epochs.py``);
    ``loader_kw``: the rest of its arguments (``batch_size``, ``collate_fn``...)."""
    import torch.utils.data as tud

    class Items(tud.Dataset):
        def __len__(self):
            return count

        def __getitem__(self, i):
            return item(i)

    return tud.DataLoader(Items(), num_workers=2, sampler=Forever(count) if repeat else None,
                          persistent_workers=True, **loader_kw)


@dataclasses.dataclass(frozen=True)
class Sample:
    """One system's measurement in one fresh process."""

    first_batch_sec: float
    items_per_sec: float


def _make(module, system: str):
    """``system``'s pipeline maker: a peer, the plain loop, a hand-picked jdata config or
    a level of ``benchmarks/cedar/ablation.py``."""
    if system == PLAIN:
        return module.plain_loop
    from benchmarks.cedar import ablation

    if system.startswith(ablation.PREFIX):  # a level of Cedar's ablation
        return ablation.maker(module, system)
    if system in module.SYSTEMS:
        return module.SYSTEMS[system]
    config = _hand_picked(module)[system]
    return lambda data, repeat=False: module.jdata_pipeline(data, repeat=repeat, **config)


def _hand_picked(module) -> dict[str, dict]:
    return {"jdata " + ", ".join(f"{k}={v}" for k, v in c.items()): c
            for c in getattr(module, "HAND_PICKED", [])}


def measure(module, system: str, data, warmup: float, seconds: float) -> Sample:
    """Builds ``system``'s infinite stream and measures it (in this process)."""
    family = system.split()[0]
    for name in {**_IMPORTS, **getattr(module, "IMPORTS", {})}.get(family, ()):
        importlib.import_module(name)
    if system == PLAIN:
        # The heap settings a jdata iterator makes (jdata/runtime/heap.py), so that the
        # plain loop's ratio measures the framework, not malloc.
        from jdata.runtime import heap

        heap.keep_freed_pages()
    count = getattr(module, "items_in", len)
    start = time.perf_counter()
    stream = iter(_make(module, system)(data, repeat=True))
    next(stream)
    first = time.perf_counter() - start
    try:
        end_warmup = time.perf_counter() + warmup
        while time.perf_counter() < end_warmup:
            next(stream)
        items, begin = 0, time.perf_counter()
        while (now := time.perf_counter()) - begin < seconds:
            items += count(next(stream))
        return Sample(first, items / (now - begin))
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def _child(args) -> None:
    module = importlib.import_module(f"benchmarks.{args.workload}")
    with open(args.data, "rb") as f:
        data = pickle.load(f)
    if args.workload != "overhead" and "grain" in args.system:
        from benchmarks.run import _parse_absl_flags

        _parse_absl_flags()
    sample = measure(module, args.system, data, args.warmup, args.seconds)
    print(json.dumps(dataclasses.asdict(sample)), flush=True)


def measure_in_fresh_process(workload: str, system: str, data_path: str, warmup: float,
                             seconds: float) -> Sample | str:
    """``measure`` in a new interpreter; a string says why there is no sample."""
    got = run_child(["benchmarks.steady", "--child", workload, system, data_path,
                     "--warmup", str(warmup), "--seconds", str(seconds)],
                    warmup + seconds + _CHILD_TIMEOUT_SEC)
    return got if isinstance(got, str) else Sample(**got)


def run_child(args: list[str], timeout: float) -> dict | str:
    """``python -m *args`` in a new interpreter: the last JSON object it printed, or a
    string that says why there is none (a timeout, a failure and its last error)."""
    try:
        done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return f"failed (exit {done.returncode}): {_why(done.stderr)}"
    return json.loads(lines[-1])


def _why(stderr: str) -> str:
    """The last exception line of a child's stderr (grain ends its tracebacks with a note),
    else its last line."""
    lines = stderr.strip().splitlines() or ["no output"]
    raised = [line for line in lines if re.match(r"[\w.]+(Error|Exception|Exit)\b", line)]
    return (raised or lines)[-1]


@dataclasses.dataclass
class Result:
    """Medians over rounds, per system (``None``: no sample; ``errors`` says why)."""

    workload: str
    samples: dict[str, list[Sample]]
    errors: dict[str, str]

    def steady(self, system: str) -> float | None:
        runs = self.samples.get(system)
        return statistics.median(s.items_per_sec for s in runs) if runs else None

    def first_batch(self, system: str) -> float | None:
        runs = self.samples.get(system)
        return statistics.median(s.first_batch_sec for s in runs) if runs else None


def run(workload: str, systems: list[str], rounds: int, warmup: float, seconds: float,
        scale: float = 1.0, log=print) -> Result:
    """``rounds`` interleaved rounds over ``systems``, each sample in a fresh process."""
    module = importlib.import_module(f"benchmarks.{workload}")
    result = Result(workload, {}, {})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.pickle")
        with open(path, "wb") as f:
            pickle.dump(module.prepare(scale), f)
        for r in range(rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            for system in order:
                if system in result.errors:
                    continue
                got = measure_in_fresh_process(workload, system, path, warmup, seconds)
                if isinstance(got, str):
                    result.errors[system] = got
                    log(f"  {system}: {got}")
                    continue
                result.samples.setdefault(system, []).append(got)
                log(f"  round {r + 1}: {system:32s} {got.items_per_sec:12,.0f} items/s, "
                    f"first batch {got.first_batch_sec:6.2f} s")
    return result


def table(result: Result) -> str:
    """The medians, ratios to the plain loop and jdata's ratio to the best peer."""
    plain = result.steady(PLAIN)
    lines = [f"== {result.workload}: steady state (items/s, median) and time to first batch",
             f"  {'system':32s} {'steady':>12s} {'x plain':>8s} {'first batch':>12s}"]
    for system in result.samples:
        rate, first = result.steady(system), result.first_batch(system)
        ratio = f"{rate / plain:7.2f}x" if plain else "       -"
        lines.append(f"  {system:32s} {rate:12,.0f} {ratio} {first:10.2f} s")
    for system, why in result.errors.items():
        lines.append(f"  {system:32s} {why}")
    peers = {s: result.steady(s) for s in result.samples
             if not s.startswith("jdata") and s != PLAIN}
    for ours in (s for s in result.samples if s in ("jdata", "jdata ops")):
        rate = result.steady(ours)
        if peers:
            best = max(peers, key=peers.get)
            lines.append(f"  {ours} / best peer ({best}): steady {rate / peers[best]:.2f}x, "
                         f"first batch {result.first_batch(ours):.2f} s against "
                         f"{result.first_batch(best):.2f} s")
            lines.append(f"  {ours} / each peer: " + ", ".join(
                f"{peer} {rate / peer_rate:.2f}x" for peer, peer_rate in peers.items()))
    return "\n".join(lines)


def systems_of(workload: str, tuning: bool, only=None) -> list[str]:
    module = importlib.import_module(f"benchmarks.{workload}")
    names = [PLAIN, *module.SYSTEMS] + (list(_hand_picked(module)) if tuning else [])
    return [n for n in names if not only or n in only or n == PLAIN]


def report(workload: str, rounds: int = 3, warmup: float = 2.0, seconds: float = 5.0,
           scale: float = 1.0, tuning: bool = False, systems=None) -> Result:
    print(f"== {workload}: {rounds} interleaved rounds, {warmup:g} s warm-up, "
          f"{seconds:g} s measured, each in a fresh process")
    result = run(workload, systems_of(workload, tuning, systems), rounds, warmup, seconds,
                 scale)
    print(table(result))
    return result


def add_stream_arguments(parser: argparse.ArgumentParser, rounds: int) -> None:
    """The measurement's arguments (``--rounds``, ``--warmup``, ``--seconds``, ``--scale``,
    ``--quick``), as this module and ``benchmarks/cedar/ablation.py`` take them."""
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 round, 0.5 s warm-up, 2 s measured, scale 0.1")


def quick(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with ``--quick``'s settings where it was given."""
    if args.quick:
        args.rounds, args.warmup, args.seconds, args.scale = 1, 0.5, 2.0, 0.1
    return args


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=["nlp", "cv", "overhead"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_stream_arguments(parser, rounds=3)
    parser.add_argument("--tuning", action="store_true",
                        help="also jdata's hand-picked configurations")
    parser.add_argument("--systems", nargs="*", default=None,
                        help="only these systems (the plain loop always runs)")
    args = quick(parser.parse_args(argv))
    if args.child:
        workload, system, data = args.workloads
        _child(argparse.Namespace(workload=workload, system=system, data=data,
                                  warmup=args.warmup, seconds=args.seconds))
        return
    for workload in args.workloads:
        report(workload, args.rounds, args.warmup, args.seconds, args.scale, args.tuning,
               args.systems)


if __name__ == "__main__":
    main()
