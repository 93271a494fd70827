"""End to end: sim_to_real with training_backend=hyperpod_eks on a real Airflow (dag.test) against the sandbox.

Two of the folder's runs (:mod:`tests.e2e.hyperpod.runs`, one process for all): the team queue's capacity check, the
PyTorchJob created in the team's Kueue queue with the task-governance labels, preempted once by Kueue and readmitted
(the wait goes on), the trainer's checkpoint evaluated and the lineage naming the job; then a 2-candidate sweep, one
PyTorchJob per candidate, the best one released.
"""

from __future__ import annotations

import pytest
from sim2real.contract import task_ids as ids

from tests.e2e.test_sandbox_run import states

#: The first test waits for the folder's five runs (the session fixture ``hyperpod_runs``).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]


def test_hyperpod_eks_run_trains_through_a_preemption_and_releases_the_policy(hyperpod_runs):
    run = hyperpod_runs["hyperpod_eks"]
    tasks = states(run)
    assert run["state"] == "success", tasks
    for task in (ids.TRAINING_BACKEND, ids.HYPERPOD_EKS_CHECK_CAPACITY, ids.HYPERPOD_EKS_TRAIN_POLICY,
                 ids.TRAINING_JOB, ids.WAIT_FOR_CHECKPOINT, ids.READ_EVAL_REPORT, ids.QUALITY_GATE, ids.WRITE_LINEAGE):
        assert tasks[task] == "success", (task, tasks)
    for task in (ids.BATCH_TRAIN_POLICY, ids.HYPERPOD_SCALE_UP, ids.HYPERPOD_TRAIN_POLICY):
        assert tasks[task] == "skipped", (task, tasks)
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


def test_a_sweep_on_eks_trains_each_candidate_as_its_own_pytorchjob_and_releases_the_best(hyperpod_runs):
    from sim2real.contract.hyperpod_eks import job_name
    from sim2real.orchestration.candidates import best_candidate
    from sim2real.orchestration.lineage import lineage_errors

    sweep = hyperpod_runs["hyperpod_eks/sweep"]
    assert sweep["preemption_events"] == []  # the first EKS run's preemption fault was not this run's
    tasks = states(sweep)
    assert sweep["state"] == "success", tasks
    for task in (ids.HYPERPOD_EKS_CHECK_CAPACITY, ids.HYPERPOD_EKS_SUBMISSION, ids.SWEEP_CANDIDATES,
                 ids.SWEEP_PICK_BEST, ids.TRAINING_JOB, ids.QUALITY_GATE, ids.WRITE_LINEAGE):
        assert tasks[task] == "success", (task, tasks)
    for task in (ids.HYPERPOD_EKS_TRAIN_POLICY, ids.SWEEP_CHECK_CAPACITY, ids.HYPERPOD_SUBMIT_SWEEP):
        assert tasks[task] == "skipped", (task, tasks)
    mapped = sweep["mapped_tasks"]
    for task in (ids.SWEEP_TRAIN_ON_EKS, ids.SWEEP_WAIT_FOR_CHECKPOINT, ids.SWEEP_READ_EVAL_REPORT):
        assert mapped[task] == ["success"] * 2, (task, mapped)
    for task in (ids.SWEEP_SUBMIT_TRAINING, ids.SWEEP_TRAIN_ON_SLURM):  # the Batch and Slurm paths
        assert {state for t, state, _ in sweep["tasks"] if t == task} == {"skipped"}, (task, sweep["tasks"])
    # One PyTorchJob per candidate, in the team's queue with the run's priority class, each Succeeded.
    key = sweep["run_key"]
    jobs = sorted(sweep["jobs"], key=lambda j: j["name"])
    assert [j["labels"]["sim2real.io/candidate"] for j in jobs] == ["c0", "c1"]
    assert [j["name"] for j in jobs] == [job_name(key, f"c{i}") for i in range(2)]  # s2r-<run key>-c<i>
    for job in jobs:
        assert job["labels"]["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-robotics-localqueue"
        assert job["labels"]["kueue.x-k8s.io/priority-class"] == "training-priority"
        assert job["labels"]["sim2real.io/run-key"] == key and job["conditions"]["Succeeded"] == "True"
    # The lineage names each candidate's job (namespace, name, uid); the best lower bound was released.
    lineage = sweep["lineage"]
    assert lineage is not None and lineage_errors(lineage) == []
    candidates = lineage["candidates"]
    assert [c["eks_job"] for c in candidates] == [{"namespace": j["namespace"], "job_name": j["name"],
                                                   "job_uid": j["uid"]} for j in jobs]
    assert all(c["batch_job_id"] is None and c["hyperpod_cluster_name"] == "sim2real-hyperpod-eks"
               for c in candidates)
    for i, cand in enumerate(candidates):
        assert cand["checkpoint_uri"].startswith(f"s3://{sweep['bucket']}/runs/{key}/candidates/c{i}/")
    expected = best_candidate([{"index": c["index"], "report": c} for c in candidates])["index"]
    assert lineage["sweep"]["winner"] == expected
    chain = lineage["chain"]
    assert chain["training_backend"] == "hyperpod_eks" and chain["eks_job"] == candidates[expected]["eks_job"]
    assert chain["checkpoint_sha256"] == candidates[expected]["checkpoint_sha256"]
