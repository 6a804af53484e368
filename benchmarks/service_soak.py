"""service_soak: a service run as an operator would for weeks, compressed into minutes.

``python -m benchmarks.service_soak [--minutes 10] [--kill-every 60] [--out soak.json]``

A real local Ray (127.0.0.1), one service (2 workers, one-element splits, so every
element is a lease and its report: the journal's worst case). For ``--minutes``:

- a trainer reads one long named job (``range`` of 10**9 elements) and takes its
  state every 100 elements, as a checkpointing trainer does;
- the main thread runs short jobs one after another, each over a 16 MB source of its
  own (16 one-MB elements), checking each job got its own data;
- a worker is killed every ``--kill-every`` seconds (the dispatcher replaces it).

Every 10 s it samples the journal (file size, snapshot and records since, compactions),
the dispatcher's and the workers' private memory and the plans the workers hold. The
dispatcher is killed (Ray restarts it, which replays the journal) right after the
start and again at the end: the trainer's longest wait for an element around each
restart is the restart stall, fresh and aged. Printed: the samples, then the summary
(journal at its largest and at the end, stalls, memory at the first sample after
warm-up and at the end, jobs run, the long trainer's duplicates: 0 is exactly once).
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import numpy as np

_SAMPLE_SEC = 10.0
_SOURCE_BYTES = 16 << 20
_STALL_WINDOW_SEC = 20.0


class _Trainer(threading.Thread):
    """Reads the long named job; notes when each element came (for the stalls)."""

    def __init__(self, svc):
        super().__init__(daemon=True, name="soak-trainer")
        import jdata

        self._it = jdata.range(10**9).distribute(svc, job_name="soak").iterator()
        self.times: list[float] = []
        self.seen: set[int] = set()
        self.duplicates = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                x = int(next(self._it))
                self.duplicates += x in self.seen
                self.seen.add(x)
                self.times.append(time.monotonic())
                if len(self.times) % 100 == 0:
                    self._it.get_state()  # a checkpoint: the dispatcher journals a commit
        except BaseException as error:  # reported in the summary
            self.error = error
        finally:
            self._it.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=60)

    def stall_after(self, began: float) -> float:
        """The longest wait for an element within the window from ``began``."""
        times = [began] + [t for t in self.times if began < t < began + _STALL_WINDOW_SEC]
        return max((b - a for a, b in zip(times, times[1:])), default=_STALL_WINDOW_SEC)


def _restart_stall(svc, trainer) -> float:
    ray = __import__("ray")
    began = time.monotonic()
    ray.kill(svc._dispatcher, no_restart=False)
    deadline = began + _STALL_WINDOW_SEC
    while time.monotonic() < deadline:
        time.sleep(0.5)  # the trainer's clock decides; this only lets the window pass
    return trainer.stall_after(began)


def _sample(svc, start: float, jobs: int) -> dict:
    status = svc.status()
    journal = status.journal
    running = [w for w in status.workers if w.state == "running"]
    return {"sec": round(time.monotonic() - start, 1), "jobs": jobs,
            "journal_bytes": journal.file_bytes, "snapshot_bytes": journal.snapshot_bytes,
            "tail_bytes": journal.tail_bytes, "compactions": journal.compactions,
            "dispatcher_mb": round(status.dispatcher.memory_bytes / 1e6, 1),
            "worker_mb": round(max((w.memory_bytes for w in running), default=0) / 1e6, 1),
            "plans": max((w.plans for w in running), default=0), "workers": len(running)}


def _short_job(svc, k: int) -> None:
    import jdata

    source = np.full((16, _SOURCE_BYTES // 16), k % 251, np.uint8)
    firsts = {int(x[0]) for x in jdata.from_tensor_slices(source).distribute(svc)}
    if firsts != {k % 251}:
        raise AssertionError(f"short job {k} read {sorted(firsts)}, not its own data")


def _kill_a_worker(svc) -> None:
    ray = __import__("ray")
    running = [w.worker_id for w in svc.status().workers if w.state == "running"]
    if running:
        ray.kill(ray.get_actor(running[0], namespace=svc.ref.namespace))


def run(minutes: float, kill_every: float) -> dict:
    from jdata import service

    svc = service.start(num_workers=2, worker_cpus=0.5, split_elements=1)
    try:
        trainer = _Trainer(svc)
        trainer.start()
        time.sleep(5.0)  # warm-up: the trainer's stream is running
        fresh = _restart_stall(svc, trainer)
        start = time.monotonic()
        samples, jobs = [_sample(svc, start, 0)], 0
        next_sample, next_kill = start + _SAMPLE_SEC, start + kill_every
        while time.monotonic() - start < minutes * 60 and trainer.error is None:
            _short_job(svc, jobs)
            jobs += 1
            now = time.monotonic()
            if now >= next_kill:
                _kill_a_worker(svc)
                next_kill += kill_every
            if now >= next_sample:
                samples.append(_sample(svc, start, jobs))
                print(json.dumps(samples[-1]), flush=True)
                next_sample += _SAMPLE_SEC
        aged = _restart_stall(svc, trainer)
        samples.append(_sample(svc, start, jobs))
        trainer.stop()
        warm = samples[min(1, len(samples) - 1)]
        return {"minutes": minutes, "jobs": jobs, "elements": len(trainer.seen),
                "duplicates": trainer.duplicates,
                "trainer_error": None if trainer.error is None else repr(trainer.error),
                "journal_max_bytes": max(s["journal_bytes"] for s in samples),
                "journal_end_bytes": samples[-1]["journal_bytes"],
                "compactions": samples[-1]["compactions"],
                "restart_stall_fresh_sec": round(fresh, 2),
                "restart_stall_aged_sec": round(aged, 2),
                "dispatcher_mb": [warm["dispatcher_mb"], samples[-1]["dispatcher_mb"]],
                "worker_mb": [warm["worker_mb"], samples[-1]["worker_mb"]],
                "samples": samples}
    finally:
        svc.stop()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--kill-every", type=float, default=60.0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    report = run(args.minutes, args.kill_every)
    summary = {k: v for k, v in report.items() if k != "samples"}
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
