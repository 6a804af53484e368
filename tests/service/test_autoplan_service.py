"""Cedar's planner with a service (``ds.with_service(svc)``) on a real local Ray
(127.0.0.1): zero remote workers when this process meets the demand, a cut and workers
when it does not, and the elements (restores included) those of the local pipeline."""

import json
import time

import jax
import numpy as np
import pytest

import jdata
from jdata.errors import ServiceStoppedError
from jdata.service import _ray

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]

N = 240


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    from jdata import service

    ray = _ray.ray_module()
    assert not ray.is_initialized(), "another test left a Ray running"
    started = service.start(num_workers=jdata.AUTOTUNE, max_workers=2, worker_cpus=0.5,
                            split_elements=20, num_cpus=2,
                            work_dir=str(tmp_path_factory.mktemp("journal")))
    yield started
    started.stop()
    assert not ray.is_initialized()
    # A thread still at work (the planner's svc.scale waiting for its workers) gets an
    # error now, not a new local Ray from Ray's auto-connect: that one's GCS went with the
    # next test's cluster, and Ray ended this process a minute later (CI, twice).
    with pytest.raises(ServiceStoppedError, match="connection to the service is closed"):
        started.status()
    with pytest.raises(ServiceStoppedError):
        started.scale(1)
    assert not ray.is_initialized()


def _spin(x):
    total = 0
    for i in range(20000):  # ~1 ms of Python a element: holds the GIL
        total += i
    return np.full(8, x, np.int64)


def _noise(x, key):
    return x + np.random.default_rng(key).integers(0, 1000, x.shape)


def _pipeline():
    return (jdata.range(N).shuffle(jax.random.key(3)).map(_spin)
            .random_map(_noise, jax.random.key(4)))


def _epoch(ds, wait_sec=0.0):
    out = []
    for x in ds:
        out.append(np.asarray(x))
        if wait_sec:
            time.sleep(wait_sec)  # the trainer's step: what sets the demand
    return np.stack(out)


def test_a_slow_consumer_gets_no_remote_workers(svc):
    ds = _pipeline().with_service(svc).with_options(jdata.Options(cpu_budget=2))
    first = _epoch(ds, wait_sec=0.02)  # 50 elements/s: local makes far more
    second = _epoch(ds)
    local = _pipeline()
    np.testing.assert_array_equal(first, _epoch(local))
    np.testing.assert_array_equal(second, _epoch(local))
    text = ds.explain()
    assert "cut: none, 0 remote workers (local capacity" in text, text
    assert "Distribute" not in text.split("Planned")[1]


def test_a_fast_consumer_of_a_slow_pipeline_gets_a_cut_and_workers(svc):
    # One local core against two remote workers: the service makes twice as much.
    ds = _pipeline().with_service(svc).with_options(jdata.Options(cpu_budget=1))
    local = _pipeline()
    np.testing.assert_array_equal(_epoch(ds), _epoch(local))
    text = ds.explain()
    assert "2 remote workers" in text and "Distribute(" in text.split("Planned")[1], text
    it = ds.iterator()  # epoch 1, through the service
    head = [np.asarray(next(it)) for _ in range(37)]
    state = json.dumps(it.get_state())
    assert "distribute" in json.loads(state)["plan"]
    rest = [np.asarray(x) for x in it]
    expected = _epoch(local)
    np.testing.assert_array_equal(np.stack(head + rest), expected)
    assert any(row["engine"] == "service" for row in it.stats().rows)
    fresh = _pipeline().with_service(svc).with_options(jdata.Options(cpu_budget=1))
    again = [np.asarray(x) for x in fresh.iterator(state)]
    np.testing.assert_array_equal(np.stack(again), np.stack(rest))
    deadline = time.monotonic() + 120
    while len(svc.status().workers) != 2:  # the planner scaled it
        assert time.monotonic() < deadline, svc.status()
        time.sleep(0.2)
