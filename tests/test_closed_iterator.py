"""``next()`` after ``close()`` says so at once, in every engine (issue 25, item 5).

Before, a thread-parallel map waited forever, worker processes said they were shut down,
and a sequential pipeline ended as if its data were exhausted.
"""

from __future__ import annotations

import jax
import pytest

import jdata
from jdata.errors import IteratorClosedError

N = 50
_SEQUENTIAL = jdata.Options(inject_prefetch=False)


def _add_one(x):
    return x + 1


def _pipelines() -> dict:
    ds = jdata.range(N)
    return {
        "sequential": ds.map(_add_one).with_options(_SEQUENTIAL),
        "threads": ds.map(_add_one, num_parallel_calls=2).with_options(
            jdata.Options(engine="threads")),
        "processes": ds.map(_add_one, num_parallel_calls=2).with_options(
            jdata.Options(engine="processes")),
        "prefetch": ds.map(_add_one).prefetch(4).with_options(_SEQUENTIAL),
        "batched": ds.map(_add_one, num_parallel_calls=2).batch(5).with_options(
            jdata.Options(engine="threads")),
    }


ENGINES = sorted(_pipelines())


def _check_closed(it, pipeline: jdata.Dataset, taken: list, state) -> None:
    """``it`` is closed: next(), get_state() and set_state() refuse; ``state``, taken
    before close(), resumes the rest."""
    with pytest.raises(IteratorClosedError, match=r"next\(\) on a closed iterator") as raised:
        next(it)
    assert "ds.iterator()" in str(raised.value)
    assert isinstance(raised.value, ValueError)
    with pytest.raises(IteratorClosedError):  # a second try too: no engine state is reached
        next(it)
    with pytest.raises(IteratorClosedError, match=r"set_state\(\) on a closed iterator"):
        it.set_state(state)
    # Closing drops buffered elements: no state is left to take, and none is made up.
    with pytest.raises(IteratorClosedError, match=r"get_state\(\) on a closed iterator"):
        it.get_state()
    rest = [value.tolist() for value in pipeline.iterator(state)]
    whole = [value.tolist() for value in pipeline.iterator()]
    assert taken + rest == whole


@pytest.mark.timeout(120)  # before the fix, "threads" waited here forever
@pytest.mark.parametrize("engine", ENGINES)
def test_next_after_close_raises_at_once(engine):
    pipeline = _pipelines()[engine]
    it = pipeline.iterator()
    taken = [next(it).tolist() for _ in range(3)]
    state = it.get_state()
    it.close()
    _check_closed(it, pipeline, taken, state)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_an_iterator_closed_by_its_with_block_refuses_too(engine):
    pipeline = _pipelines()[engine]
    with pipeline.iterator() as it:
        taken = [next(it).tolist()]
        state = it.get_state()
    _check_closed(it, pipeline, taken, state)


@pytest.mark.timeout(120)
def test_an_iterator_closed_before_its_first_element_and_after_its_last():
    pipeline = _pipelines()["threads"]
    fresh = pipeline.iterator()
    state = fresh.get_state()
    fresh.close()
    _check_closed(fresh, pipeline, [], state)
    done = pipeline.iterator()
    taken = [x.tolist() for x in done]
    with pytest.raises(StopIteration):  # exhausted, still open: the end of the data
        next(done)
    state = done.get_state()
    done.close()
    _check_closed(done, pipeline, taken, state)


def _shuffled() -> jdata.Dataset:
    return jdata.range(N).shuffle(jax.random.key(0)).map(_add_one, num_parallel_calls=2)


@pytest.mark.timeout(120)
def test_an_iterator_restored_to_another_epoch_refuses_after_close():
    epoch0 = [x.tolist() for x in _shuffled().iterator()]
    pipeline = _shuffled()
    saved = pipeline.iterator()  # epoch 0
    taken = [next(saved).tolist()]
    state = saved.get_state()
    saved.close()
    it = pipeline.iterator()  # epoch 1: set_state swaps in a new root, for epoch 0
    it.set_state(state)
    taken.append(next(it).tolist())
    state = it.get_state()
    it.close()
    with pytest.raises(IteratorClosedError):
        next(it)
    assert taken + [x.tolist() for x in pipeline.iterator(state)] == epoch0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_data_service_iterator_refuses_after_close(tmp_path):
    from jdata import service

    svc = service.start(num_workers=1, worker_cpus=0.5, work_dir=str(tmp_path), num_cpus=1)
    try:
        pipeline = jdata.range(N).map(_add_one).distribute(svc, job_name="closed")
        it = pipeline.iterator()
        next(it)
        it.close()
        with pytest.raises(IteratorClosedError, match=r"next\(\) on a closed iterator"):
            next(it)
    finally:
        svc.stop()
