"""One MLflow parent run per DAG run, with a child run per stage (RL training, evaluation, GR00T fine-tune).

How runs appear in MLflow: the experiment is tagged ``mlflow.experimentKind = custom_model_development`` (the UI
opens it in its model-training view, not the GenAI one); the parent run is named after the run key's distinct
tail (``91216f4c``, ``91216f4c round 2``), the children ``91216f4c train`` / ``eval`` / ``fine-tune`` and a sweep
candidate's ``91216f4c c1 train`` (:func:`run_names`); the parent carries the run's params and, once the run
is over, its headline metrics (success rate and Wilson bounds, gate threshold and verdict, cost, rounds:
:func:`headline_metrics`), so that MLflow's Compare view compares DAG runs.

Configured by the environment config's optional ``mlflow`` section::

    "mlflow": {
      "tracking_uri": "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/sim2real",  # or http(s)://
      "experiment_name": "sim2real",     # optional (default sim2real)
      "ui_url": "https://..."            # optional; default: the server's TrackingServerUrl, else the URI
    }

Without it tracking is off: no MLflow call, the plan and every command are what they were.

:func:`start_tracking` (first task) creates the experiment when missing, the parent run (the run's params logged,
tags ``sim2real.run_key``, ``airflow.dag_id``, ``airflow.run_id``) and the child runs
(tag ``mlflow.parentRunId``: MLflow's UI nests them under the parent; a sweep's candidates' runs nest under
the run's RL-training run, which :func:`record_sweep` gives the winner when the run closes);
:func:`sim2real.orchestration.stages.run.apply_tracking` puts each child's variables (:func:`stage_env`) into the
plan: the training job's environment (Batch and the HyperPod Slurm script), the evaluation command's, and the
fine-tune's pipeline parameter. :func:`close_tracking` (last task) ends each child that a workload left open with
its stage's outcome and the parent with the run's.

Every conversation with the server is bounded (short request timeouts, two attempts, one deadline:
:data:`START_DEADLINE_S` for the set-up, :data:`CLOSE_DEADLINE_S` for the last task's closing of the runs, sweep record
and headline metrics together), so an MLflow outage never holds an Airflow task beyond them.

Tracking never decides a run's outcome: when the server cannot be reached, refuses a call, or runs another MLflow
version than the images' client, the reason is logged and recorded (``{"enabled": false, "reason": ...}`` in the
plan and the lineage) and the run goes on untracked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from sim2real.contract import env_vars
from sim2real.contract import task_ids as ids
from sim2real.contract import tracking as contract
from sim2real.orchestration.candidates import candidate_index

log = logging.getLogger(__name__)

#: Stage → the DAG tasks whose states decide the child run's status (the first that ran counts).
STAGE_TASKS: dict[str, tuple[str, ...]] = {
    # the backend's training task (Batch, HyperPod Slurm, HyperPod EKS), or a sweep's pick
    "rl_training": (ids.BATCH_TRAIN_POLICY, ids.HYPERPOD_TRAIN_POLICY, ids.HYPERPOD_EKS_TRAIN_POLICY, ids.SWEEP_PICK_BEST),
    "evaluation": (ids.RUN_EVALUATION,),
    "vla_finetune": (ids.FINETUNE_GROOT,),
}
#: A sweep candidate's child runs (``TrackingPlan.candidate_runs``) and the mapped tasks whose state closes them.
CANDIDATE_STAGES: dict[str, tuple[str, ...]] = {
    # Batch, HyperPod Slurm or HyperPod EKS: the one that ran
    "rl_training": (ids.SWEEP_TRAIN_POLICY, ids.SWEEP_TRAIN_ON_SLURM, ids.SWEEP_TRAIN_ON_EKS),
    "evaluation": (ids.SWEEP_RUN_EVALUATION,),
}
#: Airflow task state → MLflow run status (``mlflow.entities.RunStatus``).
_STATUS = {"success": "FINISHED", "failed": "FAILED", "upstream_failed": "KILLED", "skipped": "KILLED",
           "removed": "KILLED"}


class MlflowTrackingError(RuntimeError):
    """Tracking could not be set up for this run (the message says why and what to do)."""


def mlflow_settings(env: Mapping[str, Any]) -> dict[str, Any] | None:
    """The environment config's ``mlflow`` section, checked; ``None`` when tracking is off.

    :raises ValueError: a tracking URI that is neither http(s) nor a SageMaker MLflow ARN.
    """
    section = env.get("mlflow") or {}
    uri = str(section.get("tracking_uri") or "").strip()
    if not uri:
        return None
    return {"tracking_uri": contract.check_tracking_uri(uri),
            "experiment_name": section.get("experiment_name") or contract.DEFAULT_EXPERIMENT_NAME,
            "ui_url": (section.get("ui_url") or "").rstrip("/") or None}


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(str(version).split(".")[:2])


def check_server_version(server_version: str | None, client_version: str = contract.MLFLOW_CLIENT_VERSION) -> None:
    """Refuse a SageMaker tracking server whose MLflow major.minor differs from the images' client.

    :raises MlflowTrackingError: naming both versions and the two ways to fix it.
    """
    if server_version and _major_minor(server_version) != _major_minor(client_version):
        raise MlflowTrackingError(
            f"the MLflow tracking server runs MLflow {server_version}, the training and evaluation images log with "
            f"client {client_version} (requirements-workload.txt): MLflow needs one version on both sides; update "
            f"the tracking server (UpdateMlflowTrackingServer --mlflow-version) or the image pin")


#: Longest time :func:`start_tracking` talks to the tracking server, in seconds (every call and retry together).
START_DEADLINE_S = 60.0
#: Longest time the run's last task talks to the server (:func:`close_dag_run`: closing the runs, the sweep record
#: and the headline metrics together; each function alone without a hook too), in seconds: its 2-minute timeout
#: is never reached for an MLflow outage.
CLOSE_DEADLINE_S = 30.0
#: The experiment tag MLflow's UI reads to open an experiment in its model-training view rather than its GenAI
#: view (``mlflow.experimentKind``; the UI's ``ExperimentKind.CUSTOM_MODEL_DEVELOPMENT``, MLflow 3.17.2).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: Short names of the child runs, after the run's short name (:func:`run_names`).
STAGE_NAMES = {"rl_training": "train", "evaluation": "eval", "vla_finetune": "fine-tune"}


def short_name(plan: Mapping[str, Any]) -> str:
    """The DAG run's short MLflow name: the run key's last part (its 8 hex digits, distinct per run), with
    ``round <n>`` in a retraining loop's later rounds; e.g. ``91216f4c`` or ``91216f4c round 2``. MLflow's run
    table cuts long names, so the distinct part comes first (the run key itself is tag ``sim2real.run_key``)."""
    tail = str(plan["run_key"]).rsplit("-", 1)[-1]
    rounds = plan.get("rounds") or {}
    n = rounds.get("round") if isinstance(rounds, Mapping) else None
    return f"{tail} round {n}" if n and int(n) > 1 else tail


def run_names(plan: Mapping[str, Any]) -> dict[str, str]:
    """Every MLflow run name of the DAG run: ``parent``, each stage (``91216f4c train``, ``91216f4c eval``,
    ``91216f4c fine-tune``) and each sweep candidate's stages (``91216f4c c1 train``, ...) as ``c<i>.<stage>``."""
    base = short_name(plan)
    names = {"parent": base, **{stage: f"{base} {word}" for stage, word in STAGE_NAMES.items()}}
    for cand in (plan.get("sweep") or {}).get("candidates") or []:
        for stage in CANDIDATE_STAGES:
            names[f"{cand['candidate']}.{stage}"] = f"{base} {cand['candidate']} {STAGE_NAMES[stage]}"
    return names


