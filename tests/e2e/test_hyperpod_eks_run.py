"""End to end: sim_to_real with training_backend=hyperpod_eks on a real Airflow (dag.test) against the sandbox.

One subprocess (``tests/e2e/hyperpod_eks_run.py``): the team queue's capacity check, the PyTorchJob created in the
team's Kueue queue with the task-governance labels, preempted once by Kueue and readmitted (the wait goes on), the
trainer's checkpoint evaluated and the lineage naming the job.
"""

from __future__ import annotations

import pytest
from sim2real.contract import task_ids as ids

from tests.fresh_process import run_script

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    summary, _ = run_script("tests.e2e.hyperpod_eks_run", tmp_path_factory.mktemp("hyperpod_eks"), timeout=600)
    return summary


def test_hyperpod_eks_run_trains_through_a_preemption_and_releases_the_policy(run):
    states = {task: state for task, state, _ in run["tasks"]}
    assert run["state"] == "success", states
    for task in (ids.TRAINING_BACKEND, ids.HYPERPOD_EKS_CHECK_CAPACITY, ids.HYPERPOD_EKS_TRAIN_POLICY,
                 ids.TRAINING_JOB, ids.WAIT_FOR_CHECKPOINT, ids.READ_EVAL_REPORT, ids.QUALITY_GATE, ids.WRITE_LINEAGE):
        assert states[task] == "success", (task, states)
    for task in (ids.BATCH_TRAIN_POLICY, ids.HYPERPOD_SCALE_UP, ids.HYPERPOD_TRAIN_POLICY):
        assert states[task] == "skipped", (task, states)
    # One job, in the team's namespace and queue, with the task-governance labels; it succeeded.
    [job] = run["jobs"]
    assert job["namespace"] == "hyperpod-ns-robotics" and job["name"].startswith("s2r-")
    assert job["labels"]["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-robotics-localqueue"
    assert job["labels"]["kueue.x-k8s.io/priority-class"] == "training-priority"
    assert job["labels"]["sim2real.io/run-key"] == run["run_key"]
    assert job["conditions"]["Succeeded"] == "True"
    # Preempted once, waited through (not a failure), and only the GPU-held time counted.
    assert len(run["preemption_events"]) == 1
    training = run["lineage"]["stages"]["training"]
    assert training["preemptions"] == 1 and training["state"] == "Succeeded"
    assert 0 < training["gpu_seconds"] and training["cost_usd"] > 0
    # The trainer's checkpoint was evaluated; the lineage names the cluster, namespace, job and uid.
    assert run["report"]["checkpoint_sha256"] == run["manifest"]["sha256"]
    chain = run["lineage"]["chain"]
    assert chain["training_backend"] == "hyperpod_eks" and chain["hyperpod_cluster_name"] == "sim2real-hyperpod-eks"
    assert chain["eks_job"] == {"namespace": job["namespace"], "job_name": job["name"],
                                "job_uid": training["job_uid"]}
