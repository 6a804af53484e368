"""Freed buffers stay in the heap once an iterator starts (``jdata.runtime.heap``).

Each case runs in a fresh interpreter: the thresholds are process-wide and
set once. The page faults of 200 rounds of four 1 MiB arrays, written and
freed (as an element's intermediate arrays are) tell whether the pages were
kept: with glibc's defaults the heap gives them back after each round and
the next faults its 1024 pages in again; with the thresholds raised, only
the first round does.
"""

from __future__ import annotations

import inspect
import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from jdata.runtime import outcomes, processes

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the thresholds are glibc's")


def _faults_of_churn() -> int:
    """Minor page faults of 200 rounds of four 1 MiB arrays, written and freed."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        held = [np.ones(1 << 18, np.float32) for _ in range(4)]
        del held
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


# The script of each fresh interpreter: the churn's faults before and after its first
# iterator (the churn's own code, so that the worker test below counts the same thing).
_CHURN = f"""
import json
import numpy as np
import jdata

{inspect.getsource(_faults_of_churn)}
_faults_of_churn()  # numpy's first allocations
untouched = _faults_of_churn()
list(jdata.range(3))  # the first iterator of the process
from jdata.runtime import heap
print(json.dumps({{"before": untouched, "after": _faults_of_churn(),
                  "kept": heap.keep_freed_pages()}}))
"""


def _run(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES",
                          "JDATA_KEEP_FREED_PAGES")}
    done = subprocess.run([sys.executable, "-c", _CHURN], env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_iterator_keeps_freed_pages_for_the_next_arrays():
    counts = _run()
    assert counts["kept"] is True
    assert counts["before"] > 50_000  # each round faults its pages in again
    assert counts["after"] < 5_000  # the first round's pages reused


def test_the_environment_turns_it_off():
    counts = _run(JDATA_KEEP_FREED_PAGES="0")
    assert counts["kept"] is False
    assert counts["after"] > 50_000


def test_other_glibc_tunables_do_not_turn_it_off():
    counts = _run(GLIBC_TUNABLES="glibc.malloc.check=0")
    assert counts["kept"] is True
    assert counts["after"] < 5_000


def test_the_users_own_malloc_settings_are_left_alone():
    # glibc's default, set by hand: a 1 MiB array still gets its own mmap.
    counts = _run(MALLOC_MMAP_THRESHOLD_="131072")
    assert counts["kept"] is False
    assert counts["after"] > 50_000
    tuned = _run(GLIBC_TUNABLES="glibc.malloc.mmap_threshold=131072")
    assert tuned["kept"] is False
    assert tuned["after"] > 50_000


def _churned(items):
    _faults_of_churn()  # the first round of a fresh process faults in any case
    return [outcomes.Outcome(_faults_of_churn()) for _ in items]


def test_process_engine_workers_keep_freed_pages():
    # A worker is forked from the fork server, a fresh interpreter with glibc's defaults:
    # the worker sets the thresholds itself.
    executor = processes.ProcessExecutor(_churned, 1)
    try:
        faults = executor.submit([0]).result(120)[0][0].get()
    finally:
        executor.shutdown()
    assert faults < 5_000


def _batched(items):
    """Per task: the faults of 48 1 MiB elements made, held and batched (as a worker's
    batch of 48 elements: freed together once stacked), and the batch."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    held = [np.ones(1 << 18, np.float32) for _ in range(48)]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    batch = np.stack(held)
    del held
    return [outcomes.Outcome((faults, batch)) for _ in items]


def test_a_worker_keeps_the_pages_of_a_batch_of_elements_freed_together():
    # 48 MiB freed at once leave a free top over the 32 MiB threshold: with it, each
    # task gives the excess back and faults it in again (8,000 faults a task measured).
    executor = processes.ProcessExecutor(_batched, 1)
    try:
        faults = [executor.submit([0]).result(120)[0][0].get()[0] for _ in range(6)]
    finally:
        executor.shutdown()
    assert faults[0] > 10_000  # the first task's elements fault their pages in
    assert max(faults[2:]) < 1_000, faults  # later tasks reuse them
