"""Sweeps: the form field (refused at trigger time with the reason), the plan of each candidate, the pick of the
best Wilson lower bound, the budget over every candidate and the capacity preflight sized for the parallel jobs."""

import json
import re

import pytest

from sim2real.contract.stats import wilson_interval
from sim2real.orchestration.budget import BudgetExceeded, candidate_cost_limits
from sim2real.orchestration.candidates import MAX_CANDIDATES, SWEEP_KEYS, best_candidate, expand_sweep
from sim2real.orchestration.params import ParamRuleError
from sim2real.orchestration.stages.run import build_params, check_params, plan_run
from sim2real.orchestration.stages.sweep import SweepPlan, pick_best_result

from tests.orchestration.test_config import GOOD
from .test_stages import PARAMS

SWEEP = [{"seed": 3}, {"seed": 4, "num_envs": 64}, {"seed": 5, "train_time_budget_seconds": 30}]


def _plan(**overrides):
    return plan_run(dag_id="sim_to_real", run_id="manual__2026-12-01T00:00:00+00:00",
                    params={**PARAMS, "sweep_max_parallel": 2, **overrides}, env=GOOD)


def test_a_list_and_a_grid_expand_to_candidates_and_empty_means_no_sweep():
    assert expand_sweep(SWEEP) == SWEEP
    assert expand_sweep({"seed": [1, 2], "num_envs": [8, 16]}) == [
        {"seed": 1, "num_envs": 8}, {"seed": 1, "num_envs": 16}, {"seed": 2, "num_envs": 8}, {"seed": 2, "num_envs": 16}]
    for empty in (None, [], {}):
        assert expand_sweep(empty) == []
        check_params({**PARAMS, "sweep": empty}, GOOD)  # no sweep: nothing to refuse
        assert _plan(sweep=empty)["sweep"]["enabled"] is False


@pytest.mark.parametrize("sweep, reason", [
    ([{"seed": 3}, {"learning_rate": 0.0003}], r"candidate 1 overrides 'learning_rate'.*allowed: seed, num_envs"),
    ([{"task": "Pusher-v5"}], "overrides 'task'"),
    ([{"num_envs": 0}], r"candidate 0: num_envs = 0 is refused: it must be at least 1"),
    ([{"seed": "3"}], r"seed = '3' is refused"),
    ([{"seed": 3}, {"seed": 4}, {"seed": 3}], r"candidates 0 and 2 have the same params"),
    ([{"seed": 0}, {}], r"candidates 0 and 1 have the same params"),  # {} is the form's own seed 0
    ([{"seed": i} for i in range(MAX_CANDIDATES + 1)], f"at most {MAX_CANDIDATES}"),
    ({"seed": list(range(5)), "num_envs": [8, 16, 32, 64]}, "20 candidates"),
    ({"seed": []}, "non-empty list"),
    ([3, 4], r"sweep\[0\] must be an object"),
    ([{"train_time_budget_seconds": 50_000}], r"candidate 0: train_time_budget_seconds \(50000\) must be below"),
])
def test_a_bad_sweep_is_refused_before_the_run_with_the_reason(sweep, reason):
    with pytest.raises(ParamRuleError, match=reason):
        check_params({**PARAMS, "training_timeout_hours": 12.0, "sweep": sweep}, GOOD)


def test_a_sweep_runs_on_either_backend_and_a_bad_one_is_refused_on_hyperpod_too():
    env = {**GOOD, "hyperpod": {"cluster_name": "c", "submit_host_tag_key": "k", "submit_host_tag_value": "v"}}
    check_params({**PARAMS, "training_backend": "hyperpod", "sweep": SWEEP}, env)  # a Slurm job array
    with pytest.raises(ParamRuleError, match="candidates 0 and 1 have the same params"):
        check_params({**PARAMS, "training_backend": "hyperpod", "sweep": [{"seed": 3}, {"seed": 3}]}, env)


