"""Short epochs: a fresh iterator per epoch, as eval loops and small datasets run.

``for epoch in range(10): for batch in ds: ...`` pays each iterator's start-up, and
whatever the framework decides or measures per iterator, once per epoch: over short
epochs that costs as much as the work. For each system, one fresh process builds the
workload's pipeline once and runs ``--epochs`` epochs over it, each a fresh iterator
(``iter(pipeline)``; tf.data's ``as_numpy_iterator()`` of the same dataset; the plain
loop, a generator, is called again; torch's ``DataLoader`` keeps its workers,
``persistent_workers=True``), timing each epoch from the iterator's creation to its
last batch. Rounds interleave the systems, each in a fresh process; the table gives
medians over rounds of:

- the first epoch's time, and the median time of the epochs after it;
- the slowest epoch after the first as a multiple of that median (predictable epochs:
  issue 29 asks for at most 1.3x);
- items/s over every epoch, with its ratio to the plain loop (one thread, no framework),
  and jdata's ratio to each peer.

An epoch is the workload's data at ``EPOCH_SCALE``: 20,000 sentences (nlp), 20,000
integers (overhead), 1,024 images (cv).

    python -m benchmarks.epochs nlp cv overhead --epochs 10 --rounds 3
    python -m benchmarks.epochs overhead --quick   # a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pickle
import statistics
import tempfile
import time

from benchmarks import steady

PLAIN = steady.PLAIN
EPOCH_SCALE = {"nlp": 1.0, "overhead": 0.1, "cv": 1.0}
_CHILD_TIMEOUT_SEC = 600  # start-up and every epoch of one system, with room


@dataclasses.dataclass(frozen=True)
class Sample:
    """One system's epochs in one fresh process."""

    epoch_sec: list[float]
    items: int  # per epoch (every epoch must give the same)

    @property
    def first(self) -> float:
        return self.epoch_sec[0]

    @property
    def later_median(self) -> float:
        later = self.epoch_sec[1:] or self.epoch_sec
        return statistics.median(later)

    @property
    def worst_ratio(self) -> float:
        """The slowest epoch after the first over the median of those epochs."""
        later = self.epoch_sec[1:] or self.epoch_sec
        return max(later) / statistics.median(later)

    @property
    def items_per_sec(self) -> float:
        return self.items * len(self.epoch_sec) / sum(self.epoch_sec)


def measure(module, system: str, data, epochs: int) -> Sample:
    """``epochs`` epochs of ``system``'s pipeline, a fresh iterator each (in this process)."""
    family = system.split()[0]
    for name in {**steady._IMPORTS, **getattr(module, "IMPORTS", {})}.get(family, ()):
        importlib.import_module(name)
    if system == PLAIN:
        from jdata.runtime import heap  # as a jdata iterator sets it: see steady.measure

        heap.keep_freed_pages()
    count = getattr(module, "items_in", len)
    make = steady._make(module, system)
    pipeline = make(data, repeat=False)
    # tf.data's workloads return ds.as_numpy_iterator(): a new one of the same dataset per
    # epoch, as a tf.data user's loop makes it.
    dataset = pipeline._dataset if type(pipeline).__name__ == "NumpyIterator" else None
    times, items = [], []
    for epoch in range(epochs):
        start = time.perf_counter()
        if epoch and dataset is not None:
            pipeline = dataset.as_numpy_iterator()
        elif epoch and iter(pipeline) is pipeline:  # a generator (the plain loop): made again
            pipeline = make(data, repeat=False)
        items.append(sum(count(batch) for batch in pipeline))
        times.append(time.perf_counter() - start)
    if len(set(items)) != 1:
        raise RuntimeError(f"{system}: the epochs gave {items} items")
    return Sample(times, items[0])


def _child(args) -> None:
    module = importlib.import_module(f"benchmarks.{args.workload}")
    with open(args.data, "rb") as f:
        data = pickle.load(f)
    if args.workload != "overhead" and "grain" in args.system:
        from benchmarks.run import _parse_absl_flags

        _parse_absl_flags()
    sample = measure(module, args.system, data, args.epochs)
    print(json.dumps(dataclasses.asdict(sample)), flush=True)


