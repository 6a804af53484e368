"""A trainer process for the service's contract tests and its chaos run.

``python -m tests.service.trainer SPEC`` (a JSON object) connects to a running service,
reads a job and logs what it yields, one line each, flushed, to ``SPEC["log"]``:

- ``E <element>``: an element it yielded (its int value);
- ``X <error type> <message>``: an element's error (an ``ElementError``), caught, the loop
  goes on;
- ``G <round>``, a coordinated consumer's (``SPEC["num_consumers"]``), before each ``E``
  and ``X``: the round the element was read in;
- ``C <n>``: it took a state after its n-th element and saved it (atomically) to
  ``SPEC["checkpoint"]``: a checkpoint;
- ``R <n>``: it restored the checkpoint taken after its n-th element;
- ``END``, or ``FAIL <error type> <message>`` and exit status 3.

Its kept history (what the service promises to keep exactly once) is what it logged up to
its last ``C`` if it was killed, all of it if it ended. It reads ``SPEC["pace"]`` seconds
per element (a trainer's step), so a test can stop it mid-epoch; ``SPEC["checkpoints"]``
bounds how many checkpoints it takes (every ``SPEC["checkpoint_every"]`` elements), and
``SPEC["elements"]`` how many elements it reads (a coordinated job's pipeline repeats).

Two options serve the chaos run (``benchmarks/service_chaos.py``); the log is the same with
or without them:

- ``SPEC["timestamps"]``: a second file, ``SPEC["log"] + ".t"``, gets a line ``<kind>
  <time.time()>`` for ``READY`` (connected, about to take its iterator) and for each ``E``,
  ``X``, ``END`` and ``FAIL`` line of the log, so a run can measure stalls;
- ``SPEC["gate"]``: a path; the trainer waits for it to exist before it takes its iterator,
  so that the trainers of one named job join its first epoch together (a trainer that
  connected late would otherwise find the epoch done and start the next).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


class Unpicklable:
    def __reduce__(self):
        raise TypeError("this element cannot be pickled")


def pipeline(spec: dict):
    """The job's pipeline: ``range(n)`` shuffled and tagged by the slot's randomness (so
    ``off`` slots differ), an unpicklable element at ``spec["bad"]``, if any."""
    import jax

    import jdata

    bad = set(spec.get("bad", ()))

    def tag(x, key):
        if int(x) in bad:
            return np.array(Unpicklable(), dtype=object)
        return x * 1000 + np.random.default_rng(key).integers(1000)

    ds = jdata.range(spec["n"])
    if spec.get("shuffle", True):
        ds = ds.shuffle(jax.random.key(spec.get("seed", 0)))
    ds = ds.random_map(tag, jax.random.key(7))
    return ds.repeat() if spec.get("repeat") else ds


def main(spec: dict) -> int:
    import jdata
    from jdata import service

    os.environ.setdefault("RAY_AUTH_MODE", "token")
    svc = service.connect(spec["address"], namespace=spec["namespace"],
                          split_elements=spec.get("split_elements"))
    ds = pipeline(spec).distribute(svc, **distribute_args(spec))
    log = open(spec["log"], "a", buffering=1)
    times = _times_file(spec)
    _mark(times, "READY")
    _wait_for_gate(spec.get("gate"))
    state, count = None, 0
    if spec.get("restore") and os.path.exists(spec["checkpoint"]):
        with open(spec["checkpoint"]) as f:
            saved = json.load(f)
        state, count = saved["state"], saved["count"]
        log.write(f"R {count}\n")
    it = ds.iterator(state)
    every = spec.get("checkpoint_every", 0)
    rounds = spec.get("num_consumers") is not None
    try:
        while count < spec.get("elements", float("inf")):
            try:
                x = next(it)
            except StopIteration:
                break
            except jdata.ElementError as e:
                _log_round(log, it, rounds)
                log.write(f"X {type(e).__name__} {str(e)[:200]!r}\n")
                _mark(times, "X")
                continue
            count += 1
            _log_round(log, it, rounds)
            log.write(f"E {int(x)}\n")
            _mark(times, "E")
            if every and count % every == 0 and count // every <= spec.get("checkpoints", 1e9):
                _checkpoint(spec["checkpoint"], it.get_state(), count)
                log.write(f"C {count}\n")
            time.sleep(spec.get("pace", 0.0))
    except Exception as e:  # the test reads why
        log.write(f"FAIL {type(e).__name__} {str(e)[:500]!r}\n")
        _mark(times, "FAIL")
        return 3
    log.write("END\n")
    _mark(times, "END")
    it.close()
    return 0


def distribute_args(spec: dict) -> dict:
    """``distribute``'s arguments for the spec's mode: ``dynamic``, ``static``, ``off``,
    ``shared`` (``sharing=True``) or ``coordinated`` (``num_consumers``)."""
    mode, name = spec.get("mode", "dynamic"), spec.get("job_name")
    if mode == "shared":
        return {"job_name": name, "sharing": True}
    if mode == "coordinated":
        return {"job_name": name, "num_consumers": spec["num_consumers"],
                "consumer_index": spec["consumer_index"]}
    return {"processing_mode": mode, "job_name": name}


def _log_round(log, it, rounds: bool) -> None:
    """A coordinated consumer's ``G <round>`` line: the round of the element that follows."""
    if rounds:
        log.write(f"G {it.get_state()['state']['round'] - 1}\n")


def _times_file(spec: dict):
    """The timestamps file, opened to append, if the spec asks for one."""
    return open(spec["log"] + ".t", "a", buffering=1) if spec.get("timestamps") else None


def _mark(times, kind: str) -> None:
    """A timestamp line for ``kind`` when the spec asked for them (``times`` is the file)."""
    if times is not None:
        times.write(f"{kind} {time.time():.6f}\n")


def _wait_for_gate(gate: str | None, timeout_sec: float = 300.0) -> None:
    """Until the file ``gate`` exists (its creator opens it to every trainer at once)."""
    deadline = time.monotonic() + timeout_sec
    while gate is not None and not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gate {gate} was not opened within {timeout_sec:g} s")
        time.sleep(0.01)  # polling for the gate's file: nothing to wait on instead


def _checkpoint(path: str, state, count: int) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"state": state, "count": count}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def kept(path: str) -> list[int]:
    """The elements a trainer's log keeps: each incarnation's up to its last checkpoint
    (a killed one's), or to its end; a restore goes on from the checkpoint it names."""
    lines = open(path).read().splitlines()
    kept_list: list[int] = []
    incarnation: list[int] = []
    checkpoints: dict[int, int] = {}  # count -> len(kept) then
    base = 0
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "R":
            count = int(rest)
            kept_list = kept_list[:checkpoints[count]] if count else []
            incarnation, base = [], count
        elif kind == "E":
            incarnation.append(int(rest))
            kept_list.append(int(rest))
        elif kind == "C":
            checkpoints[int(rest)] = len(kept_list)
    ended = lines and lines[-1] == "END"
    if not ended:  # killed: what it yielded past its last checkpoint died with it
        last = max((c for c in checkpoints if c >= base), default=None)
        kept_list = kept_list[:checkpoints[last]] if last is not None else \
            kept_list[:len(kept_list) - len(incarnation)]
    return kept_list


if __name__ == "__main__":
    # Through the module, not __main__: its UDFs then have the fingerprint the same code
    # has imported in another process (a named job runs one pipeline).
    from tests.service import trainer

    sys.exit(trainer.main(json.loads(sys.argv[1])))