def test_the_form_field_refuses_a_bad_sweep_when_the_run_is_created():
    """Airflow validates each param against its JSON schema when the run is created (HTTP 400 / the form)."""
    from airflow.sdk.exceptions import ParamValidationError

    field = build_params()["sweep"]
    assert field.resolve(SWEEP) == SWEEP and field.resolve(None) is None
    assert field.resolve({"seed": [1, 2]}) == {"seed": [1, 2]}
    for bad in ([{"learning_rate": 0.1}], [{"seed": -1}], [{"num_envs": 1.5}], {"seed": []}, {"task": ["x"]},
                [{"seed": i} for i in range(MAX_CANDIDATES + 1)], "seed=3"):
        with pytest.raises(ParamValidationError):  # with the JSON schema's message
            field.resolve(bad)
    max_parallel = build_params()["sweep_max_parallel"]
    for bad in (0, MAX_CANDIDATES + 1):
        with pytest.raises(ParamValidationError, match="minimum|maximum"):
            max_parallel.resolve(bad)


def test_each_candidate_has_its_own_key_suffix_prefix_job_and_lane():
    plan = _plan(sweep=SWEEP)
    key = plan["run_key"]
    sweep = plan["sweep"]
    assert sweep["enabled"] and sweep["max_parallel"] == 2 and len(sweep["candidates"]) == 3
    names = set()
    for i, cand in enumerate(sweep["candidates"]):
        assert cand["index"] == i and cand["candidate"] == f"c{i}" and cand["candidate_key"] == f"{key}-c{i}"
        assert cand["job_name"] == f"sim2real-train-{key}-c{i}" and len(cand["job_name"]) <= 128
        prefix = f"s3://b/runs/{key}/candidates/c{i}/"
        assert cand["output_uri"] == f"{prefix}checkpoints/" and cand["environment"]["OUTPUT_URI"] == cand["output_uri"]
        assert cand["manifest_uri"] == f"{prefix}checkpoints/manifest.json"
        assert cand["report_uri"] == f"{prefix}eval/report.json"
        assert cand["ssm_output_key_prefix"] == f"runs/{key}/candidates/c{i}/eval/ssm"
        assert cand["environment"]["RUN_KEY"] == key  # the jobs carry the run's key (the orphan sweep finds them)
        names.add(cand["job_name"])
    assert len(names) == 3
    envs = [c["environment"] for c in sweep["candidates"]]
    assert [e["SEED"] for e in envs] == ["3", "4", "5"] and [e["NUM_ENVS"] for e in envs] == ["8", "64", "8"]
    assert [e["TIME_BUDGET_SECONDS"] for e in envs] == ["60", "60", "30"]
    assert sweep["candidates"][1]["params"] == {"seed": 4, "num_envs": 64, "max_iterations": 40,
                                                "train_time_budget_seconds": 60}
    # lanes: at most 2 jobs at once; c2 waits for c0
    assert [c["lane_after"] for c in sweep["candidates"]] == [None, None, 0]
    # the selection's episodes do not overlap the confirmation evaluation's (eval_seed .. eval_seed + episodes - 1)
    assert all(c["eval_seed"] == PARAMS["eval_seed"] + PARAMS["eval_episodes"] for c in sweep["candidates"])
    json.dumps(plan)


def test_the_preflight_is_sized_for_the_jobs_that_run_at_once():
    assert _plan(sweep=SWEEP)["sweep"]["parallel_nodes"] == 2  # min(max parallel 2, 3 candidates) x 1 node
    assert _plan(sweep=SWEEP, sweep_max_parallel=8)["sweep"]["parallel_nodes"] == 3
    assert _plan(sweep=SWEEP, sweep_max_parallel=1)["sweep"]["parallel_nodes"] == 1
    gpu = _plan(sweep=SWEEP, task="Isaac-Velocity-Rough-Anymal-C-v0", num_nodes=4)
    assert gpu["sweep"]["parallel_nodes"] == 8  # 2 jobs x 4 nodes: the quota must hold both at once


