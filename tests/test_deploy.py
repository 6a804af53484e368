"""``deploy/kuberay/``: the RayCluster manifest has what KubeRay needs, and matches its image."""

import pathlib
import re

import yaml

DEPLOY = pathlib.Path(__file__).resolve().parents[1] / "deploy" / "kuberay"


def _cluster() -> dict:
    documents = list(yaml.safe_load_all((DEPLOY / "raycluster.yaml").read_text()))
    assert len(documents) == 1
    return documents[0]


def _containers(group: dict) -> list:
    return group["template"]["spec"]["containers"]


def test_it_is_a_raycluster_with_token_authentication_and_autoscaling():
    cluster = _cluster()
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    spec = cluster["spec"]
    assert spec["authOptions"] == {"mode": "token"}
    assert spec["enableInTreeAutoscaling"] is True
    assert tuple(int(p) for p in spec["rayVersion"].split(".")[:2]) >= (2, 52)  # token auth


def test_the_head_listens_for_clients_privately_and_runs_no_workers():
    head = _cluster()["spec"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP"
    assert head["rayStartParams"]["num-cpus"] == "0"
    ports = {p["name"]: p["containerPort"] for p in _containers(head)[0]["ports"]}
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001}


def test_worker_groups_scale_within_their_bounds():
    groups = {g["groupName"]: g for g in _cluster()["spec"]["workerGroupSpecs"]}
    assert set(groups) == {"jdata-cpu", "tpu-trainer"}
    for group in groups.values():
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        # KubeRay's rayStartParams is a map of strings: a YAML number is rejected.
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())
    assert groups["jdata-cpu"]["maxReplicas"] > groups["jdata-cpu"]["minReplicas"]


def test_the_trainer_group_is_a_tpu_slice_that_offers_no_cpus_to_workers():
    tpu = next(g for g in _cluster()["spec"]["workerGroupSpecs"]
               if g["groupName"] == "tpu-trainer")
    assert tpu["rayStartParams"]["num-cpus"] == "0"
    assert tpu["numOfHosts"] >= 1
    selector = tpu["template"]["spec"]["nodeSelector"]
    assert {"cloud.google.com/gke-tpu-accelerator",
            "cloud.google.com/gke-tpu-topology"} <= set(selector)
    resources = _containers(tpu)[0]["resources"]
    assert resources["requests"]["google.com/tpu"] == resources["limits"]["google.com/tpu"]


def test_every_pod_runs_the_image_the_dockerfile_builds_at_the_clusters_ray_version():
    cluster = _cluster()
    groups = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    images = {c["image"] for g in groups for c in _containers(g)}
    assert len(images) == 1
    tag = images.pop().rpartition(":")[2]
    ray_version = cluster["spec"]["rayVersion"]
    assert tag.startswith(ray_version + "-py")
    base = re.search(r"^FROM rayproject/ray:(\S+)$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert base and base.group(1) == tag
