"""service_chaos: seeded fault schedules on a real Ray, held to the service's contract.

``python -m benchmarks.service_chaos --schedules 200 --seed 0 [--quick] [--out report.json]``

Schedule ``i`` is drawn from ``random.Random(seed + i)`` (``draw``): a mode (dynamic,
static, off with 2 or 3 slots, shared, coordinated; ``--modes`` picks some), a job that is named
(two trainers; a coordinated job's two consumers) or anonymous (one; a shared job's one
trainer under a name), a small pipeline (``tests.service.trainer.pipeline``, 200 to 400
elements, 10 to 20 per split, sometimes an element Ray cannot pickle) and 1 to 3 faults of docs/service.md's
table ("When things fail: the contract"), each struck when the trainers' logs show a drawn
share of the epoch read: a worker SIGKILLed, the dispatcher SIGKILLed, a worker's node
removed (those schedules run on a 3-node cluster of their own), a trainer SIGKILLed and
restored from its checkpoint after a delay below or above the client timeout (also with
more or fewer workers), a trainer SIGSTOPped until the service expired it, then SIGCONTed
(restored from its checkpoint if it then fails with ``ServiceError``, as the table allows).

Trainers run in processes of their own (``python -m tests.service.trainer SPEC``),
checkpointing every few elements at a pace that puts the faults mid-epoch; their logs go
through ``_chaos_check.check`` (each element of the epoch kept exactly once across them).
Printed and returned (and written with ``--out``): per mode x fault kind the schedules that
held it, those where it could not land, those with a violation, and the longest stall a
fault caused (``_chaos_check.stall``); then every violation, and notes (a named job's
trainer that got nothing). ``--quick``: a few short schedules, no node removal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings

from benchmarks import _chaos_check as check
from benchmarks._chaos_check import KINDS, draw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NAMESPACE = "jdata-chaos"
_SCHEDULE_TIMEOUT_SEC = 300.0  # a bound for a hang, far above a schedule's time
_SETTLE_SEC = 120.0  # for the workers to be back between schedules
_POLL_SEC = 0.05


class _Stuck(Exception):
    """A schedule did not reach a state within its bound (a hang: a violation)."""


class _Trainer:
    """One trainer of a schedule: its spec, its current process, restores it is owed."""

    def __init__(self, spec: dict):
        self.spec, self.owed_restores = spec, 0
        self.process = None
        self.start()

    def start(self, restore: bool = False) -> None:
        open(self.spec["log"], "a").close()  # an empty log is a trainer that kept nothing
        with open(self.spec["log"] + ".out", "a") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.service.trainer",
                 json.dumps({**self.spec, "restore": restore})], cwd=ROOT, stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, RAY_AUTH_MODE="token", PYTHONPATH=ROOT))

    def running(self) -> bool:
        return self.process.poll() is None

    def lines(self) -> list[str]:
        return check.read_lines(self.spec["log"])

    def kill(self) -> None:
        """SIGKILL, then log the checkpoint it saved if it died before logging it."""
        self.process.kill()
        self.process.wait(timeout=30)
        try:
            with open(self.spec["checkpoint"]) as f:
                count = json.load(f)["count"]
        except FileNotFoundError:
            return
        if f"C {count}" not in self.lines():  # killed between the save and the line
            with open(self.spec["log"], "a") as log:
                log.write(f"C {count}\n")

    def supervise(self) -> None:
        """Restores it from its checkpoint when a pause made it fail as the contract lets
        it (``ServiceError``: others took its splits)."""
        lines = self.lines()
        if self.owed_restores and self.process.poll() == 3 and lines and \
                lines[-1].startswith("FAIL ServiceError"):
            self.owed_restores -= 1
            self.start(restore=True)


def _wait(condition, trainers, deadline: float, what: str):
    """Polls ``condition()`` (supervising the trainers) until it is truthy."""
    while True:
        for t in trainers:
            t.supervise()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _Stuck(f"not within the schedule's {_SCHEDULE_TIMEOUT_SEC:g} s: {what}")
        time.sleep(_POLL_SEC)


def _has_name(schedule: dict) -> bool:
    """Whether the schedule's job has a name (shared and coordinated jobs always do)."""
    return schedule["named"] or schedule["mode"] in ("shared", "coordinated")


def _progress(trainers) -> int:
    return sum(line[:2] in ("E ", "X ") for t in trainers for line in t.lines())