def test_the_dag_checks_capacity_for_the_parallel_nodes():
    from airflow.dag_processing.dagbag import DagBag

    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.operators.quota import compute_verdict

    dag = DagBag(dag_folder="dags/sim_to_real.py").dags["sim_to_real"]
    check = dag.get_task(ids.SWEEP_CHECK_CAPACITY)
    assert check.num_nodes.key == "sweep.parallel_nodes"
    # A quota that holds one 48-vCPU node but not two refuses the sweep's two parallel jobs, with the numbers.
    args = dict(instance_type="g6.12xlarge", vcpu_per_node=48, gpus_per_node=4, service_code="ec2",
                quota_code="L-DB2E81BA", quota_name="Running On-Demand G and VT instances", limit_vcpu=64,
                in_use_vcpu=0)
    assert compute_verdict(num_nodes=1, **args)["ok"]
    verdict = compute_verdict(num_nodes=_plan(sweep=SWEEP)["sweep"]["parallel_nodes"], **args)
    assert not verdict["ok"] and verdict["needed_vcpu"] == 96


def test_the_budget_counts_every_candidate_and_refuses_the_sum_up_front():
    one = _plan()["budget"]
    three = _plan(sweep=SWEEP)["budget"]
    trainings = [i for i in three["items"] if i["stage"] == "training"]
    assert [i["basis"].split(":")[0] for i in trainings] == ["sweep candidate c0", "sweep candidate c1",
                                                            "sweep candidate c2"]
    single = next(i for i in one["items"] if i["stage"] == "training")["usd"]
    assert [i["usd"] for i in trainings] == [single, single, round(single / 2, 2)]  # c2 trains 30 s, not 60
    assert three["total_usd"] == pytest.approx(one["total_usd"] + 1.5 * single, abs=0.02)
    # a budget that holds one run but not the sweep: refused before anything runs, with the numbers
    limit = round(one["total_usd"] + 0.5 * single, 2)
    _plan(max_budget_usd=limit)
    with pytest.raises(BudgetExceeded, match=r"estimated cost \$[0-9.]+ is above max_budget_usd .*sweep candidate c2"):
        _plan(sweep=SWEEP, max_budget_usd=limit)


def test_each_candidate_may_spend_its_share_of_the_training_allowance():
    budget = _plan(sweep=SWEEP)["budget"]
    limits = candidate_cost_limits(budget, 3)
    allowance = budget["max_budget_usd"] - sum(i["usd"] for i in budget["items"] if i["stage"] != "training")
    assert sum(limits) == pytest.approx(allowance, abs=0.03) and limits[0] == limits[1] == pytest.approx(2 * limits[2], abs=0.02)
    assert [c["cost_limit_usd"] for c in _plan(sweep=SWEEP)["sweep"]["candidates"]] == limits
    assert candidate_cost_limits({**budget, "max_budget_usd": 0}, 3) == [None, None, None]
    assert candidate_cost_limits(budget, 0) == []


def _report(successes, n=20):
    lo, hi = wilson_interval(successes, n)
    return {"success_rate": successes / n, "successes": successes, "episodes": n, "ci95": [lo, hi]}


def test_the_best_wilson_lower_bound_wins_and_ties_are_deterministic():
    # the lower bound, not the point estimate: 19/20 (0.95, lower 0.76) beats 10/10 (1.0, lower 0.72)
    results = [{"index": 0, "report": _report(10, 10)}, {"index": 1, "report": _report(19, 20)}]
    assert best_candidate(results)["index"] == 1
    # same lower bound: the higher success rate; same both: the lower index (the order of the sweep field)
    tie = {"success_rate": 0.5, "ci95": [0.3, 0.7]}
    higher = {"success_rate": 0.6, "ci95": [0.3, 0.8]}
    assert best_candidate([{"index": 0, "report": tie}, {"index": 1, "report": higher}])["index"] == 1
    assert best_candidate([{"index": 2, "report": tie}, {"index": 1, "report": tie}, {"index": 3, "report": tie}])["index"] == 1
    with pytest.raises(ValueError, match="no candidate"):
        best_candidate([])


