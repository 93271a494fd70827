"""Training on SageMaker HyperPod (group ``hyperpod``): capacity check, scale the GPU group up, the Slurm
job through SSM on the head node (a sweep: one Slurm job array, one task per candidate); then, outside the group,
scale back down (teardown ``hyperpod_scale_down``, after the group and after a sweep's candidates)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration import slurm
from sim2real.orchestration.budget import estimate_run_cost, training_cost_limit, training_usd_per_node_hour
from sim2real.orchestration.candidates import expand_sweep
from sim2real.orchestration.config import hyperpod_settings
from sim2real.orchestration.dag_defaults import POLL
from sim2real.orchestration.params import SECTION_TRAINING
from sim2real.orchestration.stages._base import PlanSection, refs
from sim2real.orchestration.stages.train import training_environment

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
checkpoints and `manifest.json`. The teardown `hyperpod_scale_down` (after this group) sets the GPU group back to
`hyperpod.min_count` once `scale_up` sent its request, whatever happened after (nodes that never came up, a failed
or killed job); a failed scale-down fails the run. Hands on the Slurm job id, its state, exit code and log path.
A run with a `sweep`: the group is scaled for `min(sweep_max_parallel, candidates) x num_nodes` nodes,
`submission` takes `sweep_script` and `submit_sweep` (one job array, `sbatch --array=0-<N-1>%<P>`) instead of
`train_policy`, each candidate's `sweep.train_on_slurm` waits for its array task, and `hyperpod_scale_down` waits
for all.
"""

SCALE_DOWN_DOC = """\
**Scale the HyperPod GPU group back down (teardown of `hyperpod.scale_up`).** SageMaker `UpdateCluster` with the
GPU group at `hyperpod.min_count`, then waits (deferred) until its extra nodes are gone (`DescribeCluster`,
`ListClusterNodes`). Runs once `hyperpod.scale_up` sent its request, after `hyperpod.train_policy` or, in a sweep,
after `hyperpod.submit_sweep` and every candidate's `sweep.train_on_slurm`, whatever they did; skipped with the
HyperPod path in a Batch run. Outside the `hyperpod` group: the sweep's candidates wait on that group's job array,
and a scale-down inside it would make the two groups depend on each other both ways. A failed scale-down fails the
run (nodes left up cost money). Hands on the cluster, the group, its previous, target and current counts.
"""

GROUP_ID = ids.HYPERPOD_GROUP
TASK_IDS = (ids.HYPERPOD_CHECK_CAPACITY, ids.HYPERPOD_SCALE_UP, ids.HYPERPOD_WAIT_FOR_NODES,
            ids.HYPERPOD_TRAIN_POLICY, ids.HYPERPOD_SCALE_DOWN, ids.HYPERPOD_SUBMISSION, *ids.HYPERPOD_SWEEP)


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
    num_nodes: int = 1  #: nodes of one Slurm job (a sweep: of each array task); ``target_count`` sizes the group
    #: A sweep (``training_backend: hyperpod`` with candidates): its job array's name, ``--array`` value
    #: (:func:`sim2real.orchestration.slurm.array_spec`), ``--output`` (``%A_%a``) and script path; "" otherwise.
    sweep_job_name: str = ""
    sweep_array: str = ""
    sweep_log_path: str = ""
    sweep_script_path: str = ""
    launcher: str = ""  #: the config's ``hyperpod.launcher`` (the job array's script is rendered at run time)
    container_mounts: str = ""  #: the config's ``hyperpod.container_mounts``


def params() -> dict[str, Any]:
    """The HyperPod fields of the trigger form."""
    from airflow.sdk import Param

    return {
        "hyperpod_cluster_name": Param(
            None, type=["null", "string"], maxLength=63, pattern=r"^([a-zA-Z0-9](-*[a-zA-Z0-9]){0,62})?$",
            title="HyperPod cluster", description="Needed when the backend is hyperpod "
            "(empty: the environment config's cluster).", section=SECTION_TRAINING,
        ),
    }


def plan(ctx: Any) -> HyperPodPlan:
    return HyperPodPlan(**hyperpod_plan(ctx.run_key, ctx.params, ctx.env, training_environment(ctx), ctx.budget))


