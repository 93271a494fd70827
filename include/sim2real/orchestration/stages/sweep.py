"""Sweep (mapped task group ``sweep`` and task ``pick_best``): several candidate policies in one run, the best
one goes on to the checkpoint, the confirmation evaluation, the gate and the release.

A run whose ``sweep`` field is empty never enters this path (its tasks are skipped) and trains one policy as
before. A sweep (:mod:`sim2real.orchestration.candidates`: a list of overrides or a grid) trains on AWS Batch
(below) or, with ``training_backend: hyperpod``, as one Slurm job array on the HyperPod cluster
(:mod:`sim2real.orchestration.stages.hyperpod`: ``sbatch --array=0-<N-1>%<sweep_max_parallel>``, the GPU group
scaled for ``min(sweep_max_parallel, candidates) x num_nodes`` nodes; per candidate ``sweep.train_on_slurm``, the
wait on its array task, takes the place of the Batch tasks, which the ``training_backend`` branch skipped) or, with
``training_backend: hyperpod_eks``, as one Kubeflow ``PyTorchJob`` per candidate in the team's Kueue queue
(``sweep.train_on_eks``, after ``hyperpod_eks.check_capacity``; :mod:`sim2real.orchestration.stages.hyperpod_eks`).
On AWS Batch:

* ``preflight.check_sweep_capacity`` sizes the quota for ``min(sweep_max_parallel, candidates)`` jobs of
  ``num_nodes`` nodes each (the ``training_backend`` branch takes it instead of ``preflight.check_capacity``);
* per candidate ``c<i>`` (dynamic task mapping, one map index each; Airflow's ``expand_kwargs``): its own
  Batch job ``sim2real-train-<run_key>-c<i>``, prefix ``runs/<run_key>/candidates/c<i>/``, MLflow child runs and
  closed-loop evaluation on the workstation (one candidate at a time, ``max_active_tis_per_dagrun=1``, unless
  the Airflow option ``[sim2real] sweep_parallel_evaluations`` allows more);
* ``pick_best`` takes the candidate with the best Wilson 95% lower bound
  (:func:`sim2real.orchestration.candidates.best_candidate`; ties: higher success rate, then lower index) and
  hands it to ``checkpoint.training_job``: the winner's checkpoint is what the rest of the run evaluates again
  (on the run's own ``eval_seed`` episodes, disjoint from the selection's), gates and releases.

At most ``sweep_max_parallel`` training jobs run at once: candidate ``i`` runs in lane ``i mod P`` and is
submitted once candidate ``i - P`` has ended (``sweep.wait_for_slot``, a sensor in reschedule mode), whether it
succeeded or failed.

Survivors: ``pick_best`` picks among the candidates whose training, checkpoint and evaluation succeeded, as long
as at least ``sweep_min_candidates`` did (default 1; the number of candidates: every candidate must succeed). It
runs once every candidate has ended and at least one succeeded (trigger rule ``all_done_min_one_success``; when
none did it is ``upstream_failed``, as before), records each failed candidate with its state and reason
(:func:`sim2real.orchestration.candidates.failed_candidate`), and fails, naming them, when fewer survived. A lane's sensor fails at once
when so many candidates can no longer succeed that the sweep cannot reach its minimum; on HyperPod the failing
candidate's ``sweep.train_on_slurm`` then cancels the job array's remaining tasks. ``run_outcome`` does not
count the failed candidates' task instances that ``pick_best`` recorded against the run
(:func:`forgiven_task_keys`): the run is then as successful as its winner's release, and its note says how many
candidates failed.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration.budget import candidate_cost_limits
from sim2real.orchestration.candidates import (
    CANDIDATE_TASKS,
    MAX_CANDIDATES,
    PICK_RULE,
    SWEEP_KEYS,
    best_candidate,
    candidate_id,
    candidate_params,
    expand_sweep,
    failed_candidate,
    sweep_schema,
    training_task_id,
)
from sim2real.orchestration.dag_defaults import POLL
from sim2real.orchestration.params import SECTION_TRAINING, _range
from sim2real.orchestration.stages import hyperpod, hyperpod_eks, train
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs
from sim2real.orchestration.stages.evaluate import EvaluationPlan, check_report, eval_commands
from sim2real.orchestration.stages.train import BatchPlan, training_environment

DOC = """\
**Sweep: several candidates in one run (AWS Batch, HyperPod Slurm or HyperPod EKS).** Runs only when the form's `sweep` lists
candidates (skipped otherwise). Per candidate `c<i>` (one map index each), the run's `training_backend` decides
its training (the other backend's tasks are skipped). HyperPod: `train_on_slurm` waits (deferred) on the
candidate's task `<id>_<i>` of the job array `hyperpod.submit_sweep` submitted (`sacct -j <id>_<i>` through SSM on
the head node; Slurm runs at most `sweep_max_parallel` tasks at once; `scancel <id>_<i>` when killed). HyperPod
EKS: `train_on_eks` creates the candidate's own Kubeflow `PyTorchJob` `s2r-<run key>-c<i>` in the team's Kueue queue
and waits (deferred) for it, as `hyperpod_eks.train_policy` (reattached by name on a retry, deleted when killed,
preemption waited through). AWS Batch:
waits for a free lane (`sweep_max_parallel` jobs at once; Batch `DescribeJobs` of the lane's previous job, free
once it ended; fails at once when the sweep can no longer reach `sweep_min_candidates` survivors), submits its own
Batch job (`RegisterJobDefinition`, `ListJobs`, `SubmitJob`), waits (deferred) for it. Then it waits for its `manifest.json` under
`runs/<run_key>/candidates/c<i>/checkpoints/`, then evaluates it in closed loop on the workstation (SSM
`SendCommand`; one candidate at a time unless configured parallel) and reads its report. `pick_best` then hands
the surviving candidate with the best Wilson 95% lower bound (ties: higher success rate, then lower index) to the
checkpoint stage; every candidate (a failed one with its state and reason) and the winner go into the lineage.
"""

CAPACITY_DOC = """\
**Capacity preflight for a sweep.** As `preflight.check_capacity` (EC2 `DescribeInstanceTypes`, Service Quotas
`GetServiceQuota`, CloudWatch `AWS/Usage`, Batch `DescribeComputeEnvironments` / `DescribeJobDefinitions`), sized
for the jobs that run at once: `min(sweep_max_parallel, candidates)` × `num_nodes` nodes. Waits for nothing.
"""

CANDIDATES_DOC = """\
**Sweep candidates.** Calls no AWS API and waits for nothing: hands on the planned candidates (one entry per
candidate: its params, job name, prefixes, evaluation seeds), which the `sweep` group maps over.
"""

PICK_BEST_DOC = """\
**Pick the best candidate.** Calls no AWS API but Batch `DescribeJobs` of failed candidates' jobs: reads every
candidate's training result, checkpoint manifest and evaluation report, and hands on the one with the highest
Wilson 95% lower bound of its success rate (ties: higher success rate, then lower candidate index), with the table
of all candidates (params, job, checkpoint sha256, success rate and interval). Runs once every candidate has ended
and at least one succeeded (trigger rule `all_done_min_one_success`; none did: `upstream_failed`) and picks among
the candidates whose training, checkpoint and evaluation succeeded, when at least `sweep_min_candidates` did; the
failed ones are listed with their task states and, for a Batch job that was submitted, its status and
`statusReason`. Waits for nothing. Fails, naming every failed candidate, when fewer survived.
"""

GROUP_ID = ids.SWEEP_GROUP
TASK_IDS = ids.SWEEP
#: The Airflow option (read when the DAG is parsed) that lets this many candidates' evaluations run at once on the
#: workstation; default 1 (one after the other: one workstation, one simulator at a time).
PARALLEL_EVALUATIONS_OPTION = ("sim2real", "sweep_parallel_evaluations")


@dataclass(frozen=True)
class SweepPlan(PlanSection):
    """The run's candidates (an empty list: no sweep)."""

    SECTION = "sweep"
    enabled: bool
    max_parallel: int  #: training jobs at once
    parallel_nodes: int  #: nodes the capacity preflight sizes for: min(max_parallel, candidates) × num_nodes
    selection_eval_seed: int  #: candidates are evaluated on seeds selection_eval_seed + i (disjoint from eval_seed's)
    #: candidates that must survive (training, checkpoint, evaluation) for pick_best to pick; 0: every candidate
    #: (a plan made before this field existed, whose run may resume after an upgrade, required every candidate)
    min_candidates: int = 0
    max_failed: int = 0  #: candidates that may fail while the sweep still picks: candidates - min_candidates
    #: one entry per candidate: the mapped group's kwargs (:func:`candidate_entry`)
    candidates: list[dict[str, Any]] = field(default_factory=list)


