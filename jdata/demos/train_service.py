"""``make demo-service``: the demo's training fed by a jdata.service, a worker killed mid-run.

``jdata.demos.train``'s pipeline with an id per example (``enumerate``, which
leaves the images, labels and flips those of ``make demo``), cut at
``distribute``::

    load -> enumerate -> shuffle(key) -> random_map(decode, flip)  on the service's workers
         -> distribute(svc) -> batch -> repeat -> to_global            here, in the trainer

1. Starts an embedded service (a local Ray on 127.0.0.1) with 2 workers that
   declare half of the machine's CPUs between them, the trainer the other half.
2. Writes the demo's JPEGs and reads the whole run once without the service:
   the reference, a digest per batch.
3. Trains as ``jdata.demos.train`` does. Mid first epoch it kills a worker
   (``SIGKILL`` to the pid that ``svc.status()`` gives) and watches the
   dispatcher's replacement come up and deliver.
4. Is preempted and restores from its Orbax checkpoint (``jdata.checkpoint``):
   the iterator's state holds the service's progress (the splits yielded),
   and the restored iterator's job starts after them.
5. Reports the workers, the kill, the time until the replacement delivered,
   each epoch's example ids counted (every example exactly once), and whether
   the batches trained on are the reference's, bit for bit (deterministic
   mode gives the local stream, so the loss curve is the one without the service).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import tempfile
import threading
import time

import jax
import numpy as np

import jdata
from jdata.demos import train as demo

NUM_WORKERS = 2
# How often the watch asks the service for its workers after the kill.
_POLL_SEC = 0.05


def _decode(index, example, key):
    return {"id": index, **demo._decode(example, key)}


def pipeline(path: str, global_batch: int, sharding, epochs: int,
             svc=None) -> jdata.Dataset:
    """``jdata.demos.train.pipeline`` with an ``"id"``; with ``svc``, the part above ``batch`` runs
    on the service's workers."""
    shuffle_key, flip_key = demo.keys()
    above = (jdata.hosts.shard_for_this_host(jdata.load(path).enumerate())
             .shuffle(shuffle_key)
             .random_map(_decode, flip_key, num_parallel_calls=jdata.AUTOTUNE))
    if svc is not None:
        above = above.distribute(svc)
    per_host = jdata.hosts.per_host_batch_size(global_batch)
    # The ids stay on the host (no sharding): NumPy arrays, to count.
    return (above.batch(per_host, drop_remainder=True)
            .repeat(epochs)
            .to_global({"id": None, "image": sharding, "label": sharding}, prefetch=4))


def _digest(batch) -> str:
    h = hashlib.sha256()
    for key in ("id", "image", "label"):
        h.update(np.asarray(batch[key]).tobytes())
    return h.hexdigest()[:16]


class Watch:
    """Kills a worker, then times its replacement: up (answers), then its first elements out."""

    def __init__(self, svc):
        workers = svc.status().workers
        self.victim = workers[0]
        self.replacement = self.up_s = self.delivered_s = None
        known = {w.worker_id for w in workers}
        os.kill(self.victim.pid, signal.SIGKILL)  # an embedded service: its pids are local
        self._killed_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(svc, known), daemon=True,
                                        name="jdata-demo-watch")
        self._thread.start()

    def _poll(self, svc, known: set) -> None:
        while not self._stop.is_set():
            for worker in svc.status().workers:
                if worker.worker_id in known or not worker.pid:
                    continue
                elapsed = time.monotonic() - self._killed_at
                self.replacement = worker
                self.up_s = self.up_s or elapsed
                if worker.elements > 0:
                    self.delivered_s = elapsed
                    return
            self._stop.wait(_POLL_SEC)

    def stop(self, wait_up_sec: float = 0.0) -> None:
        """Stops watching; first waits up to ``wait_up_sec`` for the replacement to be up
        (a short run may end before it is)."""
        deadline = time.monotonic() + wait_up_sec
        while self.up_s is None and time.monotonic() < deadline and self._thread.is_alive():
            self._stop.wait(_POLL_SEC)
        self._stop.set()
        self._thread.join()


