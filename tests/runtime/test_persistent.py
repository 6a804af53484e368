"""Worker processes kept for a dataset's later iterators (``jdata.runtime.persistent``)."""

from __future__ import annotations

import gc
import os
import signal
import threading
import weakref

import jax
import numpy as np
import pytest

import jdata
from jdata.runtime import engine, forkserver, persistent
from tests.helpers import take_list
from tests.runtime.process_helpers import (PROCESSES, gone, my_segments, pool_of, python_work,
                                           run_script, wait_until, write_script)


def _keyed(x, key):
    return x * 1000 + int(np.random.default_rng(key).integers(1000))


def _pids(it) -> list[int]:
    return pool_of(it)._executor.pids()


def test_a_later_iterator_takes_over_the_workers_and_reads_its_own_epoch():
    ds = jdata.range(60).random_map(_keyed, jax.random.key(0), num_parallel_calls=2)
    on_threads = ds.with_options(jdata.Options(engine="threads"))
    expected = [take_list(on_threads) for _ in range(3)]  # epochs 0, 1, 2
    ds = ds.with_options(PROCESSES)
    it = ds.iterator()
    first, pids = [int(x) for x in it], _pids(it)
    home = it._node
    del it  # dropped, as a for loop drops it: its workers are parked
    assert persistent.parked_count(home) == 1
    it = ds.iterator()
    assert _pids(it) == pids  # no fork, no job shipped
    second = [int(x) for x in it]
    del it
    third = [int(x) for x in ds]
    assert [first, second, third] == [[int(x) for x in e] for e in expected]
    assert first != second


def test_close_of_the_last_open_iterator_releases_the_workers():
    ds = jdata.range(40).map(python_work, num_parallel_calls=2).with_options(PROCESSES)
    first, second = ds.iterator(), ds.iterator()
    next(first), next(second)
    pids = _pids(first)
    home = first._node
    first.close()  # another iterator of the dataset is open: kept for it
    assert persistent.parked_count(home) == 1
    assert not any(gone(pid) for pid in pids)
    second.close()  # the last one: every parked worker stops
    assert persistent.parked_count(home) == 0
    wait_until(lambda: all(gone(pid) for pid in pids + _pids(second)), "the workers exited")
    assert my_segments() == []


def test_the_workers_go_with_the_dataset():
    ds = jdata.range(40).map(python_work, num_parallel_calls=2).with_options(PROCESSES)
    it = ds.iterator()
    list(it)
    pids = _pids(it)
    del it, ds
    gc.collect()
    wait_until(lambda: all(gone(pid) for pid in pids), "the workers exited")
    assert my_segments() == []


def test_the_workers_go_with_a_dataset_whose_whole_plan_they_run():
    # Unoptimized, the plan's root is the subtree the workers read by index: parked under
    # the plan with the subtree as their key, they kept the plan alive, and the plan them,
    # for the life of the process (every such dataset leaked two processes and a segment).
    unoptimized = jdata.Options(engine="processes", optimize=False)
    ds = jdata.range(40).map(python_work, num_parallel_calls=2).with_options(unoptimized)
    it = ds.iterator()
    assert [int(e["x"]) for e in it] == list(range(40))
    pids, home = _pids(it), weakref.ref(it._node)
    del it  # parks the workers
    assert persistent.parked_count(home()) == 1
    del ds
    gc.collect()
    assert home() is None
    wait_until(lambda: all(gone(pid) for pid in pids), "the workers exited")
    assert my_segments() == []


def test_an_iterator_at_its_end_parks_its_workers_at_once_and_keeps_its_state():
    # A training loop keeps the epoch's iterator (for its state) while the next one starts:
    # the workers were parked only when it was dropped, so every epoch forked new ones.
    ds = jdata.range(40).map(python_work, num_parallel_calls=2).with_options(PROCESSES)
    it = ds.iterator()
    assert [int(next(it)["x"]) for _ in range(10)] == list(range(10))
    middle = it.get_state()
    assert [int(e["x"]) for e in it] == list(range(10, 40))
    pids, home = _pids(it), it._node
    assert persistent.parked_count(home) == 1  # while the ended iterator is still held
    end = it.get_state()
    assert list(it) == [] and it.get_state() == end
    later = ds.iterator()
    assert [int(e["x"]) for e in later] == list(range(40))
    assert _pids(later) == pids  # no fork: the ended one's workers
    assert list(ds.iterator(end)) == []  # its end state restores as an ended iterator
    with pytest.raises(ValueError):  # a bad state changes nothing
        it.set_state({**middle, "state": {"index": "nonsense"}})
    assert it.get_state() == end and list(it) == []
    it.set_state(middle)  # its stages are built again, from where the state was taken
    assert [int(e["x"]) for e in it] == list(range(10, 40))
    it.close()
    later.close()
    wait_until(lambda: all(gone(pid) for pid in pids), "the workers exited")
    assert my_segments() == []