def test_pick_best_records_every_candidate_and_the_lineage_lists_them():
    from sim2real.orchestration.lineage import build_lineage, lineage_errors

    plan = _plan(sweep=SWEEP)
    trainings = [{"job_id": f"job-{i}", "num_nodes": 1, "started_at": 0.0, "stopped_at": 60.0} for i in range(3)]
    manifests = [{"checkpoint_uri": f"{c['output_uri']}policy.pt", "sha256": f"{i:x}" * 64}
                 for i, c in enumerate(plan["sweep"]["candidates"])]
    reports = [_report(12), _report(18), _report(18)]  # c1 and c2 tie: the lower index wins
    picked = pick_best_result(plan, trainings, manifests, reports)
    assert picked["winner"] == 1 and picked["candidate"] == "c1" and picked["training"]["job_id"] == "job-1"
    assert picked["manifest_uri"] == plan["sweep"]["candidates"][1]["manifest_uri"]
    assert [r["won"] for r in picked["candidates"]] == [False, True, False]
    assert [r["checkpoint_sha256"] for r in picked["candidates"]] == [m["sha256"] for m in manifests]
    with pytest.raises(ValueError, match="do not match the 3 planned candidates"):
        pick_best_result(plan, trainings[:2], manifests, reports)

    lineage = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="r", params=plan["params"],
                            plan=plan, sweep=picked, evaluation={**reports[1], "checkpoint_sha256": manifests[1]["sha256"]})
    assert lineage_errors(lineage) == []
    assert lineage["chain"]["batch_job_id"] == "job-1"  # the winner's job is the chain's
    assert [c["candidate"] for c in lineage["candidates"]] == ["c0", "c1", "c2"]
    assert lineage["sweep"]["winner"] == 1 and lineage["sweep"]["max_parallel"] == 2
    assert {"success_rate", "ci95", "checkpoint_sha256", "params", "batch_job_id"} <= set(lineage["candidates"][0])
    from sim2real.orchestration.lineage import render_markdown

    markdown = render_markdown(lineage)  # lineage.md: one row per candidate, the winner marked
    assert "## Sweep" in markdown and "| c1 | " in markdown and "| job-1 | " in markdown
    rows = [line for line in markdown.splitlines() if re.match(r"^\| c[0-9]+ \|", line)]
    assert [row.endswith("| yes |") for row in rows] == [False, True, False]


def test_a_run_without_a_sweep_lists_its_one_policy_as_the_only_candidate():
    from sim2real.orchestration.lineage import build_lineage, lineage_errors

    plan = _plan()
    lineage = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="r", params=plan["params"],
                            plan=plan, training={"job_id": "job-x"}, checkpoint={"checkpoint_uri": "s3://b/k",
                                                                                 "sha256": "a" * 64},
                            evaluation={**_report(15), "checkpoint_sha256": "a" * 64})
    assert lineage_errors(lineage) == [] and lineage["sweep"] is None
    (only,) = lineage["candidates"]
    assert only["won"] and only["batch_job_id"] == "job-x" and only["checkpoint_sha256"] == "a" * 64
    assert only["params"] == {k: PARAMS[k] for k in SWEEP_KEYS} and only["success_rate"] == 0.75


def test_each_candidate_hands_its_own_mlflow_runs_to_its_trainer_and_evaluation():
    from sim2real.contract import env_vars
    from sim2real.orchestration.stages.evaluate import eval_commands
    from sim2real.orchestration.stages.run import apply_tracking

    plan = json.loads(json.dumps(_plan(sweep=SWEEP)))
    runs = {f"c{i}": {"rl_training": f"{i}" * 32, "evaluation": f"{i + 5}" * 32} for i in range(3)}
    tracking = {"enabled": True, "tracking_uri": "http://127.0.0.1:5000", "experiment_name": "sim2real",
                "experiment_id": "1", "parent_run_id": "a" * 32, "runs": {"rl_training": "b" * 32, "evaluation": "c" * 32},
                "candidate_runs": runs, "ui_url": None}
    apply_tracking(plan, tracking, GOOD)
    for i, cand in enumerate(plan["sweep"]["candidates"]):
        assert cand["environment"][env_vars.MLFLOW_RUN_ID] == f"{i}" * 32
        assert cand["environment"][env_vars.MLFLOW_PARENT_RUN_ID] == "a" * 32
        assert cand["eval_environment"][env_vars.MLFLOW_RUN_ID] == f"{i + 5}" * 32
        commands = eval_commands(plan, {"checkpoint_uri": f"{cand['output_uri']}policy.pt"},
                                 manifest_uri=cand["manifest_uri"], report_uri=cand["report_uri"],
                                 seed=cand["eval_seed"], environment=cand["eval_environment"])[0]
        assert f"export MLFLOW_RUN_ID={i + 5}" in commands and cand["report_uri"] in commands
        assert cand["manifest_uri"] in commands and f" {cand['eval_seed']}" in commands
    assert plan["batch"]["environment"][env_vars.MLFLOW_RUN_ID] == "b" * 32  # the run's own runs are unchanged
    assert plan["tracking"]["candidate_runs"] == runs


