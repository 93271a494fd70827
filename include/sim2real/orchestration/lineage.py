"""The run's lineage record: from container image digest to the robots that run the model.

``build_lineage`` assembles ``runs/<run_key>/lineage.json`` from what each stage handed on
(their XCom return values); ``render_markdown`` writes the human summary beside it. Both are
pure functions (no AWS call) so the report task and the tests share them.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from sim2real.contract import schemas
from sim2real.contract import task_ids as ids
from sim2real.contract.run_key import run_prefix
from sim2real.orchestration.candidates import CANDIDATE_TASKS, SWEEP_KEYS, failed_candidate


#: Lineage key → the task whose return value fills it, for a run on AWS Batch (task ids:
#: :mod:`sim2real.contract.task_ids`). The report pulls each task's XCom and hands it to :func:`build_lineage`
#: under its key; the lineage's ``rounds`` entry is computed from the plan instead, and the plan itself is the
#: lineage's frame (run key, params, budget).
SOURCES = {
    "image": ids.BUILD_IMAGE,
    "preflight": ids.BATCH_CHECK_CAPACITY,
    "training": ids.BATCH_TRAIN_POLICY,
    "sweep": ids.SWEEP_PICK_BEST,
    "checkpoint": ids.WAIT_FOR_CHECKPOINT,
    "evaluation": ids.READ_EVAL_REPORT,
    "quality_gate": ids.QUALITY_GATE,
    "vla": ids.FINETUNE_GROOT,
    "model_package": ids.WAIT_FOR_APPROVAL,
    "deployment": ids.DEPLOY_TO_ROBOTS,
}
#: What differs for a ``training_backend: hyperpod`` run (the plan's ``backend``): its capacity check and training
#: are the ``hyperpod`` group's tasks (the Slurm job's result is the ``training`` stage).
HYPERPOD_SOURCES = {"preflight": ids.HYPERPOD_CHECK_CAPACITY, "training": ids.HYPERPOD_TRAIN_POLICY}
#: ``training_backend: hyperpod_eks``: the team queue's capacity check and the PyTorchJob's wait.
HYPERPOD_EKS_SOURCES = {"preflight": ids.HYPERPOD_EKS_CHECK_CAPACITY, "training": ids.HYPERPOD_EKS_TRAIN_POLICY}
#: HyperPod runs: the scale tasks' results → lineage ``stages.hyperpod_scaling`` (``scale_down``: the teardown
#: ``hyperpod_scale_down``, outside group ``hyperpod``).
HYPERPOD_SCALING_SOURCES = {"scale_up": ids.HYPERPOD_SCALE_UP, "wait_for_nodes": ids.HYPERPOD_WAIT_FOR_NODES,
                            "scale_down": ids.HYPERPOD_SCALE_DOWN}
#: The lineage's ``rounds`` entry, given by the stages (``stages.rounds.lineage_entry``): called as
#: ``rounds_entry(plan, run_id=, evaluation=, checkpoint=, next_run_id=)`` with this run's evaluation report and
#: checkpoint manifest (None: not there) and the next round's run id (None: none started); returns the entry, or
#: None for a plan without retraining rounds.
RoundsEntry = Callable[..., dict[str, Any] | None]
#: XCom key of the quality gate's verdict, pushed whether it passed or failed (a failed gate task returns nothing).
VERDICT_KEY = "verdict"
#: XCom key of the canary's verdict and evidence (``operators.canary.XCOM_VERDICT``), pushed whether it promoted or not.
CANARY_VERDICT_KEY = "canary_verdict"
#: XCom key of a person's promote or abort in the canary review (``operators.canary_review.DECISION_XCOM``).
CANARY_REVIEW_KEY = "decision"


def stage_sources(plan: Mapping[str, Any]) -> dict[str, str]:
    """lineage key → task id for this run's backend (:data:`SOURCES`, with :data:`HYPERPOD_SOURCES`)."""
    backend = plan.get("backend")
    return {**SOURCES, **{"hyperpod": HYPERPOD_SOURCES, "hyperpod_eks": HYPERPOD_EKS_SOURCES}.get(backend, {})}

SCHEMA_VERSION = 1

#: JSON schema (draft 2020-12) of ``lineage.json``, in the contract package (``sim2real.contract.schemas``).
SCHEMA_PATH = schemas.path("lineage")


