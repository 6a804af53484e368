"""One memory budget per process: every pipeline's buffers count against it."""

from __future__ import annotations

import gc

import numpy as np

import jdata
from jdata.runtime import memory

_MB = 1 << 20


def _big(n: int):
    # 1 MB elements, from a generator so nothing is read by index.
    return jdata.from_generator(lambda: (np.full(_MB, i, np.uint8) for i in range(n)))


def test_three_iterators_share_one_budget_and_the_initial_buffer_counts():
    # Each asks for prefetch(AUTOTUNE), whose initial buffer alone (4 elements) is
    # twice the budget. Before: every iterator had its own budget (3 x 100%), and
    # the initial buffer was not counted at all: 12 MB held.
    gc.collect()
    options = jdata.Options(ram_budget=2 * _MB)
    datasets = [_big(30).prefetch(jdata.AUTOTUNE).with_options(options) for _ in range(3)]
    iterators = [ds.iterator() for ds in datasets]
    most = 0
    for _ in range(30):
        for it in iterators:
            assert next(it).nbytes == _MB
            most = max(most, memory.held())
    for it in iterators:
        it.close()
    # What the budget leaves, plus the one element any buffer may always hold
    # (so that no pipeline ever stalls), and the one each consumer has taken.
    assert most <= 2 * _MB + 3 * _MB + 3 * _MB


def test_the_smallest_ram_budget_of_the_live_pipelines_is_the_process_budget():
    gc.collect()
    assert memory.limit() > 64 * _MB  # the default: half the available memory
    small = jdata.range(3).with_options(jdata.Options(ram_budget=5 * _MB)).iterator()
    large = jdata.range(3).with_options(jdata.Options(ram_budget=50 * _MB)).iterator()
    assert memory.limit() == 5 * _MB
    small.close()
    del small
    gc.collect()
    assert memory.limit() == 50 * _MB
    large.close()
    del large
    gc.collect()
    assert memory.limit() > 64 * _MB


def test_a_worker_pool_sizes_its_chunks_within_the_budget():
    # A cheap UDF on 1 MB elements: by time alone, chunks would hold up to 256 elements.
    options = jdata.Options(ram_budget=8 * _MB, engine="threads")
    ds = _big(200).map(lambda x: x + 1, num_parallel_calls=2).with_options(options)
    most = 0
    with ds.iterator() as it:
        for i, element in enumerate(it):
            assert element[0] == (i + 1) % 256
            most = max(most, memory.held())
    # Two workers, two chunks each, within 8 MB: at most a few elements a chunk.
    assert most <= 8 * _MB + 2 * _MB


def test_the_process_engines_shared_memory_counts_against_the_budget():
    # 4 MB elements from a cheap UDF: by time alone a worker's chunk holds about ten
    # of them, and each worker keeps a ring of three segments the size of a chunk
    # (about 300 MB of /dev/shm for a 64 MB budget).
    import glob
    import os

    from jdata.runtime import segments

    options = jdata.Options(ram_budget=64 * _MB, engine="processes")
    ds = jdata.range(120).map(lambda i: np.full(_MB, i, np.float32),
                              num_parallel_calls=2).with_options(options)
    pattern = os.path.join(segments.SEGMENT_DIR, segments.session() + "_*")
    most_shm = most_held = 0
    with ds.iterator() as it:
        for i, element in enumerate(it):
            assert element[0] == i
            most_shm = max(most_shm, sum(os.path.getsize(p) for p in glob.glob(pattern)))
            most_held = max(most_held, memory.held())
    assert 0 < most_shm <= 64 * _MB
    assert most_held <= 64 * _MB + 4 * 4 * _MB  # the one element any stage may always hold


_COLLECTED_UNDER_THE_LOCK = """
import gc
from jdata.runtime import memory
gc.disable()  # the claim is freed by the collection below, not before
claim = memory.Claim(1 << 20)
cycle = [claim]
cycle.append(cycle)
del claim, cycle
assert memory.limit() == 1 << 20
with memory._lock:  # where any allocation can set off a collection
    gc.collect()
print(memory.limit())
"""


def test_a_budget_collected_while_its_thread_holds_the_budgets_lock_does_not_hang():
    # A Claim's finalizer runs on whichever thread a garbage collection happens, maybe one
    # inside limit() or held(): it took the lock that thread held and waited forever (and
    # every pipeline of the process after it). In a child: the old behaviour hangs.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _COLLECTED_UNDER_THE_LOCK],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 1 << 20  # released: the default budget again