def _results(plan, failed=()):
    """The mapped tasks' results of ``plan``'s candidates, ``None`` for the ``failed`` ones (no XCom)."""
    trainings = [None if i in failed else {"job_id": f"job-{i}", "num_nodes": 1, "started_at": 0.0, "stopped_at": 60.0}
                 for i in range(len(plan["sweep"]["candidates"]))]
    manifests = [None if i in failed else {"checkpoint_uri": f"{c['output_uri']}policy.pt", "sha256": f"{i:x}" * 64}
                 for i, c in enumerate(plan["sweep"]["candidates"])]
    return trainings, manifests


def test_the_form_field_sweep_min_candidates_defaults_to_any_survivor_and_is_refused_above_the_candidates():
    from sim2real.orchestration.stages.sweep import SweepPlan

    assert build_params()["sweep_min_candidates"].value == 1  # any survivor: a lost job does not cost the sweep
    plan = _plan(sweep=SWEEP)
    assert (plan["sweep"]["min_candidates"], plan["sweep"]["max_failed"]) == (1, 2)
    assert SweepPlan.from_plan(_plan(sweep=SWEEP, sweep_min_candidates=3)).max_failed == 0  # every candidate
    assert _plan()["sweep"]["min_candidates"] == 0  # no sweep
    with pytest.raises(ParamRuleError, match="sweep_min_candidates 4 is above the sweep's 3 candidates"):
        check_params({**PARAMS, "sweep": SWEEP, "sweep_min_candidates": 4}, GOOD)
    check_params({**PARAMS, "sweep_min_candidates": 4}, GOOD)  # no sweep: nothing to refuse


def test_pick_best_picks_among_the_survivors_and_records_the_failed_with_their_reason():
    from sim2real.orchestration.lineage import build_lineage, lineage_errors, render_markdown
    from sim2real.orchestration.run_note import render_run_note

    plan = _plan(sweep=SWEEP)
    trainings, manifests = _results(plan, failed=(1,))
    reports = [_report(12), None, _report(15)]
    failures = {1: {"state": "failed", "reason": "sweep.train_policy is failed; Batch job job-1 FAILED (Host EC2 "
                    "instance terminated)", "batch_job_id": "job-1"}}
    picked = pick_best_result(plan, trainings, manifests, reports, failures)
    # the best lower bound among c0 and c2 (the failed c1 is out of the pick, whatever it would have scored)
    assert picked["winner"] == 2 and picked["failed"] == [1] and picked["survivors"] == 2
    c0, c1, c2 = picked["candidates"]
    assert (c0["state"], c0["reason"], c2["won"]) == ("success", None, True)
    assert c1["state"] == "failed" and "Host EC2 instance terminated" in c1["reason"] and c1["batch_job_id"] == "job-1"
    assert c1["success_rate"] is None and c1["checkpoint_sha256"] is None and not c1["won"]
    # a candidate that handed on nothing though no task state was read is recorded as failed too
    unlisted = pick_best_result(plan, trainings, manifests, reports)
    assert unlisted["candidates"][1]["reason"] == "no training result, no checkpoint manifest, no evaluation report handed on"

    lineage = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="r", params=plan["params"],
                            plan=plan, sweep=picked, evaluation={**reports[2], "checkpoint_sha256": manifests[2]["sha256"]})
    assert lineage_errors(lineage) == []
    assert lineage["sweep"]["failed"] == [1] and lineage["sweep"]["min_candidates"] == 1
    assert "1 of 3 candidates failed (c1): picked among the 2 that succeeded" in render_markdown(lineage)
    note = render_run_note(lineage)
    assert "**Sweep:** 1 of 3 candidates failed (c1: sweep.train_policy is failed; Batch job job-1 FAILED" in note