class LineageSchemaError(ValueError):
    """A lineage document does not match ``lineage.schema.json``; ``errors`` lists each mismatch."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("lineage.json does not match lineage.schema.json:\n- " + "\n- ".join(errors))


@lru_cache(maxsize=1)
def lineage_schema() -> dict[str, Any]:
    """The lineage JSON schema (parsed once)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def lineage_errors(lineage: Mapping[str, Any]) -> list[str]:
    """Every mismatch between ``lineage`` and the schema, as ``"<json path>: <message>"`` (empty when valid)."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(lineage_schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)
    doc = json.loads(json.dumps(lineage, default=str))  # what is written to S3
    return [f"{err.json_path}: {err.message}" for err in sorted(validator.iter_errors(doc), key=lambda e: e.json_path)]


def validate_lineage(lineage: Mapping[str, Any]) -> None:
    """Check ``lineage`` against ``lineage.schema.json``.

    :raises LineageSchemaError: listing every mismatch.
    """
    errors = lineage_errors(lineage)
    if errors:
        raise LineageSchemaError(errors)

def _get(mapping: Mapping[str, Any] | None, *keys: str) -> Any:
    cur: Any = mapping
    for key in keys:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def build_lineage(*, run_key: str, dag_id: str, run_id: str, params: Mapping[str, Any],
                  plan: Mapping[str, Any] | None = None, image: Mapping[str, Any] | None = None,
                  preflight: Mapping[str, Any] | None = None, training: Mapping[str, Any] | None = None,
                  checkpoint: Mapping[str, Any] | None = None, evaluation: Mapping[str, Any] | None = None,
                  quality_gate: Mapping[str, Any] | None = None, vla: Mapping[str, Any] | None = None,
                  model_package: Mapping[str, Any] | None = None, deployment: Mapping[str, Any] | None = None,
                  task_states: Mapping[str, Mapping[str, Any]] | None = None,
                  cost_estimate: Mapping[str, Any] | None = None,
                  figures: Mapping[str, Mapping[str, Any]] | None = None,
                  hyperpod_scaling: Mapping[str, Any] | None = None,
                  cost_actual: Mapping[str, Any] | None = None,
                  deploy_check: Mapping[str, Any] | None = None,
                  mlflow: Mapping[str, Any] | None = None,
                  approval: Mapping[str, Any] | None = None,
                  sweep: Mapping[str, Any] | None = None,
                  rounds: Mapping[str, Any] | None = None,
                  field: Mapping[str, Any] | None = None,
                  canary_review: Mapping[str, Any] | None = None,
                  field_dataset: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Assemble the lineage document (JSON-serialisable dict).

    Every argument but the identifiers may be ``None`` (a stage that did not run or was switched
    off); the document then says so with ``null`` rather than leaving the key out.

    :param cost_estimate: the run's cost estimate (``sim2real.orchestration.budget.estimate_run_cost``); default: the
        plan's ``budget``.
    :param figures: the report's pictures, ``{"training_curve": FIGURE, "eval_outcome": FIGURE}`` with
        ``FIGURE = {"uri", "source", "points", "skipped_reason"}`` (:func:`figure_entry`); ``None``: not drawn.
    :param hyperpod_scaling: HyperPod runs: ``{"scale_up": ..., "scale_down": ...}`` (the scale tasks' results).
    :param cost_actual: the run's actual GPU cost (:func:`sim2real.orchestration.cost_actual.actual_run_cost`); ``None``: unknown.
    :param deploy_check: the deploy stage's reading of the model package right before CreateDeployment
        (``{"model_package_arn", "model_approval_status"}``, XCom ``model_package_check``). When present, the
        chain's ``model_approval_status`` is that status (``model_approval_checked_at: "deploy"``), not the
        one the approval sensor saw earlier (``"approval"``): a package rejected in between shows as Rejected.
    :param mlflow: the run's MLflow tracking (:func:`sim2real.orchestration.tracking.start_tracking`'s result, the
        plan's ``tracking``): parent and child run ids; default: the plan's ``tracking``; ``None``: not known.
    :param approval: the release decision (the approval step's XCom ``decision``: ``{"decided_by", "via"
        ("airflow" | "sagemaker"), "at", "comment", "status", "triggered_by", "refused"}``); default: the one in
        ``model_package``; ``None``: nobody decided (no fine-tune, or the approval timed out).
    :param sweep: a sweep run's ``pick_best`` result (every candidate and the winner,
        :func:`sim2real.orchestration.stages.sweep.pick_best_result`); its winner's training result stands in for
        ``training`` when that is ``None``. ``None``: no sweep (or it did not finish).
    :param rounds: the retraining rounds (:func:`sim2real.orchestration.stages.rounds.lineage_entry`): this run's
        round and the success rate of every round so far; ``None``: not known.
    :param field: the canary's verdict with its evidence (the canary task's XCom ``canary_verdict``,
        :class:`sim2real.orchestration.operators.canary.CanaryVerdictOperator`); ``None``: no canary.
    :param canary_review: a person's answer to the canary review (XCom ``decision`` of ``canary_review``); ``None``:
        none (the verdict decided).
    :param field_dataset: the field dataset version the GR00T fine-tune includes (XCom ``field_dataset`` of
        ``vla.field_dataset``: ``{"dataset_version", "manifest_uri", "episodes", "frames", "source"}``, see
        :mod:`sim2real.orchestration.stages.vla_field`); ``None``: none (or the task did not run). Written as
        ``stages.field_dataset``.
    :return: ``{"schema_version", "run_key", "dag_id", "run_id", "created_at", "params", "chain",
        "cost_estimate", "cost_actual", "stages": {...}, "tasks": {...}, "figures", "mlflow", "approval",
        "candidates", "sweep", "rounds", "field"}`` where ``field`` is :func:`field_entry`, ``candidates`` lists
        every candidate the run trained (:func:`candidate_entries`; one without a sweep), ``sweep`` is ``{"rule", "winner", "candidate",
        "max_parallel"}`` or ``None``, ``rounds`` the retraining rounds' entry or ``None``, and ``chain`` is the
        one-line lineage (image digest → training job (Batch job, or Slurm job on the HyperPod cluster) →
        checkpoint sha256 → success rate → execution → package → deployment).
    """
    backend = _get(plan, "backend") or "batch"
    on_hyperpod = backend == "hyperpod"
    on_eks = backend == "hyperpod_eks"
    if sweep and not training:
        training = sweep.get("training")
    chain = {
        "image_digest": _get(image, "image_digest"),
        "image_uri": _get(image, "image_uri"),
        "training_backend": backend,
        "batch_job_id": None if on_hyperpod or on_eks else _get(training, "job_id"),
        "slurm_job_id": _get(training, "job_id") if on_hyperpod else None,
        "hyperpod_cluster_name": (_get(training, "cluster_name") or _get(plan, "hyperpod", "cluster_name"))
        if on_hyperpod else _get(training, "cluster_name") if on_eks else None,
        "checkpoint_uri": _get(checkpoint, "checkpoint_uri"),
        "checkpoint_sha256": _get(checkpoint, "sha256"),
        "success_rate": _get(evaluation, "success_rate"),
        "success_rate_ci95": _get(evaluation, "ci95"),
        "pipeline_execution_arn": _get(vla, "pipeline_execution_arn"),
        "model_package_arn": _get(model_package, "model_package_arn"),
        "model_approval_status": (_get(deploy_check, "model_approval_status") if deploy_check
                                  else _get(model_package, "approval_status")),
        "model_approval_checked_at": ("deploy" if deploy_check else "approval" if model_package else None),
        "deployment_id": _get(deployment, "deployment_id"),
        "device_statuses": _get(deployment, "devices"),
    }
    if on_eks:  # the PyTorchJob on the HyperPod EKS cluster
        chain["eks_job"] = {k: _get(training, k) for k in ("namespace", "job_name", "job_uid")}
    return {
        "schema_version": SCHEMA_VERSION,
        "run_key": run_key,
        "dag_id": dag_id,
        "run_id": run_id,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "params": dict(params),
        "chain": chain,
        "cost_estimate": dict(cost_estimate) if cost_estimate else (dict(plan["budget"]) if plan and plan.get("budget") else None),
        "cost_actual": dict(cost_actual) if cost_actual else None,
        "stages": {
            "plan": dict(plan) if plan else None,
            "image": dict(image) if image else None,
            "preflight": dict(preflight) if preflight else None,
            "training": dict(training) if training else None,
            "hyperpod_scaling": dict(hyperpod_scaling) if hyperpod_scaling else None,
            "checkpoint": dict(checkpoint) if checkpoint else None,
            "evaluation": dict(evaluation) if evaluation else None,
            "quality_gate": dict(quality_gate) if quality_gate else None,
            "field_dataset": dict(field_dataset) if field_dataset else None,
            "vla": dict(vla) if vla else None,
            "model_package": dict(model_package) if model_package else None,
            "deployment": dict(deployment) if deployment else None,
        },
        "tasks": with_job_time({k: dict(v) for k, v in (task_states or {}).items()}, backend,
                               None if sweep else training),
        "figures": {name: dict(fig) for name, fig in figures.items()} if figures is not None else None,
        "mlflow": _mlflow_entry(mlflow if mlflow is not None else _get(plan, "tracking"),
                                {"rl_training": checkpoint, "evaluation": evaluation}),
        "approval": _approval_entry(approval if approval is not None else _get(model_package, "decision")),
        "candidates": candidate_entries(params, chain, evaluation, sweep, _get(plan, "sweep"), task_states),
        "sweep": ({"rule": sweep.get("rule"), "winner": sweep.get("winner"), "candidate": sweep.get("candidate"),
                   "max_parallel": _get(plan, "sweep", "max_parallel"), "min_candidates": sweep.get("min_candidates"),
                   "survivors": sweep.get("survivors"), "failed": list(sweep.get("failed") or [])}
                  if sweep else None),
        "rounds": dict(rounds) if rounds else None,
        "field": field_entry(field, evaluation, canary_review),
    }


