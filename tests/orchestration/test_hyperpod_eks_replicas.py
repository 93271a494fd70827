"""The emulated training operator runs every replica of a PyTorchJob with the operator's variables, and the image's
launcher (containers/rl/distributed_run.bash) makes them one torchrun rendezvous: a two-node job trains as one
world of two ranks, not as two single-node runs."""

from __future__ import annotations

import json
import time

import pytest

from sim2real.orchestration.hooks import hyperpod_eks as eks
from tests.workloads.conftest import LAUNCHER, clean_env


def test_operator_env_of_master_and_workers():
    from sim2real.dev.sandbox.kubernetes_api import operator_env

    job = eks.job_manifest(name="s2r-k", namespace="hyperpod-ns-robots", team="robots", priority_class="training",
                           run_key="k", image="img", num_nodes=3, gpus_per_node=4, environment={}, command=["true"])
    assert operator_env(job, "Worker", 1, master_addr="s2r-k-master-0", master_port=23456) == {
        "PYTHONUNBUFFERED": "1", "MASTER_ADDR": "s2r-k-master-0", "PET_MASTER_ADDR": "s2r-k-master-0",
        "MASTER_PORT": "23456", "PET_MASTER_PORT": "23456", "PET_NNODES": "3", "PET_NODE_RANK": "2", "RANK": "2",
        "WORLD_SIZE": "12", "PET_NPROC_PER_NODE": "4"}
    master = operator_env(job, "Master", 0, master_addr="a", master_port=1)
    assert master["RANK"] == master["PET_NODE_RANK"] == "0"


@pytest.mark.integration
def test_a_two_node_job_is_one_rendezvous_of_two_ranks():
    from kubernetes import config as kube_config

    from sim2real.dev.sandbox.kubernetes_api import KubernetesApiServer

    with KubernetesApiServer(step_seconds=0.05, process_env=clean_env) as emulator:
        emulator.add_team("robots", gpu_quota=4)
        emulator.add_priority_class("training-priority")  # Kueue admits no job whose priority class is missing
        api = kube_config.new_client_from_config_dict(emulator.kubeconfig())
        manifest = eks.job_manifest(
            name="s2r-two", namespace="hyperpod-ns-robots", team="robots", priority_class="training", run_key="k",
            image="local", num_nodes=2, gpus_per_node=1, command=["bash", str(LAUNCHER)],
            environment={"TRAIN_ENTRYPOINT": "-m sim2real.workloads.selfcheck", "EXPECTED_WORLD_SIZE": "2",
                         "GLOO_SOCKET_IFNAME": "lo", "RDZV_JOIN_TIMEOUT": "60"})
        eks.create_job(api, manifest)
        deadline = time.monotonic() + 120
        state = ""
        while time.monotonic() < deadline and state not in ("Succeeded", "Failed"):
            time.sleep(0.2)
            job = eks.read_job(api, "hyperpod-ns-robots", "s2r-two") or {}
            state = next((c["type"] for c in (job.get("status") or {}).get("conditions") or []
                          if c["type"] in ("Succeeded", "Failed") and c["status"] == "True"), "")
        logs = {pod: list(lines) for (_, pod), lines in emulator.logs.items()}
        assert state == "Succeeded", logs
    assert set(logs) == {"s2r-two-master-0", "s2r-two-worker-0"}
    ranks = [json.loads(line) for lines in logs.values() for line in lines if line.startswith("{")]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    assert all(r["world_size"] == 2 and r["sum"] == 1 for r in ranks)
    assert any("scheduler=pytorchjob role=main node=0/2" in line for line in logs["s2r-two-master-0"])
    assert any("scheduler=pytorchjob role=worker node=1/2" in line for line in logs["s2r-two-worker-0"])
