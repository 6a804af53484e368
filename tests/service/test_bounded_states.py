"""Crafted ``distribute`` iterator states fail fast, in bounded memory, with a ``ValueError``
naming the field: every count a state holds is checked before anything is expanded or
sent to a worker to compute (a range of 2**40 units, a stream position of 2**60).

Decoding a state never connects to the service, so these restore states into the
iterators of a ``Service`` that was never started. Each probe runs in a process of its
own whose address space is capped: an expansion that escaped the checks ends there in
a ``MemoryError`` instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # a Python process per probe

# A refused state's decoding allocates almost nothing (an accepted one no more than its
# own size); 50 MB leaves room for the interpreter's noise.
_PEAK_BYTES = 50 << 20
_PROBE_TIMEOUT_SEC = 300

# Restores ``state`` into an iterator of the pipeline named by argv[1] under tracemalloc,
# its address space capped 2 GiB above what it uses, and prints what happened as JSON.
_PROBE = textwrap.dedent("""
    import json, resource, sys, tracemalloc
    import jdata
    from jdata.service import Service
    from jdata.service.client import ServiceRef

    svc = Service(None, ServiceRef(None, "jdata", 10), owned=False)  # never started
    endless = jdata.range(50).repeat()
    pipelines = {
        "dynamic": lambda: jdata.range(50).distribute(svc),
        "off_endless": lambda: endless.distribute(svc, processing_mode="off"),
        "shared_endless": lambda: endless.distribute(svc, job_name="j", sharing=True),
        "shared_finite": lambda: jdata.range(50).distribute(svc, job_name="j", sharing=True),
        "rounds": lambda: endless.distribute(svc, job_name="j", num_consumers=2,
                                             consumer_index=0),
    }
    ds = pipelines[sys.argv[1]]()
    with ds.iterator() as it:
        full = it.get_state()
    full["state"] = json.loads(sys.stdin.read())
    with open("/proc/self/status") as f:
        used = int(next(line for line in f if line.startswith("VmSize")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (used + (2 << 30), resource.RLIM_INFINITY))
    tracemalloc.start()
    try:
        ds.iterator(full).close()
        error, message = None, ""
    except BaseException as e:
        error, message = type(e).__name__, str(e)
    peak = tracemalloc.get_traced_memory()[1]
    print(json.dumps({"error": error, "message": message, "peak": peak}))
""")


def _restore(pipeline: str, state: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, pipeline], input=json.dumps(state),
                          capture_output=True, text=True, timeout=_PROBE_TIMEOUT_SEC,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _lease(units=None, done=(), partial=()) -> dict:
    return {"lineage": "0" * 32, "epoch": 0, "units": units, "split_elements": None,
            "done": [list(r) for r in done], "done_from": [],
            "partial": [list(p) for p in partial]}


@pytest.mark.parametrize("pipeline, state, field", [
    # The ~250-byte state: done units as one range of 2**40, expanded unit by unit
    # (while checking for units listed twice) before anything bounded it.
    ("dynamic", _lease(done=[(0, 2 ** 40)]), "done"),
    # A range's end was not checked against the job's units, only its start.
    ("dynamic", _lease(units=10, done=[(0, 2 ** 40)]), "done"),
    # A unit of an unbounded job far out: the dispatcher sizes its tables to it.
    ("dynamic", _lease(partial=[(2 ** 40, 0, 5)]), "partial"),
    # With 4096 ranges or more, units listed twice were not looked for at all.
    ("dynamic", _lease(units=10_000, done=[(2 * i, 2 * i + 1) for i in range(4096)],
                       partial=[(8, 0, 1)]), "partial"),
    # An off slot of an endless pipeline: its worker would skip 2**60 elements.
    ("off_endless", _lease(units=1, partial=[(0, 0, 2 ** 60)]), "partial"),
    # A shared slot's position: the worker computes the slot's stream up to it.
    ("shared_endless", {"slots": [[0, 2 ** 60]]}, "slots"),
    ("shared_finite", {"slots": [[0, 51]]}, "slots"),
    ("shared_endless", {"slots": [[0, 5], [0, 6]]}, "slots"),
    ("rounds", {"round": 2 ** 60}, "round"),
], ids=["done-2**40", "done-past-units", "unit-2**40", "twice-among-4096-ranges",
        "off-skip-2**60", "shared-2**60", "shared-past-the-end", "shared-slot-twice",
        "round-2**60"])
def test_a_crafted_state_fails_fast_naming_the_field_in_bounded_memory(pipeline, state, field):
    outcome = _restore(pipeline, state)
    assert outcome["error"] == "ValueError", outcome
    assert f"state field {field!r}" in outcome["message"], outcome
    assert outcome["peak"] < _PEAK_BYTES, outcome


@pytest.mark.parametrize("pipeline, state", [
    ("dynamic", _lease(units=10, done=[(0, 4), (6, 10)], partial=[(4, 0, 3)])),
    ("dynamic", _lease(done=[(0, 100_000)], partial=[(100_000, 0, 7)])),  # unbounded job
    ("off_endless", _lease(units=1, partial=[(0, 0, 10 ** 9)])),
    ("shared_endless", {"slots": [[0, 10 ** 9], [1, 3]]}),
    ("shared_finite", {"slots": [[0, 50]]}),
    ("rounds", {"round": 10 ** 9}),
], ids=["dynamic", "unbounded-job", "off", "shared", "shared-at-the-end", "rounds"])
def test_states_within_the_bounds_still_restore(pipeline, state):
    outcome = _restore(pipeline, state)
    assert outcome["error"] is None, outcome
    assert outcome["peak"] < _PEAK_BYTES, outcome