def field_entry(verdict: Mapping[str, Any] | None, evaluation: Mapping[str, Any] | None,
                review: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The lineage ``field`` entry: the canary robots' field success rate beside the simulation's, and the gap.

    :param verdict: the canary's verdict and evidence (``decision``, ``message``, ``rate``, ``ci95``, ``n``,
        ``successes``, ``threshold``, ``min_episodes``, ``robots``, ``silent``, ``refused``, ``window``,
        ``deployment_id``, ``model_version``); ``None`` or ``decision`` ``no_canary``: no entry.
    :param evaluation: the evaluation report (``success_rate``, ``ci95``, ``successes``, ``episodes``); ``None``:
        the simulation side is ``null``.
    :param review: a person's answer to the canary review (its XCom ``decision``: ``decided_by``, ``at``,
        ``comment``, ``status`` ``Promote`` | ``Abort``); with one, ``decision`` is theirs (``promote`` /
        ``roll_back``), the verdict's recommendation stays in ``message``, and ``reviewed_by`` records it.
    :return: ``{"decision", "message", "reviewed_by", "field": {"success_rate", "ci95", "successes", "episodes"}, "simulation":
        the same or None, "gap_pp": field minus simulation in percentage points (one decimal) or None, "threshold",
        "min_episodes", "robots", "silent", "refused", "window", "deployment_id", "model_version"}``, or ``None``.
    """
    if not verdict or verdict.get("decision") in (None, "no_canary"):
        return None
    field = {"success_rate": verdict.get("rate"), "ci95": list(verdict.get("ci95") or [0.0, 1.0]),
             "successes": int(verdict.get("successes") or 0), "episodes": int(verdict.get("n") or 0)}
    simulation = None
    if evaluation and evaluation.get("success_rate") is not None:
        simulation = {"success_rate": evaluation["success_rate"], "ci95": list(evaluation.get("ci95") or [0.0, 1.0]),
                      "successes": int(evaluation.get("successes") or 0), "episodes": int(evaluation["episodes"])}
    gap = (round((field["success_rate"] - simulation["success_rate"]) * 100.0, 1)
           if simulation and field["success_rate"] is not None else None)
    decision, reviewed = verdict["decision"], None
    if review and review.get("status") in ("Promote", "Abort"):
        decision = "promote" if review["status"] == "Promote" else "roll_back"
        reviewed = {k: review.get(k) for k in ("decided_by", "at", "comment", "status")}
    return {"decision": decision, "message": str(verdict.get("message") or ""), "reviewed_by": reviewed, "field": field,
            "simulation": simulation, "gap_pp": gap, "threshold": verdict.get("threshold"),
            "min_episodes": verdict.get("min_episodes"), "robots": dict(verdict.get("robots") or {}),
            "silent": list(verdict.get("silent") or []), "refused": dict(verdict.get("refused") or {}),
            "window": dict(verdict.get("window") or {}), "deployment_id": verdict.get("deployment_id"),
            "model_version": verdict.get("model_version")}


#: The training task whose result is the job a backend ran (``training``), and how its job is named.
TRAINING_TASKS = {"batch": (ids.BATCH_TRAIN_POLICY, "AWS Batch job", "startedAt → stoppedAt (DescribeJobs)"),
                  "hyperpod": (ids.HYPERPOD_TRAIN_POLICY, "Slurm job", "start → end (on the HyperPod cluster)"),
                  "hyperpod_eks": (ids.HYPERPOD_EKS_TRAIN_POLICY, "PyTorchJob",
                                   "start → end (on the HyperPod EKS cluster)")}


def with_job_time(tasks: dict[str, dict[str, Any]], backend: str,
                  training: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Add the training job's own running time to its task's entry.

    A cleared or retried training task that reattached to its job (already running or finished) lasts only its
    own try (seconds), while the job ran for hours: the entry keeps that ``duration_s`` and gains
    ``job_duration_s`` (the job's ``stopped_at - started_at``, seconds, as the training operator read them:
    Batch ``DescribeJobs`` ``startedAt``/``stoppedAt``, or the Slurm job's start and end) and
    ``job_duration_source`` (which job, which fields). Nothing is added without both times, nor for a sweep
    (its candidates' tasks are mapped; ``training`` is then ``None``).

    :param tasks: the lineage ``tasks`` (``{task_id: {"state", "duration_s"}}``), changed in place and returned.
    :param backend: the plan's ``backend`` (``batch`` or ``hyperpod``).
    :param training: the training task's result (``job_id``, ``started_at``, ``stopped_at``: epoch seconds).
    """
    task_id, kind, fields = TRAINING_TASKS.get(backend, (None, "", ""))
    started, stopped = _get(training, "started_at"), _get(training, "stopped_at")
    if task_id in tasks and started is not None and stopped is not None and float(stopped) >= float(started):
        tasks[task_id]["job_duration_s"] = round(float(stopped) - float(started), 1)
        tasks[task_id]["job_duration_source"] = f"{kind} {_get(training, 'job_id')} {fields}"
    return tasks


