"""service: ``jdata.service`` on one machine, against issue 13's targets.

Five parts, in one local Ray (127.0.0.1) with a service per worker count (the node
removal in a cluster of its own):

1. Scale-out: a sleep-bound UDF (``time.sleep(0.01)`` per element: no CPU) above
   ``distribute``, with 1, 2, 4 and 8 workers (``worker_cpus=0.1`` so that eight fit
   on two cores): elements/s, the ratio to linear (target >= 0.9x) and to the ideal
   (each of a worker's concurrent reads at one element per delay).
2. Transfer: one consumer pulling 10 MB blocks (one uint8 array each) from one worker:
   GB/s at the client (target >= 1 GB/s), with Ray alone on the same sizes for
   reference (an actor streaming them, and ``ray.put``/``ray.get`` here).
3. Overhead: ``range(N).map(cheap).batch(256)`` locally against the part above
   ``batch`` run by the service (1 and 2 workers, the splits sized by the client):
   the ratio of steady rates (target >= 0.5x) and the time to the first batch; and
   ``batch`` above ``distribute`` (blocks of batches travel), the way around it.
4. Failures (``benchmarks.service_failure``): kill -9 of a worker, then of the
   dispatcher, mid-epoch, and the removal of a worker's node from a 3-node cluster
   (``ray.cluster_utils``, 127.0.0.1); every element exactly once and the local order
   (asserted), the times to recover (target < 10 s).
5. The dispatcher's lease rate (``benchmarks.service_dispatch``), at a small scale.

Steady rates are taken after a warm-up, in rounds that alternate between the
configurations; medians are printed. Run with ``python -m benchmarks.service``
(about four minutes) or ``python -m benchmarks.run service``.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import tempfile
import time

import numpy as np

import jdata
from benchmarks import service_dispatch, service_failure

WORKER_COUNTS = (1, 2, 4, 8)
WORKER_CPUS = 0.1
SPLIT_ELEMENTS = 50  # 0.5 s of the sleep-bound UDF: each worker reads several per round
SLEEP_SEC = 0.01
TRANSFER_BYTES = 10 << 20
BATCH = 256
_NAMESPACE = "jdata-bench"
# Epochs long enough that a measurement ends inside them (at most a million splits).
_SLEEPY_ELEMENTS = 10**6
_CHEAP_ELEMENTS = 10**8
_TRANSFER_BLOCKS = 10**5


def _sleepy(x, delay: float):
    time.sleep(delay)  # releases the CPU: the rate is set by the delay, not by the two cores
    return x


def _cheap(x):
    return x + 1


class Cluster:
    """A local Ray and one service per worker count (namespace ``jdata-bench-<n>``), so that
    rounds alternate between counts without starting workers in between."""

    def __init__(self):
        from jdata.service import _ray

        self.ray = _ray.ray_module()  # first: Ray then binds 127.0.0.1 only
        if self.ray.is_initialized():
            raise RuntimeError("benchmarks.service starts its own Ray: run it in a process "
                               "without one")
        _ray.init_local(_NAMESPACE)
        self._services: dict[int, object] = {}
        self._journals = tempfile.TemporaryDirectory(prefix="jdata-bench-service-")

    def service(self, num_workers: int, measured_splits: bool = False):
        """The service of ``num_workers`` workers (up), its clients' splits of
        SPLIT_ELEMENTS; with ``measured_splits`` the same workers, splits sized by the
        client (the service has no split size of its own)."""
        from jdata import service

        svc = self._services.get(num_workers)
        if svc is None:
            svc = service.start(num_workers=num_workers, worker_cpus=WORKER_CPUS,
                                namespace=f"{_NAMESPACE}-{num_workers}",
                                work_dir=os.path.join(self._journals.name, str(num_workers)))
            self._services[num_workers] = svc
            self.wait_idle(svc)
        return service.connect(namespace=svc.ref.namespace,
                               split_elements=None if measured_splits else SPLIT_ELEMENTS)

    def wait_idle(self, svc, timeout_sec: float = 120.0) -> None:
        """Until every worker answers and runs no read (a closed iterator's reads end at
        their next block: without this wait they could slow the next measurement)."""
        deadline = time.monotonic() + timeout_sec
        while time.monotonic() < deadline:
            workers = svc.status().workers  # pinged now: ``active`` is the reads running
            if all(w.pid for w in workers) and not any(w.active for w in workers):
                return
            time.sleep(0.05)
        raise RuntimeError(f"benchmarks.service: the workers of {svc.ref.namespace} were not "
                           f"idle after {timeout_sec:.0f} s:\n{svc.status()}")

    def close(self) -> None:
        for svc in self._services.values():
            svc.stop()
        self.ray.shutdown()
        self._journals.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def steady(make_iterator, warmup_sec: float, measure_sec: float,
           amount=lambda element: 1) -> tuple[float, float]:
    """``(seconds to the first element, amount/s after a warm-up)`` of one iterator."""
    start = time.perf_counter()
    it = make_iterator()
    try:
        next(it)
        first = time.perf_counter() - start
        deadline = time.perf_counter() + warmup_sec
        while time.perf_counter() < deadline:
            next(it)
        total, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < measure_sec:
            total += amount(next(it))
    finally:  # a service iterator left open keeps a heartbeat thread calling Ray
        it.close()
    return first, total / elapsed


def _rounds(systems: dict, rounds: int, measure, after=lambda name: None) -> dict:
    """Medians of ``measure(make)`` (a tuple) per system, over interleaved rounds."""
    samples = collections.defaultdict(list)
    for _ in range(rounds):
        for name, make in systems.items():
            samples[name].append(measure(make))
            after(name)
    return {name: tuple(statistics.median(column) for column in zip(*values))
            for name, values in samples.items()}


def scale_out(cluster: Cluster, counts=WORKER_COUNTS, rounds: int = 3, warmup_sec: float = 1.5,
              measure_sec: float = 3.0, delay: float = SLEEP_SEC) -> dict:
    """Per worker count: elements/s, the ratio to linear (from the first count's rate per
    worker) and to the ideal (``reads per worker / delay`` per worker)."""
    from jdata.service import _lease_reader

    above = jdata.range(_SLEEPY_ELEMENTS).map(functools.partial(_sleepy, delay=delay))
    systems = {n: lambda n=n: above.distribute(cluster.service(n)).iterator() for n in counts}
    for n in counts:
        cluster.service(n)  # started before the first round
    rates = _rounds(systems, rounds, lambda make: steady(make, warmup_sec, measure_sec),
                    lambda n: cluster.wait_idle(cluster.service(n)))
    per_worker = rates[counts[0]][1] / counts[0]
    ideal = _lease_reader.READS_PER_WORKER / delay
    return {n: {"elements_per_sec": rate, "of_linear": rate / (n * per_worker),
                "of_ideal": rate / (n * ideal)} for n, (_, rate) in rates.items()}


class _Producer:
    """Ray alone (an actor): streams ``count`` blocks of one array, as a worker streams a
    split's blocks, without a pipeline."""

    def stream(self, nbytes: int, count: int):
        block = np.ones(nbytes, np.uint8)
        for _ in range(count):
            yield [block]


