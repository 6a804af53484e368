"""service_sharing: ephemeral data sharing (``distribute(sharing=True)``) and coordinated
reads (``num_consumers``/``consumer_index``) against issue 14's targets.

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

Coordinated reads (``coordinated``): a synthetic synchronous training of four consumers
whose step takes ``STEP_SEC_PER_TOKEN`` times the longest sequence of the step's four
batches (the padded width of the widest), over text of Zipf-distributed lengths
bucketed above ``distribute`` (``bucket_by_sequence_length(4 * b).rebatch(b)``, two
workers). Without coordination each consumer reads its own job; with it the four read
rounds. Reported: the step time of each (target: coordinated <= 0.6x uncoordinated) and
the per-step spread of the four batches' widths (max - min, mean over steps).
Run with ``python -m benchmarks.service_sharing`` (about two minutes).
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time

import numpy as np

import jdata
from benchmarks.service import Cluster
from jdata.service._rounds_reader import ROUND_BOUND_SEC as _ROUND_BOUND_SEC

JOBS = 4
WORK = 12_000  # loop iterations per element: about half a millisecond of one CPU
CONSUMERS = 4
BATCH = 8
BOUNDARIES = [16, 32, 64, 128, 256]
STEP_SEC_PER_TOKEN = 5e-5  # a step over a batch 512 tokens wide: about 26 ms


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


def _text(i):
    """Tokens of a Zipf-distributed length (1 to 512), from the element's index."""
    rng = np.random.default_rng(i)
    return np.ones(min(512, int(rng.zipf(1.3))), np.int32)


def _bucketed(shard: int | None = None) -> jdata.Dataset:
    """The text, bucketed; ``shard``: that consumer's share of it (every 4th element)."""
    ds = jdata.range(10**6)
    if shard is not None:
        ds = ds.shard(CONSUMERS, shard)
    return (ds.map(_text).repeat()
            .bucket_by_sequence_length(len, BOUNDARIES,
                                       [CONSUMERS * BATCH] * (len(BOUNDARIES) + 1))
            .rebatch(BATCH))


def _train(iterators, steps: int) -> tuple[float, float, float]:
    """Synchronous steps, each replica (an iterator) on a thread of its own reading its
    batch; the step then takes as long as the widest of them. The mean step time, the mean
    spread (max - min) of the batches' widths in a step, and the mean widest width."""
    widths = [0] * len(iterators)
    spreads, widest = [], []

    def step():  # every replica has its batch: the synchronous step, as long as the widest
        spreads.append(max(widths) - min(widths))
        widest.append(max(widths))
        time.sleep(STEP_SEC_PER_TOKEN * max(widths))

    barrier = threading.Barrier(len(iterators), action=step, timeout=300)

    def replica(i):
        for _ in range(steps):
            widths[i] = next(iterators[i]).shape[1]
            barrier.wait()

    threads = [threading.Thread(target=replica, args=(i,), daemon=True)
               for i in range(len(iterators))]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return (time.perf_counter() - began) / steps, float(np.mean(spreads)), float(np.mean(widest))