#: The keys of the lineage ``approval`` entry (who decided, where, when, why, what; who triggered the run; the
#: answers refused before the decision: four-eyes, or a contrary decision that came later).
APPROVAL_KEYS = ("decided_by", "via", "at", "comment", "status", "triggered_by", "refused")
#: The keys of one refused answer in the ``approval`` entry's ``refused`` list.
REFUSAL_KEYS = ("by", "via", "status", "at", "reason")


def _approval_entry(decision: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The lineage ``approval`` entry: the decision's :data:`APPROVAL_KEYS` (``refused``: a list, possibly
    empty, of :data:`REFUSAL_KEYS`), or ``None`` when nobody decided."""
    if not decision:
        return None
    entry = {key: decision.get(key) for key in APPROVAL_KEYS}
    entry["refused"] = [{key: r.get(key) for key in REFUSAL_KEYS} for r in decision.get("refused") or []]
    return entry


def candidate_entries(params: Mapping[str, Any], chain: Mapping[str, Any], evaluation: Mapping[str, Any] | None,
                      sweep: Mapping[str, Any] | None, planned: Mapping[str, Any] | None = None,
                      task_states: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The lineage's ``candidates``: a sweep's rows (params, job, checkpoint sha256, success rate and interval of
    the selection evaluation, ``state`` and ``reason``, ``won``); a sweep that did not reach its pick (``planned``:
    the plan's ``sweep`` section): its planned candidates with nothing measured and none won, a failed one with
    its state and reason from ``task_states`` (:func:`sim2real.orchestration.candidates.failed_candidate`);
    else the run's one policy (from ``chain``, ``won`` true when it reached the gate's input)."""
    if sweep:
        return [dict(row) for row in sweep.get("candidates") or []]
    if planned and planned.get("enabled"):
        rows = []
        for c in planned.get("candidates") or []:
            states = {t: ((task_states or {}).get(f"{t}[{c['index']}]") or {}).get("state") for t in CANDIDATE_TASKS}
            failure = failed_candidate({t: v for t, v in states.items() if v})
            rows.append({"index": c["index"], "candidate": c["candidate"], "candidate_key": c["candidate_key"],
                         "overrides": c["overrides"], "params": c["params"], "batch_job_id": None,
                         "checkpoint_uri": None, "checkpoint_sha256": None, "success_rate": None, "ci95": None,
                         "successes": None, "episodes": None, "state": failure["state"] if failure else None,
                         "reason": failure["reason"] if failure else None, "won": False})
        return rows
    return [{
        "index": 0, "candidate": None, "candidate_key": None, "overrides": {},
        "params": {k: params.get(k) for k in SWEEP_KEYS},
        "batch_job_id": chain.get("batch_job_id") or chain.get("slurm_job_id"),
        "checkpoint_uri": chain.get("checkpoint_uri"), "checkpoint_sha256": chain.get("checkpoint_sha256"),
        "success_rate": chain.get("success_rate"), "ci95": chain.get("success_rate_ci95"),
        "successes": _get(evaluation, "successes"), "episodes": _get(evaluation, "episodes"),
        "won": chain.get("success_rate") is not None,
    }]


