"""Checkpoint stage (group ``checkpoint``): join the two training backends and wait for the trainer's
``manifest.json``."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration import assets
from sim2real.orchestration.assets import CHECKPOINT_ANNOUNCEMENTS
from sim2real.orchestration.dag_defaults import POLL
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs

TRAINING_JOB_DOC = """\
**Training job.** Calls no AWS API: runs after whichever backend trained (the other one is skipped; in a sweep,
after `pick_best`) and waits for nothing. Hands on `backend` and that backend's job: `batch_job_id`, or
`slurm_job_id`, `hyperpod_cluster_name` and `slurm_log_path`; `manifest_uri` (the winning candidate's in a sweep)
and `candidate` (`c<i>` of the winner, or none).
"""

DOC = """\
**Wait for the checkpoint.** Runs after whichever backend trained (Batch or HyperPod). Calls S3
`HeadObject`/`GetObject` (or reads a mounted EFS path). Waits (deferred) for `manifest.json`, which the
trainer writes last. Hands on the manifest: checkpoint URI, its sha256
(re-verified against the object), iteration, timesteps and mean reward; emits the checkpoint asset
event, once per sha256 and run (a cleared or retried try finding the same checkpoint emits none).
"""

GROUP_ID = ids.CHECKPOINT_GROUP
TASK_IDS = (ids.TRAINING_JOB, ids.WAIT_FOR_CHECKPOINT)


@dataclass(frozen=True)
class CheckpointPlan(PlanSection):
    """Where the trainer writes its checkpoints and, last, ``manifest.json``."""

    SECTION = "checkpoint"
    output_uri: str  #: ``s3://<bucket>/runs/<run_key>/checkpoints/``
    manifest_uri: str
    task: str  #: the task the manifest must name


def params() -> dict[str, Any]:
    """The checkpoint stage has no form fields (its task is the training's)."""
    return {}


def plan(ctx: PlanContext) -> CheckpointPlan:
    return CheckpointPlan(output_uri=ctx.checkpoint_uri, manifest_uri=f"{ctx.checkpoint_uri}manifest.json",
                          task=ctx.params["task"])


def training_job_of(backend: str, result: dict | None, *, manifest_uri: str, sweep: dict | None = None) -> dict:
    """Which backend trained and its job, from that backend's training task's result.

    :param manifest_uri: the run's ``checkpoint.manifest_uri`` (the checkpoint to wait for without a sweep).
    :param sweep: ``pick_best``'s result in a sweep run (the winner's training result and manifest); ``None``
        without a sweep.
    :return: ``{"backend", "batch_job_id", "slurm_job_id", "hyperpod_cluster_name", "slurm_log_path",
        "manifest_uri", "candidate"}`` (``candidate``: the winning ``c<i>`` of a sweep, else ``None``).
    :raises ValueError: the backend's training task handed on nothing.
    """
    if sweep:
        result = sweep.get("training")
        manifest_uri = sweep["manifest_uri"]
    job = {"manifest_uri": manifest_uri, "candidate": sweep.get("candidate") if sweep else None}
    if result and backend == "hyperpod_eks":
        return {"backend": backend, "batch_job_id": None, "slurm_job_id": None,
                "hyperpod_cluster_name": result.get("cluster_name"), "slurm_log_path": None,
                "eks_job": {k: result.get(k) for k in ("namespace", "job_name", "job_uid", "preemptions")}, **job}
    if result and backend != "hyperpod":
        return {"backend": "batch", "batch_job_id": result.get("job_id"), "slurm_job_id": None,
                "hyperpod_cluster_name": None, "slurm_log_path": None, **job}
    if result:
        return {"backend": "hyperpod", "batch_job_id": None, "slurm_job_id": result.get("job_id"),
                "hyperpod_cluster_name": result.get("cluster_name"), "slurm_log_path": result.get("log_path"), **job}
    raise ValueError(f"neither {ids.BATCH_TRAIN_POLICY} nor {ids.HYPERPOD_TRAIN_POLICY} nor {ids.SWEEP_PICK_BEST} "
                     "handed on a job")


def add_tasks(plan: Any, *, trained_by: list[Any]) -> tuple[Any, Any]:
    """Add the ``checkpoint`` group after the training tasks (both backends' and a sweep's ``pick_best``); return
    ``(the manifest sensor, training_job)``."""
    from airflow.sdk import TaskGroup, task
    from airflow.sdk.exceptions import AirflowFailException

    from sim2real.orchestration.sensors.checkpoint import CheckpointManifestSensor

    ckpt = refs(plan, CheckpointPlan)
    with TaskGroup(GROUP_ID, tooltip="manifest.json written last by the trainer", doc_md=DOC):

        # Joins the two backends (the other one is skipped). A task of its own: the sensor also reads the
        # plan, and a task right after prepare_run (the lineage's setup) must keep trigger rule all_success.
        @task(task_id=ids.local(ids.TRAINING_JOB), trigger_rule="none_failed_min_one_success",
              multiple_outputs=True, execution_timeout=dt.timedelta(minutes=1), doc_md=TRAINING_JOB_DOC)
        def training_job(ti=None) -> dict:
            """Which backend trained and its job: ``backend``, ``batch_job_id`` or the Slurm job's facts."""
            # Only the backend that ran is read (pulling the skipped one's XCom logs a 404 at error level).
            # The plan is pulled, not passed: a task right after prepare_run (a setup) must be all_success.
            plan = (ti.xcom_pull(task_ids=ids.PREPARE_RUN) or {}).get("plan", {})
            backend = plan.get("backend", "batch")
            swept = bool((plan.get("sweep") or {}).get("enabled"))
            sweep = ti.xcom_pull(task_ids=ids.SWEEP_PICK_BEST) if swept else None
            training_task = {"hyperpod": ids.HYPERPOD_TRAIN_POLICY,
                             "hyperpod_eks": ids.HYPERPOD_EKS_TRAIN_POLICY}.get(backend, ids.BATCH_TRAIN_POLICY)
            result = None if swept else ti.xcom_pull(task_ids=training_task)
            try:
                return training_job_of(backend, result, manifest_uri=plan["checkpoint"]["manifest_uri"],
                                       sweep=sweep)
            except ValueError as err:
                raise AirflowFailException(str(err)) from err

        trained = training_job()
        trained_by >> trained
        manifest = CheckpointManifestSensor(
            task_id=ids.local(ids.WAIT_FOR_CHECKPOINT),
            manifest_uri=trained["manifest_uri"],  # the plan's; in a sweep the winning candidate's
            expected_task=ckpt.task,
            # None on a HyperPod run (its Slurm job has ended before this sensor starts).
            batch_job_id=trained["batch_job_id"],
            poke_interval=POLL,
            timeout=30 * 60,
            execution_timeout=dt.timedelta(minutes=40),
            # sim2real_rl_checkpoint's event, through the alias: once per sha256 and run (a cleared or retried
            # sensor finding the same checkpoint emits none); the inlet reads this run's earlier announcements.
            outlets=[CHECKPOINT_ANNOUNCEMENTS],
            inlets=[CHECKPOINT_ANNOUNCEMENTS],
            post_execute=assets.checkpoint_post_execute,  # checkpoint URI + sha256 on the asset event
            doc_md=DOC,
        )
    return manifest, trained