def start_tracking(*, plan: Mapping[str, Any], env: Mapping[str, Any], dag_id: str, run_id: str,
                   hook: Any = None, deadline_s: float = START_DEADLINE_S) -> dict[str, Any]:
    """Create the parent run and the stage child runs of this DAG run, within ``deadline_s`` seconds in all.

    An unreachable or slow server cannot hold the first task: no call starts, and no request waits, after
    ``deadline_s`` (the hook's ``deadline``); the run then goes on untracked with the reason logged and recorded.

    :param plan: ``plan_run``'s output (run key, params, whether the fine-tune runs).
    :param env: the environment config.
    :param hook: an :class:`~sim2real.orchestration.hooks.mlflow.MlflowHook` (default: one for the config's URI).
    :param deadline_s: the bound on the whole set-up, seconds (default :data:`START_DEADLINE_S`).
    :return: ``{"enabled": False, "reason"}`` when tracking is off or could not be set up, else ``{"enabled": True,
        "tracking_uri", "experiment_name", "experiment_id", "parent_run_id", "runs": {stage: run_id}, "ui_url"}``.
    """
    try:
        settings = mlflow_settings(env)
    except ValueError as err:
        log.warning("MLflow tracking off for this run: %s", err)
        return {"enabled": False, "reason": str(err)}
    if settings is None:
        return {"enabled": False, "reason": "the environment config has no mlflow.tracking_uri"}
    from sim2real.orchestration.hooks.mlflow import MlflowApiError, MlflowHook

    # short timeouts and one overall deadline: this runs inside the first task, whose own timeout is minutes
    hook = hook or MlflowHook(settings["tracking_uri"], timeout=10, retries=2)
    hook.deadline = time.monotonic() + deadline_s
    run_key = plan["run_key"]
    try:
        ui_url = settings["ui_url"]
        server = hook.describe_server()
        if server is not None:
            check_server_version(server.get("MlflowVersion"))
            if server.get("TrackingServerStatus") not in (None, "Created", "Updated", "Started"):
                raise MlflowTrackingError(f"MLflow tracking server {settings['tracking_uri']} is "
                                          f"{server.get('TrackingServerStatus')}: start it (StartMlflowTrackingServer)")
            ui_url = ui_url or (server.get("TrackingServerUrl") or "").rstrip("/") or None
        experiment_id = hook.get_or_create_experiment(settings["experiment_name"],
                                                      tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        base_tags = {contract.RUN_KEY_TAG: run_key, "airflow.dag_id": dag_id, "airflow.run_id": run_id}
        names = run_names(plan)
        parent = hook.create_run(experiment_id, names["parent"], {**base_tags, contract.STAGE_TAG: "dag_run"})
        parent_id = parent["run_id"]
        hook.log_batch(parent_id, params={k: v for k, v in sorted((plan.get("params") or {}).items())})
        stages = [s for s in contract.STAGES if s != "vla_finetune" or (plan.get("vla") or {}).get("enabled")]
        runs = {}
        for stage in stages:
            child = hook.create_run(experiment_id, names[stage],
                                    {**base_tags, contract.STAGE_TAG: stage, contract.PARENT_RUN_TAG: parent_id})
            runs[stage] = child["run_id"]
        candidate_runs: dict[str, dict[str, str]] = {}
        # a sweep: each candidate's own runs, nested under the run's RL-training run (the sweep as a whole: the
        # winner is recorded on it when the run closes, :func:`record_sweep`)
        for cand in (plan.get("sweep") or {}).get("candidates") or []:
            candidate_runs[cand["candidate"]] = {
                stage: hook.create_run(experiment_id, names[f"{cand['candidate']}.{stage}"],
                                       {**base_tags, contract.STAGE_TAG: stage,
                                        contract.PARENT_RUN_TAG: runs.get("rl_training", parent_id),
                                        contract.CANDIDATE_TAG: cand["candidate"]})["run_id"]
                for stage in CANDIDATE_STAGES}
    except (MlflowApiError, MlflowTrackingError) as err:
        log.warning("MLflow tracking off for run %s: %s", run_key, err)
        return {"enabled": False, "reason": str(err)}
    except Exception as err:  # noqa: BLE001 - e.g. no AWS credentials for SigV4: tracking never fails the run
        log.warning("MLflow tracking off for run %s: %s: %s", run_key, type(err).__name__, err)
        return {"enabled": False, "reason": f"{type(err).__name__}: {err}"}
    tracking = {"enabled": True, "tracking_uri": settings["tracking_uri"],
                "experiment_name": settings["experiment_name"], "experiment_id": experiment_id,
                "parent_run_id": parent_id, "runs": runs, "candidate_runs": candidate_runs,
                "ui_url": ui_url or (None if contract.is_sagemaker_arn(settings["tracking_uri"])
                                     else settings["tracking_uri"].rstrip("/"))}
    log.info("MLflow parent run %s (experiment %s, %s) with child runs %s", parent_id, experiment_id,
             settings["tracking_uri"], runs)
    return tracking


def stage_env(tracking: Mapping[str, Any] | None, stage: str) -> dict[str, str]:
    """The tracking variables of one stage's workload (empty when tracking is off or the stage has no run)."""
    if not tracking or not tracking.get("enabled") or stage not in (tracking.get("runs") or {}):
        return {}
    return {env_vars.MLFLOW_TRACKING_URI: tracking["tracking_uri"], env_vars.MLFLOW_EXPERIMENT_ID: tracking["experiment_id"],
            env_vars.MLFLOW_RUN_ID: tracking["runs"][stage], env_vars.MLFLOW_PARENT_RUN_ID: tracking["parent_run_id"]}


def close_tracking(tracking: Mapping[str, Any] | None, *, succeeded: bool,
                   task_states: Mapping[str, Mapping[str, Any]] | None = None, hook: Any = None) -> dict[str, Any]:
    """End the child runs still RUNNING (status from their stage's task state; a stage that never ran → KILLED)
    and the parent (FINISHED when the DAG run succeeded, else FAILED).

    :param task_states: ``{task_id: {"state": ...}}``, mapped tasks as ``task_id[i]``
        (``sim2real.orchestration.report.collect_task_states``): candidate ``c<i>``'s runs close from map index
        ``i``'s states only.
    :return: ``{"parent": status, stage: status, ...}`` as set (a candidate's stages as ``c<i>.<stage>``); ``{}``
        when tracking is off. Errors are logged.
    """
    if not tracking or not tracking.get("enabled"):
        return {}
    from sim2real.orchestration.hooks.mlflow import MlflowHook
    from sim2real.orchestration.report import task_key

    hook = hook or MlflowHook(tracking["tracking_uri"], deadline=time.monotonic() + CLOSE_DEADLINE_S)
    states = task_states or {}
    closed: dict[str, str] = {}
    try:
        children = [(stage, run_id, STAGE_TASKS.get(stage, ())) for stage, run_id in (tracking.get("runs") or {}).items()]
        children += [(f"{cid}.{stage}", run_id,
                      tuple(task_key(t, candidate_index(cid)) for t in CANDIDATE_STAGES.get(stage, ())))
                     for cid, runs in (tracking.get("candidate_runs") or {}).items() for stage, run_id in runs.items()]
        for stage, run_id, tasks in children:
            current = hook.get_run(run_id)["info"].get("status")
            state = next((states[t].get("state") for t in tasks if t in states
                          and states[t].get("state") not in (None, "skipped")), None)
            status = _STATUS.get(str(state), "KILLED") if state else "KILLED"
            if current == "RUNNING" or (current == "FINISHED" and status == "FAILED"):
                hook.update_run(run_id, status)
                closed[stage] = status
            else:
                closed[stage] = current
        status = "FINISHED" if succeeded else "FAILED"
        hook.update_run(tracking["parent_run_id"], status)
        closed["parent"] = status
    except Exception as err:  # noqa: BLE001 - the report and the run's verdict do not depend on it
        log.warning("could not close the MLflow runs of %s: %s: %s", tracking.get("parent_run_id"),
                    type(err).__name__, err)
    return closed


#: Tags :func:`record_sweep` sets on a sweep's RL-training run.
SWEEP_WINNER_TAG = "sim2real.sweep_winner"
SWEEP_WINNER_RUN_TAG = "sim2real.sweep_winner_run_id"


def record_sweep(tracking: Mapping[str, Any] | None, picked: Mapping[str, Any] | None, hook: Any = None) -> dict[str, Any]:
    """Record a sweep's outcome on the run's RL-training run, under which the candidates' runs are nested: the
    winner (tags :data:`SWEEP_WINNER_TAG` = ``c<i>`` and :data:`SWEEP_WINNER_RUN_TAG` = its training run id), the
    winner's params, and per candidate the selection evaluation's ``success_rate`` and Wilson 95% bounds as metrics
    ``c<i>.success_rate`` / ``c<i>.ci95_lower`` / ``c<i>.ci95_upper`` (MLflow's chart view compares them).

    :param picked: ``pick_best``'s value (:func:`sim2real.orchestration.stages.sweep.pick_best_result`); None or
        empty (no sweep, or the pick never ran): nothing is logged.
    :return: ``{"run_id", "winner", "metrics"}`` as logged; ``{}`` when nothing was. Errors are logged, not raised.
    """
    run_id = ((tracking or {}).get("runs") or {}).get("rl_training")
    if not tracking or not tracking.get("enabled") or not run_id or not picked or not picked.get("candidates"):
        return {}
    from sim2real.orchestration.hooks.mlflow import MlflowHook

    hook = hook or MlflowHook(tracking["tracking_uri"], deadline=time.monotonic() + CLOSE_DEADLINE_S)
    winner = picked.get("candidate")
    now = int(time.time() * 1000)
    metrics = []
    for cand in picked["candidates"]:
        ci95 = list(cand.get("ci95") or [])
        values = {"success_rate": cand.get("success_rate"), "ci95_lower": ci95[0] if ci95 else None,
                  "ci95_upper": ci95[1] if len(ci95) > 1 else None}
        metrics += [{"key": f"{cand['candidate']}.{k}", "value": float(v), "timestamp": now, "step": 0}
                    for k, v in values.items() if v is not None]
    best = next((c for c in picked["candidates"] if c.get("candidate") == winner), {})
    winner_run = ((tracking.get("candidate_runs") or {}).get(winner) or {}).get("rl_training")
    try:
        hook.log_batch(run_id, params=dict(best.get("params") or {}),
                       tags={SWEEP_WINNER_TAG: winner, SWEEP_WINNER_RUN_TAG: winner_run,
                             "sim2real.sweep_rule": picked.get("rule")},
                       metrics=metrics)
    except Exception as err:  # noqa: BLE001 - the report and the run's verdict do not depend on it
        log.warning("could not record sweep winner %s on MLflow run %s: %s: %s", winner, run_id,
                    type(err).__name__, err)
        return {}
    return {"run_id": run_id, "winner": winner, "metrics": len(metrics)}


#: Tag :func:`record_field_dataset` sets on the fine-tune's run (also a param of it).
FIELD_DATASET_TAG = "sim2real.field_dataset_version"


def record_field_dataset(tracking: Mapping[str, Any] | None, entry: Mapping[str, Any] | None,
                         hook: Any = None) -> dict[str, Any]:
    """Log the field dataset the GR00T fine-tune includes on its ``vla_finetune`` run: params
    ``field_dataset_version``, ``field_dataset_manifest_uri``, ``field_dataset_episodes``, ``field_dataset_frames``
    and the tag :data:`FIELD_DATASET_TAG` (``"none"`` when it includes none), within :data:`CLOSE_DEADLINE_S`.

    :param entry: the ``field_dataset`` task's resolution (:func:`sim2real.orchestration.stages.vla_field.resolve`),
        ``None``: no field dataset.
    :return: ``{"run_id", "params", "tags"}`` as logged; ``{}`` when tracking is off or the server could not be
        reached (logged, never raised).
    """
    run_id = ((tracking or {}).get("runs") or {}).get("vla_finetune")
    if not tracking or not tracking.get("enabled") or not run_id:
        return {}
    from sim2real.orchestration.hooks.mlflow import MlflowHook

    hook = hook or MlflowHook(tracking["tracking_uri"], deadline=time.monotonic() + CLOSE_DEADLINE_S)
    params = {"field_dataset_version": entry["dataset_version"], "field_dataset_manifest_uri": entry["manifest_uri"],
              "field_dataset_episodes": entry["episodes"], "field_dataset_frames": entry["frames"]} if entry else {}
    tags = {FIELD_DATASET_TAG: entry["dataset_version"] if entry else "none"}
    try:
        hook.log_batch(run_id, params=params, tags=tags)
    except Exception as err:  # noqa: BLE001 - the fine-tune does not depend on it
        log.warning("could not log the field dataset on MLflow run %s: %s: %s", run_id, type(err).__name__, err)
        return {}
    return {"run_id": run_id, "params": params, "tags": tags}


def headline_metrics(lineage: Mapping[str, Any]) -> dict[str, float]:
    """The run's headline numbers from its lineage, as the parent run's metrics (MLflow's Compare and chart views
    compare runs by metrics, not params): ``success_rate``, ``ci95_lower``, ``ci95_upper`` (Wilson 95%),
    ``successes``, ``episodes``, ``gate_threshold``, ``gate_passed`` (1/0), ``cost_usd`` (actual),
    ``cost_estimate_usd``, ``round``, ``max_rounds``, ``sweep_candidates``, and with a canary (lineage ``field``)
    ``field_success_rate``, ``field_ci95_lower``, ``field_ci95_upper``, ``field_episodes``, ``sim_to_real_gap_pp``
    (field minus simulation, percentage points), ``canary_promoted`` (1/0); each only when known."""
    def get(*path: str) -> Any:
        cur: Any = lineage
        for key in path:
            cur = cur.get(key) if isinstance(cur, Mapping) else None
        return cur

    ci95 = list(get("chain", "success_rate_ci95") or [])
    gate = get("stages", "quality_gate") or {}
    passed = gate.get("passed") if isinstance(gate, Mapping) else None
    values = {
        "success_rate": get("chain", "success_rate"),
        "ci95_lower": ci95[0] if ci95 else None, "ci95_upper": ci95[1] if len(ci95) > 1 else None,
        "successes": get("stages", "evaluation", "successes"), "episodes": get("stages", "evaluation", "episodes"),
        "gate_threshold": gate.get("threshold") if isinstance(gate, Mapping) else None,
        "gate_passed": None if passed is None else float(bool(passed)),
        "cost_usd": get("cost_actual", "total_usd"), "cost_estimate_usd": get("cost_estimate", "total_usd"),
        "round": get("rounds", "round"), "max_rounds": get("rounds", "max_rounds"),
        "sweep_candidates": len(lineage.get("candidates") or []) if lineage.get("sweep") else None,
    }
    field = lineage.get("field")
    if isinstance(field, Mapping):
        field_ci = list(get("field", "field", "ci95") or [])
        values.update({
            "field_success_rate": get("field", "field", "success_rate"),
            "field_ci95_lower": field_ci[0] if field_ci else None,
            "field_ci95_upper": field_ci[1] if len(field_ci) > 1 else None,
            "field_episodes": get("field", "field", "episodes"), "sim_to_real_gap_pp": field.get("gap_pp"),
            "canary_promoted": {"promote": 1.0, "roll_back": 0.0}.get(field.get("decision")),
        })
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def record_headline(tracking: Mapping[str, Any] | None, lineage: Mapping[str, Any] | None,
                    hook: Any = None) -> dict[str, Any]:
    """Log :func:`headline_metrics` on the parent run, and tag each child run whose workload could not record
    everything (lineage ``mlflow.not_recorded``; tag ``sim2real.tracking.not_recorded``), within
    :data:`CLOSE_DEADLINE_S`. :return: ``{"metrics": n, "tagged": [stage, ...]}``; ``{}`` when tracking is off,
    there is no lineage, or the server could not be reached (logged, never raised)."""
    if not tracking or not tracking.get("enabled") or not lineage:
        return {}
    from sim2real.orchestration.hooks.mlflow import MlflowHook

    hook = hook or MlflowHook(tracking["tracking_uri"], deadline=time.monotonic() + CLOSE_DEADLINE_S)
    now = int(time.time() * 1000)
    metrics = [{"key": k, "value": v, "timestamp": now, "step": 0} for k, v in headline_metrics(lineage).items()]
    gaps = ((lineage.get("mlflow") or {}).get("not_recorded") or {})
    tagged = []
    try:
        if metrics:
            hook.log_batch(tracking["parent_run_id"], metrics=metrics)
        for stage, entry in gaps.items():
            run = (tracking.get("runs") or {}).get(stage)
            if run and entry.get("text"):
                hook.log_batch(run, tags={contract.NOT_RECORDED_TAG: entry["text"]})
                tagged.append(stage)
    except Exception as err:  # noqa: BLE001 - the report and the run's verdict do not depend on it
        log.warning("could not log the run's headline metrics on MLflow run %s: %s: %s",
                    tracking.get("parent_run_id"), type(err).__name__, err)
        return {}
    return {"metrics": len(metrics), "tagged": tagged}


def _read_lineage(plan: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run's ``lineage.json`` (written by ``write_lineage`` before the last task), or None (logged)."""
    import json

    try:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        return json.loads(S3Hook().read_key(f"{plan['run_prefix']}lineage.json", plan["bucket"]))
    except Exception as err:  # noqa: BLE001 - no lineage: no headline metrics
        log.info("no lineage to log the run's headline metrics from: %s: %s", type(err).__name__, err)
        return None


def close_dag_run(ti: Any, dag_id: str, run_id: str, *, succeeded: bool) -> dict[str, Any]:
    """:func:`close_tracking` from inside the run's last task: the tracking record from ``prepare_run``'s plan,
    the stages' states from the Task Execution API; then the sweep's record (:func:`record_sweep`) and the run's
    headline metrics (:func:`record_headline`, from its ``lineage.json``). All of it within one
    :data:`CLOSE_DEADLINE_S` (the runs' statuses first). Never raises (logged)."""
    try:
        plan = (ti.xcom_pull(task_ids=ids.PREPARE_RUN) or {}).get("plan") or {}
    except Exception as err:  # noqa: BLE001
        log.warning("no plan to close the MLflow runs from: %s", err)
        return {}
    tracking = plan.get("tracking")
    if not tracking or not tracking.get("enabled"):
        return {}
    from sim2real.orchestration.hooks.mlflow import MlflowHook
    from sim2real.orchestration.report import collect_task_states

    states = collect_task_states(dag_id, run_id)
    hook = MlflowHook(tracking["tracking_uri"], deadline=time.monotonic() + CLOSE_DEADLINE_S)
    closed = close_tracking(tracking, succeeded=succeeded, task_states=states, hook=hook)
    log.info("MLflow runs closed: %s", closed)
    if (plan.get("sweep") or {}).get("enabled"):
        try:
            picked = ti.xcom_pull(task_ids=ids.SWEEP_PICK_BEST)
        except Exception as err:  # noqa: BLE001 - the pick never ran (failed sweep)
            log.info("no sweep pick to record in MLflow: %s", err)
            picked = None
        log.info("MLflow sweep record: %s", record_sweep(tracking, picked, hook=hook))
    log.info("MLflow headline metrics: %s", record_headline(tracking, _read_lineage(plan), hook=hook))
    return closed