def exactly_once(ids_by_step: list, steps_per_epoch: int, images: int) -> list[dict]:
    """Per epoch: how many examples were trained on, and whether each id came exactly once."""
    out = []
    for first in range(0, len(ids_by_step), steps_per_epoch):
        ids = np.concatenate(ids_by_step[first:first + steps_per_epoch])
        counts = np.bincount(ids, minlength=images)
        out.append({"examples": len(ids), "min": int(counts.min()), "max": int(counts.max()),
                    "exact": bool(len(counts) == images and (counts == 1).all())})
    return out


def main(images: int = 4096, global_batch: int = 64, epochs: int = 4,
         split_elements: int | None = None) -> dict:
    """Runs the demo (``split_elements``: a sixteenth of an epoch by default); returns its
    report as a dict."""
    if images % global_batch:
        raise ValueError(f"images={images} must be a multiple of global_batch={global_batch}: "
                         "every example in a batch of every epoch, to count them")
    from jdata import service

    workdir = tempfile.mkdtemp(prefix="jdata-demo-service-")
    cpus = os.cpu_count() or 2
    worker_cpus = cpus / (2 * NUM_WORKERS)
    start = time.perf_counter()
    svc = service.start(num_workers=NUM_WORKERS, worker_cpus=worker_cpus,
                        split_elements=split_elements or max(images // 16, 1),
                        work_dir=os.path.join(workdir, "service"))
    try:
        status = svc.status()
        print(f"== a jdata.service on a local Ray (127.0.0.1), up in "
              f"{time.perf_counter() - start:.1f} s: dispatcher pid {status.dispatcher.pid}, "
              f"{len(status.workers)} workers (pids "
              f"{', '.join(str(w.pid) for w in status.workers)}) of {worker_cpus:g} CPU "
              f"each; the trainer has the other {cpus / 2:g} of {cpus} CPUs")
        return _run(svc, workdir, images, global_batch, epochs)
    finally:
        svc.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _run(svc, workdir: str, images: int, global_batch: int, epochs: int) -> dict:
    import optax
    import orbax.checkpoint as ocp

    devices = jax.devices()
    mesh = jax.sharding.Mesh(np.array(devices), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    path = demo.write_dataset(workdir, images)
    print(f"== wrote {images} JPEGs; {len(devices)} {devices[0].platform} devices in a "
          "data-parallel mesh")
    print("== reference: the batches of the same pipeline without the service (data only)")
    reference = [_digest(b) for b in pipeline(path, global_batch, sharding, epochs)]

    ds = pipeline(path, global_batch, sharding, epochs, svc)
    total = len(ds)
    optimizer = optax.adam(3e-3)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    manager = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"),
                                    options=ocp.CheckpointManagerOptions(max_to_keep=2))
    seen: dict[int, tuple] = {}  # step -> (digest, ids); a step done again replaces its own
    watch: list[Watch] = []
    try:
        report, loss = _train(svc, ds, total, total // epochs // 2, optimizer, replicated,
                              manager, global_batch, seen, watch)
        for w in watch:  # the report names the replacement
            w.stop(wait_up_sec=30.0)
    finally:
        for w in watch:  # before the service stops: it asks the service
            w.stop()
        manager.close()
    return _report(svc, report, loss, watch[0],
                   [seen[s][0] for s in range(total)] == reference,
                   exactly_once([seen[s][1] for s in range(total)], total // epochs, images),
                   total)


def _train(svc, ds, total: int, kill_at: int, optimizer, replicated, manager,
           global_batch: int, seen: dict, watch: list) -> tuple[dict, float]:
    """``jdata.demos.train``'s training, preemption and restore, with a worker killed at ``kill_at``."""
    import orbax.checkpoint as ocp

    import jdata.checkpoint

    fresh = demo.init_model(jax.random.key(1))
    params = jax.device_put(fresh, replicated)
    opt_state = jax.device_put(optimizer.init(params), replicated)
    step = demo.make_step(optimizer)
    preempt_at = int(total * 0.6)
    print(f"== training {total} steps of {global_batch} fed by the service; a worker killed "
          f"at step {kill_at}, preempted at step {preempt_at}")
    progress = demo.Progress(total, global_batch)

    def observe(s, batch):
        seen[s] = (_digest(batch), np.asarray(batch["id"]))
        if s == kill_at and not watch:  # once, though a restore may redo the step
            watch.append(Watch(svc))
            victim = watch[0].victim
            print(f"\n== killed worker {victim.worker_id} (pid {victim.pid}, {victim.tasks} "
                  f"reads so far) with SIGKILL at step {s}")

    # closing(): an iterator left open would go on heartbeating to the service.
    with contextlib.closing(ds.iterator()) as it:
        demo.train(ds, step, params, opt_state, manager, 0, preempt_at, progress, it=it,
                   observe=observe)
        manager.wait_until_finished()
    del params, opt_state, it  # the preemption: nothing survives but the checkpoints
    resume_from = manager.latest_step()
    print(f"\n== preempted after step {preempt_at}; restoring step {resume_from}: the model "
          "and the iterator, whose state holds the service's progress")
    like = jax.device_put(fresh, replicated)
    restored = manager.restore(resume_from, args=ocp.args.Composite(
        model=ocp.args.StandardRestore(
            {"params": like, "opt_state": jax.device_put(optimizer.init(like), replicated)}),
        data=jdata.checkpoint.CheckpointRestore(ds.iterator())))
    with contextlib.closing(restored.data) as it:
        print(f"== the restored iterator's service progress: {_progress(it.get_state())}")
        _, _, loss, _ = demo.train(
            ds, step, restored.model["params"], restored.model["opt_state"], manager,
            resume_from, total, progress, it=it, observe=observe)
        manager.wait_until_finished()
    return progress.close(), loss


def _report(svc, report: dict, loss: float, watch: Watch, exact: bool, epochs: list[dict],
            total: int) -> dict:
    workers, new = svc.status().workers, watch.replacement
    print("== report")
    print(f"workers now: {len(workers)} (pids {', '.join(str(w.pid) for w in workers)})")
    print(f"killed {watch.victim.worker_id} (pid {watch.victim.pid}); its replacement "
          f"{new and new.worker_id} (pid {new and new.pid}) was up after "
          f"{_seconds(watch.up_s)} and delivered its first elements after "
          f"{_seconds(watch.delivered_s)}")
    for index, epoch in enumerate(epochs):
        print(f"epoch {index}: {epoch['examples']} examples trained on; each id counted "
              f"{epoch['min']} to {epoch['max']} times; exactly once: {epoch['exact']}")
    print(f"final loss {loss:.3f}; {report['examples_per_sec']:,.0f} examples/s, "
          f"{report['steps'] / report['seconds']:.1f} steps/s over {report['steps']} steps; "
          f"waiting for input {report['wait_fraction']:.1%} of the time")
    print(f"resumed run matches the uninterrupted one: {exact} (batch by batch against the "
          "pipeline without the service, no kill, no preemption)")
    once = all(e["exact"] for e in epochs)
    if not (exact and once):
        raise SystemExit("demo failed: the run through the service consumed other batches")
    return {**report, "loss": loss, "exact": exact, "exactly_once": once, "epochs": epochs,
            "steps": total, "workers": len(workers), "killed_pid": watch.victim.pid,
            "replacement_pid": new and new.pid, "replacement_up_s": watch.up_s,
            "replacement_delivered_s": watch.delivered_s}


def _progress(state) -> str:
    """The ``distribute`` part of an iterator's state, and its epoch, in words."""
    epoch, node = state["epoch"], state["state"]
    while "units" not in node:
        epoch += node.get("repetition", 0)
        node = node["input"]
    whole = ", ".join(f"{a}" if b == a + 1 else f"{a}-{b - 1}" for a, b in node["done"])
    part = ", ".join(f"split {split} ({stop - start} examples)"
                     for split, start, stop in node["partial"])
    return (f"epoch {epoch}, {node['units']} splits of {node['split_elements']} examples; "
            f"yielded whole: {whole or 'none'}; in part: {part or 'none'}")


def _seconds(value: float | None) -> str:
    return "(not within the run)" if value is None else f"{value:.1f} s"


if __name__ == "__main__":
    main()
