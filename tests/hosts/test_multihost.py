"""Real multi-process runs: 2 processes under jax.distributed on localhost (CPU, gloo),
4 devices each, one global mesh of 8."""

import json
import os
import socket
import subprocess
import sys

import pytest

# The full tier (make test, CI); `pytest -m "not slow"` leaves it out of the edit loop.
pytestmark = pytest.mark.slow

WORKER = os.path.join(os.path.dirname(__file__), "_multihost.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GLOBAL_BATCH, ELEMENTS, CRASH_AFTER = 16, 100, 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(out_dir, mode: str) -> list[dict]:
    os.makedirs(out_dir, exist_ok=True)
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, WORKER, str(i), str(port), str(out_dir), mode],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                              cwd=ROOT) for i in range(2)]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=240)[0].decode()[-3000:])
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)
    return [json.load(open(os.path.join(out_dir, f"process_{i}.json"))) for i in range(2)]


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory):
    return [_run(tmp_path_factory.mktemp(f"full{k}"), "full") for k in range(2)]


def test_every_element_once_per_epoch_in_global_arrays_over_both_hosts(full_runs):
    hosts = full_runs[0]
    assert [h["devices"] for h in hosts] == [8, 8] and hosts[0]["local_devices"] == 4
    steps = len(hosts[0]["steps"])
    assert steps == len(hosts[1]["steps"]) == (ELEMENTS // 2) // (GLOBAL_BATCH // 2)
    seen = []
    for step in range(steps):
        a, b = hosts[0]["steps"][step], hosts[1]["steps"][step]
        assert a["shape"] == b["shape"] == [GLOBAL_BATCH]
        assert a["local_shards"] == b["local_shards"] == 4
        assert a["global_sum"] == b["global_sum"] == sum(a["local"]) + sum(b["local"])
        seen += a["local"] + b["local"]
    # Each host reads its own shard: no element twice, and the dropped remainders are all
    # that is missing.
    assert len(seen) == len(set(seen)) == steps * GLOBAL_BATCH
    assert set(seen) <= {10 * x for x in range(ELEMENTS)}


def test_the_order_is_the_same_in_every_run(full_runs):
    assert full_runs[0] == full_runs[1]


def test_a_killed_run_resumed_from_its_orbax_checkpoint_gives_the_same_batches(tmp_path,
                                                                                full_runs):
    crashed = _run(tmp_path, "crash")
    assert [len(h["steps"]) for h in crashed] == [CRASH_AFTER + 1] * 2
    resumed = _run(tmp_path, "resume")
    for host in range(2):
        got = crashed[host]["steps"] + resumed[host]["steps"]
        assert got == full_runs[0][host]["steps"]


def test_host_leaves_stay_per_host_beside_global_arrays_and_batch_sizes_split_per_host(
        tmp_path):
    hosts = _run(tmp_path, "host_leaves")
    for host in hosts:
        # 4 rows per host make the 8-row global batch: a multiple of the 4 row blocks on
        # each host's devices is enough, though the sharding has 8 blocks.
        assert host["spec"] == {"x": [8], "id": [4]}
        assert len(host["steps"]) == 5  # 20 elements per host, 4 per batch
        for step in host["steps"]:
            assert step["shape"] == [8]
            # The host leaf is this host's batch, row for row with its part of the array.
            assert step["local"] == [10 * int(i) for i in step["ids"]]
        assert host["grid_spec"] == host["grid_shape"] == [4]
        assert "has a batch of 6 rows" in host["errors"]["rows_by_6"]
        assert ("splits dimension 0 into 8 blocks, 4 of them on this process's devices, so "
                "each host's batch needs a multiple of 4 rows (the global batch is 2 hosts' "
                "batches: a multiple of 8)") in host["errors"]["rows_by_6"]
        assert "e.g. 4 or 8" in host["errors"]["rows_by_6"]
        assert ("into 4 blocks, 2 of them on this process's devices"
                in host["errors"]["grid_by_3"])
    for a, b in zip(*(h["steps"] for h in hosts)):
        assert a["global_sum"] == b["global_sum"] == sum(a["local"]) + sum(b["local"])
    ids = [int(i) for h in hosts for step in h["steps"] for i in step["ids"]]
    assert sorted(ids) == list(range(40))  # each host its own elements, every one once