def test_an_iterator_at_its_end_stops_its_threads_while_it_is_held():
    before = set(threading.enumerate())
    ds = jdata.range(200).map(lambda x: x + 1, num_parallel_calls=jdata.AUTOTUNE).prefetch(2)
    it = ds.with_options(jdata.Options(engine="threads")).iterator()
    assert [int(x) for x in it] == list(range(1, 201))
    wait_until(lambda: not [t for t in set(threading.enumerate()) - before if t.is_alive()],
               "the pipeline's threads ended")
    assert [row["elements"] for row in it.stats().rows] == [200, 200]
    it.close()


_PARKED_ONCE_STARTED = """
    import glob, os, time
    import jdata
    from jdata.runtime import forkserver, persistent

    def holds_the_gil(x):
        total = 0
        for i in range(20000):
            total += i
        return x

    def until(condition, what):
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    ds = jdata.range(10**6).map(holds_the_gil, num_parallel_calls=jdata.AUTOTUNE)
    with forkserver.Server._lock:  # the worker processes cannot start meanwhile
        it = ds.iterator()
        stage = it._root
        while not hasattr(stage, "_pool"):
            stage = stage._input
        pool, home = stage._pool, it._node
        deadline = time.monotonic() + 60
        while pool._starting is None:  # read at full speed: the threads keep it waiting
            next(it)
            assert time.monotonic() < deadline, "the threads measured the UDF holding the GIL"
        starting = pool._starting
        if "{how}" == "close":
            it.close()
        else:
            del it
    executor = starting.result(60)
    if "{how}" == "close":  # released: the processes stop once started
        until(lambda: not executor.usable(), "the processes stopped")
        assert persistent.parked_count(home) == 0
        until(lambda: not glob.glob(f"/dev/shm/jdata_{{os.getpid()}}_*"), "segments unlinked")
    else:  # dropped: parked (starting) for the dataset's next iterator, which takes them
        assert persistent.parked_count(home) == 1
        later = ds.iterator()
        next(later)
        stage = later._root
        while not hasattr(stage, "_pool"):
            stage = stage._input
        assert stage._pool._executor is executor, "a new executor"
        later.close()
    print("ok")
"""


@pytest.mark.parametrize("how", ["drop", "close"])
def test_processes_chosen_while_an_iterator_goes_are_parked_unless_released(tmp_path, how):
    # They were stopped once started, and the next iterator started its own again: the
    # second epoch of a small dataset ran on threads while a second start imported jdata.
    script = write_script(tmp_path, _PARKED_ONCE_STARTED.format(how=how))
    result = run_script(script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"
    assert my_segments(result.pid) == []


def test_a_restore_into_another_epoch_keeps_its_workers_busy_and_exact():
    ds = jdata.range(30).random_map(_keyed, jax.random.key(1), num_parallel_calls=2)
    expected = take_list(ds.with_options(jdata.Options(engine="threads")).repeat(2))
    ds = ds.with_options(PROCESSES)
    it = ds.iterator()
    saved = None
    for _ in range(10):
        next(it)
    later = ds.iterator()  # epoch 1
    for _ in range(5):
        next(later)
    saved = later.get_state()
    it.set_state(saved)  # epoch 0 -> 1: the epoch-0 pool parks, a new one runs epoch 1
    assert [int(x) for x in it] == [int(x) for x in expected[35:]]
    it.close()
    later.close()


def test_a_forked_child_never_takes_its_parents_parked_workers(tmp_path):
    script = write_script(tmp_path, """
        import os
        import jdata
        from jdata.runtime import persistent

        def work(x):
            return x * 2

        ds = jdata.range(100).map(work, num_parallel_calls=2).with_options(
            jdata.Options(engine="processes"))
        it = ds.iterator()
        assert [int(x) for x in it] == [2 * x for x in range(100)]
        home = it._node
        del it
        assert persistent.parked_count(home) == 1
        child = os.fork()
        if child == 0:
            # The parent's executor is not this process's: new workers, same stream.
            ok = [int(x) for x in ds] == [2 * x for x in range(100)]
            os._exit(0 if ok else 3)
        _, status = os.waitpid(child, 0)
        print("child:", os.waitstatus_to_exitcode(status))
        print("parent:", [int(x) for x in ds] == [2 * x for x in range(100)])
    """)
    result = run_script(script)
    assert result.returncode == 0, result.stderr
    assert "child: 0" in result.stdout and "parent: True" in result.stdout, result.stdout
    assert my_segments(result.pid) == []


def test_parked_workers_killed_meanwhile_are_replaced_for_the_next_iterator():
    ds = jdata.range(80).map(python_work, num_parallel_calls=2).with_options(PROCESSES)
    it = ds.iterator()
    first = [int(e["x"]) for e in it]
    pids = _pids(it)
    del it
    for pid in pids:  # kill -9 while parked
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: all(gone(pid) for pid in pids), "the killed workers are reaped")
    with ds.iterator() as it:
        assert [int(e["x"]) for e in it] == first == list(range(80))
        assert not set(_pids(it)) & set(pids)
    assert my_segments() == []


