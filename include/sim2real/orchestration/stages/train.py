"""Training on AWS Batch: the GPU capacity check (group ``preflight``) and the multi-node training job
(group ``train``). Also the training environment both backends hand to the trainer
(:mod:`sim2real.contract.env_vars`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sim2real.contract import env_vars as ev
from sim2real.contract import task_ids as ids
from sim2real.orchestration.budget import training_cost_limit, training_usd_per_node_hour
from sim2real.orchestration.dag_defaults import POLL
from sim2real.orchestration.params import SECTION_BUDGET, SECTION_TRAINING, TASKS, _range
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs
from sim2real.orchestration.stages.rounds import max_iterations_of, resume_environment

PREFLIGHT_DOC = """\
**Capacity preflight.** Calls EC2 `DescribeInstanceTypes`, Service Quotas `GetServiceQuota`, CloudWatch
`AWS/Usage` and Batch `DescribeComputeEnvironments` / `DescribeJobDefinitions`. Waits for nothing: it fails
fast, before any GPU is started, when one node of the job definition needs more GPUs, vCPUs or memory than
the instance type has (the job would stay RUNNABLE), when the quota cannot hold nodes × vCPUs (with the
quota's name, code, limit, usage and the command to request more) or the compute environment is not usable.
Hands on the verdict: needed / limit / in-use vCPU.
"""

DOC = """\
**Train the policy (AWS Batch, multi-node).** Calls Batch `RegisterJobDefinition` (a revision pinned to
the image digest), `ListJobs` (a retry reattaches to the job its earlier try started), `SubmitJob` with
`nodeOverrides`, `DescribeJobs`; `TerminateJob` when killed or when the job stays RUNNABLE past the
budget; CloudWatch Logs for progress. Waits (deferred) for SUCCEEDED; failures are classified and only
retryable classes are retried. Hands on the job id, its attempts and every node's log stream (extra links).
"""

GROUP_IDS = (ids.PREFLIGHT_GROUP, ids.TRAIN_GROUP)
TASK_IDS = (ids.BATCH_CHECK_CAPACITY, ids.BATCH_TRAIN_POLICY)


@dataclass(frozen=True)
class BatchPlan(PlanSection):
    """The AWS Batch training job of a run (planned for every run: names only, no calls)."""

    SECTION = "batch"
    job_name: str
    job_queue: str
    job_definition: str
    compute_environment: str
    instance_type: str
    num_nodes: int
    environment: dict[str, str]  #: the trainer's environment (:func:`training_environment`)
    runnable_timeout_seconds: int
    #: Checked at each poll while the job runs (None = no check): the job is stopped before its elapsed cost
    #: would pass max_budget_usd less the other stages' estimate.
    cost_limit_usd: float | None
    usd_per_node_hour: float | None


def params() -> dict[str, Any]:
    """The training fields of the trigger form (both backends)."""
    from airflow.sdk import Param

    return {
        "training_backend": Param(
            "batch", type="string", enum=["batch", "hyperpod", "hyperpod_eks"], title="Training backend",
            description="batch: an AWS Batch multi-node job. hyperpod: a Slurm job (sbatch through SSM on "
            "the head node) on a SageMaker HyperPod cluster whose GPU instance group is scaled up for the "
            "run and back to its minimum afterwards. hyperpod_eks: a Kubeflow PyTorchJob on a HyperPod cluster "
            "orchestrated by Amazon EKS, in your team's task-governance queue (HyperPod EKS team and priority "
            "below); a preempted job waits for its turn again, its GPU-held time alone counts against the budget.",
            section=SECTION_TRAINING,
        ),
        "task": Param(
            "Reacher-v5", type="string", enum=list(TASKS), title="Task",
            description="Gymnasium/MuJoCo task id (CPU) or Isaac Lab task id (GPU image). Isaac Lab 3.0 (the "
            "image's default) names its tasks without a version suffix (Isaac-Velocity-Rough-H1); the -v0 id is "
            "Isaac Lab 2.x's, for an image built for 2.x (containers/isaaclab/Dockerfile).",
            section=SECTION_TRAINING,
        ),
        "num_nodes": Param(
            1, type="integer", title="Nodes",
            description="Nodes of the multi-node job (each node: all GPUs of one instance).",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=16)),
        "max_iterations": Param(
            1000, type="integer", title="Max iterations",
            description="PPO iterations (one rollout per environment + one update each).",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=100_000)),
        "num_envs": Param(
            32, type="integer", title="Vectorised environments per process",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=65_536)),
        "seed": Param(0, type="integer", title="Training seed",
                      section=SECTION_TRAINING, **_range(minimum=0, maximum=2**31 - 1)),
        "train_time_budget_seconds": Param(
            60, type="integer", title="Training time budget (s)",
            description="The trainer stops after this many seconds and still writes its final checkpoint "
            "and manifest. 0 = no budget (runs max_iterations).",
            section=SECTION_TRAINING, **_range(minimum=0, maximum=7 * 24 * 3600)),
        "runnable_timeout_minutes": Param(
            30, type="integer", title="Max minutes in RUNNABLE",
            description="Fail (and terminate the job) when the training job waits for capacity longer.",
            section=SECTION_BUDGET, **_range(minimum=1, maximum=24 * 60)),
        "training_timeout_hours": Param(12.0, type="number",
                                        title="Training duration bound (h)",
                                        description="Costs the run when no time budget is set, and must exceed "
                                        "the time budget. The training task itself gives up after 12 h.",
                                        section=SECTION_BUDGET, **_range(exclusiveMinimum=0, maximum=12)),
    }


def training_environment(ctx: PlanContext) -> dict[str, str]:
    """The trainer's environment (names: :mod:`sim2real.contract.env_vars`), the same for both backends."""
    p = ctx.params
    env = {
        ev.TASK: p["task"],
        ev.MAX_ITERATIONS: str(max_iterations_of(p)),  # a further round: the resumed iteration + round_iterations
        ev.NUM_ENVS: str(p["num_envs"]),
        ev.SEED: str(p["seed"]),
        ev.OUTPUT_URI: ctx.checkpoint_uri,
        ev.RUN_KEY: ctx.run_key,
    }
    if p.get("train_time_budget_seconds"):  # 0 = no budget: the trainer runs max_iterations
        env[ev.TIME_BUDGET_SECONDS] = str(p["train_time_budget_seconds"])
    env.update(resume_environment(ctx))
    return env


def plan(ctx: PlanContext) -> BatchPlan:
    batch = ctx.env["batch"]
    return BatchPlan(
        job_name=f"sim2real-train-{ctx.run_key}"[:128],
        job_queue=batch["job_queue"],
        job_definition=batch["job_definition"],
        compute_environment=batch["compute_environment"],
        instance_type=batch["instance_type"],
        num_nodes=int(ctx.params["num_nodes"]),
        environment=training_environment(ctx),
        runnable_timeout_seconds=int(ctx.params["runnable_timeout_minutes"]) * 60,
        cost_limit_usd=training_cost_limit(ctx.budget),
        usd_per_node_hour=training_usd_per_node_hour(ctx.budget),
    )


def add_tasks(plan: Any, *, image: Any, backend: Any) -> Any:
    """Add the ``preflight`` and ``train`` groups after the ``training_backend`` branch; return the
    training operator."""
    from airflow.sdk import TaskGroup

    from sim2real.orchestration.operators.batch import BatchTrainingOperator
    from sim2real.orchestration.operators.quota import GpuCapacityPreflightOperator

    batch = refs(plan, BatchPlan)
    with TaskGroup(ids.PREFLIGHT_GROUP, tooltip="GPU quota and compute environment, before any spend",
                   doc_md=PREFLIGHT_DOC):
        preflight = GpuCapacityPreflightOperator(
            task_id=ids.local(ids.BATCH_CHECK_CAPACITY),
            instance_type=batch.instance_type,
            num_nodes=batch.num_nodes,
            compute_environment=batch.compute_environment,
            job_definition=batch.job_definition,  # its per-node GPU/VCPU/MEMORY must fit one instance
            retries=1,
            execution_timeout=dt.timedelta(minutes=5),
            doc_md=PREFLIGHT_DOC,
        )

    with TaskGroup(ids.TRAIN_GROUP, tooltip="AWS Batch multi-node training job", doc_md=DOC):
        training = BatchTrainingOperator(
            task_id=ids.local(ids.BATCH_TRAIN_POLICY),
            job_name=batch.job_name,
            job_queue=batch.job_queue,
            job_definition=batch.job_definition,
            image_uri=image.output["image_uri"],
            num_nodes=batch.num_nodes,
            run_key=plan["run_key"],
            environment=batch.environment,
            runnable_timeout_seconds=batch.runnable_timeout_seconds,
            cost_limit_usd=batch.cost_limit_usd,  # stop the job before it passes the budget
            usd_per_node_hour=batch.usd_per_node_hour,
            poll_interval=POLL,
            multiple_outputs=True,
            execution_timeout=dt.timedelta(hours=12),
            doc_md=DOC,
        )
        preflight >> training  # no spend before the capacity check passed
    backend >> preflight
    return training
