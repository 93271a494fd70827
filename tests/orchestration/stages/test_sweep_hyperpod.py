"""A sweep on SageMaker HyperPod: the plan (the GPU group sized for the array tasks at once, the job array's
name, ``--array`` spec and log pattern), the array's batch script and submit lines, the candidates' lineage rows
with their Slurm array tasks, and the budget at the HyperPod instance price."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from sim2real.orchestration import slurm
from sim2real.orchestration.params import ParamRuleError
from sim2real.orchestration.stages.run import check_params, plan_run
from sim2real.orchestration.stages.hyperpod import sweep_array_commands
from sim2real.orchestration.candidates import training_task_id
from sim2real.orchestration.stages.sweep import pick_best_result, training_job_fields

from .test_stages import HYPERPOD_ENV, PARAMS

SWEEP = [{"seed": 3}, {"seed": 4, "num_envs": 64}, {"seed": 5, "train_time_budget_seconds": 30}]
GPU = {"task": "Isaac-Velocity-Rough-H1-v0", "hyperpod_cluster_name": ""}


def _plan(**overrides):
    params = {**PARAMS, "training_backend": "hyperpod", "sweep": SWEEP, "sweep_max_parallel": 2, **overrides}
    return plan_run(dag_id="sim_to_real", run_id="manual__2026-12-01T00:00:00+00:00", params=params, env=HYPERPOD_ENV)


def test_the_plan_sizes_the_gpu_group_for_the_array_tasks_that_run_at_once():
    plan = _plan(**GPU, num_nodes=2)
    hp, key = plan["hyperpod"], plan["run_key"]
    assert hp["target_count"] == 4 and hp["num_nodes"] == 2  # min(2 at once, 3 candidates) x 2 nodes; each job 2
    assert _plan(sweep_max_parallel=8)["hyperpod"]["target_count"] == 3  # never more than the candidates
    assert _plan(sweep_max_parallel=1)["hyperpod"]["target_count"] == 1
    assert hp["sweep_job_name"] == f"sim2real-train-{key}-sweep" and hp["sweep_array"] == "0-2%2"
    assert hp["sweep_log_path"] == f"/fsx/sim2real/logs/sim2real-train-{key}-sweep-%A_%a.out"
    assert hp["sweep_script_path"] == f"/fsx/sim2real/jobs/sim2real-train-{key}-sweep.sbatch"
    assert hp["submit_commands"] == []  # no single job
    assert hp["usd_per_node_hour"] == 7.09  # ml.g5.12xlarge, the HyperPod group's price
    # each candidate keeps its own key suffix, prefix and cost limit (its array task is held to it)
    assert [c["candidate_key"] for c in plan["sweep"]["candidates"]] == [f"{key}-c{i}" for i in range(3)]
    assert all(c["cost_limit_usd"] is not None for c in plan["sweep"]["candidates"])
    json.dumps(plan)
    # Without a sweep nothing changes: one job of num_nodes, no array.
    single = plan_run(dag_id="sim_to_real", run_id="manual__x", env=HYPERPOD_ENV,
                      params={**PARAMS, **GPU, "training_backend": "hyperpod", "num_nodes": 2})["hyperpod"]
    assert single["target_count"] == 2 and single["sweep_array"] == "" and single["submit_commands"]


def test_the_budget_counts_every_candidate_at_the_hyperpod_price():
    budget = _plan()["budget"]
    items = [i for i in budget["items"] if i["stage"] == "training"]
    assert len(items) == 3 and {i["instance_type"] for i in items} == {"ml.g5.12xlarge"}
    assert [i["basis"].split(":")[0] for i in items] == ["sweep candidate c0", "sweep candidate c1",
                                                         "sweep candidate c2"]
    assert items[2]["hours"] == round(30 / 3600, 4)  # c2's own time budget
    from sim2real.orchestration.budget import BudgetExceeded

    with pytest.raises(BudgetExceeded, match="sweep candidate c2"):
        _plan(max_budget_usd=0.2)


def test_the_array_script_exports_each_candidates_variables_by_array_task_id():
    plan = _plan()
    for i, cand in enumerate(plan["sweep"]["candidates"]):  # as prepare_run does with each candidate's MLflow run
        cand["environment"]["MLFLOW_RUN_ID"] = f"{i:032x}"
    text = "\n".join(sweep_array_commands(plan))
    key = plan["run_key"]
    assert f"#SBATCH --job-name=sim2real-train-{key}-sweep" in text and "#SBATCH --nodes=1" in text
    assert f"#SBATCH --output=/fsx/sim2real/logs/sim2real-train-{key}-sweep-%A_%a.out" in text
    assert "sbatch --parsable --array=0-2%2 " in text
    assert f"squeue -h -r -n sim2real-train-{key}-sweep" in text and "-o %i" in text  # one line per task
    assert '--array="$missing"%2 ' in text  # a retry: only the candidates without an active or COMPLETED task
    assert 'case "${SLURM_ARRAY_TASK_ID:?' in text
    block = text[text.index("case "):text.index("esac")]
    for i, cand in enumerate(plan["sweep"]["candidates"]):
        task = block[block.index(f"  {i})"):]
        task = task[:task.index(";;")]
        assert f"export OUTPUT_URI={shlex.quote(cand['output_uri'])}" in task
        assert f"export SEED={cand['params']['seed']}" in task and f"export MLFLOW_RUN_ID={i:032x}" in task
        assert f"/runs/{key}/candidates/c{i}/" in cand["output_uri"]
    # what every candidate shares is exported once, before the case
    assert f"export TASK={PARAMS['task']}" in text[:text.index("case ")]
    with pytest.raises(ValueError, match="no HyperPod sweep"):
        sweep_array_commands(plan_run(dag_id="sim_to_real", run_id="manual__x", env=HYPERPOD_ENV,
                                      params={**PARAMS, "training_backend": "hyperpod"}))


def test_the_array_script_runs_each_tasks_own_exports_under_bash(tmp_path):
    script = slurm.render_script(job_name="j", num_nodes=1, log_path="/tmp/l-%A_%a.out", launcher="/bin/true",
                                 environment={"TASK": "Reacher-v5"}, time_limit_minutes=5, use_container_image=False,
                                 task_environments=[{"SEED": "3"}, {"SEED": "it's 4"}])
    body = script[script.index("export TASK"):script.index("LAUNCHER=")] + 'echo "$TASK $SEED"\n'
    path = tmp_path / "env.sh"
    path.write_text(body)
    for index, seed in ((0, "3"), (1, "it's 4")):
        out = subprocess.run(["bash", str(path)], env={"SLURM_ARRAY_TASK_ID": str(index), "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True, check=True).stdout
        assert out.strip() == f"Reacher-v5 {seed}"
    missing = subprocess.run(["bash", str(path)], env={"SLURM_ARRAY_TASK_ID": "2", "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "no candidate for array task 2" in missing.stderr
    assert subprocess.run(["bash", str(path)], env={"PATH": "/usr/bin:/bin"}, capture_output=True).returncode != 0
    with pytest.raises(ValueError, match="not a valid shell name"):
        slurm.render_script(job_name="j", num_nodes=1, log_path="l", launcher="x", environment={},
                            time_limit_minutes=5, task_environments=[{"BAD-NAME": "1"}])
    with pytest.raises(ValueError, match="at least one task"):
        slurm.render_script(job_name="j", num_nodes=1, log_path="l", launcher="x", environment={},
                            time_limit_minutes=5, task_environments=[])


@pytest.mark.parametrize("tasks, parallel, spec", [(3, 2, "0-2%2"), (3, 3, "0-2"), (2, 5, "0-1"), (1, 1, "0-0"),
                                                    (16, 4, "0-15%4")])
def test_array_spec(tasks, parallel, spec):
    assert slurm.array_spec(tasks, parallel) == spec  # no % limit when it would not hold anything back


def test_array_spec_task_ids_and_log_paths():
    with pytest.raises(ValueError, match="tasks >= 1"):
        slurm.array_spec(0, 2)
    with pytest.raises(ValueError, match="max_parallel >= 1"):
        slurm.array_spec(2, 0)
    assert slurm.array_task_id("1001", 2) == "1001_2"
    with pytest.raises(ValueError, match="digits"):
        slurm.array_task_id("1001_1", 2)
    with pytest.raises(ValueError, match=">= 0"):
        slurm.array_task_id("1001", -1)
    assert slurm.log_path_for("/l/n-%A_%a.out", "1001_2", "n") == "/l/n-1001_2.out"
    assert slurm.log_path_for("/l/%x-%j.out", "77", "n") == "/l/n-77.out"
    assert slurm.status_commands("1001_2")[1].startswith('out="$(sacct -j 1001_2 -X')
    assert slurm.cancel_commands("1001_2") == ["scancel 1001_2"]


def _report(successes: int, episodes: int = 20) -> dict:
    from sim2real.contract.stats import wilson_interval

    lo, hi = wilson_interval(successes, episodes)
    return {"success_rate": successes / episodes, "ci95": [lo, hi], "successes": successes, "episodes": episodes}


def test_pick_best_records_each_candidates_array_task_and_the_lineage_is_valid():
    from sim2real.orchestration.lineage import build_lineage, lineage_errors, render_markdown
    from sim2real.orchestration.stages.checkpoint import training_job_of

    plan = _plan()
    assert training_task_id(plan) == "sweep.train_on_slurm" and training_task_id({"backend": "batch"}) == \
        "sweep.train_policy"
    trainings = [{"cluster_name": "sim2real-hyperpod", "job_id": f"1001_{i}", "num_nodes": 1, "started_at": 0.0,
                  "stopped_at": 60.0, "state": "COMPLETED", "log_path": f"/fsx/l-1001_{i}.out"} for i in range(3)]
    manifests = [{"checkpoint_uri": f"{c['output_uri']}policy.pt", "sha256": f"{i:x}" * 64}
                 for i, c in enumerate(plan["sweep"]["candidates"])]
    picked = pick_best_result(plan, trainings, manifests, [_report(12), _report(18), _report(9)])
    assert picked["winner"] == 1
    rows = picked["candidates"]
    assert [r["slurm_job_id"] for r in rows] == ["1001_0", "1001_1", "1001_2"]
    assert all(r["batch_job_id"] is None and r["hyperpod_cluster_name"] == "sim2real-hyperpod" for r in rows)
    assert training_job_fields({"job_id": "b-1"}) == {"batch_job_id": "b-1"}
    job = training_job_of("hyperpod", None, manifest_uri="unused", sweep=picked)
    assert job["slurm_job_id"] == "1001_1" and job["manifest_uri"] == plan["sweep"]["candidates"][1]["manifest_uri"]
    lineage = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="r", params=plan["params"],
                            plan=plan, sweep=picked, training=picked["training"],
                            evaluation={**_report(18), "checkpoint_sha256": manifests[1]["sha256"]})
    assert lineage_errors(lineage) == []
    assert lineage["chain"]["training_backend"] == "hyperpod" and lineage["chain"]["slurm_job_id"] == "1001_1"
    assert [c["slurm_job_id"] for c in lineage["candidates"]] == ["1001_0", "1001_1", "1001_2"]
    assert "| Slurm 1001_1 |" in render_markdown(lineage)
    # the actual cost: one item per candidate's array task, at the HyperPod price
    from sim2real.orchestration.cost_actual import actual_run_cost

    items = [i for i in actual_run_cost(plan, trainings, now=120.0)["items"] if i["stage"] == "training"]
    assert [i["usd"] for i in items] == [round(7.09 / 60, 2)] * 3
    assert all("Slurm job 1001_" in i["basis"] and i["instance_type"] == "ml.g5.12xlarge" for i in items)


def test_a_hyperpod_sweep_still_needs_the_head_node():
    env = {**HYPERPOD_ENV, "hyperpod": {**HYPERPOD_ENV["hyperpod"], "submit_host_tag_value": ""}}
    with pytest.raises(ParamRuleError, match="submit_host_tag_value"):
        check_params({**PARAMS, "training_backend": "hyperpod", "sweep": SWEEP}, env)


class CandidateTI:
    """``pick_best``'s task instance: the candidates' task states (Task Execution API form) and their
    ``sweep.train_on_slurm`` XComs by key and map index."""

    dag_id, run_id = "sim_to_real", "manual__r"

    def __init__(self, states: dict[str, str], xcoms: dict[tuple[str, int], object]):
        self.states, self.xcoms, self.pulls = states, xcoms, []

    def get_task_states(self, **kwargs):
        return {self.run_id: dict(self.states)}

    def xcom_pull(self, task_ids=None, key="return_value", map_indexes=None):
        self.pulls.append((task_ids, key, map_indexes))
        return self.xcoms.get((key, map_indexes))


def test_a_failed_hyperpod_candidate_keeps_its_slurm_array_task_and_end_state_in_the_lineage():
    from sim2real.orchestration.lineage import build_lineage, lineage_errors
    from sim2real.orchestration.stages.sweep import _candidate_failures

    plan = _plan()
    cands = plan["sweep"]["candidates"]
    trainings = [{"cluster_name": "sim2real-hyperpod", "job_id": f"1001_{i}", "num_nodes": 1, "state": "COMPLETED",
                  "log_path": f"/fsx/l-1001_{i}.out"} for i in range(3)]
    trainings[2] = None  # its train_on_slurm failed: no return value
    manifests = [{"checkpoint_uri": f"{c['output_uri']}policy.pt", "sha256": f"{i:x}" * 64}
                 for i, c in enumerate(cands)]
    manifests[2] = None
    states = {"sweep.train_on_slurm_0": "success", "sweep.train_on_slurm_1": "success",
              "sweep.train_on_slurm_2": "failed", "sweep.wait_for_checkpoint_2": "upstream_failed",
              "sweep.train_policy_2": "skipped"}
    ti = CandidateTI(states, {("slurm_job_id", 2): "1002_2",  # resubmitted: a later array than the others'
                              ("slurm_job_end", 2): {"job_id": "1002_2", "state": "FAILED", "exit_code": "3:0"}})
    failures = _candidate_failures(ti, [0, 1, 2], lambda task_id: [None] * 3, batch=False,
                                   cluster_name=plan["hyperpod"]["cluster_name"])
    assert ("sweep.train_on_slurm", "slurm_job_id", 2) in ti.pulls
    assert failures[2]["slurm_job_id"] == "1002_2" and failures[2]["hyperpod_cluster_name"] == "sim2real-hyperpod"
    picked = pick_best_result(plan, trainings, manifests, [_report(12), _report(18), None], failures)
    row = picked["candidates"][2]
    assert row["state"] == "failed" and row["batch_job_id"] is None
    assert row["slurm_job_id"] == "1002_2" and row["hyperpod_cluster_name"] == "sim2real-hyperpod"
    assert row["reason"] == "sweep.train_on_slurm is failed; Slurm job 1002_2 FAILED (exit code 3:0)"
    assert picked["failed"] == [2] and picked["winner"] == 1
    lineage = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="r", params=plan["params"],
                            plan=plan, sweep=picked, training=picked["training"],
                            evaluation={**_report(18), "checkpoint_sha256": manifests[1]["sha256"]})
    assert lineage_errors(lineage) == []
    assert lineage["candidates"][2]["slurm_job_id"] == "1002_2"
    # A candidate that never waited for a task (no XCom) keeps the task states as its reason, without a job.
    bare = _candidate_failures(CandidateTI(states, {}), [0, 1, 2], lambda task_id: [None] * 3, batch=False,
                               cluster_name="sim2real-hyperpod")
    assert "slurm_job_id" not in bare[2] and bare[2]["reason"] == "sweep.train_on_slurm is failed"
