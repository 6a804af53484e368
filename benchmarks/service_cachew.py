"""service_cachew: Cachew's autoscaler (and autocache) against issue 15's targets.

**Autoscaling.** A sleep-bound pipeline (``SLEEP_SEC`` per element, so that workers
scale on two cores: they wait rather than compute) runs through a service started with
``num_workers=jdata.AUTOTUNE``. First one worker's rate ``r`` is measured with a consumer
that takes all it gets. Then, for each ratio D/r in ``RATIOS``, a consumer of demand
``D = ratio * r`` elements/s reads from a fresh autoscaling service that starts with one
worker (a trainer whose step takes a batch of 8 elements and then computes for 8/D
seconds: it would take D elements/s if it never waited). Reported per ratio: the worker
count each second, when the count entered ``ceil(D/r) +- 1`` and stayed there (target:
within 60 s), the count it ends at, and the autoscaler's decisions with their reasons.
Then the demand halves: the count must come down within 60 s (Cedar's check: the
smallest count that meets the demand), and the
stream stays whole and in order through the drain (every element once).

**Autocache.** Cachew's fig. 8 regimes, each a pipeline with an ``autocache()``
marker, sleep-bound so that two workers run it as they would on more cores:

- ``read``: cheap compute, expensive read (a source that waits per record);
- ``before``: expensive compute below the marker, a cheap op above it;
- ``after``: a cheap op below the marker, expensive compute above it;
- ``grow``: expensive compute below, and above it an op that makes each element
  ``GROW`` times bigger (cheap to compute, costly to store and read back).

Each regime runs with every mode forced by hand (``autocache(mode=...)``) and with the
service's choice, three epochs each (the choice profiles in epoch 1 and puts in epoch 2;
a forced mode puts in epoch 1); the steady epoch (the third) is compared. Rounds
alternate, each with pipelines of a fresh fingerprint (so every run writes its own
caches); medians. Target: the chosen mode's epoch within 10% of the best forced mode's
in every regime. Then a second job with the same prefix as ``grow`` (another op above
the marker) runs: it must read the marker's cache from its first epoch.

Run with ``python -m benchmarks.service_cachew`` (about ten minutes).
"""

from __future__ import annotations

import functools
import math
import statistics
import tempfile
import time

import numpy as np

import jdata

SLEEP_SEC = 0.01
RATIOS = (1, 3, 6)
MAX_WORKERS = 10
WORKER_CPUS = 0.1  # ten workers fit in the local Ray's two CPUs: they sleep
RUN_SEC = 75.0
SETTLE_TARGET_SEC = 60.0
STEP = 8  # elements per training step of the paced consumer


ELEMENTS = 1000
WORK_SEC = 0.004  # the expensive op: a wait per element
ELEMENT_BYTES = 4096
GROW = 64  # "grow": 4 KB at the marker, 256 KB out
MODES = ("compute", "marker", "output")


def _sleepy(x):
    time.sleep(SLEEP_SEC)
    return x


def _pipeline() -> jdata.Dataset:
    return jdata.range(10**8).map(_sleepy)


def _start(namespace: str, num_workers, journals: str):
    from jdata import service

    return service.start(namespace=namespace, num_workers=num_workers,
                         max_workers=MAX_WORKERS, worker_cpus=WORKER_CPUS,
                         work_dir=f"{journals}/{namespace}")


def worker_rate(journals: str, seconds: float = 8.0) -> float:
    """Elements/s one worker makes when its consumer takes all it gets (after 2 s)."""
    svc = _start("jdata-cachew-rate", 1, journals)
    try:
        it = _pipeline().distribute(svc).iterator()
        began = time.monotonic()
        while time.monotonic() - began < 2.0:
            next(it)
        n, began = 0, time.monotonic()
        while time.monotonic() - began < seconds:
            next(it)
            n += 1
        it.close()
        return n / (time.monotonic() - began)
    finally:
        svc.stop()


def _paced(it, rate: float, seconds: float, trace: list, svc, got: list, began: float):
    """A trainer that takes ``rate`` elements/s when it never waits: every step takes a
    batch of ``STEP`` elements and then computes for ``STEP / rate`` seconds (Cedar's
    consumer of fixed demand). Runs ``seconds``; the worker count each second."""
    start = time.monotonic()
    next_check = start
    while (now := time.monotonic()) - start < seconds:
        got.extend(int(next(it)) for _ in range(STEP))
        time.sleep(STEP / rate)  # the step's compute
        if now >= next_check:
            next_check += 1.0
            workers = svc.status().workers
            trace.append((round(now - began, 1),
                          sum(w.state in ("running", "draining") for w in workers)))


