"""Plain-Python logic of the ``sim_to_real`` DAG's own tasks (the non-AWS-operator steps).

Each function takes what the previous stages handed on and returns a JSON-serialisable dict.
The DAG file wraps them in ``@task``; tests call them directly.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.budget import check_budget, estimate_run_cost, training_cost_limit, training_usd_per_node_hour
from sim2real.orchestration.config import DEFAULT_EVAL_COMMAND, RUN_KEY_TAG, hyperpod_settings
from sim2real.orchestration.params import VLA_INSTANCE_GPUS, apply_run_defaults, check_params
from sim2real.contract.run_key import make_run_key, run_prefix
from sim2real.contract.stats import wilson_interval


class QualityGateFailed(Exception):
    """The evaluated policy is below the release bar (a verdict, not an infrastructure failure)."""


def plan_run(*, dag_id: str, run_id: str, params: Mapping[str, Any], env: Mapping[str, Any],
             run_type: Any = None) -> dict[str, Any]:
    """Validate the run and compute every name and URI the stages use.

    :param params: the run's params (already valid field by field).
    :param env: the environment config (``sim2real.orchestration.config.load_environment()``).
    :param run_type: ``dag_run.run_type``; for ``"scheduled"`` runs the config's ``run_defaults`` replace
        the form's defaults (:func:`sim2real.orchestration.params.apply_run_defaults`).
    :return: the plan: ``run_key``, ``run_uri`` (``s3://<bucket>/runs/<run_key>/``), per-stage settings,
        ``budget`` (the cost estimate, :func:`sim2real.orchestration.budget.estimate_run_cost`), ``params`` (the params
        the run uses) and ``run_defaults_applied``.
    :raises sim2real.orchestration.params.ParamRuleError: when a cross-field rule is broken (before any spend).
    :raises sim2real.orchestration.budget.BudgetExceeded: when the estimated cost is above ``max_budget_usd``.
    """
    params, applied = apply_run_defaults(params, env, run_type=run_type)
    check_params(params, env)
    budget = estimate_run_cost(params, env)
    check_budget(budget)
    run_key = make_run_key(dag_id, run_id)
    bucket = env["artifacts_bucket"]
    prefix = run_prefix(run_key)
    run_uri = f"s3://{bucket}/{prefix}"
    ckpt_uri = f"{run_uri}checkpoints/"
    source_version = params.get("image_source_version") or env["image_build"]["source_version"]
    training_env = {
        "TASK": params["task"],
        "MAX_ITERATIONS": str(params["max_iterations"]),
        "NUM_ENVS": str(params["num_envs"]),
        "SEED": str(params["seed"]),
        "OUTPUT_URI": ckpt_uri,
        "RUN_KEY": run_key,
    }
    if params.get("train_time_budget_seconds"):  # 0 = no budget: the trainer runs max_iterations
        training_env["TIME_BUDGET_SECONDS"] = str(params["train_time_budget_seconds"])
    gg = env["greengrass"]
    thing_group = params.get("thing_group_name") or gg["thing_group_name"]
    return {
        "run_key": run_key,
        "backend": params.get("training_backend", "batch"),
        "bucket": bucket,
        "run_prefix": prefix,
        "run_uri": run_uri,
        "region": env["region"],
        "tags": {RUN_KEY_TAG: run_key},
        "budget": budget,
        "params": dict(params),
        "run_defaults_applied": applied,
        "quality_gate": {"min_success_rate": float(params["min_success_rate"]),
                         "on_lower_bound": bool(params["gate_on_lower_bound"])},
        "image": {
            "project_name": env["image_build"]["codebuild_project"],
            "repository_name": env["image_build"]["ecr_repository"],
            "source_version": source_version,
            "record_bucket": bucket,  # images/<repository>/<image key>.json: the digest built for a key
        },
        "batch": {
            "job_name": f"sim2real-train-{run_key}"[:128],
            "job_queue": env["batch"]["job_queue"],
            "job_definition": env["batch"]["job_definition"],
            "compute_environment": env["batch"]["compute_environment"],
            "instance_type": env["batch"]["instance_type"],
            "num_nodes": int(params["num_nodes"]),
            "environment": training_env,
            "runnable_timeout_seconds": int(params["runnable_timeout_minutes"]) * 60,
            # Checked at each poll while the job runs (None = no check): the job is stopped before its
            # elapsed cost would pass max_budget_usd less the other stages' estimate.
            "cost_limit_usd": training_cost_limit(budget),
            "usd_per_node_hour": training_usd_per_node_hour(budget),
        },
        "hyperpod": hyperpod_plan(run_key, params, env, training_env),
        "checkpoint": {
            "output_uri": ckpt_uri,
            "manifest_uri": f"{ckpt_uri}manifest.json",
            "task": params["task"],
        },
        "evaluation": {
            "workstation_tag_key": env["evaluation"]["workstation_tag_key"],
            "workstation_tag_value": env["evaluation"]["workstation_tag_value"],
            "report_uri": f"{run_uri}eval/report.json",
            "episodes": int(params["eval_episodes"]),
            "seed": int(params["eval_seed"]),
            "execution_timeout_seconds": int(params["eval_timeout_minutes"]) * 60,
            "output_s3_bucket": bucket,
            "output_s3_key_prefix": f"{prefix}eval/ssm",
            "command_template": env["evaluation"].get("command_template") or DEFAULT_EVAL_COMMAND,
        },
        "vla": {
            "enabled": bool(params["run_vla_finetune"]),
            "pipeline_name": env["sagemaker"]["pipeline_name"],
            "role_arn": env["sagemaker"]["pipeline_role_arn"],
            "model_package_group": env["sagemaker"]["model_package_group"],
            "display_name": run_key,
            "parameters": {
                "RunKey": run_key,
                "EmbodimentTag": params["embodiment_tag"],
                "BaseModelS3Uri": f"s3://{bucket}/models/groot-base/",
                "DatasetS3Uri": params.get("dataset_s3_uri") or f"s3://{bucket}/datasets/default/",
                "OutputS3Uri": f"{run_uri}vla/",
                "InstanceType": params["vla_instance_type"],
                "MaxSteps": int(params["vla_max_steps"]),
                "GlobalBatchSize": int(params["vla_global_batch_size"]),
                "NumGpus": VLA_INSTANCE_GPUS[params["vla_instance_type"]],
            },
            "images": env["sagemaker"].get("images") or {},
        },
        "deploy": {
            "enabled": bool(params["deploy_to_edge"]) and bool(params["run_vla_finetune"]),
            "thing_group_name": thing_group,
            "components": dict(gg["components"]),
            "deployment_name": f"sim2real-{run_key}",
            "iot_job_configuration": iot_job_configuration(params),
            "timeout_seconds": deployment_timeout_seconds(params),
        },
    }


def hyperpod_plan(run_key: str, params: Mapping[str, Any], env: Mapping[str, Any],
                  training_env: Mapping[str, str], budget: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The HyperPod (Slurm) training settings of a run (also planned for a Batch run: names only, no calls).

    :return: ``cluster_name`` (the form's ``hyperpod_cluster_name``, else the config's), ``instance_group_name``,
        ``target_count`` (= ``num_nodes``), ``min_count``, ``submit_host_tag_key``/``_value``, ``job_name``
        (from the run key: a retry finds the job by it), ``log_path`` (``--output``, ``%j`` = job id),
        ``script_path``, ``time_limit_minutes`` (``#SBATCH --time``: ``training_timeout_hours`` in minutes,
        rounded up), ``submit_commands`` (``AWS-RunShellScript`` lines: write the rendered
        ``train_rl.sbatch``, then ``sbatch --parsable`` unless the job is already queued or COMPLETED; run
        with bash), ``environment``
        (the Batch job's training env), ``use_container_image``, and for a hyperpod run ``cost_limit_usd``
        (:func:`~sim2real.orchestration.budget.training_cost_limit`) and ``usd_per_node_hour``
        (:func:`~sim2real.orchestration.budget.training_usd_per_node_hour`, the price of ``hyperpod.instance_type``): the
        Slurm job is cancelled before its elapsed cost would pass the limit (None = no check; always None
        for a Batch run). Empty strings where the config has no HyperPod section (``check_params`` refuses
        the hyperpod backend then).
    :param budget: the run's cost estimate (plan ``budget``); default: :func:`~sim2real.orchestration.budget.estimate_run_cost`
        of ``params`` and ``env``, the same figure.
    """
    import math

    from sim2real.orchestration import slurm

    hp = hyperpod_settings(env)
    name = slurm.job_name(run_key)
    shared = str(hp["shared_dir"]).rstrip("/") or "/"
    log_dir = f"{shared}/logs"
    log_path = f"{log_dir}/{name}-%j.out"
    script_path = f"{shared}/jobs/{name}.sbatch"
    nodes = int(params["num_nodes"])
    section: dict[str, Any] = {
        "cluster_name": params.get("hyperpod_cluster_name") or hp["cluster_name"],
        "instance_group_name": hp["gpu_instance_group"],
        "target_count": nodes,
        "min_count": int(hp["min_count"]),
        "submit_host_tag_key": hp["submit_host_tag_key"],
        "submit_host_tag_value": hp["submit_host_tag_value"],
        "partition": hp["partition"],
        "job_name": name,
        "log_path": log_path,
        "script_path": script_path,
        "environment": dict(training_env),
        "use_container_image": bool(hp["use_container_image"]),
        # Slurm's --time: the run's training_timeout_hours (the trainer's time budget is below it).
        "time_limit_minutes": max(1, math.ceil(float(params.get("training_timeout_hours") or 12) * 60)),
        "submit_commands": [],
        "cost_limit_usd": None,
        "usd_per_node_hour": None,
    }
    if params.get("training_backend") == "hyperpod":
        budget = estimate_run_cost(params, env) if budget is None else budget
        # Checked at each poll while the Slurm job runs (None = no check): the job is cancelled before its
        # elapsed cost (target nodes x price x time since its Slurm Start) would pass the limit.
        section["cost_limit_usd"] = training_cost_limit(budget)
        section["usd_per_node_hour"] = training_usd_per_node_hour(budget)
        script = slurm.render_script(
            job_name=name, num_nodes=nodes, log_path=log_path, environment=training_env,
            launcher=hp["launcher"], partition=hp["partition"], time_limit_minutes=section["time_limit_minutes"],
            use_container_image=bool(hp["use_container_image"]), container_mounts=hp["container_mounts"],
        )
        section["submit_commands"] = slurm.submit_commands(
            script_path=script_path, script_text=script, job_name=name, log_dir=log_dir)
    return section


def deployment_timeout_seconds(params: Mapping[str, Any]) -> int:
    """The one bound on the Greengrass deployment wait, in seconds: the form's ``deployment_timeout_minutes``
    (default 60) × 60. When it passes, the deploy task cancels the deployment and fails without retry."""
    return int(params.get("deployment_timeout_minutes") or 60) * 60


def iot_job_configuration(params: Mapping[str, Any]) -> dict[str, Any]:
    """Greengrass ``CreateDeployment`` ``iotJobConfiguration`` from the form's rollout fields.

    :param params: ``rollout_max_per_minute`` (devices per minute), ``abort_failure_threshold_percent``
        (cancel the rollout once this percentage of devices failed, after at least one) and
        ``deployment_timeout_minutes`` (``timeoutConfig.inProgressTimeoutInMinutes``: a device still
        IN_PROGRESS after that long reports TIMED_OUT, the same bound the deploy task waits for).
    """
    return {
        "jobExecutionsRolloutConfig": {"maximumPerMinute": int(params["rollout_max_per_minute"])},
        "timeoutConfig": {"inProgressTimeoutInMinutes": deployment_timeout_seconds(params) // 60},
        "abortConfig": {"criteriaList": [{
            "failureType": "ALL", "action": "CANCEL",
            "thresholdPercentage": float(params["abort_failure_threshold_percent"]),
            "minNumberOfExecutedThings": 1,
        }]},
    }


def eval_commands(plan: Mapping[str, Any], manifest: Mapping[str, Any]) -> list[str]:
    """The shell commands the workstation runs for this run's evaluation (``AWS-RunShellScript``).

    :param plan: ``plan_run``'s output.
    :param manifest: the validated checkpoint manifest (``checkpoint_uri``, ``task``).
    :return: one-element list: the evaluation command with every value shell-quoted, run with
        ``bash -euo pipefail`` (:func:`sim2real.orchestration.slurm.bash_commands`: AWS-RunShellScript uses ``sh``).
    """
    from sim2real.orchestration.slurm import bash_commands

    ev = plan["evaluation"]
    fields = {
        "manifest_uri": plan["checkpoint"]["manifest_uri"],
        "checkpoint_uri": manifest["checkpoint_uri"],
        "report_uri": ev["report_uri"],
        "episodes": ev["episodes"],
        "seed": ev["seed"],
        "task": manifest.get("task") or plan["checkpoint"]["task"],
    }
    quoted = {k: shlex.quote(str(v)) for k, v in fields.items()}
    # the evaluation's MLflow child run (sim2real.orchestration.tracking.apply_tracking; none when tracking is off)
    exports = [f"export {k}={shlex.quote(str(v))}" for k, v in sorted((ev.get("environment") or {}).items())]
    return bash_commands([*exports, ev["command_template"].format(**quoted)])


def check_report(report: Mapping[str, Any], *, expected_sha256: str, expected_episodes: int) -> None:
    """Refuse an evaluation report that does not belong to this checkpoint or is inconsistent.

    :raises ValueError: naming the field that is wrong.
    """
    if report.get("checkpoint_sha256") != expected_sha256:
        raise ValueError(f"eval report is for checkpoint sha256 {report.get('checkpoint_sha256')!r}, "
                         f"expected {expected_sha256!r}")
    n = report.get("episodes")
    if n != expected_episodes:
        raise ValueError(f"eval report has {n} episodes, the run asked for {expected_episodes}")
    k = report.get("successes")
    if not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"eval report has an invalid success count {k!r}")
    rate = report.get("success_rate")
    if rate is None or abs(rate - k / n) > 1e-9:
        raise ValueError(f"eval report success_rate {rate!r} != successes/episodes {k}/{n}")
    lo, hi = wilson_interval(k, n)
    ci = report.get("ci95") or [None, None]
    if not all(isinstance(v, (int, float)) for v in ci) or abs(ci[0] - lo) > 1e-6 or abs(ci[1] - hi) > 1e-6:
        raise ValueError(f"eval report ci95 {ci!r} is not the Wilson 95% interval [{lo:.6f}, {hi:.6f}] of {k}/{n}")


def quality_gate(report: Mapping[str, Any], *, min_success_rate: float, on_lower_bound: bool) -> dict[str, Any]:
    """Decide whether the evaluated policy may be released.

    :return: ``{"passed": bool, "metric": "success_rate"|"ci95_lower", "value", "threshold", "reason"}``.
    """
    metric = "ci95_lower" if on_lower_bound else "success_rate"
    value = float(report["ci95"][0] if on_lower_bound else report["success_rate"])
    passed = value >= min_success_rate
    reason = (f"{metric} {value:.3f} {'>=' if passed else '<'} threshold {min_success_rate:.3f} "
              f"({report['successes']}/{report['episodes']} episodes succeeded, "
              f"95% CI [{report['ci95'][0]:.3f}, {report['ci95'][1]:.3f}])")
    return {"passed": passed, "metric": metric, "value": value, "threshold": min_success_rate, "reason": reason}


def deployment_components(plan: Mapping[str, Any], approval: Mapping[str, Any],
                          manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    """Greengrass ``components`` for CreateDeployment, with the model URI merged into the configuration.

    :param approval: the approval sensor's output (``model_package_arn``, ``model_data_url``).
    :param manifest: the RL checkpoint manifest (its ONNX export / sha256 go to the setup component).
    :return: ``{component_name: {"componentVersion": v, "configurationUpdate": {"merge": json}}}``.
    """
    merge = {
        "ModelS3Uri": approval.get("model_data_url"),
        "ModelPackageArn": approval.get("model_package_arn"),
        "RunKey": plan["run_key"],
    }
    if manifest:
        merge["PolicyCheckpointUri"] = manifest.get("checkpoint_uri")
        merge["PolicyCheckpointSha256"] = manifest.get("sha256")
        if manifest.get("onnx_uri"):
            merge["PolicyOnnxUri"] = manifest["onnx_uri"]
            merge["PolicyOnnxSha256"] = manifest.get("onnx_sha256")
    return {
        name: {"componentVersion": version, "configurationUpdate": {"merge": json.dumps(merge, sort_keys=True)}}
        for name, version in plan["deploy"]["components"].items()
    }