def _victim(trainers, fault: dict, named: bool, deadline: float) -> int | None:
    """A running trainer (with a checkpoint, in a named job: else its restore would join the
    job's next epoch), picked by the fault's draw; ``None`` once none runs."""
    def choice():  # a list, truthy once decided
        alive = [i for i, t in enumerate(trainers) if t.running()]
        fit = [i for i in alive if not named or os.path.exists(trainers[i].spec["checkpoint"])]
        return [fit[int(fault["pick"] * len(fit))]] if fit else None if alive else [None]
    return _wait(choice, trainers, deadline, "a victim")[0]


def _expired(svc, schedule: dict, trainers, victim: int, before: set) -> bool:
    """The service counts the paused trainer as gone (its job's clients fell)."""
    jobs = svc.status().jobs
    others = sum(t.running() for i, t in enumerate(trainers) if i != victim)
    if _has_name(schedule):
        return all(j.clients <= others for j in jobs if j.name == _job_name(schedule))
    return not [j for j in jobs if j.job_id not in before and j.name is None and j.clients]


def _job_name(schedule: dict) -> str:
    return f"chaos-{schedule['seed']}"


def _strike(env, schedule: dict, fault: dict, trainers, before: set, deadline: float):
    """Strikes one fault; what happened (``kind``, ``t``, ``back``, ``victim``) or ``None``
    when it could not land (the epoch ended first)."""
    kind = fault["kind"]
    if kind in ("trainer_kill", "rescale_restore", "trainer_pause"):
        i = _victim(trainers, fault, _has_name(schedule), deadline)
        if i is None:
            return None
        victim, struck = trainers[i], time.time()
        if kind == "trainer_pause":
            _pause(env.svc, schedule, fault, trainers, i, before, deadline)
        else:
            victim.kill()
            until = time.monotonic() + fault["delay"]  # the drawn delay before its restore
            _wait(lambda: time.monotonic() >= until, trainers, deadline, "a delay")
            if kind == "rescale_restore":
                env.svc.scale(fault["scale_to"])
            victim.start(restore=True)
        return {**fault, "t": struck, "back": time.time(), "victim": i}
    status, struck = env.svc.status(), time.time()
    if kind == "worker_kill":
        workers = [w for w in status.workers if w.pid]
        if not workers:  # every worker still starting: nothing to kill
            return None
        os.kill(workers[int(fault["pick"] * len(workers))].pid, signal.SIGKILL)
    elif kind == "dispatcher_kill":
        os.kill(status.dispatcher.pid, signal.SIGKILL)
    elif env.remove_node(fault["pick"], status) is None:
        return None
    return {**fault, "t": struck}


def _pause(svc, schedule, fault, trainers, i, before, deadline) -> None:
    """SIGSTOP until the service expired the trainer, plus the drawn extra; then SIGCONT
    (a named job's trainer may then fail with ``ServiceError``: it is owed a restore)."""
    victim = trainers[i]
    victim.owed_restores += schedule["named"] and schedule["mode"] in check.LEASED
    victim.process.send_signal(signal.SIGSTOP)
    try:
        expired = _wait(lambda: _expired(svc, schedule, trainers, i, before) and time.time(),
                        trainers, deadline, "the paused trainer expired")
        until = expired + fault["extra"]
        _wait(lambda: time.time() >= until, trainers, deadline, "a pause")
    finally:
        victim.process.send_signal(signal.SIGCONT)


def run_schedule(env, schedule: dict, workdir: str) -> dict:
    """One schedule on ``env``'s service: its trainers, faults, checks and stalls."""
    began = time.monotonic()
    deadline = began + _SCHEDULE_TIMEOUT_SEC
    folder = tempfile.mkdtemp(prefix=f"s{schedule['seed']}-", dir=workdir)
    trainers, struck, incidents, expected = [], [], [], None
    try:
        env.settle(schedule["workers"], deadline)
        expected = env.expected(schedule)
        before = {j.job_id for j in env.svc.status().jobs}
        trainers += [_Trainer(_spec(env, schedule, folder, i))
                     for i in range(check.trainers(schedule))]
        _wait(lambda: all(check.read_times(t.spec["log"] + ".t") for t in trainers), trainers,
              deadline, "the trainers connected")  # their READY: open the gate
        open(os.path.join(folder, "gate"), "w").close()
        for fault in schedule["faults"]:
            at = fault["at"] * _total(schedule)
            _wait(lambda at=at: _progress(trainers) >= at or not any(
                t.running() for t in trainers), trainers, deadline, "progress")
            struck.append(_strike(env, schedule, fault, trainers, before, deadline))
        _wait(lambda: not any(t.running() for t in trainers), trainers, deadline, "the end")
        if schedule["mode"] == "shared":  # what it may miss: skips behind a window
            expected = dataclasses.replace(expected, counted=_lost(env.svc, schedule))
    except _Stuck as e:
        incidents.append({"check": "hang", "detail": str(e)})
    finally:
        for t in trainers:
            if t.running():
                t.kill()
    return check.summarize(schedule, [t.spec["log"] for t in trainers], expected, struck,
                           incidents, time.monotonic() - began)