def _mlflow_entry(tracking: Mapping[str, Any] | None,
                  outputs: Mapping[str, Mapping[str, Any] | None] | None = None) -> dict[str, Any] | None:
    """The lineage ``mlflow`` entry: the tracking record plus the parent run's UI URL (when enabled), and
    ``not_recorded``: per stage, what its workload could not send to MLflow (its manifest's or report's
    ``tracking`` summary with ``text``, :func:`sim2real.contract.tracking.describe_not_recorded`); ``None`` when
    everything was recorded.

    :param outputs: stage → the workload's output holding its ``tracking`` summary (``rl_training``: the
        checkpoint manifest, ``evaluation``: the evaluation report)."""
    if not tracking:
        return None
    if not tracking.get("enabled"):
        return {"enabled": False, "reason": str(tracking.get("reason") or "tracking off")}
    from sim2real.orchestration.links.mlflow import run_url

    keys = ("enabled", "tracking_uri", "experiment_name", "experiment_id", "parent_run_id", "runs", "ui_url")
    entry = {**{k: tracking.get(k) for k in keys}, "runs": dict(tracking.get("runs") or {}),
             "parent_run_url": run_url(tracking)}
    if tracking.get("candidate_runs"):  # a sweep: each candidate's own runs
        entry["candidate_runs"] = {cid: dict(runs) for cid, runs in tracking["candidate_runs"].items()}
    # --- what the workloads could not record (an MLflow outage during the job) ---
    from sim2real.contract.tracking import describe_not_recorded

    gaps = {}
    for stage, output in (outputs or {}).items():
        summary = (output or {}).get("tracking") if isinstance(output, Mapping) else None
        text = describe_not_recorded(summary)
        if text:
            gaps[stage] = {"text": text, **{k: summary.get(k) for k in (
                "mlflow_run_id", "not_recorded", "first_unreachable_at", "unreachable_since")}}
    entry["not_recorded"] = gaps or None
    return entry


