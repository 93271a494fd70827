import json

import pytest

from sim2real.orchestration.params import ParamRuleError
from sim2real.orchestration.stages.run import check_params, plan_run
from sim2real.orchestration.stages import check_report, deployment_components, eval_commands, quality_gate
from sim2real.contract.stats import wilson_interval

from tests.orchestration.test_config import GOOD

PARAMS = {
    "training_backend": "batch", "task": "Reacher-v5", "num_nodes": 1, "max_iterations": 40, "num_envs": 8,
    "seed": 0, "train_time_budget_seconds": 60, "image_source_version": "", "hyperpod_cluster_name": "",
    "eval_episodes": 20, "eval_seed": 1000, "min_success_rate": 0.5, "gate_on_lower_bound": False,
    "run_vla_finetune": True, "embodiment_tag": "new_embodiment", "vla_instance_type": "ml.p4d.24xlarge",
    "vla_max_steps": 10000, "vla_global_batch_size": 32, "dataset_s3_uri": "", "approval_timeout_hours": 24.0,
    "deploy_to_edge": True, "thing_group_name": "", "rollout_max_per_minute": 10,
    "abort_failure_threshold_percent": 10.0, "deployment_timeout_minutes": 30, "runnable_timeout_minutes": 30,
    "training_timeout_hours": 12.0, "eval_timeout_minutes": 30, "max_budget_usd": 500.0,
    "max_rounds": 1, "round_iterations": 1000, "retrain_round": None,
}


def test_plan_threads_the_run_key_through_every_stage():
    plan = plan_run(dag_id="sim_to_real", run_id="manual__2026-11-29T00:00:00+00:00", params=PARAMS, env=GOOD)
    key = plan["run_key"]
    assert plan["run_uri"] == f"s3://b/runs/{key}/"
    assert plan["batch"]["job_name"].endswith(key)
    assert plan["batch"]["environment"]["OUTPUT_URI"] == f"s3://b/runs/{key}/checkpoints/"
    assert all(isinstance(v, str) for v in plan["batch"]["environment"].values())  # Batch env values are strings
    assert plan["checkpoint"]["manifest_uri"].startswith(f"s3://b/runs/{key}/")
    assert plan["evaluation"]["report_uri"] == f"s3://b/runs/{key}/eval/report.json"
    assert plan["vla"]["display_name"] == key and plan["vla"]["parameters"]["RunKey"] == key
    assert plan["deploy"]["deployment_name"] == f"sim2real-{key}"
    assert plan["tags"] == {"sim2real:run-key": key}
    assert plan["evaluation"]["execution_timeout_seconds"] == 30 * 60
    assert plan["vla"]["parameters"]["NumGpus"] == 8
    json.dumps(plan)  # XCom-serialisable


def test_zero_time_budget_means_no_budget_for_the_trainer():
    """The trainer refuses TIME_BUDGET_SECONDS=0; 0 in the form means "run max_iterations"."""
    plan = plan_run(dag_id="d", run_id="r", params={**PARAMS, "train_time_budget_seconds": 0}, env=GOOD)
    assert "TIME_BUDGET_SECONDS" not in plan["batch"]["environment"]
    plan = plan_run(dag_id="d", run_id="r", params=PARAMS, env=GOOD)
    assert plan["batch"]["environment"]["TIME_BUDGET_SECONDS"] == "60"


@pytest.mark.parametrize("override, reason", [
    ({"training_backend": "hyperpod"}, "hyperpod_cluster_name"),
    ({"training_backend": "hyperpod", "hyperpod_cluster_name": "c"}, "submit_host_tag_key"),
    ({"num_nodes": 2}, "num_nodes > 1"),
    ({"num_nodes": 2, "task": "Pusher-v5"}, "num_nodes > 1"),
    ({"deploy_to_edge": True, "run_vla_finetune": False}, "deploy_to_edge needs run_vla_finetune"),
    ({"train_time_budget_seconds": 7200, "training_timeout_hours": 1.0}, "train_time_budget_seconds"),
])
def test_cross_field_rules_refuse_with_the_reason(override, reason):
    with pytest.raises(ParamRuleError, match=reason):
        check_params({**PARAMS, **override}, GOOD)


def test_isaaclab_task_refused_in_the_sandbox_only():
    check_params({**PARAMS, "task": "Isaac-Velocity-Rough-H1-v0"}, GOOD)
    with pytest.raises(ParamRuleError, match="Isaac Lab GPU image"):
        check_params({**PARAMS, "task": "Isaac-Velocity-Rough-H1-v0"}, {**GOOD, "sandbox": True})


