"""The autoscaler on a 4-node Ray cluster on 127.0.0.1 (ray.cluster_utils): the workers it
asks for land on the nodes with room, one per node of one CPU."""

import time

import pytest

import jdata
from jdata.service import _ray

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    ray = _ray.ray_module()  # first: Ray binds loopback only
    assert not ray.is_initialized(), "another test left a Ray running"
    from ray.cluster_utils import Cluster

    # The head runs only the dispatcher (it asks for no CPU): workers go to the others.
    nodes = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": _ray.LOCALHOST, "num_cpus": 0, "include_dashboard": False})
    try:
        workers = [nodes.add_node(node_ip_address=_ray.LOCALHOST, num_cpus=1) for _ in range(3)]
        yield nodes, workers, tmp_path_factory.mktemp("journal")
    finally:
        ray.shutdown()
        nodes.shutdown()


def _slow(x):
    time.sleep(0.005)
    return x


def test_the_autoscaler_fills_the_nodes_with_room_one_worker_each(cluster):
    from jdata import service

    nodes, workers, journal = cluster
    # max_workers=None: the cluster's 3 CPUs over 1 CPU per worker.
    svc = service.start(address=nodes.address, worker_cpus=1.0, work_dir=str(journal))
    try:
        it = jdata.range(10**6).map(_slow).distribute(svc).iterator()
        deadline = time.monotonic() + 60
        running = []
        while time.monotonic() < deadline and len(running) < 3:
            for _ in range(200):
                next(it)  # a consumer that takes all it gets: demand far above 3 workers
            running = [w for w in svc.status().workers if w.state == "running"]
        scaling = svc.status().autoscaler
        assert scaling.max_workers == 3 and scaling.decisions[0].target == 3, scaling
        assert len(running) == 3, scaling.decisions
        assert {w.node_id for w in running} == {n.node_id for n in workers}  # one per node
        it.close()
    finally:
        svc.stop()
