"""Training on SageMaker HyperPod (group ``hyperpod``): capacity check, scale the GPU group up, the Slurm
job through SSM on the head node, scale back down (teardown)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration.stages._base import PlanSection, refs

DOC = """\
**Train the policy (SageMaker HyperPod, Slurm).** `check_capacity` calls SageMaker `DescribeCluster` /
`ListClusters` and Service Quotas (`<type> for cluster usage`) and fails before any spend when the quota
cannot hold the GPU group at `num_nodes`. `scale_up` (setup) calls `UpdateCluster` with every instance group
(only the GPU group's count changed); `wait_for_nodes` waits (deferred) until the group's nodes are Running
(`DescribeCluster`, `ListClusterNodes`). `train_policy` finds the cluster's head/login node by EC2 tag, sends
SSM `SendCommand` (`AWS-RunShellScript`) that writes the run's `train_rl.sbatch` and runs `sbatch --parsable`
under bash (unless `squeue` lists this run's job name as active, or `sacct` shows it COMPLETED: a retry
waits for or reports that job instead of paying for a second one; the script has `#SBATCH --time` from
`training_timeout_hours`), then waits (deferred) on the
job's state (`sacct`, else `scontrol show job`, each through SSM) until COMPLETED; FAILED, CANCELLED,
TIMEOUT, OUT_OF_MEMORY, NODE_FAIL fail with the cluster, job id, state, exit code and the end of the job's
log; `scancel` when killed. Every node runs the same launcher as the Batch job, so the trainer writes the same
checkpoints and `manifest.json`. `scale_down` (teardown) sets the GPU group back to `hyperpod.min_count` once
`scale_up` sent its request, whatever happened after (nodes that never came up, a failed or killed job);
a failed scale-down fails the run. Hands on the Slurm job id, its state, exit code and log path.
"""

GROUP_ID = ids.HYPERPOD_GROUP
TASK_IDS = (ids.HYPERPOD_CHECK_CAPACITY, ids.HYPERPOD_SCALE_UP, ids.HYPERPOD_WAIT_FOR_NODES,
            ids.HYPERPOD_TRAIN_POLICY, ids.HYPERPOD_SCALE_DOWN)
#: What differs in the lineage of a ``training_backend: hyperpod`` run: its capacity check and training
#: are this group's tasks (the Slurm job's result is the ``training`` stage).
LINEAGE_SOURCES = {"preflight": ids.HYPERPOD_CHECK_CAPACITY, "training": ids.HYPERPOD_TRAIN_POLICY}
#: HyperPod runs: the scale tasks' results → lineage ``stages.hyperpod_scaling``.
LINEAGE_SCALING_SOURCES = {"scale_up": ids.HYPERPOD_SCALE_UP, "wait_for_nodes": ids.HYPERPOD_WAIT_FOR_NODES,
                           "scale_down": ids.HYPERPOD_SCALE_DOWN}


@dataclass(frozen=True)
class HyperPodPlan(PlanSection):
    """The HyperPod (Slurm) training settings of a run (:func:`hyperpod_plan`)."""

    SECTION = "hyperpod"
    cluster_name: str
    instance_group_name: str
    target_count: int
    min_count: int
    submit_host_tag_key: str
    submit_host_tag_value: str
    partition: str
    job_name: str
    log_path: str
    script_path: str
    environment: dict[str, str]
    use_container_image: bool
    time_limit_minutes: int
    submit_commands: list[str] = field(default_factory=list)
    cost_limit_usd: float | None = None
    usd_per_node_hour: float | None = None


def params() -> dict[str, Any]:
    """The HyperPod fields of the trigger form."""
    from airflow.sdk import Param

    from sim2real.orchestration.params import SECTION_TRAINING

    return {
        "hyperpod_cluster_name": Param(
            None, type=["null", "string"], maxLength=63, pattern=r"^([a-zA-Z0-9](-*[a-zA-Z0-9]){0,62})?$",
            title="HyperPod cluster", description="Needed when the backend is hyperpod "
            "(empty: the environment config's cluster).", section=SECTION_TRAINING,
        ),
    }


def plan(ctx: Any) -> HyperPodPlan:
    from sim2real.orchestration.stages.train import training_environment

    return HyperPodPlan(**hyperpod_plan(ctx.run_key, ctx.params, ctx.env, training_environment(ctx), ctx.budget))


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
    from sim2real.orchestration import slurm
    from sim2real.orchestration.budget import estimate_run_cost, training_cost_limit, training_usd_per_node_hour
    from sim2real.orchestration.config import hyperpod_settings

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


def add_tasks(plan: Any, *, image: Any, backend: Any) -> tuple[Any, Any]:
    """Add the ``hyperpod`` group after the ``training_backend`` branch; return ``(train_policy, scale_down)``."""
    from airflow.sdk import TaskGroup

    from sim2real.orchestration.dag_defaults import POLL
    from sim2real.orchestration.operators.hyperpod import HyperPodScaleOperator, HyperPodSlurmJobOperator
    from sim2real.orchestration.operators.quota import HyperPodCapacityPreflightOperator

    hp = refs(plan, HyperPodPlan)
    with TaskGroup(GROUP_ID, tooltip="SageMaker HyperPod: scale up, Slurm job via SSM, scale down", doc_md=DOC):
        preflight = HyperPodCapacityPreflightOperator(
            task_id=ids.local(ids.HYPERPOD_CHECK_CAPACITY),
            cluster_name=hp.cluster_name,
            instance_group_name=hp.instance_group_name,
            target_count=hp.target_count,
            retries=1,
            execution_timeout=dt.timedelta(minutes=5),
            doc_md=DOC,
        )
        # The setup only sends UpdateCluster: once it succeeded the scale-down teardown always runs, also
        # when the nodes then fail to come up (a setup that failed while waiting would skip its teardown
        # and leave the requested nodes running).
        scale_up = HyperPodScaleOperator(
            task_id=ids.local(ids.HYPERPOD_SCALE_UP),
            cluster_name=hp.cluster_name,
            instance_group_name=hp.instance_group_name,
            target_count=hp.target_count,
            wait_for_completion=False,
            execution_timeout=dt.timedelta(minutes=10),
            doc_md=DOC,
        )
        # Same target: no second UpdateCluster, waits until the group's nodes are Running.
        wait_for_nodes = HyperPodScaleOperator(
            task_id=ids.local(ids.HYPERPOD_WAIT_FOR_NODES),
            cluster_name=hp.cluster_name,
            instance_group_name=hp.instance_group_name,
            target_count=hp.target_count,
            waiter_delay=POLL,
            waiter_max_attempts=max(1, 3600 // max(1, POLL)),
            execution_timeout=dt.timedelta(hours=2),
            doc_md=DOC,
        )
        slurm_job = HyperPodSlurmJobOperator(
            task_id=ids.local(ids.HYPERPOD_TRAIN_POLICY),
            cluster_name=hp.cluster_name,
            submit_host_tag_key=hp.submit_host_tag_key,
            submit_host_tag_value=hp.submit_host_tag_value,
            job_name=hp.job_name,
            submit_commands=hp.submit_commands,
            log_path=hp.log_path,
            container_image=image.output["image_uri"],
            poll_interval=POLL,
            num_nodes=hp.target_count,
            cost_limit_usd=hp.cost_limit_usd,
            usd_per_node_hour=hp.usd_per_node_hour,
            execution_timeout=dt.timedelta(hours=12),
            doc_md=DOC,
        )
        # Teardown: runs once scale_up succeeded, whatever the Slurm job did (failed, killed, timed out).
        scale_down = HyperPodScaleOperator(
            task_id=ids.local(ids.HYPERPOD_SCALE_DOWN),
            only_after_task_id=ids.HYPERPOD_SCALE_UP,  # a Batch run never resizes the cluster
            cluster_name=hp.cluster_name,
            instance_group_name=hp.instance_group_name,
            target_count=hp.min_count,
            retries=5,  # nodes left up cost money: outlast a slow scale-up or a transient error
            waiter_delay=POLL,
            waiter_max_attempts=max(1, 3600 // max(1, POLL)),
            execution_timeout=dt.timedelta(hours=2),
            doc_md=DOC,
        ).as_teardown(setups=scale_up, on_failure_fail_dagrun=True)  # nodes left up: the run must say so
        backend >> preflight >> scale_up >> wait_for_nodes >> slurm_job >> scale_down
    return slurm_job, scale_down