def test_every_cpu_trainer_task_is_a_sandbox_task_of_the_form():
    from sim2real.orchestration.params import MUJOCO_TASKS
    from sim2real.workloads.tasks import TASKS as REGISTRY

    assert set(MUJOCO_TASKS) == {k for k, v in REGISTRY.items() if v.kind == "gymnasium"}
    check_params({**PARAMS, "task": "Pusher-v5"}, {**GOOD, "sandbox": True})


def test_all_broken_rules_listed_together():
    with pytest.raises(ParamRuleError) as err:
        check_params({**PARAMS, "num_nodes": 3, "run_vla_finetune": False}, GOOD)
    assert len(err.value.errors) == 2


def test_eval_command_is_shell_quoted():
    plan = plan_run(dag_id="d", run_id="r", params=PARAMS, env=GOOD)
    cmds = eval_commands(plan, {"checkpoint_uri": "s3://b/x y;rm -rf /.pt", "task": "Reacher-v5"})
    assert "'s3://b/x y;rm -rf /.pt'" in cmds[-1]
    assert "--episodes 20" in cmds[-1] and "--seed 1000" in cmds[-1]
    assert cmds[-1].split("sim2real-evaluate ", 1)[1].startswith("--contract-version 1 "), cmds[-1]


def test_eval_command_runs_with_bash_under_sh():
    """AWS-RunShellScript runs the lines with sh (dash): the command must not depend on sh being bash."""
    import shutil
    import subprocess

    plan = plan_run(dag_id="d", run_id="r", params=PARAMS, env=GOOD)
    plan["evaluation"]["command_template"] = (
        "[[ {task} == Reacher-v5 ]] && echo \"ok $BASH_VERSION\" | cat && echo {checkpoint_uri}")
    cmds = eval_commands(plan, {"checkpoint_uri": "s3://b/it's;x.pt", "task": "Reacher-v5"})
    out = subprocess.run([shutil.which("dash") or "sh", "-c", "\n".join(cmds)], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("ok ") and len(lines[0]) > 3 and lines[1] == "s3://b/it's;x.pt"
    # pipefail and -e hold inside: a failing first stage of a pipeline fails the command.
    plan["evaluation"]["command_template"] = "false | cat; echo not-reached {task}"
    out = subprocess.run(["sh", "-c", "\n".join(eval_commands(plan, {"checkpoint_uri": "s3://b/c.pt"}))],
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "not-reached" not in out.stdout


SHA = "a" * 64


def _report(k, n, sha=SHA):
    """A report as sim2real-evaluate writes it (schema eval_report)."""
    lo, hi = wilson_interval(k, n)
    return {"schema_version": 1, "task": "Reacher-v5", "checkpoint_uri": "s3://b/c.pt", "checkpoint_sha256": sha,
            "episodes": n, "successes": k, "success_rate": k / n, "ci95": [lo, hi], "ci_method": "wilson",
            "mean_return": -5.0, "episode_lengths": [50] * n, "returns": [-5.0] * n,
            "successes_per_episode": [i < k for i in range(n)], "seeds": list(range(1000, 1000 + n)),
            "success_definition": "fingertip within 0.02 m", "policy": "deterministic", "iteration": 3,
            "manifest_uri": "s3://b/manifest.json", "created_at": "2026-12-03T00:00:00Z"}


def test_wilson_interval_known_values():
    # Reference values: Wilson score interval, z = 1.96 (Newcombe 1998, table I: 81/263 -> 0.2553..0.3662).
    lo, hi = wilson_interval(81, 263)
    assert lo == pytest.approx(0.2553, abs=1e-4) and hi == pytest.approx(0.3662, abs=1e-4)
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        wilson_interval(3, 0)


def test_check_report_rejects_foreign_or_inconsistent_reports():
    check_report(_report(7, 20), expected_sha256=SHA, expected_episodes=20)
    with pytest.raises(ValueError, match="sha256"):
        check_report(_report(7, 20, sha="b" * 64), expected_sha256=SHA, expected_episodes=20)
    with pytest.raises(ValueError, match="episodes"):
        check_report(_report(7, 10), expected_sha256=SHA, expected_episodes=20)
    bad = _report(7, 20)
    bad["success_rate"] = 0.9
    with pytest.raises(ValueError, match="success_rate"):
        check_report(bad, expected_sha256=SHA, expected_episodes=20)
    bad = _report(7, 20)
    bad["ci95"] = [0.0, 1.0]
    with pytest.raises(ValueError, match="Wilson"):
        check_report(bad, expected_sha256=SHA, expected_episodes=20)
    # another evaluator's shape: refused where it is read, naming the field
    other = {**_report(7, 20), "success": 0.35}
    del other["successes_per_episode"]
    with pytest.raises(ValueError, match="eval_report schema: .*successes_per_episode.*"):
        check_report(other, expected_sha256=SHA, expected_episodes=20)


def test_quality_gate_point_estimate_and_lower_bound():
    report = _report(12, 20)  # 0.6, CI about [0.39, 0.78]
    assert quality_gate(report, min_success_rate=0.5, on_lower_bound=False)["passed"]
    verdict = quality_gate(report, min_success_rate=0.5, on_lower_bound=True)
    assert not verdict["passed"] and "ci95_lower" in verdict["reason"] and "12/20" in verdict["reason"]


def test_deployment_components_merge_the_policy_and_its_sha256():
    plan = plan_run(dag_id="d", run_id="r", params=PARAMS, env=GOOD)
    comps = deployment_components(plan, {"model_data_url": "s3://b/m.tar.gz", "model_package_arn": "arn:pkg"},
                                  {"checkpoint_uri": "s3://b/c.pt", "sha256": "ff"})
    merge = json.loads(comps["c"]["configurationUpdate"]["merge"])
    assert comps["c"]["componentVersion"] == "1.0.0"
    assert merge == {"ModelS3Uri": "s3://b/c.pt", "ModelSha256": "ff", "ModelPackageArn": "arn:pkg"}


HYPERPOD_ENV = {**GOOD, "hyperpod": {"cluster_name": "sim2real-hyperpod", "gpu_instance_group": "gpu", "min_count": 1,
                                      "instance_type": "ml.g5.12xlarge",
                                      "submit_host_tag_key": "sim2real:role", "submit_host_tag_value": "hyperpod-head",
                                      "shared_dir": "/fsx/sim2real"}}


@pytest.mark.parametrize("override, env, reason", [
    ({"training_backend": "hyperpod"}, {**GOOD, "hyperpod": {"submit_host_tag_key": "k", "submit_host_tag_value": "v"}},
     "needs a cluster"),
    ({"training_backend": "hyperpod"}, {**GOOD, "hyperpod": {"cluster_name": "c"}}, "submit_host_tag_value"),
])
def test_hyperpod_rules_name_the_missing_setting(override, env, reason):
    with pytest.raises(ParamRuleError, match=reason):
        check_params({**PARAMS, **override}, env)


def test_hyperpod_backend_valid_with_the_config_or_the_form_cluster():
    check_params({**PARAMS, "training_backend": "hyperpod"}, HYPERPOD_ENV)
    env = {**GOOD, "hyperpod": {**HYPERPOD_ENV["hyperpod"], "cluster_name": ""}}
    check_params({**PARAMS, "training_backend": "hyperpod", "hyperpod_cluster_name": "other"}, env)


def test_hyperpod_plan_submits_the_batch_training_env_under_the_run_key():
    import shlex

    params = {**PARAMS, "training_backend": "hyperpod", "task": "Isaac-Velocity-Rough-H1-v0", "num_nodes": 2,
              "hyperpod_cluster_name": ""}
    plan = plan_run(dag_id="sim_to_real", run_id="manual__x", params=params, env=HYPERPOD_ENV)
    hp, key = plan["hyperpod"], plan["run_key"]
    assert plan["backend"] == "hyperpod"
    assert hp["cluster_name"] == "sim2real-hyperpod" and hp["instance_group_name"] == "gpu"
    assert hp["target_count"] == 2 and hp["min_count"] == 1
    assert hp["job_name"] == f"sim2real-train-{key}"
    assert hp["log_path"] == f"/fsx/sim2real/logs/sim2real-train-{key}-%j.out"
    assert hp["environment"] == plan["batch"]["environment"]
    text = "\n".join(hp["submit_commands"])
    assert f"#SBATCH --job-name=sim2real-train-{key}" in text and "#SBATCH --nodes=2" in text
    assert "#SBATCH --partition=dev" in text and "#SBATCH --exclusive" in text
    assert f"export OUTPUT_URI={shlex.quote(plan['checkpoint']['output_uri'])}" in text
    assert "sbatch --parsable /fsx/sim2real/jobs/" in text and f"squeue -h -n sim2real-train-{key}" in text
    assert f"sacct -X -n -P --name sim2real-train-{key} -S now-7days -o JobID,State" in text
    assert hp["submit_commands"][0].startswith("exec bash -euo pipefail -c ")
    # Slurm's --time is the run's training_timeout_hours.
    assert hp["time_limit_minutes"] == 720 and "#SBATCH --time=720" in text
    short = plan_run(dag_id="d", run_id="r", params={**params, "training_timeout_hours": 1.5}, env=HYPERPOD_ENV)
    assert "#SBATCH --time=90" in "\n".join(short["hyperpod"]["submit_commands"])
    json.dumps(plan)
    # A form cluster name wins over the config's.
    plan = plan_run(dag_id="d", run_id="r", params={**params, "hyperpod_cluster_name": "other"}, env=HYPERPOD_ENV)
    assert plan["hyperpod"]["cluster_name"] == "other"


def test_hyperpod_plan_carries_the_training_cost_limit_priced_by_the_gpu_group():
    from sim2real.orchestration.budget import ON_DEMAND_USD_PER_HOUR, training_cost_limit, training_usd_per_node_hour

    params = {**PARAMS, "training_backend": "hyperpod", "task": "Isaac-Velocity-Rough-H1-v0", "num_nodes": 2,
              "max_budget_usd": 500}
    plan = plan_run(dag_id="sim_to_real", run_id="manual__x", params=params, env=HYPERPOD_ENV)
    hp = plan["hyperpod"]
    assert hp["usd_per_node_hour"] == ON_DEMAND_USD_PER_HOUR["ml.g5.12xlarge"]
    assert hp["usd_per_node_hour"] == training_usd_per_node_hour(plan["budget"])
    assert hp["cost_limit_usd"] == training_cost_limit(plan["budget"]) and 0 < hp["cost_limit_usd"] <= 500
    # No budget: no check.
    plan = plan_run(dag_id="d", run_id="r", params={**params, "max_budget_usd": 0}, env=HYPERPOD_ENV)
    assert plan["hyperpod"]["cost_limit_usd"] is None
    # A Batch run plans HyperPod names only: no HyperPod price or limit.
    plan = plan_run(dag_id="d", run_id="r", params={**PARAMS, "max_budget_usd": 500}, env=HYPERPOD_ENV)
    assert plan["hyperpod"]["cost_limit_usd"] is None and plan["hyperpod"]["usd_per_node_hour"] is None


def test_batch_plan_has_no_slurm_commands():
    plan = plan_run(dag_id="d", run_id="r", params=PARAMS, env=GOOD)
    assert plan["backend"] == "batch" and plan["hyperpod"]["submit_commands"] == []


def test_a_gate_the_lower_bound_cannot_reach_is_refused_with_the_reachable_bar():
    # 100/100 successes give a Wilson lower bound of 0.963: a threshold of 1.0 (or 0.97) can never pass.
    with pytest.raises(ParamRuleError) as err:
        check_params({**PARAMS, "gate_on_lower_bound": True, "min_success_rate": 1.0, "eval_episodes": 100}, GOOD)
    (reason,) = err.value.errors
    assert reason.startswith("min_success_rate 1.0 cannot be reached on the 95% Wilson lower bound with "
                             "eval_episodes 100: even 100/100 successes give 0.963"), reason
    assert "gate_on_lower_bound" in reason and "lower min_success_rate to at most 0.963" in reason
    with pytest.raises(ParamRuleError, match=r"at least 125 episodes"):  # 125/125 -> 0.9703 >= 0.97
        check_params({**PARAMS, "gate_on_lower_bound": True, "min_success_rate": 0.97, "eval_episodes": 100}, GOOD)
    assert wilson_interval(125, 125)[0] >= 0.97 > wilson_interval(124, 124)[0]
    # reachable: 0.96 with 100 episodes; any bar on the point estimate; exactly the bound of a perfect run
    check_params({**PARAMS, "gate_on_lower_bound": True, "min_success_rate": 0.96, "eval_episodes": 100}, GOOD)
    check_params({**PARAMS, "gate_on_lower_bound": False, "min_success_rate": 1.0, "eval_episodes": 100}, GOOD)
    bound = wilson_interval(20, 20)[0]
    check_params({**PARAMS, "gate_on_lower_bound": True, "min_success_rate": bound, "eval_episodes": 20}, GOOD)


def test_a_refused_value_is_one_readable_sentence_naming_the_field():
    from sim2real.orchestration.candidates import sweep_errors
    from sim2real.orchestration.params import param_problem
    from sim2real.orchestration.stages.run import apply_run_defaults, build_params

    specs = build_params()
    assert param_problem("eval_episodes", -5, specs["eval_episodes"]) == "eval_episodes = -5 is refused: it must be at least 1"
    assert param_problem("eval_episodes", 5.5, specs["eval_episodes"]) == ("eval_episodes = 5.5 is refused: it must be "
                                                                          "an integer")
    assert param_problem("training_backend", "k8s", specs["training_backend"]).startswith(
        "training_backend = 'k8s' is refused: it must be one of 'batch', 'hyperpod'")
    assert param_problem("eval_episodes", 20, specs["eval_episodes"]) is None
    (sweep,) = sweep_errors([{"num_envs": 0}], {}, specs)
    assert sweep == "sweep candidate 0: num_envs = 0 is refused: it must be at least 1"
    with pytest.raises(ParamRuleError) as err:
        apply_run_defaults({}, {"run_defaults": {"eval_episodes": 0}}, run_type="scheduled")
    assert err.value.errors == ["environment config run_defaults.eval_episodes = 0 is refused: it must be at least 1"]
    for text in (sweep, *err.value.errors):
        assert "\n" not in text and "Failed validating" not in text and "schema[" not in text
