"""service_failure: kill -9 of a worker, then of the dispatcher, in the middle of an epoch;
and the removal of a node of a 3-node cluster (``node_removal``).

A paced pipeline, ``range(N).shuffle(key).random_map(noise)`` with a short sleep
per element, runs through a service; after a tenth of the epoch the process is
killed (its pid from ``svc.status()``) and the epoch is read to its end. The
stream is compared with the same pipeline run here (its delay at 0: the
elements do not depend on it): every element exactly once, in the same order,
asserted. Reported, in seconds from the kill (target < 10 s): the next element
delivered (often buffered already), the longest wait for one element after the
kill (the stall the failure causes; the longest before it for comparison) and,
for a worker, its replacement up (in ``status()`` with a pid) and its first
element produced; for the dispatcher, its first answer again (a new pid).

``node_removal`` starts its own cluster (``ray.cluster_utils.Cluster``, a
head and two worker nodes of one CPU each, all on 127.0.0.1), removes the
node of one of the two workers mid-epoch and reports the same figures (the
replacement starts where there is room: on the head).
"""

from __future__ import annotations

import collections
import functools
import os
import signal
import tempfile
import threading
import time

import jax
import numpy as np

import jdata

ELEMENTS = 10_000
DELAY_SEC = 0.002
TARGET_SEC = 10.0
_KEY, _KEY2 = 13, 14
_POLL_SEC = 0.05


def _noise(x, key, delay: float):
    if delay:
        time.sleep(delay)
    return x * 1000 + np.random.default_rng(key).integers(1000)  # unique: noise < 1000


def pipeline(elements: int, delay: float) -> jdata.Dataset:
    return jdata.range(elements).shuffle(jax.random.key(_KEY)).random_map(
        functools.partial(_noise, delay=delay), jax.random.key(_KEY2))


class _Watcher(threading.Thread):
    """Polls ``svc.status()`` from the kill on: when a new worker is up and has produced an
    element, or when the dispatcher answers with a new pid (seconds after ``killed``)."""

    def __init__(self, svc, before, killed: float):
        super().__init__(daemon=True, name="jdata-bench-failure-watcher")
        self._svc, self._killed, self._done = svc, killed, threading.Event()
        self._old_workers = {w.worker_id for w in before.workers}
        self._old_pid = before.dispatcher.pid
        self.times: dict[str, float] = {}
        self.start()

    def run(self):
        while not self._done.is_set() and len(self.times) < 3:
            try:
                status = self._svc.status()
            except Exception:  # the dispatcher restarting: ask again
                time.sleep(_POLL_SEC)
                continue
            now = time.perf_counter() - self._killed
            if status.dispatcher.pid != self._old_pid:
                self.times.setdefault("dispatcher_back_s", now)
            for w in status.workers:
                if w.worker_id not in self._old_workers and w.pid:
                    self.times.setdefault("replacement_up_s", now)
                    if w.elements > 0:
                        self.times.setdefault("replacement_first_s", now)
            self._done.wait(_POLL_SEC)

    def finish(self, until: str | None = None, timeout_sec: float = 60.0) -> dict:
        """Stops polling (once ``until`` is seen, or after ``timeout_sec``); the times seen."""
        deadline = time.monotonic() + timeout_sec
        while until is not None and until not in self.times and time.monotonic() < deadline \
                and self.is_alive():
            time.sleep(_POLL_SEC)
        self._done.set()
        self.join()
        return self.times


def check_exactly_once(got: list, expected: list) -> None:
    """Raises AssertionError unless ``got`` is ``expected``: each element once, in order."""
    if sorted(got) != sorted(expected):
        have, want = collections.Counter(got), collections.Counter(expected)
        raise AssertionError(f"not exactly once: {sum((want - have).values())} elements "
                             f"missing, {sum((have - want).values())} extra or repeated")
    if got != expected:
        at = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
        raise AssertionError(f"every element once, but not in the local order from {at} on")


def run(svc, kind: str, elements: int = ELEMENTS, delay: float = DELAY_SEC,
        kill_at: int | None = None) -> dict:
    """One epoch with ``kind`` ("worker" or "dispatcher") killed after ``kill_at`` elements."""
    if kind not in ("worker", "dispatcher"):
        raise ValueError(f"kind={kind!r}: pass 'worker' or 'dispatcher'")
    kill_at = elements // 10 if kill_at is None else kill_at
    expected = [int(x) for x in pipeline(elements, 0.0)]
    # Closed even at its end: an open iterator keeps a heartbeat thread calling Ray.
    def kill(before):
        os.kill(before.workers[0].pid if kind == "worker" else before.dispatcher.pid,
                signal.SIGKILL)

    with pipeline(elements, delay).distribute(svc).iterator() as it:
        got, times, killed, seen = _read_with_failure(
            svc, it, kill_at, kill, "replacement_up_s" if kind == "worker" else
            "dispatcher_back_s")
    keys = ("replacement_up_s", "replacement_first_s") if kind == "worker" else \
        ("dispatcher_back_s",)
    return _result(got, expected, times, killed, kill_at, seen, keys)