def test_a_plan_made_before_sweep_min_candidates_still_needs_every_candidate():
    """A run planned before the field existed (its plan's sweep section has no min_candidates / max_failed) that
    resumes after an upgrade keeps the rule it was planned with: every candidate must succeed."""
    plan = json.loads(json.dumps(_plan(sweep=SWEEP)))
    for key in ("min_candidates", "max_failed"):
        plan["sweep"].pop(key)
    assert SweepPlan.from_plan(plan).max_failed == 0
    trainings, manifests = _results(plan, failed=(1,))
    with pytest.raises(ValueError, match="only 2 of 3 sweep candidates succeeded, sweep_min_candidates is 3"):
        pick_best_result(plan, trainings, manifests, [_report(12), None, _report(15)],
                         {1: {"state": "failed", "reason": "sweep.train_policy is failed"}})


def test_too_few_survivors_fail_the_pick_with_every_failed_candidate_named():
    plan = _plan(sweep=SWEEP, sweep_min_candidates=2)
    trainings, manifests = _results(plan, failed=(0, 2))
    failures = {0: {"state": "failed", "reason": "sweep.train_policy is failed"},
                2: {"state": "upstream_failed", "reason": "sweep.submit_training is upstream_failed"}}
    with pytest.raises(ValueError, match=r"only 1 of 3 sweep candidates succeeded, sweep_min_candidates is 2: "
                                         r"c0 failed: sweep.train_policy is failed; c2 upstream_failed: "
                                         r"sweep.submit_training is upstream_failed"):
        pick_best_result(plan, trainings, manifests, [None, _report(15), None], failures)
    with pytest.raises(ValueError, match="only 0 of 3"):  # none survived: nothing to pick, whatever the minimum
        pick_best_result(_plan(sweep=SWEEP), [None] * 3, [None] * 3, [None] * 3)
    # no pick: the lineage still records each failed candidate's state and reason, from the task states
    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.lineage import build_lineage, lineage_errors

    lineage = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="r", params=plan["params"],
                            plan=plan, task_states={f"{ids.SWEEP_TRAIN_POLICY}[0]": {"state": "failed"},
                                                    f"{ids.SWEEP_TRAIN_POLICY}[1]": {"state": "success"},
                                                    f"{ids.SWEEP_SUBMIT_TRAINING}[2]": {"state": "upstream_failed"},
                                                    ids.SWEEP_PICK_BEST: {"state": "failed"}})
    assert lineage_errors(lineage) == [] and lineage["sweep"] is None
    assert [(c["state"], c["reason"]) for c in lineage["candidates"]] == [
        ("failed", f"{ids.SWEEP_TRAIN_POLICY} is failed"), (None, None),
        ("upstream_failed", f"{ids.SWEEP_SUBMIT_TRAINING} is upstream_failed")]