def params() -> dict[str, Any]:
    """The sweep fields of the trigger form."""
    from airflow.sdk import Param

    training_fields = train.params()
    schema = sweep_schema({k: training_fields[k].schema for k in SWEEP_KEYS})
    return {
        "sweep": Param(
            None, type=["null", "array", "object"], **schema, title="Sweep (candidates)",
            description="Train several candidates in this run, in parallel, and release the best: a list of "
            'overrides (`[{"seed": 3}, {"seed": 4, "num_envs": 64}]`) or a grid (`{"seed": [3, 4, 5]}`). Keys: '
            f"{', '.join(SWEEP_KEYS)}; at most {MAX_CANDIDATES} candidates, no two alike. The candidate with the "
            "best Wilson 95% lower bound (ties: higher success rate, then the earlier candidate) goes on to the "
            "gate. Empty: one policy, as without a sweep. AWS Batch: one job per candidate; HyperPod: one Slurm "
            "job array (one task per candidate); HyperPod EKS: one PyTorchJob per candidate in the team's queue.",
            section=SECTION_TRAINING,
        ),
        "sweep_max_parallel": Param(
            3, type="integer", title="Sweep: training jobs at once",
            description="The most candidates' training jobs that run at the same time (the capacity preflight "
            "sizes the quota for this many jobs; HyperPod: the job array's % limit, and the GPU group is scaled "
            "up for this many jobs; HyperPod EKS: the team queue's quota is checked for this many jobs, and Kueue "
            "admits as many as that quota holds).",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=MAX_CANDIDATES)),
        "sweep_min_candidates": Param(
            1, type="integer", title="Sweep: candidates that must succeed",
            description="The best candidate is picked among those whose training, checkpoint and evaluation "
            "succeeded, as long as at least this many did; a candidate that failed (a job lost to a spot "
            "interruption, say) is listed in the lineage and the run note with its reason, and the run can still "
            "release. 1 (the default): any survivor; the number of candidates: every candidate must succeed. At "
            "most the sweep's number of candidates. The winner is still evaluated again and gated as any policy.",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=MAX_CANDIDATES)),
    }