def _ray_stream(ray, producer, nbytes: int, reads: int = 2):
    """The producer's blocks, ``reads`` streams in flight as the service's client keeps."""
    streams = collections.deque(producer.stream.options(num_returns="streaming").remote(
        nbytes, SPLIT_ELEMENTS) for _ in range(reads))
    while True:
        for ref in streams.popleft():
            yield ray.get(ref)[0]
        streams.append(producer.stream.options(num_returns="streaming").remote(
            nbytes, SPLIT_ELEMENTS))


def _put_get(ray, nbytes: int):
    block = np.ones(nbytes, np.uint8)
    while True:
        yield ray.get(ray.put(block))


def transfer(cluster: Cluster, rounds: int = 3, warmup_sec: float = 1.0,
             measure_sec: float = 2.0, nbytes: int = TRANSFER_BYTES) -> dict:
    """GB/s at the client: the service with one worker, and Ray alone."""
    # Splits sized by the client: 64 MB each (six blocks), as cheap blocks are capped by bytes.
    ray, svc = cluster.ray, cluster.service(1, True)
    ds = jdata.from_tensors(np.ones(nbytes, np.uint8)).repeat(_TRANSFER_BLOCKS).distribute(svc)
    producer = ray.remote(_Producer).options(num_cpus=WORKER_CPUS, max_concurrency=2).remote()
    systems = {"service": ds.iterator, "ray stream": lambda: _ray_stream(ray, producer, nbytes),
               "ray put/get": lambda: _put_get(ray, nbytes)}
    rates = _rounds(systems, rounds,
                    lambda make: steady(make, warmup_sec, measure_sec, lambda e: e.nbytes),
                    lambda name: cluster.wait_idle(svc))
    ray.kill(producer)
    return {name: rate / 1e9 for name, (_, rate) in rates.items()}