def _total(schedule: dict) -> int:
    return check.elements(schedule)


def _lost(svc, schedule: dict) -> int:
    """What the service counted lost for the schedule's job, once its clients' last
    reports are in (their goodbyes: no client left)."""
    def job():
        found = [j for j in svc.status().jobs if j.name == _job_name(schedule)]
        return found and not found[0].clients and found[0]
    return _wait(job, [], time.monotonic() + 60, "the job's last reports").lost


def _spec(env, schedule: dict, folder: str, i: int) -> dict:
    mode = schedule["mode"]
    rounds = {"num_consumers": check.CONSUMERS, "consumer_index": i, "shuffle": False,
              "repeat": True, "elements": schedule["n"]} if mode == "coordinated" else {}
    return {"address": env.address, "namespace": _NAMESPACE, "n": schedule["n"],
            "seed": schedule["seed"], "mode": mode, **rounds,
            "job_name": _job_name(schedule) if _has_name(schedule) else None,
            "split_elements": schedule["split_elements"],
            "checkpoint_every": schedule["checkpoint_every"], "pace": schedule["pace"],
            "bad": [] if schedule["bad"] is None else [schedule["bad"]],
            "log": os.path.join(folder, f"t{i}.log"),
            "checkpoint": os.path.join(folder, f"t{i}.json"), "timestamps": True,
            "gate": os.path.join(folder, "gate")}


def _slots_reference(svc, schedule: dict) -> list:
    """An off or shared job's elements, read here without a fault: each slot's stream is
    a pure function of the keys, the epoch and the slot, whichever worker reads it (a
    shared job's under a name of its own: it reads from the start)."""
    import jdata
    from tests.service import trainer

    values, spec = [], {"n": schedule["n"], "seed": schedule["seed"],
                        "bad": [] if schedule["bad"] is None else [schedule["bad"]]}
    args = {"job_name": f"reference-{schedule['seed']}", "sharing": True} \
        if schedule["mode"] == "shared" else {"processing_mode": "off"}
    it = trainer.pipeline(spec).distribute(svc, **args).iterator()
    try:
        while True:
            try:
                values.append(int(next(it)))
            except StopIteration:
                return values
            except jdata.ElementError:  # the bad element's, once per slot: checked in logs
                continue
    finally:
        it.close()


class _Env:
    """A service that runs a phase's schedules one after another (``svc``, ``address``)."""

    svc = None
    address = None

    def settle(self, workers: int, deadline: float) -> None:
        """Before a schedule: the cluster's room back, then exactly ``workers`` workers
        running (an off job gets one slot per worker alive when it starts)."""
        self.restore_capacity()
        self.svc.scale(workers)

        def ready():
            running = self.svc.status().workers
            return len(running) == workers and all(
                w.state == "running" and w.pid and _alive(w.pid) for w in running)
        _wait(ready, [], min(deadline, time.monotonic() + _SETTLE_SEC),
              f"{workers} workers running")

    def expected(self, schedule: dict) -> check.Expected:
        """What the schedule's job must keep (see ``_chaos_check``'s rules)."""
        slots = _slots_reference(self.svc, schedule) \
            if schedule["mode"] in ("off", "shared") else None
        return check.expectation(schedule, slots)

    def restore_capacity(self) -> None:
        """The nodes a removal took, added back (a one-node service has nothing to do)."""

    def remove_node(self, pick: float, status):
        raise ValueError("node_removal: a schedule of the 'nodes' phase (its own cluster)")


def _alive(pid: int) -> bool:
    try:
        return os.kill(pid, 0) is None
    except ProcessLookupError:
        return False


class _Local(_Env):
    """An embedded service on this machine's Ray (2 CPUs), for the one-node schedules."""

    def __init__(self, workdir: str):
        from jdata import service
        from jdata.service import _ray

        ray = _ray.ray_module()
        self.svc = service.start(num_workers=2, worker_cpus=0.5, num_cpus=2,
                                 client_timeout=check.CLIENT_TIMEOUT_SEC, namespace=_NAMESPACE,
                                 work_dir=tempfile.mkdtemp(prefix="journal-", dir=workdir))
        self.address = ray.get_runtime_context().gcs_address

    def close(self) -> None:
        self.svc.stop()