def test_a_candidates_failure_is_its_first_failed_task_and_its_jobs_reason():
    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.candidates import failed_candidate
    from sim2real.orchestration.stages.sweep import forgiven_task_keys

    assert failed_candidate({ids.SWEEP_TRAIN_POLICY: "success", ids.SWEEP_READ_EVAL_REPORT: "success"}) is None
    states = {ids.SWEEP_SUBMIT_TRAINING: "success", ids.SWEEP_TRAIN_POLICY: "failed",
              ids.SWEEP_WAIT_FOR_CHECKPOINT: "upstream_failed", ids.SWEEP_READ_EVAL_REPORT: "upstream_failed"}
    job = {"jobId": "j-1", "status": "FAILED", "statusReason": "Host EC2 (instance i-1) terminated."}
    out = failed_candidate(states, job)
    assert out["state"] == "failed" and out["batch_job_id"] == "j-1"
    assert out["reason"] == (f"{ids.SWEEP_TRAIN_POLICY} is failed; Batch job j-1 FAILED (Host EC2 (instance i-1) "
                             "terminated.)")
    assert set(out["tasks"]) == {ids.SWEEP_TRAIN_POLICY, ids.SWEEP_WAIT_FOR_CHECKPOINT, ids.SWEEP_READ_EVAL_REPORT}
    only_followers = failed_candidate({ids.SWEEP_SUBMIT_TRAINING: "upstream_failed"})
    assert only_followers["state"] == "upstream_failed" and only_followers["batch_job_id"] is None
    keys = forgiven_task_keys({"failed": [1]})
    assert f"{ids.SWEEP_TRAIN_POLICY}[1]" in keys and f"{ids.SWEEP_WAIT_FOR_SLOT}[1]" in keys and len(keys) == 9
    assert f"{ids.SWEEP_TRAIN_ON_SLURM}[1]" in keys  # a HyperPod sweep's failed array task is forgiven too
    assert f"{ids.SWEEP_TRAIN_ON_EKS}[1]" in keys  # and a HyperPod EKS candidate's failed PyTorchJob
    on_slurm = failed_candidate({ids.SWEEP_TRAIN_ON_SLURM: "failed", ids.SWEEP_WAIT_FOR_CHECKPOINT: "upstream_failed"})
    assert on_slurm["state"] == "failed" and on_slurm["reason"] == f"{ids.SWEEP_TRAIN_ON_SLURM} is failed"
    assert forgiven_task_keys(None) == [] and forgiven_task_keys({"failed": []}) == []


def test_pick_best_waits_for_every_candidate_and_is_skipped_with_the_sweep_path():
    """Trigger rule all_done_min_one_success: it runs once every candidate ended, also when some failed; it is
    upstream_failed when none succeeded, and skipped when the run takes the single-policy or HyperPod path (the
    sweep group is skipped whole)."""
    from airflow.dag_processing.dagbag import DagBag

    from sim2real.contract import task_ids as ids

    dag = DagBag(dag_folder="dags/sim_to_real.py").dags["sim_to_real"]
    pick = dag.get_task(ids.SWEEP_PICK_BEST)
    assert pick.trigger_rule == "all_done_min_one_success"
    assert ids.SWEEP_READ_EVAL_REPORT in pick.upstream_task_ids and ids.PREPARE_RUN not in pick.upstream_task_ids
    lane = dag.get_task(ids.SWEEP_WAIT_FOR_SLOT)
    assert "max_failed" in lane.template_fields
    # The join of both backends' training paths in the mapped group: a "fast-triggered" rule there is evaluated,
    # before expansion, against every candidate's training, so one failed candidate failed all of them.
    join = dag.get_task(ids.SWEEP_WAIT_FOR_CHECKPOINT)
    assert {ids.SWEEP_TRAIN_POLICY, ids.SWEEP_TRAIN_ON_SLURM} <= join.upstream_task_ids
    assert join.trigger_rule == "none_failed"


def test_a_candidates_training_is_not_retried_on_either_backend_and_the_slurm_wait_counts_the_failed():
    """A retry of an attach-mode wait reattaches to the same ended Batch job or Slurm array task and fails again
    while the run holds the GPUs; a HyperPod candidate's failure is counted against sweep_min_candidates."""
    from airflow.dag_processing.dagbag import DagBag

    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.candidates import CANDIDATE_TASKS

    dag = DagBag(dag_folder="dags/sim_to_real.py").dags["sim_to_real"]
    assert dag.get_task(ids.SWEEP_TRAIN_POLICY).retries == 0
    on_slurm = dag.get_task(ids.SWEEP_TRAIN_ON_SLURM)
    assert on_slurm.retries == 0
    assert {"array_task_ids", "sweep_max_failed"} <= set(on_slurm.template_fields)
    assert on_slurm.sweep_task_ids == list(CANDIDATE_TASKS)