#: The report's pictures: lineage ``figures`` key → title (Markdown, links).
FIGURES = {"training_curve": "Training curve", "eval_outcome": "Evaluation outcome",
           "round_success": "Success rate per round",  # only drawn when max_rounds > 1
           "sim_vs_field": "Simulation vs field"}  # only drawn when a canary judged field episodes


def figure_entry(*, uri: str | None = None, source: str | None = None, points: int | None = None,
                 skipped_reason: str | None = None) -> dict[str, Any]:
    """One ``figures`` entry: a drawn picture (``uri`` + ``points``) or a skipped one (``skipped_reason``).

    :raises ValueError: when both or neither of ``uri`` and ``skipped_reason`` are given.
    """
    if (uri is None) == (skipped_reason is None):
        raise ValueError("a figure entry needs exactly one of uri (drawn) and skipped_reason (not drawn)")
    return {"uri": uri, "source": source, "points": points if uri is not None else None,
            "skipped_reason": skipped_reason}


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return f"[{value[0]:.3f}, {value[1]:.3f}]"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "—"
    return str(value)


def _training_row(chain: Mapping[str, Any]) -> tuple[str, str]:
    """The chain's training job row: the Batch job, the Slurm job on its HyperPod cluster, or the ``PyTorchJob``
    ``namespace/name`` on its HyperPod EKS cluster."""
    backend, cluster = chain.get("training_backend"), _fmt(chain.get("hyperpod_cluster_name"))
    if backend == "hyperpod":
        return "Slurm job (HyperPod)", f"{_fmt(chain.get('slurm_job_id'))} on {cluster}"
    if backend == "hyperpod_eks":
        job = chain.get("eks_job") or {}
        return "PyTorchJob (HyperPod EKS)", f"{_fmt(job.get('namespace'))}/{_fmt(job.get('job_name'))} on {cluster}"
    return "Batch job", _fmt(chain.get("batch_job_id"))


