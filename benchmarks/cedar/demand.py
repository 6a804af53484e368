"""demand: Cedar's demand table. A trainer consumes at a fixed rate; the planner
(``ds.with_service(svc)``) picks the remote worker count, zero included, from the first
epoch's profile; the table sets it against the fewest workers measured to meet the rate.

The pipeline: a full ``shuffle(key)`` of ``range``, a ``map`` of about 3 ms of NumPy a
element, prefetched (it overlaps the trainer's step), one local core
(``Options(cpu_budget=1)``): about 300 elements/s here, and a
service of up to ``MAX_WORKERS`` one-CPU workers on this machine's Ray (127.0.0.1). Each rate
runs in a fresh process (the planner keeps a decision per pipeline and process): one
profiled epoch, two planned epochs (the second measured), then the same epoch with each
worker count pinned, 0 (all local) to ``MAX_WORKERS``. The trainer's step takes
``1 / rate`` seconds (a sleep: the accelerator's time) and waits for each element between
steps; a count meets the rate when the trainer waits at most 5% of its time.

    python -m benchmarks.cedar.demand [--rates 100 300 600] [--elements 1500]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import numpy as np

MAX_WORKERS = 3
_MEETS = 0.05  # the most of its time the trainer may wait
_SORTED = 400_000  # values sorted a element: ~3 ms of NumPy, which releases the GIL
_BASE = np.random.default_rng(0).random(_SORTED)


def _work(x):
    return np.sort(_BASE + x)[::2048]


def _pipeline(elements: int):
    import jax

    import jdata

    return (jdata.range(elements).shuffle(jax.random.key(0)).map(_work).prefetch(4)
            .with_options(jdata.Options(cpu_budget=1)))


def _consume(ds, rate: float) -> float:
    """The share of a trainer's time spent waiting for elements, when its step takes
    ``1 / rate`` s (a sleep: the accelerator's time) and it waits for each element between
    steps, as a training step waits for its batch."""
    step, waited, it = 1.0 / rate, 0.0, iter(ds)
    start = time.perf_counter()
    while True:
        asked = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            break
        waited += time.perf_counter() - asked
        time.sleep(step)
    return waited / (time.perf_counter() - start)


def one_rate(rate: float, elements: int) -> dict:
    """The planner's count at ``rate`` and the trainer's wait with it and each pinned
    count."""
    import jdata
    from jdata import service

    with tempfile.TemporaryDirectory(prefix="jdata-demand-") as work_dir:
        svc = service.start(num_workers=jdata.AUTOTUNE, max_workers=MAX_WORKERS,
                            worker_cpus=1.0, num_cpus=MAX_WORKERS + 1, work_dir=work_dir)
        try:
            planned = _pipeline(elements).with_service(svc)
            _consume(planned, rate)  # profiled
            text = planned.explain()
            chosen = _planned_workers(text)
            if chosen:
                _wait_for(svc, chosen)
            _consume(planned, rate)  # the first through the service: its job starts
            waited = _consume(planned, rate)
            pinned = {}
            for workers in range(MAX_WORKERS + 1):
                pins = jdata.PlanPins(cut="local") if workers == 0 else jdata.PlanPins(
                    cut="map(_work)", workers=workers)
                ds = _pipeline(elements).with_options(jdata.Options(plan=pins, service=svc))
                if workers:
                    svc.scale(workers)
                    _wait_for(svc, workers)
                pinned[workers] = _consume(ds, rate)
        finally:
            svc.stop()
    return {"rate": rate, "planned": chosen, "planned_wait": waited, "pinned": pinned,
            "reason": [line.strip() for line in text.splitlines() if "cut:" in line]}


def _planned_workers(explain: str) -> int:
    for line in explain.splitlines():
        if "cut:" in line:
            if "0 remote workers" in line:
                return 0
            return int(line.split(" remote worker")[0].rsplit(" ", 1)[1])
    raise RuntimeError(f"no decision in explain():\n{explain}")


def _wait_for(svc, workers: int, timeout_sec: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_sec
    while sum(1 for w in svc.status().workers if w.pid) != workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the service did not reach {workers} workers:\n"
                               f"{svc.status()}")
        time.sleep(0.2)


def table(rows: list[dict]) -> str:
    lines = ["== demand: Cedar's demand-driven sizing (one local core, a 3 ms NumPy map)",
             f"  {'rate/s':>7} {'planned':>8} {'waits':>6} {'fewest that meet':>17}  "
             "the trainer's wait with each count (0 = local)"]
    within = 0
    for row in rows:
        meets = [w for w, wait in sorted(row["pinned"].items()) if wait <= _MEETS]
        fewest = meets[0] if meets else None
        ok = fewest is not None and abs(row["planned"] - fewest) <= 1
        within += ok
        counts = ", ".join(f"{w}: {wait:.0%}" for w, wait in sorted(row["pinned"].items()))
        lines.append(f"  {row['rate']:>7,.0f} {row['planned']:>8} {row['planned_wait']:>6.0%} "
                     f"{'none' if fewest is None else fewest:>17}  {counts}")
    lines.append(f"  within 1 worker of the fewest that meet: {within} of {len(rows)}; "
                 f"0 workers at the lowest rate: "
                 f"{'yes' if rows and rows[0]['planned'] == 0 else 'no'}")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[100, 250, 400, 550])
    parser.add_argument("--elements", type=int, default=1000)
    parser.add_argument("--one", type=float, help=argparse.SUPPRESS)  # a rate, in a child
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one_rate(args.one, args.elements)))
        return
    rows = []
    for rate in sorted(args.rates):
        out = subprocess.run([sys.executable, "-m", "benchmarks.cedar.demand", "--one",
                              str(rate), "--elements", str(args.elements)],
                             capture_output=True, text=True, timeout=900, check=False)
        if out.returncode:
            raise RuntimeError(f"rate {rate}: exit {out.returncode}\n{out.stderr[-3000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["pinned"] = {int(w): got for w, got in row["pinned"].items()}  # JSON's keys: str
        rows.append(row)
    print(table(rows))


if __name__ == "__main__":
    main()