def _settled(trace: list, need: int, since: float) -> float | None:
    """When the count entered ``need +- 1`` and stayed to the end (seconds after
    ``since``); None if it did not stay."""
    inside = None
    for t, n in trace:
        if t < since:
            continue
        if abs(n - need) <= 1:
            inside = t if inside is None else inside
        else:
            inside = None
    return None if inside is None else inside - since


def converge(ratio: float, rate: float, journals: str, run_sec: float = RUN_SEC,
             halve: bool = False) -> dict:
    """One autoscaling run at demand ``ratio * rate`` (then half of it, with ``halve``)."""
    svc = _start(f"jdata-cachew-{ratio}".replace(".", "-"), jdata.AUTOTUNE, journals)
    trace: list = []
    got: list = []
    try:
        it = _pipeline().distribute(svc).iterator()
        began = time.monotonic()
        demand = ratio * rate
        _paced(it, demand, run_sec, trace, svc, got, began)
        out = {"ratio": ratio, "demand": demand, "need": math.ceil(ratio - 1e-9),
               "settled_sec": _settled(trace, math.ceil(ratio - 1e-9), 0.0),
               "final": trace[-1][1], "trace": trace}
        if halve:
            half_at = time.monotonic() - began
            _paced(it, demand / 2, run_sec, trace, svc, got, began)
            need = math.ceil(ratio / 2 - 1e-9)
            out.update(half_need=need, half_settled_sec=_settled(trace, need, half_at),
                       half_final=trace[-1][1], in_order=got == list(range(len(got))),
                       elements=len(got))
        it.close()
        decisions = svc.status().autoscaler.decisions
        t0 = decisions[0].time if decisions else 0.0
        out["decisions"] = [(round(d.time - t0, 1), d.workers, d.target, d.reason)
                            for d in decisions]
        return out
    finally:
        svc.stop()


def report(ratios=RATIOS, run_sec: float = RUN_SEC, rate_sec: float = 8.0) -> dict:
    from jdata.service import _ray

    ray = _ray.ray_module()  # first: Ray then binds 127.0.0.1 only
    if ray.is_initialized():
        raise RuntimeError("benchmarks.service_cachew starts its own Ray: run it in a "
                           "process without one")
    _ray.init_local("jdata-cachew")
    results: dict = {}
    try:
        with tempfile.TemporaryDirectory(prefix="jdata-bench-cachew-") as journals:
            rate = worker_rate(journals, rate_sec)
            print(f"== service_cachew: autoscaling ({SLEEP_SEC * 1e3:.0f} ms sleep per "
                  f"element; one worker makes r = {rate:,.0f} elements/s)")
            runs = [converge(ratio, rate, journals, run_sec, halve=ratio == max(ratios))
                    for ratio in ratios]
    finally:
        ray.shutdown()
    for run in runs:
        _print_run(run)
    results["rate"], results["runs"] = rate, runs
    return results


def _print_run(run: dict) -> None:
    settled = run["settled_sec"]
    verdict = "met" if settled is not None and settled <= SETTLE_TARGET_SEC else "MISSED"
    print(f"  D/r = {run['ratio']}: need {run['need']}, ends at {run['final']} workers; "
          f"within +-1 from {settled} s (target <= {SETTLE_TARGET_SEC:.0f} s): {verdict}")
    print("    workers each second: " + " ".join(str(n) for _, n in run["trace"]))
    for t, workers, target, reason in run["decisions"]:
        print(f"    {t:6.1f} s  {workers} -> {target}: {reason}")
    if "half_need" in run:
        half = run["half_settled_sec"]
        verdict = "met" if half is not None and half <= SETTLE_TARGET_SEC else "MISSED"
        print(f"  demand halved: need {run['half_need']}, ends at {run['half_final']} workers;"
              f" within +-1 after {half} s (target <= {SETTLE_TARGET_SEC:.0f} s): {verdict}; "
              f"{run['elements']:,} elements, each once and in order: {run['in_order']}")


class _SlowSource:
    """Records that take ``WORK_SEC`` each to read (a remote store)."""

    def __init__(self, n: int, salt: int):
        self.n, self.salt = n, salt

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(WORK_SEC)
        return np.full(ELEMENT_BYTES, (i + self.salt) % 251, np.uint8)


def _record(x, salt, work):
    if work:
        time.sleep(WORK_SEC)
    return np.full(ELEMENT_BYTES, (int(x) + salt) % 251, np.uint8)


def _scale(x, work):
    if work:
        time.sleep(WORK_SEC)
    return x.astype(np.float32) * (1 / 255)


def _grow(x, times=GROW):
    return np.tile(x, times)


