"""End to end: sim_to_real with training_backend=hyperpod on a real Airflow (dag.test) against the sandbox.

Two of the folder's runs (:mod:`tests.e2e.hyperpod.runs`, one process for all): a good run (scale up → Slurm job →
scale down, then checkpoint and evaluation), and one whose Slurm job is forced to fail.
"""

from __future__ import annotations

import pytest
from sim2real.contract import task_ids as ids

from tests.e2e.test_sandbox_run import states

#: The first test waits for the folder's five runs (the session fixture ``hyperpod_runs``).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]


def _order(run: dict) -> list[str]:
    return [task for task, _, _ in run["tasks"]]


def test_hyperpod_run_scales_up_trains_scales_down_and_evaluates(hyperpod_runs):
    run = hyperpod_runs["hyperpod/success"]
    tasks = states(run)
    assert run["state"] == "success", tasks
    for task in (ids.TRAINING_BACKEND, ids.HYPERPOD_CHECK_CAPACITY, ids.HYPERPOD_SCALE_UP, ids.HYPERPOD_WAIT_FOR_NODES,
                 ids.HYPERPOD_TRAIN_POLICY,
                 ids.HYPERPOD_SCALE_DOWN, ids.TRAINING_JOB, ids.WAIT_FOR_CHECKPOINT,
                 ids.RUN_EVALUATION, ids.READ_EVAL_REPORT, ids.QUALITY_GATE, ids.WRITE_LINEAGE):
        assert tasks[task] == "success", (task, tasks)
    assert tasks[ids.BATCH_CHECK_CAPACITY] == "skipped" and tasks[ids.BATCH_TRAIN_POLICY] == "skipped"
    order = _order(run)
    assert (order.index(ids.HYPERPOD_SCALE_UP) < order.index(ids.HYPERPOD_WAIT_FOR_NODES)
            < order.index(ids.HYPERPOD_TRAIN_POLICY) < order.index(ids.HYPERPOD_SCALE_DOWN))
    # One UpdateCluster up to num_nodes, one back to min_count (0); the group ends empty.
    assert run["cluster_updates"] == ["UpdateCluster sim2real-hyperpod: head=1, gpu=1",
                                      "UpdateCluster sim2real-hyperpod: head=1, gpu=0"]
    assert run["groups"]["gpu"] == {"current": 0, "target": 0} and run["gpu_nodes"] == 0
    assert run["groups"]["head"] == {"current": 1, "target": 1}
    # Exactly one Slurm job, completed, named after the run key; the trainer wrote the manifest it reads.
    jobs = run["slurm_jobs"]
    assert [(j["state"], j["exit_code"]) for j in jobs] == [("COMPLETED", "0:0")]
    assert jobs[0]["name"] == f"sim2real-train-{run['run_key']}" and jobs[0]["nodes"] == 1
    manifest = run["manifest"]
    assert manifest["task"] == "Reacher-v5" and manifest["run_key"] == run["run_key"]
    assert manifest["checkpoint_uri"].startswith(f"s3://sim2real-artifacts-123456789012/runs/{run['run_key']}/checkpoints/")
    assert run["report"]["checkpoint_sha256"] == manifest["sha256"] and run["report"]["episodes"] == 3


def test_failed_slurm_job_still_scales_down_and_fails_the_run(hyperpod_runs):
    run = hyperpod_runs["hyperpod/slurm_job_fail"]
    tasks = states(run)
    assert run["state"] == "failed", tasks
    assert tasks[ids.HYPERPOD_SCALE_UP] == "success"
    assert tasks[ids.HYPERPOD_TRAIN_POLICY] == "failed"
    assert tasks[ids.HYPERPOD_SCALE_DOWN] == "success"  # the teardown ran
    assert tasks[ids.WAIT_FOR_CHECKPOINT] == "upstream_failed"
    assert tasks[ids.WRITE_LINEAGE] == "success"
    assert run["cluster_updates"][-1] == "UpdateCluster sim2real-hyperpod: head=1, gpu=0"
    assert run["groups"]["gpu"] == {"current": 0, "target": 0} and run["gpu_nodes"] == 0
    # A FAILED job is the job's verdict: not retried, so the run submitted exactly one job.
    assert [(j["name"], j["state"], j["exit_code"]) for j in run["slurm_jobs"]] == [
        (f"sim2real-train-{run['run_key']}", "FAILED", "1:0")]
    assert run["manifest"] is None
