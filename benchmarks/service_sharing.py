"""service_sharing: ephemeral data sharing (``distribute(sharing=True)``) against issue 14's
target.

A CPU-heavy pipeline (a pure-Python loop of about half a millisecond per element,
repeated forever) runs on one worker of one CPU. Measured, in rounds that alternate:

- alone: one job reads it for ``measure_sec``;
- shared: four jobs (four trainers of a sweep, each an iterator on its own thread)
  name the same job with ``sharing=True`` and read it at the same time;
- unshared: the same four jobs without sharing (each its own job, as without the
  feature: the worker computes the stream four times).

For each: every job's elements/s, the worker's CPU seconds (from ``/proc``) and the
elements it computed (its UDF calls) per second. Target: four shared jobs use at most
1.3x the CPU of one job alone, each seeing at least 0.9x the throughput it gets alone.
Run with ``python -m benchmarks.service_sharing`` (about a minute and a half).
"""

from __future__ import annotations

import os
import statistics
import threading
import time

import jdata
from benchmarks.service import Cluster

JOBS = 4
WORK = 12_000  # loop iterations per element: about half a millisecond of one CPU


def _heavy(x):
    total = 0
    for i in range(WORK):
        total += i * i
    return x + (total & 1)


def _pipeline() -> jdata.Dataset:
    return jdata.range(10**6).map(_heavy).repeat()


def _cpu_sec(pid: int) -> float:
    """User and system CPU seconds of a process so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _read(datasets: list, warmup_sec: float, measure_sec: float) -> list[float]:
    """Each dataset read by a thread of its own, all at once; each one's elements/s over
    the same measured interval (after a warm-up)."""
    iterators = [ds.iterator() for ds in datasets]
    counts = [0] * len(iterators)
    start, stop = threading.Event(), threading.Event()

    def consume(i):
        it = iterators[i]
        while not stop.is_set():
            next(it)
            if start.is_set():
                counts[i] += 1

    threads = [threading.Thread(target=consume, args=(i,), daemon=True)
               for i in range(len(iterators))]
    for t in threads:
        t.start()
    time.sleep(warmup_sec)  # the measured interval's start, not a synchronization
    start.set()
    began = time.perf_counter()
    time.sleep(measure_sec)
    stop.set()
    elapsed = time.perf_counter() - began
    for t in threads:
        t.join(timeout=60)
    for it in iterators:
        it.close()
    return [c / elapsed for c in counts]


def _measure(svc, datasets: list, warmup_sec: float, measure_sec: float) -> dict:
    worker = svc.status().workers[0]
    cpu0, computed0, t0 = _cpu_sec(worker.pid), worker.elements, time.perf_counter()
    rates = _read(datasets, warmup_sec, measure_sec)
    seconds = time.perf_counter() - t0
    after = next(w for w in svc.status().workers if w.worker_id == worker.worker_id)
    return {"rates": rates, "cpu_per_sec": (_cpu_sec(worker.pid) - cpu0) / seconds,
            "computed_per_sec": (after.elements - computed0) / seconds}


def report(rounds: int = 3, warmup_sec: float = 2.0, measure_sec: float = 4.0) -> dict:
    print(f"== service_sharing: {JOBS} jobs over one CPU-heavy pipeline on one worker; "
          f"{warmup_sec:g} s warm-up, {measure_sec:g} s measured, medians of {rounds} "
          "interleaved rounds", flush=True)
    runs: dict[str, list] = {"alone": [], "shared": [], "unshared": []}
    with Cluster() as cluster:
        svc = cluster.service(1)
        for r in range(rounds):
            configs = {
                "alone": [_pipeline().distribute(svc, job_name=f"alone-{r}", sharing=True)],
                "shared": [_pipeline().distribute(svc, job_name=f"sweep-{r}", sharing=True)
                           for _ in range(JOBS)],
                "unshared": [_pipeline().distribute(svc, job_name=f"own-{r}-{j}", sharing=True)
                             for j in range(JOBS)]}
            for name, datasets in configs.items():
                runs[name].append(_measure(svc, datasets, warmup_sec, measure_sec))
                cluster.wait_idle(svc)
    result = {}
    for name, samples in runs.items():
        result[name] = {
            "rates": [statistics.median(s["rates"][j] for s in samples)
                      for j in range(len(samples[0]["rates"]))],
            "cpu_per_sec": statistics.median(s["cpu_per_sec"] for s in samples),
            "computed_per_sec": statistics.median(s["computed_per_sec"] for s in samples)}
    alone = result["alone"]
    for name, r in result.items():
        per_job = ", ".join(f"{x:,.0f}" for x in r["rates"])
        print(f"  {name:9s} jobs' elements/s [{per_job}]  worker CPU "
              f"{r['cpu_per_sec']:.2f} s/s ({r['cpu_per_sec'] / alone['cpu_per_sec']:.2f}x "
              f"alone)  computed {r['computed_per_sec']:,.0f} elements/s "
              f"({r['computed_per_sec'] / max(alone['computed_per_sec'], 1e-9):.2f}x alone)")
    shared = result["shared"]
    cpu = shared["cpu_per_sec"] / alone["cpu_per_sec"]
    worst = min(shared["rates"]) / alone["rates"][0]
    print(f"  sharing: {JOBS} jobs use {cpu:.2f}x the CPU of one alone "
          f"({'met' if cpu <= 1.3 else 'MISSED'}, target <= 1.3x); the slowest sees "
          f"{worst:.2f}x its throughput alone ({'met' if worst >= 0.9 else 'MISSED'}, target "
          ">= 0.9x)", flush=True)
    result["cpu_ratio"], result["slowest_ratio"] = cpu, worst
    return result


if __name__ == "__main__":
    report()