def candidate_entry(ctx: PlanContext, index: int, override: dict[str, Any], *, max_parallel: int,
                    selection_eval_seed: int, cost_limit_usd: float | None) -> dict[str, Any]:
    """One candidate's names and inputs (a plain JSON dict; its keys are the mapped group's arguments).

    :return: ``{"index", "candidate" (``c<i>``), "candidate_key" (``<run_key>-c<i>``), "overrides", "params" (the
        swept keys' values), "job_name", "environment" (the trainer's), "cost_limit_usd", "output_uri",
        "manifest_uri", "report_uri", "ssm_output_key_prefix", "eval_seed", "eval_environment", "lane_after" (the
        candidate whose job must have ended first; None: none)}``.
    """
    cid = candidate_id(index)
    prefix = f"{ctx.run_prefix}candidates/{cid}/"
    uri = f"s3://{ctx.bucket}/{prefix}"
    cparams = candidate_params(ctx.params, override)
    cctx = PlanContext(run_key=ctx.run_key, bucket=ctx.bucket, run_prefix=prefix, run_uri=uri, params=cparams,
                       env=ctx.env, budget=ctx.budget)
    return {
        "index": index,
        "candidate": cid,
        "candidate_key": f"{ctx.run_key}-{cid}",
        "overrides": dict(override),
        "params": {k: cparams[k] for k in SWEEP_KEYS},
        "job_name": f"sim2real-train-{ctx.run_key}-{cid}",
        "environment": training_environment(cctx),
        "cost_limit_usd": cost_limit_usd,
        "output_uri": cctx.checkpoint_uri,
        "manifest_uri": f"{cctx.checkpoint_uri}manifest.json",
        "report_uri": f"{uri}eval/report.json",
        "ssm_output_key_prefix": f"{prefix}eval/ssm",
        "eval_seed": selection_eval_seed,
        "eval_environment": {},
        "lane_after": index - max_parallel if index >= max_parallel else None,
    }


def plan(ctx: PlanContext) -> SweepPlan:
    overrides = expand_sweep(ctx.params.get("sweep"))
    max_parallel = int(ctx.params.get("sweep_max_parallel") or 1)
    selection_seed = selection_eval_seed_of(ctx.params)
    limits = candidate_cost_limits(ctx.budget, len(overrides))
    candidates = [candidate_entry(ctx, i, o, max_parallel=max_parallel, selection_eval_seed=selection_seed,
                                  cost_limit_usd=limits[i]) for i, o in enumerate(overrides)]
    minimum = min(int(ctx.params.get("sweep_min_candidates") or 1), len(candidates)) if candidates else 0
    return SweepPlan(enabled=bool(candidates), max_parallel=max_parallel,
                     parallel_nodes=min(max_parallel, max(len(candidates), 1)) * int(ctx.params["num_nodes"]),
                     selection_eval_seed=selection_seed, candidates=candidates, min_candidates=minimum,
                     max_failed=len(candidates) - minimum)


def selection_eval_seed_of(params: dict[str, Any]) -> int:
    """The first seed the candidates are evaluated on: after every round's gate episodes (``eval_seed +
    max_rounds × eval_episodes``; with one round, the episodes right after the gate's), so no round's confirmation
    evaluation reuses the episodes the winner was selected on."""
    return int(params["eval_seed"]) + int(params.get("max_rounds") or 1) * int(params["eval_episodes"])