class _Executor:
    """What parking asks of an executor: whether it can serve, and to stop."""

    def __init__(self):
        self.stopped = False

    def usable(self) -> bool:
        return not self.stopped

    def shutdown(self) -> None:
        self.stopped = True


class _Home:
    """A dataset's plan, as parking sees it: a key held weakly."""


def test_at_most_a_few_executors_are_parked_per_dataset_the_oldest_stopped_first():
    home, executors = _Home(), [_Executor() for _ in range(persistent.MAX_PER_HOME + 2)]
    for i, executor in enumerate(executors):
        assert persistent.park(home, ("subtree", i), executor)
    assert persistent.parked_count(home) == persistent.MAX_PER_HOME
    assert [e.stopped for e in executors] == [True, True] + [False] * persistent.MAX_PER_HOME
    assert not persistent.park(home, ("subtree", 5), _Executor())  # one per subtree
    assert persistent.take(home, ("subtree", 0)) is None  # stopped: gone
    assert persistent.take(home, ("subtree", 2)) is executors[2]
    persistent.opened(home)
    persistent.closed(home, release=True)  # the last open iterator's close()
    assert persistent.parked_count(home) == 0 and all(e.stopped for e in executors[3:])


def test_iterators_on_several_threads_take_and_park_workers_without_mixing_epochs():
    ds = jdata.range(40).random_map(_keyed, jax.random.key(2), num_parallel_calls=2)
    on_threads = ds.with_options(jdata.Options(engine="threads"))
    expected = {e: [int(x) for x in take_list(on_threads)] for e in range(6)}
    ds = ds.with_options(PROCESSES)
    got, errors = [], []

    def read_three():
        try:
            for _ in range(3):
                it = ds.iterator()
                got.append((it.epoch, [int(x) for x in it]))
                del it  # parked for whichever thread comes next
        except Exception as e:  # reported below, on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=read_three) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and sorted(e for e, _ in got) == list(range(6))
    assert all(values == expected[epoch] for epoch, values in got)


def test_an_iterator_collected_while_the_parking_lock_is_held_does_not_deadlock():
    # A garbage collection set off by an allocation under the lock may finalize an
    # iterator on the same thread, whose finalizer takes the lock again.
    ds = jdata.range(10).map(python_work, num_parallel_calls=2).with_options(PROCESSES)
    it = ds.iterator()
    next(it)
    cycle = [it]
    cycle.append(cycle)  # only the cyclic collector frees it
    del it, cycle

    def collect_under_the_lock():
        with persistent._lock:
            gc.collect()

    collector = threading.Thread(target=collect_under_the_lock, daemon=True)
    collector.start()
    collector.join(30)
    assert not collector.is_alive(), "deadlocked"


def test_a_pool_shut_down_on_its_start_thread_while_it_takes_parked_workers_goes_on(
        monkeypatch):
    # A garbage collection inside the start thread's take may run the iterator's finalizer
    # there: the pool's shutdown then waited for the lock the same thread held, for ever.
    monkeypatch.setattr(engine, "_DECISIONS", {})  # measured anew, not remembered
    forkserver.shutdown()  # so the processes start on a thread of their own
    ds = jdata.range(10 ** 6).map(python_work, num_parallel_calls=jdata.AUTOTUNE)
    it = ds.with_options(jdata.Options(inject_prefetch=False, cpu_budget=2)).iterator()
    pool, home = pool_of(it), it._node
    take, starts, consumer_out = persistent.take, [], threading.Event()

    def collected_there(*args):
        if threading.current_thread().name == "jdata-start-processes":
            starts.append(pool._starting)
            assert consumer_out.wait(60)  # no next() runs while the pool shuts down
            pool.shutdown()  # what the iterator's finalizer does
        return take(*args)

    monkeypatch.setattr(persistent, "take", collected_there)
    while pool._starting is None:
        next(it)
    consumer_out.set()
    wait_until(lambda: starts, "the start thread takes")
    executor = starts[0].result(60)  # started: neither thread waited for the other
    assert persistent.parked_count(home) == 1  # parked by the shutdown, for the next one
    it.close()
    wait_until(lambda: not executor.usable(), "the released processes stopped")
    wait_until(lambda: my_segments() == [], "the segments are unlinked")