def hyperpod_plan(run_key: str, params: Mapping[str, Any], env: Mapping[str, Any],
                  training_env: Mapping[str, str], budget: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The HyperPod (Slurm) training settings of a run (also planned for a Batch run: names only, no calls).

    :return: ``cluster_name`` (the form's ``hyperpod_cluster_name``, else the config's), ``instance_group_name``,
        ``target_count`` (= ``num_nodes``; a sweep: ``min(sweep_max_parallel, candidates) x num_nodes``, the
        array tasks that run at once), ``num_nodes`` (one job's), ``min_count``, ``submit_host_tag_key``/``_value``, ``job_name``
        (from the run key: a retry finds the job by it), ``log_path`` (``--output``, ``%j`` = job id),
        ``script_path``, ``time_limit_minutes`` (``#SBATCH --time``: ``training_timeout_hours`` in minutes,
        rounded up), ``submit_commands`` (``AWS-RunShellScript`` lines: write the rendered
        ``train_rl.sbatch``, then ``sbatch --parsable`` unless the job is already queued or COMPLETED; run
        with bash), ``environment``
        (the Batch job's training env), ``use_container_image``, and for a hyperpod run ``cost_limit_usd``
        (:func:`~sim2real.orchestration.budget.training_cost_limit`) and ``usd_per_node_hour``
        (:func:`~sim2real.orchestration.budget.training_usd_per_node_hour`, the price of ``hyperpod.instance_type``): the
        Slurm job is cancelled before its elapsed cost would pass the limit (None = no check; always None
        for a Batch run). A sweep's ``sweep_job_name`` (``<job_name>-sweep``), ``sweep_array``,
        ``sweep_log_path`` and ``sweep_script_path`` (:func:`sweep_array_commands` renders its script at run time,
        from the candidates' environments); ``submit_commands`` is then empty (there is no single job). Empty
        strings where the config has no HyperPod section (``check_params`` refuses the hyperpod backend then).
    :param budget: the run's cost estimate (plan ``budget``); default: :func:`~sim2real.orchestration.budget.estimate_run_cost`
        of ``params`` and ``env``, the same figure.
    """
    hp = hyperpod_settings(env)
    name = slurm.job_name(run_key)
    shared = str(hp["shared_dir"]).rstrip("/") or "/"
    log_dir = f"{shared}/logs"
    log_path = f"{log_dir}/{name}-%j.out"
    script_path = f"{shared}/jobs/{name}.sbatch"
    nodes = int(params["num_nodes"])
    swept = _swept_candidates(params)
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
        "num_nodes": nodes,
        "sweep_job_name": "",
        "sweep_array": "",
        "sweep_log_path": "",
        "sweep_script_path": "",
        "launcher": str(hp["launcher"] or ""),
        "container_mounts": str(hp["container_mounts"] or ""),
    }
    if params.get("training_backend") == "hyperpod" and swept:
        parallel = int(params.get("sweep_max_parallel") or 1)
        budget = estimate_run_cost(params, env) if budget is None else budget
        array_name = f"{name}-sweep"[:128]
        section.update(
            target_count=min(parallel, swept) * nodes,  # the array tasks Slurm runs at once (%P), each num_nodes
            usd_per_node_hour=training_usd_per_node_hour(budget),  # each candidate's limit: its plan entry
            sweep_job_name=array_name, sweep_array=slurm.array_spec(swept, parallel),
            sweep_log_path=f"{log_dir}/{array_name}-%A_%a.out", sweep_script_path=f"{shared}/jobs/{array_name}.sbatch",
        )
    elif params.get("training_backend") == "hyperpod":
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


def _swept_candidates(params: Mapping[str, Any]) -> int:
    """How many sweep candidates the params ask for (0: no sweep)."""
    return len(expand_sweep(params.get("sweep")))


def sweep_array_commands(plan: Mapping[str, Any]) -> list[str]:
    """``AWS-RunShellScript`` lines submitting a HyperPod sweep's job array (or finding it already there).

    Rendered at run time (``hyperpod.sweep_script``), after ``prepare_run`` put each candidate's MLflow runs into
    its environment: ``train_rl.sbatch`` with the variables every candidate shares exported once and, per array
    task ``i`` (``SLURM_ARRAY_TASK_ID``), candidate ``c<i>``'s own (seed, sizes, ``OUTPUT_URI`` under
    ``runs/<run_key>/candidates/c<i>/``, its MLflow run); submitted with ``sbatch --array=<sweep_array>``
    (:func:`sim2real.orchestration.slurm.array_submit_commands`).

    :param plan: the run's plan (``hyperpod``, ``sweep.candidates``, ``params``, ``run_key``).
    :raises ValueError: the plan has no HyperPod sweep, or a value cannot go into the script.
    """
    hp = HyperPodPlan.from_plan(plan)
    candidates = (plan.get("sweep") or {}).get("candidates") or []
    if not (hp.sweep_array and candidates):
        raise ValueError("the plan has no HyperPod sweep (training_backend hyperpod with sweep candidates)")
    envs = [dict(c["environment"]) for c in candidates]
    shared = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs[1:])}
    own = [{k: v for k, v in e.items() if k not in shared} for e in envs]
    script = slurm.render_script(
        job_name=hp.sweep_job_name, num_nodes=hp.num_nodes, log_path=hp.sweep_log_path, environment=shared,
        launcher=hp.launcher, partition=hp.partition, time_limit_minutes=hp.time_limit_minutes,
        use_container_image=hp.use_container_image, container_mounts=hp.container_mounts,
        task_environments=own,
    )
    log_dir = hp.sweep_log_path.rsplit("/", 1)[0] or "/"
    return slurm.array_submit_commands(script_path=hp.sweep_script_path, script_text=script,
                                       job_name=hp.sweep_job_name, log_dir=log_dir, array=hp.sweep_array,
                                       tasks=len(candidates))


SUBMISSION_DOC = """\
**Single job or job array.** Calls no AWS API: a run with a `sweep` goes on with its job array
(`hyperpod.sweep_script`, `hyperpod.submit_sweep`), any other with `hyperpod.train_policy`. Waits for nothing.
"""

SWEEP_SCRIPT_DOC = """\
**The sweep's job array script.** Calls no AWS API: renders `train_rl.sbatch` for every candidate (task `i` of
the array exports candidate `c<i>`'s variables, by `SLURM_ARRAY_TASK_ID`) and the shell lines that submit it
with `sbatch --array=0-<N-1>%<sweep_max_parallel>`. Waits for nothing.
"""

SUBMIT_SWEEP_DOC = """\
**Submit the sweep's job array (Slurm).** Finds the head/login node by EC2 tag and sends SSM `SendCommand`
(`AWS-RunShellScript`): writes the script and runs `sbatch --parsable --array=0-<N-1>%<P>` (at most
`sweep_max_parallel` candidates train at once: Slurm throttles the array itself). Per candidate, a task of this
run that `squeue -r` lists as active or `sacct` shows COMPLETED is kept: a retry or a clear submits
`sbatch --array=<i>,<j>%<P>` of the same script for only the candidates without one (their task failed or was
cancelled), and nothing when each has one. Waits for nothing else: each candidate's `sweep.train_on_slurm` waits
for its own array task. Hands on the array's job id and `tasks`, each candidate's task id (`<array>_<i>`).
"""

CANDIDATE_DOC = """\
**Train one sweep candidate (HyperPod, Slurm array task).** Waits (deferred) on array task
`<array job id>_<i>` of `hyperpod.submit_sweep`'s job array (`sacct -j <id>_<i>`, else `scontrol show job`,
each through SSM `SendCommand` on the head node) until COMPLETED; FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY,
NODE_FAIL fail with the cluster, job id, task, state, exit code and the end of the task's log; at each poll
the task's cost (`num_nodes` x the HyperPod instance price x the time since its Slurm Start) is held to the
candidate's share of the training budget; `scancel <id>_<i>` when killed or stopped at the limit. Not retried
(a retry would reattach to the same ended task): clearing `hyperpod.submit_sweep` resubmits the candidates whose
task failed. When it fails and more candidates have failed than the sweep may lose (`sweep_min_candidates`), it
cancels the array's remaining tasks (`scancel <array>`, pending and running). Hands on the job id, state, exit
code, log path and cost; a failed task hands on XCom `slurm_job_end` (its state and exit code).
"""


#: The wait for the GPU group's nodes (Running after a scale-up, gone after a scale-down): up to an hour.
NODES_WAIT = {"waiter_delay": POLL, "waiter_max_attempts": max(1, 3600 // max(1, POLL))}


def _gpu_group(hp: Any) -> dict[str, Any]:
    """The arguments naming the cluster's GPU instance group, the group every capacity and scale task acts on."""
    return {"cluster_name": hp.cluster_name, "instance_group_name": hp.instance_group_name}


def _submit_host(hp: Any) -> dict[str, Any]:
    """The arguments naming the cluster's Slurm submit host (found by its tag), where every Slurm task runs."""
    return {"cluster_name": hp.cluster_name, "submit_host_tag_key": hp.submit_host_tag_key,
            "submit_host_tag_value": hp.submit_host_tag_value}


def add_tasks(plan: Any, *, image: Any, backend: Any) -> tuple[Any, Any, Any]:
    """Add the ``hyperpod`` group after the ``training_backend`` branch, and its scale-down teardown
    ``hyperpod_scale_down`` after it; return ``(train_policy, hyperpod_scale_down, submit_sweep)`` (``submit_sweep``:
    a sweep's job array, which :func:`add_candidate_training` waits on and the teardown waits for)."""
    from airflow.sdk import TaskGroup, task

    from sim2real.orchestration.operators.hyperpod import HyperPodScaleOperator
    from sim2real.orchestration.operators.hyperpod_slurm import HyperPodSlurmJobOperator
    from sim2real.orchestration.operators.quota import HyperPodCapacityPreflightOperator

    hp = refs(plan, HyperPodPlan)
    with TaskGroup(GROUP_ID, tooltip="SageMaker HyperPod: scale up, Slurm job via SSM (then hyperpod_scale_down)", doc_md=DOC):
        preflight = HyperPodCapacityPreflightOperator(
            task_id=ids.local(ids.HYPERPOD_CHECK_CAPACITY),
            **_gpu_group(hp),
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
            **_gpu_group(hp),
            target_count=hp.target_count,
            wait_for_completion=False,
            execution_timeout=dt.timedelta(minutes=10),
            doc_md=DOC,
        )
        # Same target: no second UpdateCluster, waits until the group's nodes are Running.
        wait_for_nodes = HyperPodScaleOperator(
            task_id=ids.local(ids.HYPERPOD_WAIT_FOR_NODES),
            **_gpu_group(hp),
            target_count=hp.target_count,
            **NODES_WAIT,
            execution_timeout=dt.timedelta(hours=2),
            doc_md=DOC,
        )
        slurm_job = HyperPodSlurmJobOperator(
            task_id=ids.local(ids.HYPERPOD_TRAIN_POLICY),
            **_submit_host(hp),
            job_name=hp.job_name,
            submit_commands=hp.submit_commands,
            log_path=hp.log_path,
            container_image=image.output["image_uri"],
            poll_interval=POLL,
            num_nodes=hp.num_nodes,
            cost_limit_usd=hp.cost_limit_usd,
            usd_per_node_hour=hp.usd_per_node_hour,
            execution_timeout=dt.timedelta(hours=12),
            doc_md=DOC,
        )
        @task.branch(task_id=ids.local(ids.HYPERPOD_SUBMISSION), retries=0, execution_timeout=dt.timedelta(minutes=1),
                     doc_md=SUBMISSION_DOC)
        def submission(plan: dict) -> str:
            """One Slurm job (``hyperpod.train_policy``) or a sweep's job array (``hyperpod.sweep_script``)."""
            return ids.HYPERPOD_SWEEP_SCRIPT if HyperPodPlan.from_plan(plan).sweep_array else ids.HYPERPOD_TRAIN_POLICY

        @task(task_id=ids.local(ids.HYPERPOD_SWEEP_SCRIPT), retries=0, execution_timeout=dt.timedelta(minutes=1),
              doc_md=SWEEP_SCRIPT_DOC)
        def sweep_script(plan: dict) -> list:
            """The job array's submit lines (:func:`sweep_array_commands`)."""
            from airflow.sdk.exceptions import AirflowFailException

            try:
                return sweep_array_commands(plan)
            except ValueError as err:
                raise AirflowFailException(str(err)) from err

        route = submission(plan["plan"])
        script = sweep_script(plan["plan"])
        array = HyperPodSlurmJobOperator(
            task_id=ids.local(ids.HYPERPOD_SUBMIT_SWEEP),
            **_submit_host(hp),
            job_name=hp.sweep_job_name,
            submit_commands=script,
            log_path=hp.sweep_log_path,
            container_image=image.output["image_uri"],
            submit_only=True,  # each candidate's sweep.train_on_slurm waits for its own array task
            multiple_outputs=True,  # job_id: the array's, read by every candidate
            poll_interval=POLL,
            execution_timeout=dt.timedelta(minutes=10),
            doc_md=SUBMIT_SWEEP_DOC,
        )
        backend >> preflight >> scale_up >> wait_for_nodes >> route >> [slurm_job, script]
        script >> array
    # Teardown, outside the group (a sweep's candidates, in group sweep, come between the job array and it): runs
    # once scale_up succeeded, whatever the Slurm job did (failed, killed, timed out).
    scale_down = HyperPodScaleOperator(
        task_id=ids.HYPERPOD_SCALE_DOWN,
        only_after_task_id=ids.HYPERPOD_SCALE_UP,  # a Batch run never resizes the cluster
        **_gpu_group(hp),
        target_count=hp.min_count,
        retries=5,  # nodes left up cost money: outlast a slow scale-up or a transient error
        **NODES_WAIT,
        execution_timeout=dt.timedelta(hours=2),
        doc_md=SCALE_DOWN_DOC,
    ).as_teardown(setups=scale_up, on_failure_fail_dagrun=True)  # nodes left up: the run must say so
    [slurm_job, array] >> scale_down
    return slurm_job, scale_down, array


def add_candidate_training(plan: Any, *, array: Any, index: Any, cost_limit_usd: Any, max_failed: Any = None,
                           candidate_task_ids: tuple[str, ...] = ()) -> Any:
    """Inside the mapped ``sweep`` group: the candidate's wait on its Slurm array task (``sweep.train_on_slurm``).

    :param array: ``hyperpod.submit_sweep`` (its ``job_id`` is the array's, its ``tasks`` each index's task id).
    :param index: / :param cost_limit_usd: the candidate's mapped arguments.
    :param max_failed: the plan's ``sweep.max_failed``: when this candidate fails and more candidates than that
        have failed (any of ``candidate_task_ids``), the array's remaining tasks are cancelled.
    :return: the operator (its result is the candidate's training result, as ``sweep.train_policy``'s on Batch).
    """
    from sim2real.orchestration.operators.hyperpod_slurm import HyperPodSlurmJobOperator

    hp = refs(plan, HyperPodPlan)
    return HyperPodSlurmJobOperator(
        task_id=ids.local(ids.SWEEP_TRAIN_ON_SLURM),
        **_submit_host(hp),
        job_name=hp.sweep_job_name,
        submit_commands=[],
        log_path=hp.sweep_log_path,
        attach_job_id=array.output["job_id"],
        array_task_ids=array.output["tasks"],  # a resubmitted candidate's task is in a later array
        array_index=index,
        sweep_max_failed=max_failed,
        sweep_task_ids=list(candidate_task_ids) or None,
        # Not retried (as Batch's sweep.train_policy): a retry would reattach to the same ended array task and fail
        # again while the run holds the GPU group. A failed candidate trains again when hyperpod.submit_sweep is
        # cleared: it resubmits only the indexes that have no active or COMPLETED task.
        retries=0,
        poll_interval=POLL,
        num_nodes=hp.num_nodes,
        cost_limit_usd=cost_limit_usd,  # the candidate's share of the training budget
        usd_per_node_hour=hp.usd_per_node_hour,
        # The wait starts at the array's submission: a late candidate first pends behind the array's % limit
        # (up to ceil(candidates / sweep_max_parallel) - 1 trainings), then runs within its #SBATCH --time. Bounded
        # by the run's own dagrun_timeout (3 days), not by one training's 12 h.
        execution_timeout=dt.timedelta(days=3),
        doc_md=CANDIDATE_DOC,
    )