def measure_in_fresh_process(workload: str, system: str, data_path: str,
                             epochs: int) -> Sample | str:
    """``measure`` in a new interpreter; a string says why there is no sample."""
    got = steady.run_child(["benchmarks.epochs", "--child", workload, system, data_path,
                            "--epochs", str(epochs)], _CHILD_TIMEOUT_SEC)
    return got if isinstance(got, str) else Sample(**got)


@dataclasses.dataclass
class Result:
    """Samples per system over rounds (``errors``: why a system has none)."""

    workload: str
    epochs: int
    samples: dict[str, list[Sample]]
    errors: dict[str, str]

    def median(self, system: str, what: str) -> float:
        return statistics.median(getattr(s, what) for s in self.samples[system])


def run(workload: str, systems: list[str], rounds: int, epochs: int, scale: float,
        log=print) -> Result:
    """``rounds`` interleaved rounds over ``systems``, each sample in a fresh process."""
    module = importlib.import_module(f"benchmarks.{workload}")
    result = Result(workload, epochs, {}, {})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.pickle")
        with open(path, "wb") as f:
            pickle.dump(module.prepare(scale), f)
        for r in range(rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            for system in order:
                if system in result.errors:
                    continue
                got = measure_in_fresh_process(workload, system, path, epochs)
                if isinstance(got, str):
                    result.errors[system] = got
                    log(f"  {system}: {got}")
                    continue
                result.samples.setdefault(system, []).append(got)
                log(f"  round {r + 1}: {system:24s} epochs (s): "
                    + " ".join(f"{t:.3f}" for t in got.epoch_sec))
    return result


def table(result: Result) -> str:
    """Medians over rounds, ratios to the plain loop, jdata's ratio to each peer."""
    systems = list(result.samples)
    items = result.samples[systems[0]][0].items if systems else 0
    plain = result.median(PLAIN, "items_per_sec") if PLAIN in result.samples else None
    lines = [f"== {result.workload}: {result.epochs} epochs of {items:,} items, a fresh "
             "iterator each (medians over rounds)",
             f"  {'system':24s} {'1st epoch':>10s} {'later':>9s} {'max/later':>9s} "
             f"{'items/s':>12s} {'x plain':>8s}"]
    for system in systems:
        rate = result.median(system, "items_per_sec")
        ratio = f"{rate / plain:7.2f}x" if plain else "       -"
        lines.append(f"  {system:24s} {result.median(system, 'first'):9.3f}s "
                     f"{result.median(system, 'later_median'):8.3f}s "
                     f"{result.median(system, 'worst_ratio'):8.2f}x {rate:12,.0f} {ratio}")
    for system, why in result.errors.items():
        lines.append(f"  {system:24s} {why}")
    peers = {s: result.median(s, "items_per_sec") for s in systems
             if not s.startswith("jdata") and s != PLAIN}
    if "jdata" in result.samples and peers:
        rate = result.median("jdata", "items_per_sec")
        lines.append("  jdata / each peer: " + ", ".join(
            f"{peer} {rate / peer_rate:.2f}x" for peer, peer_rate in peers.items()))
    return "\n".join(lines)


def report(workload: str, rounds: int = 3, epochs: int = 10, scale: float | None = None,
           systems=None) -> Result:
    scale = EPOCH_SCALE.get(workload, 1.0) if scale is None else scale
    print(f"== {workload}: {rounds} interleaved rounds of {epochs} epochs, each system in a "
          "fresh process")
    result = run(workload, steady.systems_of(workload, False, systems), rounds, epochs, scale)
    print(table(result))
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=["nlp", "cv", "overhead"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--scale", type=float, default=None,
                        help="data scale (default: EPOCH_SCALE's, per workload)")
    parser.add_argument("--systems", nargs="*", default=None,
                        help="only these systems (the plain loop always runs)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 round of 3 epochs at a tenth of the data")
    args = parser.parse_args(argv)
    if args.child:
        workload, system, data = args.workloads
        _child(argparse.Namespace(workload=workload, system=system, data=data,
                                  epochs=args.epochs))
        return
    for workload in args.workloads:
        scale = args.scale
        if args.quick:
            args.rounds, args.epochs = 1, 3
            scale = 0.1 * EPOCH_SCALE.get(workload, 1.0)
        report(workload, args.rounds, args.epochs, scale, args.systems)


if __name__ == "__main__":
    main()