class _Nodes(_Env):
    """A 3-node Ray cluster on 127.0.0.1 (a head and two nodes of one CPU each) and a
    service with two workers on it, for the schedules that remove a node."""

    def __init__(self, workdir: str):
        from jdata import service
        from jdata.service import _ray

        _ray.ray_module()  # first: Ray then binds loopback only
        from ray.cluster_utils import Cluster

        self._cluster = Cluster(initialize_head=True, head_node_args={
            "node_ip_address": _ray.LOCALHOST, "num_cpus": 1, "include_dashboard": False})
        self._nodes: list = []
        try:
            self.restore_capacity()
            self.svc = service.start(
                address=self._cluster.address, num_workers=2, worker_cpus=0.6,
                client_timeout=check.CLIENT_TIMEOUT_SEC, namespace=_NAMESPACE,
                work_dir=tempfile.mkdtemp(prefix="journal-", dir=workdir))
        except BaseException:
            self._cluster.shutdown()
            raise
        self.address = self._cluster.address

    def restore_capacity(self) -> None:
        from jdata.service import _ray

        while len(self._nodes) < 2:
            self._nodes.append(self._cluster.add_node(node_ip_address=_ray.LOCALHOST,
                                                      num_cpus=1))

    def remove_node(self, pick: float, status):
        """Removes a (non-head) node that hosts a worker, and adds a fresh one (room for a
        later ``scale``, as an autoscaler would); its id, or ``None`` if none hosts one."""
        hosting = [n for n in self._nodes if n.node_id in {w.node_id for w in status.workers}]
        if not hosting:
            return None
        node = hosting[int(pick * len(hosting))]
        self._cluster.remove_node(node)
        self._nodes.remove(node)
        self.restore_capacity()
        return node.node_id

    def close(self) -> None:
        try:
            self.svc.stop()
        finally:
            self._cluster.shutdown()


def run(schedules: int, seed: int = 0, quick: bool = False, kinds=KINDS,
        out: str | None = None, keep: bool = False, modes=check.MODES) -> dict:
    """Runs schedules ``seed`` .. ``seed + schedules - 1`` (the one-node ones on one
    service, then those removing a node on a cluster); prints and returns the report.
    The trainers' logs are kept where a violation was found (or with ``keep``)."""
    drawn = [draw(seed + i, kinds, quick, modes) for i in range(schedules)]
    workdir = tempfile.mkdtemp(prefix="jdata-chaos-")
    results, began = [], time.monotonic()
    for phase, make in (("local", _Local), ("nodes", _Nodes)):
        group = [s for s in drawn if s["phase"] == phase]
        if not group:
            continue
        env = make(workdir)
        try:
            for schedule in group:
                results.append(run_schedule(env, schedule, workdir))
                print(f"[{len(results)}/{schedules}]", check.format_result(results[-1]),
                      flush=True)
        finally:
            env.close()
    report = {**check.table(results, modes), "wall_s": round(time.monotonic() - began, 1),
              "seed": seed, "violations": [v for r in results for v in r["violations"]],
              "notes": [f"seed {r['seed']} ({r['mode']}): {note}" for r in results
                        for note in r["notes"]], "results": results}
    print(check.format_report(report))
    if report["violations"] or keep:
        print(f"  (the logs are kept in {workdir})")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
    return report


def main(argv=None) -> dict:
    # The trainers start with fork+exec while JAX's threads run here: JAX warns, harmlessly.
    warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=None,
                        help="how many schedules (default 200; 6 with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="schedule i draws from seed + i")
    parser.add_argument("--quick", action="store_true",
                        help="shorter epochs, at most 2 faults, no node removal")
    parser.add_argument("--kinds", default=None,
                        help=f"comma-separated fault kinds to draw from (of {','.join(KINDS)})")
    parser.add_argument("--modes", default=",".join(check.MODES),
                        help=f"comma-separated modes to draw from (of {','.join(check.MODES)})")
    parser.add_argument("--out", default=None, help="write the report as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the trainers' logs")
    args = parser.parse_args(argv)
    kinds = tuple(args.kinds.split(",")) if args.kinds else \
        tuple(k for k in KINDS if not args.quick or k != "node_removal")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"--kinds: unknown {sorted(unknown)}; pick from {','.join(KINDS)}")
    modes = tuple(args.modes.split(","))
    if set(modes) - set(check.MODES) or not modes:
        parser.error(f"--modes: pick from {','.join(check.MODES)}")
    count = args.schedules if args.schedules is not None else (6 if args.quick else 200)
    return run(count, args.seed, args.quick, kinds, args.out, args.keep, modes)


if __name__ == "__main__":
    main()
