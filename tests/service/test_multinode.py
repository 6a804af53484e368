"""jdata.service on a 3-node Ray cluster on 127.0.0.1 (ray.cluster_utils): a node removed."""

import time

import jax
import numpy as np
import pytest

import jdata
from jdata import _planner
from jdata.runtime.context import Context
from jdata.service import _ray

# Ray starts its processes with fork+exec while JAX's threads run: JAX warns, harmlessly.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]

KEY = jax.random.key(5)
N = 400


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from jdata import service

    ray = _ray.ray_module()  # first: Ray binds loopback only
    assert not ray.is_initialized(), "another test left a Ray running"
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": _ray.LOCALHOST, "num_cpus": 1, "include_dashboard": False})
    try:
        workers = [nodes.add_node(node_ip_address=_ray.LOCALHOST, num_cpus=1) for _ in range(2)]
        svc = service.start(address=nodes.address, num_workers=2, worker_cpus=0.5,
                            split_elements=20, work_dir=str(tmp_path_factory.mktemp("j")))
        yield nodes, workers, svc
        svc.stop()
        assert not ray.is_initialized()
    finally:
        nodes.shutdown()


def _slow(x):
    time.sleep(0.003)
    return x * 3


def _local(ds, epoch=0):
    it = _planner.make_iterator(ds._optimize().plan, Context(options=ds.options), epoch)
    try:
        return [int(x) for x in it]
    finally:
        it.close()


def test_every_node_is_on_loopback(cluster):
    ray = _ray.ray_module()
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 3 and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}


def test_a_removed_node_loses_no_element_and_keeps_the_order(cluster):
    nodes, workers, svc = cluster
    above = jdata.range(N).shuffle(KEY).map(_slow)
    expected = _local(above)
    it = above.distribute(svc).iterator()
    head = [int(next(it)) for _ in range(80)]
    status = svc.status()
    victim_node = next(n for n in workers
                       if n.node_id in {w.node_id for w in status.workers})
    lost = {w.worker_id for w in status.workers if w.node_id == victim_node.node_id}
    nodes.remove_node(victim_node)
    removed_at = time.monotonic()
    first = int(next(it))
    to_next = time.monotonic() - removed_at
    rest = [first] + [int(x) for x in it]
    assert head + rest == expected  # every element once, in the local order
    assert to_next < 10.0
    after = svc.status().workers
    assert not lost & {w.worker_id for w in after}
    assert len(after) == 2 and all(w.node_id != victim_node.node_id for w in after)
    assert np.unique(head + rest).size == N