def chain_rows(lineage: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The lineage chain as (label, value) rows, in stage order, for tables and Markdown."""
    c = lineage.get("chain", {})
    sr = c.get("success_rate")
    ci = c.get("success_rate_ci95")
    rate = "—" if sr is None else (f"{sr:.3f} {_fmt(ci)}" if ci else f"{sr:.3f}")
    return [
        ("image digest", _fmt(c.get("image_digest"))),
        _training_row(c),
        ("checkpoint", _fmt(c.get("checkpoint_uri"))),
        ("checkpoint sha256", _fmt(c.get("checkpoint_sha256"))),
        ("success rate [95% CI]", rate),
        *([("field dataset", field_dataset_text(fd))] if (fd := (lineage.get("stages") or {}).get("field_dataset"))
          else []),
        ("pipeline execution", _fmt(c.get("pipeline_execution_arn"))),
        ("model package", f"{_fmt(c.get('model_package_arn'))} ({_fmt(c.get('model_approval_status'))})"),
        ("deployment", _fmt(c.get("deployment_id"))),
        ("device status", _fmt(c.get("device_statuses"))),
        ("estimated cost", _cost(lineage.get("cost_estimate"))),
        ("actual cost", _actual_cost(lineage.get("cost_actual"))),
        ("MLflow run", _mlflow_row(lineage.get("mlflow"))),
        ("release decision", _approval_row(lineage.get("approval"))),
    ]


def field_dataset_text(entry: Mapping[str, Any]) -> str:
    """``fd-… (2 episodes, 9 frames; s3://…/manifest.json)``: the field dataset the fine-tune includes."""
    return (f"{entry.get('dataset_version')} ({entry.get('episodes')} episodes, {entry.get('frames')} frames; "
            f"{entry.get('manifest_uri')})")


def _approval_row(entry: Mapping[str, Any] | None) -> str:
    if not entry:
        return "—"
    row = (f"{entry.get('status')} in {entry.get('via')} by {entry.get('decided_by') or 'unknown'} at "
           f"{entry.get('at') or 'unknown time'}: {entry.get('comment') or 'no comment'}")
    if entry.get("triggered_by"):
        row += f"; run triggered by {entry['triggered_by']}"
    for refusal in entry.get("refused") or []:
        row += (f"; refused: {refusal.get('status')} by {refusal.get('by')} in {refusal.get('via')} "
                f"({refusal.get('reason')})")
    return row


def _mlflow_row(entry: Mapping[str, Any] | None) -> str:
    if not entry:
        return "—"
    if not entry.get("enabled"):
        return f"off ({entry.get('reason')})"
    return entry.get("parent_run_url") or f"{entry.get('parent_run_id')} on {entry.get('tracking_uri')}"


def _actual_cost(actual: Mapping[str, Any] | None) -> str:
    if not actual:
        return "—"
    text = f"${actual['total_usd']:.2f}"
    if actual.get("unknown"):
        text = f"at least {text} (unknown: {', '.join(actual['unknown'])})"
    verdict = {True: "within budget", False: "OVER BUDGET", None: None}[actual.get("within_budget")]
    text += f", {verdict}" if verdict else ""
    loop = actual.get("loop")
    if loop:  # a later retraining round: every round so far
        text += (f"; the loop so far (rounds {', '.join(str(r['round']) for r in loop.get('rounds') or [])}): "
                 f"{'at least ' if loop.get('unknown_rounds') else ''}${loop['total_usd']:.2f}")
    return text


def _cost(estimate: Mapping[str, Any] | None) -> str:
    if not estimate:
        return "—"
    total = estimate.get("total_usd")
    limit = estimate.get("max_budget_usd")
    text = "unknown" if total is None else f"${total:.2f}"
    if limit:
        text += f" of max ${limit:.2f}"
    return f"{text} ({estimate.get('price_source')})"


def _relative_to_run_folder(uri: str, run_key: Any) -> str:
    """``s3://b/runs/<run_key>/report/x.png`` → ``report/x.png`` (else ``uri`` unchanged)."""
    marker = f"/{run_prefix(str(run_key))}"
    return uri.split(marker, 1)[1] if run_key and marker in uri else uri


def _candidate_job(cand: Mapping[str, Any]) -> str:
    """A candidate's training job for the table: the Batch job id, ``Slurm <array>_<index>`` or ``PyTorchJob
    <namespace>/<name>``."""
    if cand.get("batch_job_id"):
        return str(cand["batch_job_id"])
    if (cand.get("eks_job") or {}).get("job_name"):
        return f"PyTorchJob {cand['eks_job']['namespace']}/{cand['eks_job']['job_name']}"
    return f"Slurm {cand['slurm_job_id']}" if cand.get("slurm_job_id") else "-"


def candidate_rows(lineage: Mapping[str, Any]) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The lineage's ``candidates`` as a table: ``(header, rows)``, one row per candidate (the winner marked)."""
    header = ("candidate", "params", "training job", "checkpoint sha256", "success rate", "95% Wilson", "state", "won")
    rows = []
    for cand in lineage.get("candidates") or []:
        ci = cand.get("ci95") or [None, None]
        rate = cand.get("success_rate")
        rows.append((cand.get("candidate") or "-", json.dumps(cand.get("params") or {}, sort_keys=True),
                     _candidate_job(cand), (cand.get("checkpoint_sha256") or "-")[:12],
                     "-" if rate is None else f"{rate:.3f}",
                     "-" if ci[0] is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]",
                     cand.get("state") or "-" if not cand.get("reason") else f"{cand.get('state')}: {cand['reason']}",
                     "yes" if cand.get("won") else ""))
    return header, rows


def sweep_survivor_line(lineage: Mapping[str, Any]) -> list[str]:
    """One sentence when some of a sweep's candidates failed: ``N of M candidates failed (...): picked among the
    K that succeeded (sweep_min_candidates m)``; nothing when none failed or there is no sweep."""
    sweep = lineage.get("sweep") or {}
    failed = [c for c in lineage.get("candidates") or [] if c.get("reason")]
    if not sweep or not failed:
        return []
    total = len(lineage.get("candidates") or [])
    names = ", ".join(str(c.get("candidate")) for c in failed)
    return [f"{len(failed)} of {total} candidates failed ({names}): picked among the {total - len(failed)} that "
            f"succeeded (sweep_min_candidates {sweep.get('min_candidates')})."]


def round_lines(rounds: Mapping[str, Any] | None) -> list[str]:
    """Markdown of the retraining rounds (lineage ``rounds``): this run's round, the success rate and 95%
    interval of every round so far and how the loop goes on; nothing for a run of one round at most."""
    if not rounds or int(rounds.get("max_rounds") or 1) <= 1:
        return []
    head = f"Round **{rounds['round']} of {rounds['max_rounds']}**"
    if rounds.get("resumed_from"):
        src = rounds["resumed_from"]
        head += (f", resumed from round {src.get('round')}'s checkpoint (iteration {src.get('iteration')}, "
                 f"run `{rounds.get('parent_run_id')}` before)")
    then = {"passed": "the gate passed: the loop ends here and releases.",
            "retraining": f"below the bar: round {rounds['round'] + 1} started as run `{rounds.get('next_run_id')}`.",
            "gate_failed": "below the bar on the last round: the loop ends with the gate failed.",
            "not_evaluated": "not evaluated: the loop ends here."}.get(rounds.get("outcome"), "")
    if rounds.get("sweep"):
        sw = rounds["sweep"]
        head += (f"; round 1 was a sweep of {sw.get('candidates')} candidates (run `{sw.get('run_id')}`), this round "
                 f"retrains its winner {sw.get('winner')} ({json.dumps(sw.get('overrides') or {}, sort_keys=True)})")
    out = ["", f"{head}: {then}", "", "| round | run | success rate | 95% CI | episodes (first seed) | gate |",
           "|---|---|---|---|---|---|"]
    for r in rounds.get("rounds") or []:
        lo, hi = r["ci95"]
        out.append(f"| {r['round']} | `{r['run_id']}` | {r['success_rate']:.3f} | [{lo:.3f}, {hi:.3f}] | "
                   f"{r['episodes']} ({r['first_seed']}) | {'passed' if r['passed'] else 'failed'} |")
    return out


def field_lines(field: Mapping[str, Any] | None) -> list[str]:
    """Markdown of the lineage ``field`` entry: the canary's verdict, the field and simulation success rates side by
    side with the gap, each canary robot's episodes, and the refused objects; nothing without a canary."""
    if not field:
        return []
    f, sim = field["field"], field.get("simulation")

    def rate(side: Mapping[str, Any] | None) -> str:
        if not side or side.get("success_rate") is None:
            return "— | — | —"
        lo, hi = side["ci95"]
        return f"{side['success_rate']:.3f} | [{lo:.3f}, {hi:.3f}] | {side['successes']}/{side['episodes']}"

    gap = "unknown" if field.get("gap_pp") is None else f"{field['gap_pp']:+.1f} percentage points"
    person = field.get("reviewed_by")
    by = (f" by {person.get('decided_by')} at {person.get('at')} in the canary review"
          + (f" ({person['comment']})" if person.get("comment") else "") + "; the verdict said" if person else "")
    out = ["", "## Field", "", f"Canary deployment `{field.get('deployment_id')}`, window {field['window'].get('start')} "
           f"→ {field['window'].get('end')}: **{field['decision']}**{by} — {field['message']}", "",
           "| | success rate | 95% CI | successes/episodes |", "|---|---|---|---|",
           f"| simulation | {rate(sim)} |", f"| field (robots) | {rate(f)} |", "", f"Gap (field − simulation): {gap}."]
    robots = field.get("robots") or {}
    if robots or field.get("silent"):
        out += ["", "| robot | episodes | successes | interventions |", "|---|---|---|---|"]
        out += [f"| {t} | {r.get('n')} | {r.get('successes')} | {r.get('interventions')} |" for t, r in robots.items()]
        out += [f"| {t} | 0 (silent) | — | — |" for t in field.get("silent") or []]
    refused = {k: v for k, v in (field.get("refused") or {}).items() if v}
    if refused:
        out += ["", "Refused field episode objects: " + ", ".join(f"{k} {v}" for k, v in sorted(refused.items())) + "."]
    return out


def render_markdown(lineage: Mapping[str, Any]) -> str:
    """Markdown summary of a lineage document: the chain, the report's pictures (embedded with a link
    relative to ``lineage.md``, or why each is missing), then each task's state and duration."""
    lines = [f"# Sim-to-Real run `{lineage.get('run_key')}`", "",
             f"DAG `{lineage.get('dag_id')}`, run `{lineage.get('run_id')}`, written {lineage.get('created_at')}.",
             "", "## Lineage", "", "| | |", "|---|---|"]
    lines += [f"| {label} | `{value}` |" for label, value in chain_rows(lineage)]
    if lineage.get("sweep"):
        header, rows = candidate_rows(lineage)
        lines += ["", "## Sweep", "", f"Pick: {lineage['sweep'].get('rule')}.", *sweep_survivor_line(lineage), "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    gate = _get(lineage, "stages", "quality_gate")
    if gate:
        lines += ["", f"Quality gate: **{'passed' if gate.get('passed') else 'failed'}** — {gate.get('reason', '')}"]
    lines += round_lines(lineage.get("rounds"))
    lines += field_lines(lineage.get("field"))
    figures = lineage.get("figures")
    if figures:
        lines += ["", "## Figures", ""]
        for name, title in FIGURES.items():
            if name not in figures:  # not a picture of this run (success per round: max_rounds 1)
                continue
            fig = figures.get(name) or {}
            if fig.get("uri"):
                # relative to lineage.md (runs/<run_key>/): works on a copy of the run folder too
                rel = _relative_to_run_folder(fig["uri"], lineage.get("run_key"))
                lines += [f"![{title}]({rel})", "", f"{title}: `{fig['uri']}` (from `{fig.get('source')}`)", ""]
            else:
                lines += [f"{title}: not drawn — {fig.get('skipped_reason') or 'unknown reason'}", ""]
        lines.pop()
    tasks = lineage.get("tasks") or {}
    if tasks:
        lines += ["", "## Tasks", "", "| task | state | duration (s) |", "|---|---|---|"]
        for task_id, info in tasks.items():
            dur = info.get("duration_s")
            shown = "" if dur is None else f"{dur:.1f}"
            if info.get("job_duration_s") is not None:  # a reattached training task: the job's time first
                kind = next((k for _, k, _ in TRAINING_TASKS.values()
                             if str(info.get("job_duration_source")).startswith(k)), "job")
                shown = (f"{info['job_duration_s']:.1f} ({kind}'s running time"
                         + (f"; this task's try {shown})" if shown else ")"))
            lines.append(f"| {task_id} | {info.get('state')} | {shown} |")
    return "\n".join(lines) + "\n"
