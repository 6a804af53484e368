"""Cedar's cache table: where the planner caches, against every other place, per workload.

For each workload (SimCLR, SSD, Cedar's NLP and ASR), jdata's pipeline runs in fresh
processes over short epochs (a fresh iterator each, ``benchmarks/epochs.py``):

- ``planned``: ``Options(plan=jdata.AUTOTUNE)``: the first epoch is profiled, the
  second runs the plan (its cache, if any, fills), the later ones read it;
- one run per place a cache may go (``PlanPins(cache=op)``: each op, or a part of a
  fused op, below the first random one: the places the planner chose among, named by
  the planned run's profile) and ``none`` (``PlanPins(cache="none")``).

Each run gives the median time of its epochs from the fourth on (the planned run's
cache filled in the second epoch, tried in the third and kept or dropped); rounds repeat
every run, and the table gives medians over them;
the table gives items/s per place, which one the planner chose, and the chosen place's
throughput against the best: Cedar's "finds the best location" (the target is the best
or within 5%), and "knows when not to cache" (a place whose output inflates and does
not fit half the RAM is not chosen; an in-memory cache that fits costs little to read).

    python -m benchmarks.cedar.cache --epochs 6 --rounds 3
    python -m benchmarks.cedar.cache cedar.asr --quick   # a smoke run
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

WORKLOADS = ("simclr", "ssd", "cedar.nlp", "cedar.asr")
# Data per epoch: enough for seconds of work an epoch on 2 cores.
SCALE = {"simclr": 0.25, "ssd": 0.25, "cedar.nlp": 0.5, "cedar.asr": 0.5}
PLANNED, NONE = "planned", "none"
_CHILD_TIMEOUT_SEC = 600
_TIE = 0.05  # the target: the chosen place within 5% of the best
# Epochs measured from the fourth: the planned run profiles the first, fills its cache in
# the second and tries it in the third (kept or dropped: jdata/_plantrial.py).
_FROM = 3


@dataclasses.dataclass(frozen=True)
class Run:
    """One place's epochs in one fresh process; a planned run also says what the planner
    chose (``chosen``: an op's name or ``none``) and the places it chose among."""

    epoch_sec: list[float]
    items: int
    chosen: str | None = None
    places: list[str] = dataclasses.field(default_factory=list)

    @property
    def items_per_sec(self) -> float:
        later = self.epoch_sec[_FROM:] or self.epoch_sec[-1:]
        return self.items / statistics.median(later)


def _pipeline(module, data, place: str):
    import jdata

    plan = jdata.AUTOTUNE if place == PLANNED else jdata.PlanPins(cache=place)
    return module.jdata_pipeline(data).with_options(jdata.Options(plan=plan))


def _decision(ds) -> tuple[str, list[str]]:
    """What the planner chose for ``ds`` and the places it could cache."""
    from jdata import _autoplan

    plan = ds._optimize().plan
    placement = _autoplan.decided(plan, ds._plan_fingerprint)
    if placement is None:
        raise RuntimeError("the planner decided nothing in the first epoch")
    places = [c.name for c in placement.costs if c.cache]
    chosen = NONE if placement.cache is None else next(
        c.name for c, place in zip(placement.costs, placement.places)
        if place == (placement.cache, placement.cache_part))
    return chosen, places


def measure(workload: str, place: str, data, epochs: int) -> Run:
    module = importlib.import_module(f"benchmarks.{workload}")
    import jax  # noqa: F401 - imported before the clock, as a training job has

    count = getattr(module, "items_in", len)
    ds = _pipeline(module, data, place)
    times, items = [], []
    for _ in range(epochs):
        start = time.perf_counter()
        items.append(sum(count(batch) for batch in ds))
        times.append(time.perf_counter() - start)
    if len(set(items)) != 1:
        raise RuntimeError(f"{workload} {place}: the epochs gave {items} items")
    chosen, places = _decision(ds) if place == PLANNED else (None, [])
    return Run(times, items[0], chosen, places)


def _child(args) -> None:
    with open(args.data, "rb") as f:
        data = pickle.load(f)
    run = measure(args.workload, args.place, data, args.epochs)
    print(json.dumps(dataclasses.asdict(run)), flush=True)


def _in_fresh_process(workload: str, place: str, data_path: str, epochs: int) -> Run | str:
    got = steady.run_child(["benchmarks.cedar.cache", "--child", workload, place, data_path,
                            "--epochs", str(epochs)], _CHILD_TIMEOUT_SEC)
    return got if isinstance(got, str) else Run(**got)


@dataclasses.dataclass
class Table:
    """One workload's runs by place, over rounds; ``errors``: why a place has none."""

    workload: str
    runs: dict[str, list[Run]]
    errors: dict[str, str]

    def rate(self, place: str) -> float:
        return statistics.median(r.items_per_sec for r in self.runs[place])

    @property
    def chosen(self) -> str | None:
        """What the planner kept in most rounds (after its trial)."""
        picks = [r.chosen for r in self.runs.get(PLANNED, ())]
        return max(set(picks), key=picks.count) if picks else None

    def best(self) -> tuple[str, float]:
        pinned = {p: self.rate(p) for p in self.runs if p != PLANNED}
        place = max(pinned, key=pinned.get)
        return place, pinned[place]

    def lines(self) -> list[str]:
        rounds = max((len(r) for r in self.runs.values()), default=0)
        out = [f"{self.workload}: cache places (items/s, epochs {_FROM + 1} on, median of "
               f"{rounds} round{'s' * (rounds != 1)})"]
        for place in self.runs:
            mark = " <- planner" if place == self.chosen else ""
            out.append(f"  {place:<48} {self.rate(place):>14,.1f}{mark}")
        for place, why in self.errors.items():
            out.append(f"  {place:<48} {why}")
        if self.chosen is not None and len(self.runs) > 1:
            best, rate = self.best()
            picks = [r.chosen for r in self.runs[PLANNED]]
            chosen = ("" if self.chosen not in self.runs else
                      f"; the chosen place pinned: {self.rate(self.chosen) / rate:.2f}x the "
                      "best")
            out.append(f"  chose {self.chosen} ({picks.count(self.chosen)} of {len(picks)} "
                       f"rounds); best {best}; planned {self.rate(PLANNED) / rate:.2f}x the "
                       f"best{chosen} (target >= {1 - _TIE:.2f}x)")
        return out


def run(workload: str, epochs: int, scale: float, rounds: int = 1) -> Table:
    """``rounds`` rounds, each a planned run then one run per place (those the first
    planned run chose among), every run in a fresh process."""
    module = importlib.import_module(f"benchmarks.{workload}")
    data = module.prepare(scale)
    runs: dict[str, list[Run]] = {}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.pkl")
        with open(path, "wb") as f:
            pickle.dump(data, f)
        places: list[str] | None = None
        for _ in range(rounds):
            for place in [PLANNED] + (places or []):
                if place in errors:
                    continue
                got = _in_fresh_process(workload, place, path, epochs)
                if isinstance(got, str):
                    errors[place] = got
                    continue
                runs.setdefault(place, []).append(got)
                if place == PLANNED and places is None:
                    places = [NONE] + got.places
            if places is None:  # the planned run failed: nothing to set it against
                break
    return Table(workload, runs, errors)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=None,
                        help="data scale (default: SCALE's, per workload)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small, 4 epochs")
    parser.add_argument("--child", nargs=3, metavar=("WORKLOAD", "PLACE", "DATA"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.workload, args.place, args.data = args.child
        _child(args)
        return
    if args.epochs <= _FROM:
        parser.error(f"--epochs must be > {_FROM}: the planned run's cache is filled and "
                     "tried first")
    epochs = _FROM + 1 if args.quick else args.epochs
    for workload in args.workloads:
        if workload not in WORKLOADS:
            parser.error(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}")
        scale = args.scale if args.scale is not None else SCALE[workload]
        table = run(workload, epochs, 0.1 * scale if args.quick else scale,
                    1 if args.quick else args.rounds)
        print("\n".join(table.lines()), flush=True)


if __name__ == "__main__":
    main()