def overhead(cluster: Cluster, counts=(1, 2), rounds: int = 3, warmup_sec: float = 1.0,
             measure_sec: float = 3.0) -> dict:
    """Per configuration ``(seconds to the first batch, elements/s)``."""
    above = jdata.range(_CHEAP_ELEMENTS).map(_cheap)
    runs = {"local": (None, above.batch(BATCH))}
    for n in counts:
        runs[f"service {n}w"] = (n, above.distribute(cluster.service(n, True)).batch(BATCH))
    n = counts[0]
    runs[f"batch above, {n}w"] = (n, above.batch(BATCH).distribute(cluster.service(n, True)))

    def after(name):
        if runs[name][0] is not None:
            cluster.wait_idle(cluster.service(runs[name][0]))

    return _rounds({name: ds.iterator for name, (_, ds) in runs.items()}, rounds,
                   lambda make: steady(make, warmup_sec, measure_sec, len), after)


def report(scale: float = 1.0, rounds: int = 3, counts=WORKER_COUNTS, warmup_sec: float = 1.5,
           measure_sec: float = 3.0, sleep_sec: float = SLEEP_SEC,
           node_removal: bool = True) -> dict:
    """Runs the five parts (``scale`` sizes the failure epochs and the lease count;
    ``sleep_sec`` is the scale-out UDF's delay; ``node_removal=False`` leaves out the
    3-node cluster's run); prints and returns every figure."""
    print(f"== service: jdata.service on a local Ray; steady rates after {warmup_sec:g} s, "
          f"{measure_sec:g} s measured, medians of {rounds} interleaved rounds", flush=True)
    began = time.perf_counter()
    result = {}

    def part(name, figures, show):
        result[name] = figures
        show(figures)
        print(f"  ({name} done at {time.perf_counter() - began:.0f} s)", flush=True)

    with Cluster() as cluster:
        part("scale_out", scale_out(cluster, counts, rounds, warmup_sec, measure_sec,
                                    sleep_sec), _print_scale_out)
        part("transfer", transfer(cluster, rounds, warmup_sec, measure_sec), _print_transfer)
        part("overhead", overhead(cluster, counts[:2], rounds, warmup_sec, measure_sec),
             _print_overhead)
        # Last: the kills leave this service with a replaced worker and a restarted dispatcher.
        part("failure", service_failure.report(cluster, cluster.service(2), scale),
             lambda figures: None)
    if node_removal:  # a cluster of its own, once the local Ray is down
        part("node_removal", service_failure.node_removal(scale), lambda figures: None)
    part("dispatch", service_dispatch.report(leases=max(1000, int(20_000 * scale)),
                                             num_splits=10**5), lambda figures: None)
    return result


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _print_scale_out(rates: dict) -> None:
    # Linear is measured from the first count's rate: the ideal shows when that base is low.
    for n, r in rates.items():
        print(f"  scale-out {n} workers  {r['elements_per_sec']:8,.0f} elements/s  "
              f"{r['of_linear']:4.2f}x linear ({_verdict(r['of_linear'] >= 0.9)}, target "
              f">= 0.9x)  {r['of_ideal']:4.2f}x ideal ({_verdict(r['of_ideal'] >= 0.9)})")


def _print_transfer(rates: dict) -> None:
    print(f"  transfer of {TRANSFER_BYTES >> 20} MB blocks, 1 worker: service "
          f"{rates['service']:5.2f} GB/s ({_verdict(rates['service'] >= 1.0)}, target >= 1 "
          f"GB/s); Ray alone: a streaming actor {rates['ray stream']:5.2f} GB/s, put/get "
          f"{rates['ray put/get']:5.2f} GB/s; service / streaming actor "
          f"{rates['service'] / rates['ray stream']:4.2f}x")


def _print_overhead(rates: dict) -> None:
    local = rates["local"][1]
    for name, (first, rate) in rates.items():
        line = f"  range.map(cheap).batch({BATCH}) {name:18s} {rate:12,.0f} elements/s  " \
               f"first batch {first * 1e3:7.1f} ms"
        if name != "local":
            line += f"  {rate / local:5.3f}x local"
            if name.startswith("service"):
                line += f" ({_verdict(rate / local >= 0.5)}, target >= 0.5x)"
        print(line)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="failure epochs and lease count multiplier")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    args = parser.parse_args(argv)
    report(args.scale, args.rounds)


if __name__ == "__main__":
    main()
