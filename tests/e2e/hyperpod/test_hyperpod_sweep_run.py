"""End to end: a 3-candidate sweep with training_backend=hyperpod in one run of the real sim_to_real DAG
(dag.test, SQLite) against the sandbox's HyperPod cluster and emulated Slurm: one of the folder's runs
(:mod:`tests.e2e.hyperpod.runs`, one process for all).

Toy size (2 PPO iterations per candidate, 3 evaluation episodes, the gate open): the test checks the sweep's
orchestration on Slurm — one job array of three tasks, at most ``sweep_max_parallel`` (2) running at once, the GPU
group scaled for two jobs and back, each candidate on its own prefix, the best Wilson lower bound going on, the
lineage and the cost listing every candidate — not the policies' quality.
"""

from __future__ import annotations

import pytest
from sim2real.contract import task_ids as ids

from tests.e2e.test_sandbox_run import states

#: The first test waits for the folder's five runs (the session fixture ``hyperpod_runs``).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]


def test_a_hyperpod_sweep_trains_each_candidate_as_a_task_of_one_job_array(hyperpod_runs):
    from sim2real.orchestration.candidates import best_candidate
    from sim2real.orchestration.lineage import lineage_errors

    run = hyperpod_runs["hyperpod_sweep"]

    tasks = states(run)
    assert run["state"] == "success", (tasks, run["log"])
    for task in (ids.HYPERPOD_CHECK_CAPACITY, ids.HYPERPOD_SCALE_UP, ids.HYPERPOD_WAIT_FOR_NODES,
                 ids.HYPERPOD_SUBMISSION, ids.HYPERPOD_SWEEP_SCRIPT, ids.HYPERPOD_SUBMIT_SWEEP, ids.HYPERPOD_SCALE_DOWN,
                 ids.SWEEP_CANDIDATES, ids.SWEEP_PICK_BEST, ids.TRAINING_JOB, ids.WAIT_FOR_CHECKPOINT,
                 ids.QUALITY_GATE, ids.WRITE_LINEAGE):
        assert tasks[task] == "success", (task, tasks)
    # Not the single Slurm job, not the Batch paths.
    for task in (ids.HYPERPOD_TRAIN_POLICY, ids.BATCH_CHECK_CAPACITY, ids.BATCH_TRAIN_POLICY, ids.SWEEP_CHECK_CAPACITY):
        assert tasks[task] == "skipped", (task, tasks)
    mapped = run["mapped_tasks"]
    for task in (ids.SWEEP_TRAIN_ON_SLURM, ids.SWEEP_WAIT_FOR_CHECKPOINT, ids.SWEEP_RUN_EVALUATION,
                 ids.SWEEP_READ_EVAL_REPORT):
        assert mapped[task] == ["success"] * 3, (task, mapped)
    for task in (ids.SWEEP_WAIT_FOR_SLOT, ids.SWEEP_SUBMIT_TRAINING, ids.SWEEP_TRAIN_POLICY):  # the Batch path
        assert {state for t, state, _ in run["tasks"] if t == task} == {"skipped"}, (task, run["tasks"])
    # The GPU group was sized for min(sweep_max_parallel 2, 3 candidates) x 1 node, then back to its minimum.
    assert run["cluster_updates"] == ["UpdateCluster sim2real-hyperpod: head=1, gpu=2",
                                      "UpdateCluster sim2real-hyperpod: head=1, gpu=0"]
    assert run["groups"]["gpu"] == {"current": 0, "target": 0}
    # One job array of three tasks, each COMPLETED, at most two running at once (the array's %2).
    key = run["run_key"]
    jobs = run["slurm_jobs"]
    array = jobs[0]["array_job_id"]
    assert [j["job_id"] for j in jobs] == [f"{array}_0", f"{array}_1", f"{array}_2"]
    assert {j["name"] for j in jobs} == {f"sim2real-train-{key}-sweep"} and {j["array_limit"] for j in jobs} == {2}
    assert [(j["state"], j["exit_code"]) for j in jobs] == [("COMPLETED", "0:0")] * 3
    spans = [(float(j["start_time"]), float(j["end_time"])) for j in jobs]
    assert spans[2][0] >= min(spans[0][1], spans[1][1])  # the third started once one of the first two ended
    for start, _ in spans:
        assert sum(s <= start < e for s, e in spans) <= 2
    # The lineage lists every candidate with its array task and its own prefix; the best lower bound won.
    lineage = run["lineage"]
    assert lineage is not None and lineage_errors(lineage) == []
    candidates = lineage["candidates"]
    assert [c["slurm_job_id"] for c in candidates] == [j["job_id"] for j in jobs]
    assert all(c["batch_job_id"] is None and c["hyperpod_cluster_name"] == "sim2real-hyperpod" for c in candidates)
    for i, cand in enumerate(candidates):
        assert cand["checkpoint_uri"].startswith(f"s3://{run['bucket']}/runs/{key}/candidates/c{i}/")
        assert cand["params"]["seed"] == 3 + i and len(cand["checkpoint_sha256"]) == 64
    assert len({c["checkpoint_sha256"] for c in candidates}) == 3
    expected = best_candidate([{"index": c["index"], "report": c} for c in candidates])["index"]
    assert lineage["sweep"]["winner"] == expected and [c["won"] for c in candidates].count(True) == 1
    chain = lineage["chain"]
    assert chain["training_backend"] == "hyperpod" and chain["slurm_job_id"] == candidates[expected]["slurm_job_id"]
    assert chain["checkpoint_sha256"] == candidates[expected]["checkpoint_sha256"]
    # The estimate and the actual cost count every candidate, at the HyperPod instance type's price.
    estimate = [i for i in lineage["cost_estimate"]["items"] if i["stage"] == "training"]
    actual = [i for i in lineage["cost_actual"]["items"] if i["stage"] == "training"]
    assert len(estimate) == 3 and {i["instance_type"] for i in estimate} == {"ml.g5.12xlarge"}
    assert len(actual) == 3 and all("Slurm job" in i["basis"] for i in actual)
    assert lineage["cost_actual"]["unknown"] == []