def pick_best_result(plan: dict, trainings: list, manifests: list, reports: list,
                     failures: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``pick_best``'s value: every candidate (params, job, checkpoint, evaluation; a failed one with its state and
    reason) and the winner among the survivors.

    :param trainings: / :param manifests: / :param reports: the mapped tasks' results, in map-index order (``None``
        where a candidate's task handed on nothing: it failed, or was not run because an earlier one failed).
    :param failures: map index → ``{"state", "reason", "batch_job_id"}`` (a HyperPod candidate: also
        ``"slurm_job_id"`` and ``"hyperpod_cluster_name"`` once it waited for its array task) of the candidates that failed
        (:func:`sim2real.orchestration.candidates.failed_candidate`); a candidate missing a result but not listed
        is recorded as failed with the missing result as its reason.
    :return: ``{"rule", "winner" (index), "candidate" (``c<i>``), "candidates": [{"index", "candidate",
        "candidate_key", "overrides", "params", "batch_job_id" (a HyperPod sweep: None, and "slurm_job_id"
        ``<array>_<i>`` and "hyperpod_cluster_name" instead), "checkpoint_uri", "checkpoint_sha256", "manifest_uri",
        "report_uri", "success_rate", "ci95", "successes", "episodes", "seeds_from", "state" ("success" | "failed"),
        "reason" (None for a survivor), "won"}], "training" (the winner's training result), "manifest_uri" (the
        winner's), "min_candidates", "survivors", "failed": [indexes]}``.
    :raises ValueError: the results do not line up with the planned candidates, there are none, or fewer than
        ``min_candidates`` survived (naming every failed candidate and its reason).
    """
    section = SweepPlan.from_plan(plan)
    planned = section.candidates
    if not (len(planned) == len(trainings) == len(manifests) == len(reports)) or not planned:
        raise ValueError(f"sweep results do not match the {len(planned)} planned candidates: {len(trainings)} "
                         f"trainings, {len(manifests)} checkpoints, {len(reports)} evaluations")
    failures = dict(failures or {})
    rows = []
    for cand, training, manifest, report in zip(planned, trainings, manifests, reports, strict=True):
        training, manifest, report = training or {}, manifest or {}, report or {}
        failure = failures.get(cand["index"])
        missing = [name for name, value in (("training result", training), ("checkpoint manifest", manifest),
                                            ("evaluation report", report)) if not value]
        if missing and not failure:
            failure = {"state": "failed", "reason": f"no {', no '.join(missing)} handed on"}
        ok = failure is None
        rows.append({
            "index": cand["index"], "candidate": cand["candidate"], "candidate_key": cand["candidate_key"],
            "overrides": cand["overrides"], "params": cand["params"],
            **_job_fields(training, failure),
            "checkpoint_uri": manifest.get("checkpoint_uri") if ok else None,
            "checkpoint_sha256": manifest.get("sha256") if ok else None,
            "manifest_uri": cand["manifest_uri"], "report_uri": cand["report_uri"],
            "success_rate": report["success_rate"] if ok else None, "ci95": list(report["ci95"]) if ok else None,
            "successes": report["successes"] if ok else None, "episodes": report["episodes"] if ok else None,
            "seeds_from": cand["eval_seed"], "state": "success" if ok else str(failure.get("state") or "failed"),
            "reason": None if ok else str(failure.get("reason") or "failed"),
        })
    survivors = [r for r in rows if r["reason"] is None]
    failed = [r for r in rows if r["reason"] is not None]
    minimum = max(int(section.min_candidates or len(planned)), 1)
    if len(survivors) < minimum:
        raise ValueError(
            f"only {len(survivors)} of {len(planned)} sweep candidates succeeded, sweep_min_candidates is {minimum}: "
            + "; ".join(f"{r['candidate']} {r['state']}: {r['reason']}" for r in failed)
            + ". Read the failed candidates' task logs, or lower sweep_min_candidates")
    winner = best_candidate([{"index": r["index"], "report": r} for r in survivors])["index"]
    for row in rows:
        row["won"] = row["index"] == winner
    best = planned[winner]
    return {"rule": PICK_RULE, "winner": winner, "candidate": best["candidate"], "candidates": rows,
            "training": dict(trainings[winner]), "manifest_uri": best["manifest_uri"], "min_candidates": minimum,
            "survivors": len(survivors), "failed": [r["index"] for r in failed]}


def forgiven_task_keys(picked: dict[str, Any] | None) -> list[str]:
    """The task instances (``task_id[i]``) of the candidates ``pick_best`` recorded as failed: ``run_outcome`` does
    not fail the run for them (the sweep picked among the survivors). Empty without a pick."""
    if not picked:
        return []
    return [f"{task_id}[{int(i)}]" for i in picked.get("failed") or [] for task_id in CANDIDATE_TASKS]


def training_job_fields(training: dict | None) -> dict[str, Any]:
    """A candidate's training job in its lineage row: ``{"batch_job_id"}`` for a Batch job, ``{"batch_job_id":
    None, "slurm_job_id", "hyperpod_cluster_name"}`` for a Slurm array task (its result has ``cluster_name``), and
    ``{"batch_job_id": None, "hyperpod_cluster_name", "eks_job": {"namespace", "job_name", "job_uid"}}`` for a
    HyperPod EKS candidate's PyTorchJob (its result's ``backend`` is ``hyperpod_eks``)."""
    training = training or {}
    if training.get("backend") == "hyperpod_eks":
        return {"batch_job_id": None, "hyperpod_cluster_name": training.get("cluster_name"),
                "eks_job": {k: training.get(k) for k in ("namespace", "job_name", "job_uid")}}
    if training.get("cluster_name"):
        return {"batch_job_id": None, "slurm_job_id": training.get("job_id"),
                "hyperpod_cluster_name": training["cluster_name"]}
    return {"batch_job_id": training.get("job_id")}


def _job_fields(training: dict, failure: dict | None) -> dict[str, Any]:
    """:func:`training_job_fields`, with a failed candidate's Batch job id, Slurm array task and cluster, or
    PyTorchJob and cluster, from its failure record when its training handed on nothing."""
    fields = training_job_fields(training)
    failure = failure or {}
    if fields.get("batch_job_id") or fields.get("slurm_job_id") or fields.get("eks_job"):
        return fields
    if failure.get("eks_job"):
        return {"batch_job_id": None, "hyperpod_cluster_name": failure.get("hyperpod_cluster_name"),
                "eks_job": failure["eks_job"]}
    if failure.get("slurm_job_id"):
        return {"batch_job_id": None, "slurm_job_id": failure["slurm_job_id"],
                "hyperpod_cluster_name": failure.get("hyperpod_cluster_name")}
    if failure.get("batch_job_id"):
        fields["batch_job_id"] = failure["batch_job_id"]
    return fields


def add_tasks(plan: Any, *, image: Any, backend: Any, slurm_array: Any = None, scale_down: Any = None,
              eks_capacity: Any = None) -> Any:
    """Add ``preflight.check_sweep_capacity``, the mapped ``sweep`` group and ``pick_best`` after the
    ``training_backend`` branch; return ``pick_best``.

    :param slurm_array: ``hyperpod.submit_sweep`` (a HyperPod sweep's job array; None: Batch only).
    :param scale_down: ``hyperpod_scale_down`` (the HyperPod teardown, outside group ``hyperpod``), which then also
        waits for every candidate's array task.
    :param eks_capacity: ``hyperpod_eks.check_capacity`` (a HyperPod EKS sweep: each candidate's
        ``sweep.train_on_eks``, its own PyTorchJob, follows it; None: no EKS path)."""
    from airflow.configuration import conf
    from airflow.sdk import task, task_group
    from airflow.sdk.exceptions import AirflowFailException

    from sim2real.orchestration.operators.batch import BatchTrainingOperator
    from sim2real.orchestration.operators.quota import GpuCapacityPreflightOperator
    from sim2real.orchestration.operators.ssm import WorkstationCommandOperator
    from sim2real.orchestration.sensors.checkpoint import CheckpointManifestSensor
    from sim2real.orchestration.sensors.sweep import SweepLaneSensor

    batch = refs(plan, BatchPlan)
    ev = refs(plan, EvaluationPlan)
    sweep = refs(plan, SweepPlan)
    eval_parallel = conf.getint(*PARALLEL_EVALUATIONS_OPTION, fallback=1)

    with _existing_group(ids.PREFLIGHT_GROUP):  # beside preflight.check_capacity (train.add_tasks made the group)
        capacity = GpuCapacityPreflightOperator(
            task_id=ids.local(ids.SWEEP_CHECK_CAPACITY),
            instance_type=batch.instance_type,
            num_nodes=sweep.parallel_nodes,  # the jobs that run at once, not one job
            compute_environment=batch.compute_environment,
            job_definition=batch.job_definition,
            retries=1,
            execution_timeout=dt.timedelta(minutes=5),
            doc_md=CAPACITY_DOC,
        )

    slurm_trainings: list[Any] = []  # the mapped sweep.train_on_slurm (the HyperPod scale-down waits for it)

    @task_group(group_id=GROUP_ID, tooltip="one map index per candidate: train, checkpoint, closed-loop evaluation",
                doc_md=DOC)
    def candidates(index, candidate, candidate_key, overrides, params, job_name, environment, cost_limit_usd,
                   output_uri, manifest_uri, report_uri, ssm_output_key_prefix, eval_seed, eval_environment,
                   lane_after):
        """One candidate (its :func:`candidate_entry`, one map index): every key is an argument, as
        ``expand_kwargs`` requires; ``index``, ``candidate``, ``candidate_key``, ``overrides`` and ``params`` are
        read by ``pick_best`` and the lineage from the plan, not by these tasks."""
        lane = SweepLaneSensor(
            task_id=ids.local(ids.SWEEP_WAIT_FOR_SLOT), lane_after=lane_after, max_failed=sweep.max_failed,
            submit_task_id=ids.SWEEP_SUBMIT_TRAINING, train_task_id=ids.SWEEP_TRAIN_POLICY,
            later_task_ids=[t for t in CANDIDATE_TASKS if t not in (ids.SWEEP_WAIT_FOR_SLOT, ids.SWEEP_SUBMIT_TRAINING,
                                                                    ids.SWEEP_TRAIN_POLICY, ids.SWEEP_TRAIN_ON_SLURM,
                                                                    ids.SWEEP_TRAIN_ON_EKS)],
            mode="reschedule", poke_interval=POLL,
            timeout=13 * 3600, execution_timeout=dt.timedelta(hours=13), doc_md=DOC,
        )
        common = dict(job_name=job_name, job_queue=batch.job_queue, job_definition=batch.job_definition,
                      image_uri=image.output["image_uri"], num_nodes=batch.num_nodes, run_key=plan["run_key"],
                      environment=environment, runnable_timeout_seconds=batch.runnable_timeout_seconds,
                      cost_limit_usd=cost_limit_usd, usd_per_node_hour=batch.usd_per_node_hour,
                      poll_interval=POLL, multiple_outputs=True, doc_md=DOC)
        submitted = BatchTrainingOperator(task_id=ids.local(ids.SWEEP_SUBMIT_TRAINING), submit_only=True,
                                          execution_timeout=dt.timedelta(minutes=10), **common)
        training = BatchTrainingOperator(task_id=ids.local(ids.SWEEP_TRAIN_POLICY), attach_job_id=submitted.output["job_id"],
                                         retries=0, execution_timeout=dt.timedelta(hours=12), **common)
        manifest = CheckpointManifestSensor(
            task_id=ids.local(ids.SWEEP_WAIT_FOR_CHECKPOINT), manifest_uri=manifest_uri,
            # a template, not the plan's XComArg: a task right after prepare_run (a setup) must be all_success
            expected_task="{{ ti.xcom_pull(task_ids='" + ids.PREPARE_RUN + "', key='checkpoint.task') }}",
            # The candidate's Batch job (fails the wait early when it FAILED); empty on HyperPod (its array task
            # has ended COMPLETED before this sensor starts).
            # none_failed joins the two backends' paths (the other one is skipped). Not none_failed_min_one_success:
            # Airflow evaluates a "fast-triggered" rule (one_success, one_failed, one_done, none_failed_min_one_success)
            # of a task not yet expanded in a mapped group against every map index of its upstream, so one failed
            # candidate's training would fail this task for every candidate before it is expanded
            # (Airflow's TriggerRuleDep, found with dag.test: a failed candidate ended the whole sweep).
            batch_job_id=_BATCH_JOB_OF_CANDIDATE, trigger_rule="none_failed",
            poke_interval=POLL, timeout=30 * 60, execution_timeout=dt.timedelta(minutes=40), doc_md=DOC,
        )

        @task(task_id=ids.local(ids.SWEEP_EVAL_COMMAND), execution_timeout=dt.timedelta(minutes=1))
        def eval_command(plan: dict, manifest: dict, manifest_uri: str, report_uri: str, eval_seed: int,
                         eval_environment: dict) -> list:
            return eval_commands(plan, manifest, manifest_uri=manifest_uri, report_uri=report_uri, seed=eval_seed,
                                 environment=eval_environment)

        commands = eval_command(plan["plan"], manifest.output, manifest_uri, report_uri, eval_seed, eval_environment)
        evaluation = WorkstationCommandOperator(
            task_id=ids.local(ids.SWEEP_RUN_EVALUATION),
            workstation_tag_key=ev.workstation_tag_key, workstation_tag_value=ev.workstation_tag_value,
            commands=commands, execution_timeout_seconds=ev.execution_timeout_seconds,
            output_s3_bucket=ev.output_s3_bucket, output_s3_key_prefix=ssm_output_key_prefix, waiter_delay=POLL,
            max_active_tis_per_dagrun=max(eval_parallel, 1),  # one simulator on one workstation: one at a time
            execution_timeout=dt.timedelta(hours=2), doc_md=DOC,
        )

        @task(task_id=ids.local(ids.SWEEP_READ_EVAL_REPORT), multiple_outputs=False,
              execution_timeout=dt.timedelta(minutes=5))
        def read_eval_report(plan: dict, manifest: dict, evaluation: dict, report_uri: str) -> dict:
            """Read the candidate's eval/report.json and check it belongs to its checkpoint."""
            import json

            from airflow.providers.amazon.aws.hooks.s3 import S3Hook

            episodes = EvaluationPlan.from_plan(plan).episodes
            report = json.loads(S3Hook().read_key(key=report_uri))
            try:
                check_report(report, expected_sha256=manifest["sha256"], expected_episodes=episodes)
            except ValueError as err:
                raise AirflowFailException(f"{report_uri}: {err}") from err
            report["report_uri"] = report_uri
            return report

        report = read_eval_report(plan["plan"], manifest.output, evaluation.output, report_uri)
        # The backend's path: the Batch tasks follow the Batch capacity check, the Slurm wait follows the job array's
        # submission; the training_backend branch skipped the other one, and that skip reaches its candidates' tasks
        # (a branch inside the mapped group could not skip map indexes that are not expanded yet).
        capacity >> lane >> submitted >> training >> manifest
        if slurm_array is not None:
            on_slurm = hyperpod.add_candidate_training(plan, array=slurm_array, index=index,
                                                       cost_limit_usd=cost_limit_usd, max_failed=sweep.max_failed,
                                                       candidate_task_ids=CANDIDATE_TASKS)
            on_slurm >> manifest
            slurm_trainings.append(on_slurm)
        if eks_capacity is not None:  # HyperPod EKS: the candidate's own PyTorchJob in the team's queue
            on_eks = hyperpod_eks.add_candidate_training(plan, image=image, candidate=candidate,
                                                         environment=environment, cost_limit_usd=cost_limit_usd)
            eks_capacity >> on_eks >> manifest
        evaluation >> report

    # Serves both backends: it runs after the Batch capacity check or when that was skipped (a HyperPod sweep, whose
    # candidates' train_on_slurm wait for the job array's submission), and skips itself without a sweep. Not
    # downstream of the HyperPod scale-up: a task between that setup and its teardown (hyperpod_scale_down, after the
    # candidates' Slurm waits) is skipped with it, which would skip a Batch sweep. So its trigger rule is not
    # all_success, and it pulls the plan instead of taking it from prepare_run (the lineage's setup, whose direct
    # downstream tasks must be all_success).
    @task(task_id=ids.SWEEP_CANDIDATES, retries=0, execution_timeout=dt.timedelta(minutes=1), doc_md=CANDIDATES_DOC,
          trigger_rule="none_failed")
    def sweep_candidates(ti=None) -> list:
        """The planned candidates, as this task's return value (dynamic task mapping maps over return values)."""
        from airflow.sdk.exceptions import AirflowSkipException

        plan = (ti.xcom_pull(task_ids=ids.PREPARE_RUN) or {}).get("plan") or {}
        planned = SweepPlan.from_plan(plan)
        if not planned.enabled:
            raise AirflowSkipException("no sweep in this run: one policy is trained")
        return list(planned.candidates)

    listed = sweep_candidates()
    mapped = candidates.expand_kwargs(listed)
    backend >> capacity >> listed  # AWS Batch: after the capacity check (HyperPod: it was skipped)
    if slurm_array is not None and scale_down is not None:
        slurm_trainings >> scale_down  # the nodes stay up until every candidate's array task has ended
    image >> mapped

    # all_done_min_one_success: once every candidate has ended, also when some failed (it picks among the
    # survivors); upstream_failed when none succeeded; skipped with the sweep path (a run without a sweep).
    @task(task_id=ids.SWEEP_PICK_BEST, multiple_outputs=True, retries=0, execution_timeout=dt.timedelta(minutes=2),
          trigger_rule="all_done_min_one_success", doc_md=PICK_BEST_DOC)
    def pick_best(ti=None) -> dict:
        """The best surviving candidate by Wilson lower bound, and every candidate's record."""
        # The plan is pulled, not passed: a task right after prepare_run (the lineage's setup) must keep trigger
        # rule all_success.
        plan = (ti.xcom_pull(task_ids=ids.PREPARE_RUN) or {})["plan"]
        indexes = list(range(len(SweepPlan.from_plan(plan).candidates)))

        def pulled(task_id: str) -> list:
            # one by one: a failed candidate has no XCom, and its place must stay
            return [_pull_or_none(ti, task_id, i) for i in indexes]

        try:
            backend = plan.get("backend", "batch")
            failures = _candidate_failures(ti, indexes, pulled, batch=backend == "batch", eks=backend == "hyperpod_eks",
                                           cluster_name=(plan.get("hyperpod") or {}).get("cluster_name"))
            return pick_best_result(plan, pulled(training_task_id(plan)), pulled(ids.SWEEP_WAIT_FOR_CHECKPOINT),
                                    pulled(ids.SWEEP_READ_EVAL_REPORT), failures)
        except ValueError as err:
            raise AirflowFailException(str(err)) from err

    best = pick_best()
    mapped >> best
    return best


#: The candidate's Batch job id (``sweep.submit_training`` of the same map index), "" when it did not run.
#: (Only a Batch run pulls it: pulling a skipped task's XCom logs a 404 at error level.)
_BATCH_JOB_OF_CANDIDATE = (
    "{{ '' if (ti.xcom_pull(task_ids='" + ids.PREPARE_RUN + "', key='plan') or {}).get('backend') in "
    "('hyperpod', 'hyperpod_eks') "
    "else (ti.xcom_pull(task_ids='" + ids.SWEEP_SUBMIT_TRAINING + "', key='job_id', map_indexes=ti.map_index) "
    "or '') }}")


def _pull_or_none(ti: Any, task_id: str, index: int, key: str = "return_value") -> Any:
    """One candidate's XCom ``key`` of ``task_id`` (map index ``index``), or None when there is none (the
    candidate did not get that far: pulling it raises or answers nothing)."""
    try:
        return ti.xcom_pull(task_ids=task_id, key=key, map_indexes=index)
    except Exception:  # noqa: BLE001 - no XCom: the candidate did not get that far
        return None


def _candidate_failures(ti: Any, indexes: list[int], pulled: Any, *, batch: bool = True, eks: bool = False,
                        cluster_name: str | None = None) -> dict[int, dict[str, Any]]:
    """Map index → :func:`failed_candidate` of each candidate with a failed task, from the Task Execution API
    (``get_task_states``: ``{run_id: {"<task_id>_<map_index>": state}}``) and, for a submitted Batch job
    (``batch``), Batch ``DescribeJobs`` (its status reason; left out when it cannot be read). A HyperPod sweep
    (``batch`` False): its Slurm array task from ``train_on_slurm``'s XComs (:func:`_slurm_failure`) and
    ``cluster_name``, the plan's cluster. A HyperPod EKS sweep (``eks``): its PyTorchJob (:func:`_eks_failure`)."""
    answer = ti.get_task_states(dag_id=ti.dag_id, task_ids=list(CANDIDATE_TASKS), run_ids=[ti.run_id]) or {}
    states: dict[int, dict[str, str]] = {}
    for key, state in (answer.get(ti.run_id) or {}).items():
        task_id, _, index = key.rpartition("_")
        if task_id in CANDIDATE_TASKS and index.isdigit():
            states.setdefault(int(index), {})[task_id] = str(getattr(state, "value", state))
    failed = {i: s for i, s in states.items() if i in indexes and failed_candidate(s) is not None}
    if not failed:
        return {}
    if eks:
        return {i: _eks_failure(ti, i, s) for i, s in failed.items()}
    if not batch:
        return {i: _slurm_failure(ti, i, s, cluster_name) for i, s in failed.items()}
    submitted = pulled(ids.SWEEP_SUBMIT_TRAINING)
    job_of = {i: submitted[i]["job_id"] for i in failed
              if isinstance(submitted[i], dict) and submitted[i].get("job_id")}
    jobs: dict[str, dict[str, Any]] = {}
    if job_of:
        try:
            from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

            answer = BatchClientHook().client.describe_jobs(jobs=list(job_of.values()))
            jobs = {j["jobId"]: j for j in answer.get("jobs") or []}
        except Exception as err:  # noqa: BLE001 - the reason is then the task states alone
            print(f"[sim2real] could not describe the failed candidates' Batch jobs: {err}", flush=True)
    return {i: failed_candidate(s, jobs.get(job_of.get(i, ""))) for i, s in failed.items()}


def _slurm_failure(ti: Any, index: int, states: dict[str, str], cluster_name: str | None) -> dict[str, Any] | None:
    """:func:`failed_candidate` of a HyperPod candidate, with its Slurm array task: ``slurm_job_id`` (XCom
    ``slurm_job_id`` of its ``sweep.train_on_slurm``, pushed before the wait), ``hyperpod_cluster_name`` and, when
    the task ended in a failure state (XCom ``slurm_job_end``), its state and exit code in the reason. Left out
    when the candidate never waited for a task (the XComs cannot be read)."""
    failure = failed_candidate(states)
    if failure is None:
        return None

    job_id = _pull_or_none(ti, ids.SWEEP_TRAIN_ON_SLURM, index, key="slurm_job_id")
    if not job_id:
        return failure
    failure.update(slurm_job_id=str(job_id), hyperpod_cluster_name=cluster_name)
    end = _pull_or_none(ti, ids.SWEEP_TRAIN_ON_SLURM, index, key="slurm_job_end")
    if isinstance(end, dict) and end.get("state"):
        failure["reason"] += (f"; Slurm job {job_id} {end['state']}"
                              + (f" (exit code {end['exit_code']})" if end.get("exit_code") else ""))
    return failure


def _eks_failure(ti: Any, index: int, states: dict[str, str]) -> dict[str, Any] | None:
    """:func:`failed_candidate` of a HyperPod EKS candidate, with its PyTorchJob (XCom ``eks_job`` of its
    ``sweep.train_on_eks``, pushed before the wait: ``hyperpod_cluster_name`` and ``eks_job`` {namespace, job_name,
    job_uid}). Left out when the candidate never created or found its job (the XCom cannot be read)."""
    failure = failed_candidate(states)
    job = _pull_or_none(ti, ids.SWEEP_TRAIN_ON_EKS, index, key="eks_job")
    if failure is None or not isinstance(job, dict) or not job.get("job_name"):
        return failure
    failure.update(hyperpod_cluster_name=job.get("cluster_name"),
                   eks_job={k: job.get(k) for k in ("namespace", "job_name", "job_uid")})
    return failure


def _existing_group(group_id: str) -> Any:
    """The task group ``group_id`` of the DAG being defined (to add a task to it again with ``with``).

    :raises KeyError: the DAG has no such group yet.
    """
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    return DagContext.get_current().task_group.get_task_group_dict()[group_id]