def coordinated(svc, steps: int = 300, rounds: int = 3) -> dict:
    """Step time and width spread, uncoordinated and coordinated, in alternating rounds."""
    runs: dict[str, list] = {"uncoordinated": [], "coordinated": []}
    for r in range(rounds):
        configs = {
            "uncoordinated": [_bucketed(i).distribute(svc, job_name=f"alone-{r}-{i}",
                                                      processing_mode="off")
                              for i in range(CONSUMERS)],
            "coordinated": [_bucketed().distribute(svc, job_name=f"rounds-{r}",
                                                   num_consumers=CONSUMERS, consumer_index=i)
                            for i in range(CONSUMERS)]}
        for name, datasets in configs.items():
            iterators = [ds.iterator() for ds in datasets]
            try:
                _train(iterators, max(1, steps // 10))  # warm-up
                runs[name].append(_train(iterators, steps))
            finally:
                for it in iterators:
                    it.close()
    out = {name: {"step_sec": statistics.median(x[0] for x in samples),
                  "spread": statistics.median(x[1] for x in samples),
                  "widest": statistics.median(x[2] for x in samples)}
           for name, samples in runs.items()}
    ratio = out["coordinated"]["step_sec"] / out["uncoordinated"]["step_sec"]
    for name, r in out.items():
        # What the step takes beyond its compute: reading the four batches.
        overhead = r["step_sec"] - STEP_SEC_PER_TOKEN * r["widest"]
        print(f"  {name:13s} step {r['step_sec'] * 1e3:6.2f} ms (widest batch "
              f"{r['widest']:5.1f} tokens; input {overhead * 1e3:5.2f} ms); widths in a "
              f"step differ by {r['spread']:6.1f} tokens on average")
    print(f"  coordinated reads: step time {ratio:.2f}x uncoordinated "
          f"({'met' if ratio <= 0.6 else 'MISSED'}, target <= 0.6x)", flush=True)
    out["ratio"] = ratio
    return out


def _replicas(its, steps: int, at_step: int | None = None, action=None):
    """Each iterator read ``steps`` times on a thread of its own (as replicas, each in its
    process); ``action()`` once all read ``at_step``. Each one's elements and longest wait."""
    barrier = threading.Barrier(len(its), action=action, timeout=120)
    got, longest = [[] for _ in its], [0.0] * len(its)

    def replica(i):
        for step in range(steps):
            if step == at_step:
                barrier.wait()
            began = time.perf_counter()
            got[i].append(int(next(its[i])))
            longest[i] = max(longest[i], time.perf_counter() - began)

    threads = [threading.Thread(target=replica, args=(i,), daemon=True)
               for i in range(len(its))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return got, longest


def coordinated_faults(svc, steps: int = 60) -> dict:
    """Two replicas of a coordinated job over ``range`` (replica 1's element is always
    replica 0's plus one while they read the same rounds), each on its own thread: a worker
    killed after 10 steps (lock-step and the longest wait checked); then replica 1 closed
    (replica 0 waits once, its timeout, then reads on)."""
    its = [jdata.range(10**6).repeat().distribute(svc, job_name="faults", num_consumers=2,
                                                  consumer_index=i).iterator()
           for i in range(2)]
    victim = svc.status().workers[0].pid
    try:
        (a, b), longest = _replicas(its, steps, at_step=10,
                                    action=lambda: os.kill(victim, signal.SIGKILL))
        lock_step = len(a) == len(b) == steps and all(y == x + 1 for x, y in zip(a, b))
        its[1].close()
        waits = []
        for _ in range(steps):
            began = time.perf_counter()
            next(its[0])
            waits.append(time.perf_counter() - began)
    finally:
        for it in its:
            it.close()
    longest_kill = max(longest)
    met = lock_step and longest_kill <= _ROUND_BOUND_SEC
    print(f"  faults: a worker killed: lock-step kept {lock_step}, longest wait for a round "
          f"{longest_kill:.2f} s ({'met' if met else 'MISSED'}, "
          f"bound {_ROUND_BOUND_SEC:g} s); a replica closed: the other waited "
          f"{max(waits):.1f} s once (its timeout), then at most "
          f"{sorted(waits)[-2] * 1e3:.1f} ms a round", flush=True)
    return {"lock_step": lock_step, "longest_wait_kill_s": longest_kill,
            "consumer_gone_wait_s": max(waits), "after_s": sorted(waits)[-2]}


def report(rounds: int = 3, warmup_sec: float = 2.0, measure_sec: float = 4.0,
           steps: int = 300) -> dict:
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
    # After sharing: a closed coordinated job's reads on the workers run on a few seconds.
    with Cluster() as cluster:
        print(f"  coordinated reads: {CONSUMERS} consumers, batches of {BATCH} over Zipf "
              "text bucketed above distribute, 2 workers", flush=True)
        result["coordinated"] = coordinated(cluster.service(2), steps, rounds)
        result["coordinated"]["faults"] = coordinated_faults(cluster.service(2))
    return result


if __name__ == "__main__":
    report()
