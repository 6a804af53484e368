"""`make demo-service` trains through a jdata.service, loses a worker and is preempted, and
still trains on every example exactly once per epoch, on the local pipeline's batches."""
import glob
import os

import jax
import numpy as np
import pytest

from jdata.demos import train as demo
from jdata.demos import train_service as demo_service
from jdata.runtime import segments
from jdata.service import _ray

# Ray starts its processes with fork+exec while JAX's threads run: JAX warns, harmlessly.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


def _sharding():
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))


def test_the_ids_leave_make_demos_batches_unchanged(tmp_path):
    path = demo.write_dataset(str(tmp_path), 96)
    plain = [demo._digest(b) for b in demo.pipeline(path, 16, _sharding(), 2)]
    with_ids = list(demo_service.pipeline(path, 16, _sharding(), 2))
    assert [demo._digest(b) for b in with_ids] == plain
    for epoch in (0, 1):
        ids = np.concatenate([b["id"] for b in with_ids[6 * epoch:6 * (epoch + 1)]])
        assert sorted(ids.tolist()) == list(range(96))


def test_every_example_is_counted_per_epoch():
    assert demo_service.exactly_once([np.array([1, 0]), np.array([2, 3])], 1, 4) == [
        {"examples": 2, "min": 0, "max": 1, "exact": False},
        {"examples": 2, "min": 0, "max": 1, "exact": False}]
    twice = demo_service.exactly_once([np.array([1, 0]), np.array([1, 0])], 2, 2)
    assert twice == [{"examples": 4, "min": 2, "max": 2, "exact": False}]
    assert demo_service.exactly_once([np.array([1, 0]), np.array([2, 3])], 2, 4)[0]["exact"]
    with pytest.raises(ValueError, match="images=100 must be a multiple of global_batch=32"):
        demo_service.main(images=100, global_batch=32)


@pytest.mark.slow
def test_the_service_demo_loses_a_worker_resumes_and_matches_the_local_run(capsys):
    ray = _ray.ray_module()
    assert not ray.is_initialized(), "another test left a Ray running"
    result = demo_service.main(images=640, global_batch=32, epochs=2)
    out = capsys.readouterr().out
    assert not ray.is_initialized()  # the demo stops the Ray it started
    assert result["exact"] and result["exactly_once"] and result["steps"] == 40
    assert result["epochs"] == [{"examples": 640, "min": 1, "max": 1, "exact": True}] * 2
    assert result["workers"] == 2
    assert result["replacement_pid"] not in (None, result["killed_pid"])
    # The killed worker's pipeline's shared memory is gone: its fork server unlinked it, or
    # (killed along by Ray) the replacement swept it (once left in /dev/shm).
    assert not glob.glob(os.path.join(segments.SEGMENT_DIR,
                                      f"jdata_{result['killed_pid']}_*_job_*"))
    assert 0 < result["replacement_up_s"] < 60
    # A short run may end before the replacement gets a split: the survivor took them.
    delivered = result["replacement_delivered_s"]
    assert delivered is None or result["replacement_up_s"] <= delivered < 60
    assert "resumed run matches the uninterrupted one: True" in out
    assert f"(pid {result['killed_pid']}, " in out and "with SIGKILL at step 10" in out
    assert "exactly once: True" in out and "exactly once: False" not in out
    # Restored at step 20 (its last checkpoint), after every example of epoch 0 was yielded:
    # the last split whole, or all of its 40 examples read before its end was seen (a
    # busy machine decides which).
    progress = "the restored iterator's service progress: epoch 0, 16 splits of 40 examples; "
    assert progress + "yielded whole: 0-14; in part: split 15 (40 examples)" in out or \
        progress + "yielded whole: 0-15; in part: none" in out
    assert result["loss"] < 2.3  # it learns: below chance's log(10) after 40 steps