def _result(got: list, expected: list, times: list, failed: float, at: int, seen: dict,
            keys: tuple) -> dict:
    """The figures of a run failed after ``at`` elements (raises unless exactly once, in
    the local order)."""
    check_exactly_once(got, expected)
    gaps = np.diff([failed] + times[at:])
    result = {"elements": len(got), "exactly_once": True, "same_order": True,
              "next_element_s": float(gaps[0]), "stall_s": float(gaps.max()),
              "stall_before_s": float(np.diff(times[:at]).max(initial=0.0))}
    result.update({key: seen.get(key) for key in keys})  # first element None: the epoch ended
    return result


def _read_with_failure(svc, it, at: int, fail, until: str):
    """Reads ``it`` to its end, calling ``fail(svc.status())`` after ``at`` elements: the
    elements and their times, the failure's time and what the watcher saw (waiting for
    ``until`` when the epoch ended first)."""
    got, times = [], []
    for _ in range(at):
        got.append(int(next(it)))
        times.append(time.perf_counter())
    before = svc.status()
    fail(before)
    killed = time.perf_counter()
    watcher = _Watcher(svc, before, killed)
    try:
        for x in it:
            got.append(int(x))
            times.append(time.perf_counter())
    except BaseException:
        watcher.finish()  # before anything shuts Ray down: a status call would start one again
        raise
    seen = watcher.finish(until=until)  # up, even when the epoch ended first
    return got, times, killed, seen


def report(cluster, svc, scale: float = 1.0) -> dict:
    """Both kills on ``svc`` (its workers idle in between); printed and returned. A run
    whose iterator gives up (``RuntimeError``: no lease for minutes) is reported as
    ``{"error": message}``; a lost, repeated or moved element raises."""
    elements = max(200, int(ELEMENTS * scale))
    results = {}
    for kind in ("worker", "dispatcher"):
        head = f"  kill -9 of the {kind} after {elements // 10:,} of {elements:,} elements: "
        try:
            results[kind] = r = run(svc, kind, elements)
        except RuntimeError as e:
            results[kind] = {"error": str(e)}
            print(f"{head}the stream stopped: {e} (MISSED, target < 10 s)")
            continue
        finally:
            cluster.wait_idle(svc)
        recovery = {k[:-2].replace("_", " "): v for k, v in r.items()
                    if k.startswith(("replacement", "dispatcher"))}
        waits = [r["stall_s"]] + [v for v in recovery.values() if v is not None]
        print(f"{head}exactly once, local order; next element {r['next_element_s']:.3f} s, "
              f"longest wait {r['stall_s']:.2f} s (before the kill {r['stall_before_s']:.3f} "
              "s), " + ", ".join(f"{k} {'after the epoch' if v is None else f'{v:.2f} s'}"
                                 for k, v in recovery.items())
              + f" ({'met' if max(waits) < TARGET_SEC else 'MISSED'}, target < 10 s)")
    return results


def node_removal(scale: float = 1.0) -> dict:
    """A 3-node cluster on 127.0.0.1, a service with a worker on each worker node, and the
    node of one of them removed after a tenth of the epoch; printed and returned. Run it
    in a process without Ray (the cluster is its own, shut down at the end)."""
    from jdata import service
    from jdata.service import _ray

    ray = _ray.ray_module()  # before any other import of Ray: it then binds 127.0.0.1 only
    from ray.cluster_utils import Cluster as RayCluster

    if ray.is_initialized():
        raise RuntimeError("node_removal starts its own cluster: run it without a Ray")
    elements = max(200, int(ELEMENTS * scale))
    kill_at = elements // 10
    expected = [int(x) for x in pipeline(elements, 0.0)]
    nodes = RayCluster(initialize_head=True, head_node_args={
        "node_ip_address": _ray.LOCALHOST, "num_cpus": 1, "include_dashboard": False})
    try:
        added = [nodes.add_node(node_ip_address=_ray.LOCALHOST, num_cpus=1) for _ in range(2)]
        with tempfile.TemporaryDirectory(prefix="jdata-bench-node-") as journal:
            svc = service.start(address=nodes.address, num_workers=2, worker_cpus=0.6,
                                work_dir=journal)
            try:
                def remove(before):
                    nodes.remove_node(next(n for n in added if n.node_id in
                                           {w.node_id for w in before.workers}))

                with pipeline(elements, DELAY_SEC).distribute(svc).iterator() as it:
                    got, times, removed, seen = _read_with_failure(
                        svc, it, kill_at, remove, "replacement_up_s")
            finally:
                svc.stop()
    finally:
        nodes.shutdown()
    result = _result(got, expected, times, removed, kill_at, seen,
                     ("replacement_up_s", "replacement_first_s"))
    waits = [result["stall_s"]] + [v for k, v in result.items()
                                   if k.startswith("replacement") and v is not None]
    print(f"  removal of a worker's node (3 nodes on 127.0.0.1) after {kill_at:,} of "
          f"{elements:,} elements: exactly once, local order; next element "
          f"{result['next_element_s']:.3f} s, longest wait {result['stall_s']:.2f} s, "
          + ", ".join(f"{k[:-2].replace('_', ' ')} "
                      f"{'after the epoch' if v is None else f'{v:.2f} s'}"
                      for k, v in result.items() if k.startswith("replacement"))
          + f" ({'met' if max(waits) < TARGET_SEC else 'MISSED'}, target < 10 s)", flush=True)
    return result