def regime(name: str, salt: int, mode: str | None, n: int = ELEMENTS) -> jdata.Dataset:
    """The pipeline of regime ``name``; ``salt`` gives it a fingerprint of its own."""
    if name == "read":
        below = jdata.from_source(_SlowSource(n, salt))
        return below.autocache(mode).map(functools.partial(_scale, work=False))
    ds = jdata.range(n).map(functools.partial(_record, salt=salt, work=name != "after"))
    if name == "grow":
        return ds.autocache(mode).map(_grow)
    return ds.autocache(mode).map(functools.partial(_scale, work=name == "after"))


def _epochs(svc, ds: jdata.Dataset, epochs: int = 3) -> list:
    distributed = ds.distribute(svc)
    times = []
    for _ in range(epochs):
        began = time.perf_counter()
        count = sum(1 for _ in distributed)
        times.append(time.perf_counter() - began)
        assert count == ds.cardinality(), (count, ds.cardinality())
    return times


def autocache_regimes(svc, rounds: int = 3, n: int = ELEMENTS,
                      regimes=("read", "before", "after", "grow")) -> dict:
    """Steady epoch times per regime and mode (medians), and what the service chose."""
    results = {}
    salt = 0
    for name in regimes:
        steady: dict = {mode: [] for mode in (*MODES, "auto")}
        chosen = []
        for _ in range(rounds):
            for mode in (*MODES, None):
                salt += 1
                ds = regime(name, salt, mode, n)
                steady[mode or "auto"].append(_epochs(svc, ds)[-1])
                if mode is None:
                    chosen.append(_latest(svc))
        medians = {mode: statistics.median(times) for mode, times in steady.items()}
        best = min(MODES, key=medians.get)
        results[name] = {"medians": medians, "best": best,
                         "chosen": [entry.mode for entry in chosen],
                         "ratio": medians["auto"] / medians[best], "reason": chosen[-1].chosen,
                         "estimates": chosen[-1].estimates}
    return results


def _latest(svc):
    """The service's newest autocache entry: the pipeline that ran last."""
    return svc.status().autocache[-1]


def second_job(svc, salt: int = 10**6, n: int = ELEMENTS) -> dict:
    """``grow``'s prefix cached at the marker by one job; a second job with another op
    above the marker: its first epoch reads that cache."""
    first = regime("grow", salt, "marker", n)
    _epochs(svc, first, 1)
    other = jdata.range(n).map(functools.partial(_record, salt=salt, work=True)) \
        .autocache().map(functools.partial(_grow, times=2))
    seconds = _epochs(svc, other, 1)[0]
    entry = _latest(svc)
    fresh = jdata.range(n).map(functools.partial(_record, salt=salt + 1, work=True)) \
        .autocache().map(functools.partial(_grow, times=2))
    computed = _epochs(svc, fresh, 1)[0]
    return {"state": entry.state, "mode": entry.mode, "reason": entry.reason,
            "first_epoch_sec": seconds, "computed_first_epoch_sec": computed}


def report_autocache(rounds: int = 3, n: int = ELEMENTS) -> dict:
    from jdata import service
    from jdata.service import _ray

    ray = _ray.ray_module()
    if ray.is_initialized():
        raise RuntimeError("benchmarks.service_cachew starts its own Ray")
    with tempfile.TemporaryDirectory(prefix="jdata-bench-autocache-") as store:
        svc = service.start(num_workers=2, worker_cpus=0.5, cache_dir=store)
        try:
            results = autocache_regimes(svc, rounds, n)
            results["second_job"] = second_job(svc, n=n)
        finally:
            svc.stop()
    print(f"== service_cachew: autocache (Cachew fig. 8 regimes; {n} elements, 2 workers, "
          f"{WORK_SEC * 1e3:.0f} ms per expensive op; steady epoch, medians of {rounds})")
    for name, r in results.items():
        if name == "second_job":
            continue
        m = r["medians"]
        verdict = "met" if r["ratio"] <= 1.10 else "MISSED"
        print(f"  {name:7s} compute {m['compute']:.2f} s, marker {m['marker']:.2f} s, output "
              f"{m['output']:.2f} s; chosen {'/'.join(map(str, r['chosen']))} "
              f"{m['auto']:.2f} s = {r['ratio']:.2f}x the best ({r['best']}), target <= "
              f"1.10x: {verdict}")
        print(f"          why: {r['reason']}")
    job = results["second_job"]
    print(f"  a second job with grow's prefix: first epoch {job['state']} at {job['mode']} "
          f"({job['first_epoch_sec']:.2f} s, against {job['computed_first_epoch_sec']:.2f} s "
          f"computing): {job['reason']}")
    return results


if __name__ == "__main__":
    report_autocache()
    report()
