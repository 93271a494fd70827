"""The report stage: collect what every stage handed on and write the run's lineage to S3.

Writes, under ``s3://<bucket>/runs/<run_key>/``:

* ``report/training_curve.png`` — mean episode return per PPO iteration, from the trainer's TensorBoard
  event files (the checkpoint manifest's ``tensorboard_uri``, else the plan's ``checkpoints/tensorboard/``);
* ``report/eval_outcome.png`` — the evaluation report's success rate, Wilson 95 % interval and gate
  threshold, and each episode's return and outcome;
* ``report/round_success.png`` — with retraining rounds (``max_rounds`` > 1): the success rate and Wilson 95 %
  interval of every round so far against the gate threshold;
* ``lineage.json`` (with the pictures' URIs, or why one was not drawn, under ``figures``) and ``lineage.md``
  (which embeds them).

Runs whatever happened upstream (``trigger_rule=all_done``): a failed or stopped run still gets its
record; a picture whose data is missing (training never ran, no evaluation) or cannot be drawn is
skipped with its reason logged and recorded, never failing the report.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration import plots
from sim2real.orchestration.cost_actual import actual_run_cost, finetune_billing, loop_cost
from sim2real.orchestration.candidates import training_task_id
from sim2real.orchestration.lineage import (
    FIGURES,
    HYPERPOD_SCALING_SOURCES,
    LineageSchemaError,
    RoundsEntry,
    SOURCES,
    CANARY_REVIEW_KEY,
    CANARY_VERDICT_KEY,
    VERDICT_KEY,
    _get,
    build_lineage,
    figure_entry,
    lineage_errors,
    render_markdown,
    stage_sources,
)
from sim2real.orchestration.links.s3 import (
    FIGURE_LINKS,
    PRESIGNED_MAX_S,
    S3RunFolderLink,
    console_object_url,
    partition_of,
    presigned_get_url,
    sandbox_endpoint,
)
from sim2real.orchestration.params import gate_warnings

log = logging.getLogger(__name__)


def _pull(ti: Any, task_id: str, key: str | None = None) -> Any:
    try:
        return ti.xcom_pull(task_ids=task_id, **({"key": key} if key else {}))
    except Exception as err:  # noqa: BLE001 - a stage that never ran has no XCom
        log.info("no output%s from %s: %s", f" {key!r}" if key else "", task_id, err)
        return None


def run_actual_cost(plan: Mapping[str, Any], parts: Mapping[str, Any], ti: Any,
                    sagemaker_client: Any = None, batch_client: Any = None) -> dict[str, Any] | None:
    """The run's actual GPU cost (:func:`sim2real.orchestration.cost_actual.actual_run_cost`) from the stages' outputs.

    Training: the training task's result; a Batch job stopped at the cost limit fails its task, whose
    figures are then in its ``job_cost`` XCom; a Batch job whose task left neither (a person marked the task or the
    run failed, and the wait terminated the job) is read with DescribeJobs (``batch_client``, default the Amazon
    provider's Batch client) by the job id the task recorded for its console link. Fine-tune: the billed time of
    the pipeline's training step (:func:`sim2real.orchestration.cost_actual.finetune_billing`, one DescribeTrainingJob)
    when a client is given. Never raises: ``None`` when the figure cannot be made (logged).
    """
    try:
        training = parts.get("training")
        if (plan.get("sweep") or {}).get("enabled"):  # every candidate's job counts
            training = sweep_trainings(plan, ti)
        elif not training:  # stopped at the cost limit (task failed): its figures are in XCom job_cost
            training = _pull(ti, stage_sources(plan)["training"], key="job_cost")
        if not training and plan.get("backend", "batch") == "batch":
            training = _described_batch_job(ti, stage_sources(plan)["training"], batch_client)
        vla = parts.get("vla")
        if vla and vla.get("pipeline_execution_arn") and sagemaker_client is not None:
            try:
                vla = {**vla, **finetune_billing(sagemaker_client, vla["pipeline_execution_arn"])}
            except Exception as err:  # noqa: BLE001 - the report never fails for want of a figure
                log.warning("could not read the fine-tune's billed time: %s", err)
        return actual_run_cost(plan, training, vla)
    except Exception:  # noqa: BLE001
        log.exception("could not compute the run's actual cost")
        return None


def _described_batch_job(ti: Any, task_id: str, batch_client: Any = None) -> dict[str, Any] | None:
    """The DescribeJobs entry of the Batch job ``task_id`` submitted (its ``batch_job_details`` link XCom), or None."""
    details = _pull(ti, task_id, key="batch_job_details")
    job_id = details.get("job_id") if isinstance(details, Mapping) else None
    if not job_id:
        return None
    try:
        if batch_client is None:
            from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

            batch_client = BatchClientHook().client
        jobs = batch_client.describe_jobs(jobs=[str(job_id)]).get("jobs") or []
    except Exception as err:  # noqa: BLE001 - the report never fails for want of a figure
        log.warning("could not read Batch job %s for the run's cost: %s", job_id, err)
        return None
    return dict(jobs[0]) if jobs else None


def earlier_round_costs(plan: Mapping[str, Any], hook: Any) -> list[dict[str, Any]]:
    """Each earlier round's actual cost, from its own ``runs/<run_key>/lineage.json`` (``cost_actual``; the run key
    of every earlier round is in this round's ``retrain_round`` history), oldest first; S3 ``GetObject`` per round.
    A round whose lineage cannot be read, or has no actual cost, is ``total_usd`` None with the reason; never raises.
    """
    out = []
    for entry in _get(plan, "rounds", "history") or []:
        row = {"round": entry.get("round"), "run_id": entry.get("run_id"), "run_key": entry.get("run_key"),
               "total_usd": None, "unknown": [], "reason": None}
        key = f"runs/{entry.get('run_key')}/lineage.json"
        try:
            actual = (json.loads(hook.read_key(key, bucket_name=plan["bucket"])) or {}).get("cost_actual")
        except Exception as err:  # noqa: BLE001 - the loop's figure is then a lower bound, with the reason
            row["reason"] = f"s3://{plan['bucket']}/{key} not readable: {type(err).__name__}: {err}"
            log.warning("round %s's cost: %s", row["round"], row["reason"])
            out.append(row)
            continue
        if not actual or actual.get("total_usd") is None:
            row["reason"] = f"s3://{plan['bucket']}/{key} has no actual cost"
        else:
            row["total_usd"], row["unknown"] = float(actual["total_usd"]), list(actual.get("unknown") or [])
        out.append(row)
    return out


def with_loop_cost(plan: Mapping[str, Any], actual: dict[str, Any] | None, run_id: str, hook: Any
                   ) -> dict[str, Any] | None:
    """``actual`` with ``loop`` (:func:`sim2real.orchestration.cost_actual.loop_cost`) from round 2 on; unchanged in
    round 1, without rounds, or when this run's cost is unknown. Never raises."""
    round_ = int(_get(plan, "rounds", "round") or 1)
    if not actual or round_ <= 1:
        return actual
    try:
        return {**actual, "loop": loop_cost(actual, round_=round_, run_id=run_id, run_key=plan["run_key"],
                                            earlier=earlier_round_costs(plan, hook))}
    except Exception:  # noqa: BLE001 - the report never fails for want of a figure
        log.exception("could not sum the loop's actual cost")
        return actual


def sweep_trainings(plan: Mapping[str, Any], ti: Any) -> list[Any]:
    """Each sweep candidate's training result (its ``job_cost`` XCom when the job was stopped at the cost limit;
    ``None`` when it handed on neither), in candidate order."""
    indexes = list(range(len((plan.get("sweep") or {}).get("candidates") or [])))
    task_id = training_task_id(plan)  # Batch: sweep.train_policy; HyperPod: sweep.train_on_slurm
    out = []
    for i in indexes:
        value = None
        for key in (None, "job_cost"):
            try:
                value = ti.xcom_pull(task_ids=task_id, map_indexes=i, **({"key": key} if key else {}))
            except Exception as err:  # noqa: BLE001 - a candidate that never ran has no XCom
                log.info("no output from %s[%s]: %s", task_id, i, err)
            if value:
                break
        out.append(value or None)
    return out


#: The report's pictures: lineage ``figures`` key → object key under the run prefix (beside lineage.json).
FIGURE_KEYS = {
    "training_curve": "report/training_curve.png",
    "eval_outcome": "report/eval_outcome.png",
    "round_success": "report/round_success.png",
    "sim_vs_field": "report/sim_vs_field.png",
}


class FigureSkipped(Exception):
    """A picture's data is not there; the message is the reason recorded in ``lineage.json``."""


def draw_training_curve(plan: Mapping[str, Any], parts: Mapping[str, Any], hook: Any) -> tuple[bytes, str, int]:
    """The training curve of the run: ``(png, events prefix, reward points)``.

    Events come from the checkpoint manifest's ``tensorboard_uri``; without a manifest (the checkpoint
    never arrived) from the plan's ``<checkpoint output>/tensorboard/``, where a failed or stopped
    training leaves the events of its last checkpoint.

    :raises FigureSkipped: no events prefix, no event files, or no reward value in them.
    """
    manifest = parts.get("checkpoint") or {}
    output_uri = _get(plan, "checkpoint", "output_uri")
    source = manifest.get("tensorboard_uri") or (f"{output_uri.rstrip('/')}/tensorboard/" if output_uri else None)
    ran = (f"training did not run (no output from {stage_sources(plan)['training']})"
           if parts.get("training") is None else "training ran")
    if not source:
        raise FigureSkipped(f"{ran}; the plan has no checkpoint output URI to look for TensorBoard events in")
    try:
        scalars = plots.read_scalars(source, (plots.REWARD_TAG, plots.REWARD_MIN_TAG, plots.REWARD_MAX_TAG),
                                     s3_hook=hook)
        series = plots.reward_series(scalars, source=source)
    except plots.PlotDataMissing as err:
        raise FigureSkipped(f"{ran}; {err}") from err
    png = plots.plot_training_curve(scalars, run_key=plan["run_key"],
                                    task=manifest.get("task") or _get(plan, "checkpoint", "task"),
                                    rollouts=manifest.get("rollouts"), num_envs=manifest.get("num_envs"))
    return png, source, len(series.steps)


def draw_eval_outcome(plan: Mapping[str, Any], parts: Mapping[str, Any], hook: Any) -> tuple[bytes, str, int]:
    """The evaluation outcome of the run: ``(png, report URI, episodes)``. The threshold is the one the
    quality gate used (its output), else the plan's ``quality_gate``.

    :raises FigureSkipped: no evaluation report (the evaluation did not run or its report was refused).
    """
    report = parts.get("evaluation")
    if not report:
        raise FigureSkipped("evaluation did not run or its report was refused (no output from "
                            "evaluate.read_eval_report)")
    gate = parts.get("quality_gate") or {}
    threshold = gate.get("threshold", _get(plan, "quality_gate", "min_success_rate"))
    metric = gate.get("metric") or ("ci95_lower" if _get(plan, "quality_gate", "on_lower_bound") else "success_rate")
    png = plots.eval_outcome_png(report, run_key=plan["run_key"], threshold=threshold, gate_metric=metric,
                                 task=report.get("task") or _get(plan, "checkpoint", "task"))
    source = report.get("report_uri") or _get(plan, "evaluation", "report_uri") or ids.READ_EVAL_REPORT
    return png, source, int(report["episodes"])


def draw_round_success(plan: Mapping[str, Any], parts: Mapping[str, Any], hook: Any) -> tuple[bytes, str, int]:
    """The success rate per retraining round: ``(png, "lineage rounds", rounds drawn)`` (only drawn when
    ``max_rounds`` > 1, :func:`write_figures`).

    :raises FigureSkipped: no round has an evaluated success rate yet.
    """
    rounds = parts.get("rounds") or {}
    if not rounds.get("rounds"):
        raise FigureSkipped("no round was evaluated (no success rate to draw)")
    bar = plan.get("quality_gate") or {}
    png = plots.round_success_png(rounds, run_key=plan["run_key"], threshold=bar.get("min_success_rate"),
                                  gate_metric="ci95_lower" if bar.get("on_lower_bound") else "success_rate")
    return png, "lineage rounds", len(rounds["rounds"])


def draw_sim_vs_field(plan: Mapping[str, Any], parts: Mapping[str, Any], hook: Any) -> tuple[bytes, str, int]:
    """Simulation vs field of the released model: ``(png, "canary field episodes", field episodes)`` (only drawn
    for a run with a canary, :func:`write_figures`).

    :raises FigureSkipped: the canary gave no verdict, no field episode was accepted, or there is no evaluation.
    """
    verdict, evaluation = parts.get("field") or {}, parts.get("evaluation")
    if not verdict.get("n"):
        raise FigureSkipped("no field episode was judged (the canary did not run or its robots reported none)"
                            if verdict else "the canary gave no verdict (it did not run or did not finish)")
    if not evaluation:
        raise FigureSkipped("no evaluation report to set the field beside")
    field = {"rate": verdict["rate"], "ci95": verdict["ci95"], "successes": verdict["successes"], "n": verdict["n"],
             "robots": verdict.get("robots") or {}}
    png = plots.sim_vs_field_png(evaluation, field, run_key=plan["run_key"], field_threshold=verdict.get("threshold"))
    return png, f"canary {verdict.get('deployment_id')} field episodes", int(verdict["n"])


#: lineage ``figures`` key → function ``(plan, parts, s3_hook) -> (png, source, points)``.
FIGURE_DRAWERS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any], Any], tuple[bytes, str, int]]] = {
    "training_curve": draw_training_curve,
    "eval_outcome": draw_eval_outcome,
    "round_success": draw_round_success,  # only with max_rounds > 1
    "sim_vs_field": draw_sim_vs_field,  # only with a canary
}


def write_figures(*, plan: Mapping[str, Any], parts: Mapping[str, Any], hook: Any,
                  ti: Any = None, endpoint_url: str | None = None) -> dict[str, dict[str, Any]]:
    """Draw each of :data:`FIGURE_DRAWERS` and upload it as ``image/png`` to ``runs/<run_key>/report/``.

    A picture that is skipped (:class:`FigureSkipped`) or fails to draw is logged and recorded with its
    reason; the others are still written. With ``ti`` (the running task instance) the console link of
    each written picture is persisted (:mod:`sim2real.orchestration.links.s3`).

    :param parts: the stages' outputs by lineage key (:data:`SOURCES`).
    :param hook: the ``S3Hook`` used to read the events and write the PNGs.
    :param endpoint_url: the sandbox's S3 endpoint: the links then open the PNGs there through presigned URLs
        (None: the S3 console).
    :return: the lineage ``figures`` entries (:func:`sim2real.orchestration.lineage.figure_entry`); raises nothing for a
        picture (an upload error is recorded as its reason like any other).
    """
    bucket, prefix = plan["bucket"], plan["run_prefix"]
    figures: dict[str, dict[str, Any]] = {}
    for name, draw in FIGURE_DRAWERS.items():
        if name == "round_success" and int(_get(plan, "rounds", "max_rounds") or 1) <= 1:
            continue  # a run without retraining rounds has no such picture
        if name == "sim_vs_field" and (not _get(plan, "deploy", "canary_thing_group_name") or "field" not in parts):
            continue  # no canary, or drawn before it (the approval request's pictures): no field episodes to draw
        key = f"{prefix}{FIGURE_KEYS[name]}"
        try:
            png, source, points = draw(plan, parts, hook)
            hook.get_conn().upload_fileobj(io.BytesIO(png), bucket, key,
                                           ExtraArgs={**hook.extra_args, "ContentType": "image/png"})
        except FigureSkipped as err:
            log.warning("%s not drawn: %s", name, err)
            figures[name] = figure_entry(skipped_reason=str(err))
            continue
        except Exception as err:  # noqa: BLE001 - a picture must not cost the run its lineage record
            log.exception("%s could not be drawn or stored", name)
            figures[name] = figure_entry(skipped_reason=f"could not be drawn or stored at s3://{bucket}/{key}: "
                                                        f"{type(err).__name__}: {err}")
            continue
        uri = f"s3://{bucket}/{key}"
        log.info("%s (%d points from %s) written to %s (%d bytes)", name, points, source, uri, len(png))
        figures[name] = figure_entry(uri=uri, source=source, points=points)
        link = FIGURE_LINKS.get(name)
        if ti is not None and link is not None:
            link.persist_for_object(ti, plan, key, url=presigned_get_url(hook.get_conn(), bucket, key)
                                    if endpoint_url else None)
    return figures


def task_duration_s(duration: Any) -> float | None:
    """A task's duration in seconds for the lineage: ``None`` (unknown) when Airflow's is missing or negative.

    Airflow stores ``end_date - start_date`` of the latest try. A task that was cleared and run again can
    carry a start date of the new try with an end date of an earlier one (seen: ``-61.77``); that figure
    is not a duration at all, so the lineage records ``null`` (unknown) rather than clamping it to 0, which
    would claim the task took no time.
    """
    if duration is None:
        return None
    try:
        value = float(duration)
    except (TypeError, ValueError):
        return None
    if value < 0 or value != value:  # negative or NaN
        return None
    return value


def task_key(task_id: str, map_index: int | None = None) -> str:
    """The key of one task instance in :func:`collect_task_states`: ``task_id``, or ``task_id[i]`` for map index
    ``i >= 0`` (Airflow's ``map_index`` is ``-1`` for a task that is not mapped)."""
    return f"{task_id}[{map_index}]" if map_index is not None and int(map_index) >= 0 else task_id


def collect_task_states(dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    """State and duration (s, :func:`task_duration_s`) of every finished task of the run, from the Task
    Execution API (``RuntimeTaskInstance.get_task_breadcrumbs``: one row per task instance).

    :return: ``{key: {"state", "duration_s"}}``; ``key`` is the task id, and ``task_id[i]`` for map index ``i``
        of a mapped task (each candidate of a sweep keeps its own state, as in
        :func:`sim2real.orchestration.run_state.failed_tasks`). ``{}`` outside a task runner (unit tests)
        instead of failing the report.
    """
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        crumbs = RuntimeTaskInstance.get_task_breadcrumbs(dag_id=dag_id, run_id=run_id)
    except Exception as err:  # noqa: BLE001 - the report must not fail for want of task states
        log.warning("could not read task states: %s", err)
        return {}
    out: dict[str, dict[str, Any]] = {}
    for crumb in crumbs:
        state = crumb.get("state")
        out[task_key(crumb["task_id"], crumb.get("map_index"))] = {
            "state": getattr(state, "value", state), "duration_s": task_duration_s(crumb.get("duration"))}
    return out


def _environment() -> dict[str, Any]:
    """The environment config (``{}`` when it cannot be read: the report then uses console links)."""
    from sim2real.orchestration.config import load_environment

    try:
        return dict(load_environment())
    except Exception as err:  # noqa: BLE001 - prepare_run read it already; the report never fails for it
        log.warning("could not read the environment config: %s", err)
        return {}


def note_links(plan: Mapping[str, Any], lineage: Mapping[str, Any], endpoint_url: str | None,
               s3_client: Any = None) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The run note's ``(links, images)``: the S3 run folder, lineage.md and the report's pictures,
    as S3 console URLs on AWS, as presigned URLs on the sandbox's S3 (``endpoint_url``, ``s3_client``), where
    the pictures are also embedded when they fit (the browser loads them from 127.0.0.1; the console needs a
    sign-in, so AWS gets links only)."""
    bucket, prefix, region = plan["bucket"], plan["run_prefix"], plan["region"]
    common = {"region_name": region, "aws_domain": S3RunFolderLink.get_aws_domain(partition_of(region)),
              "bucket": bucket}

    def obj(key: str) -> str:
        return presigned_get_url(s3_client, bucket, key) if endpoint_url else console_object_url(region, bucket, key)

    folder = (s3_client.generate_presigned_url("list_objects_v2", Params={"Bucket": bucket, "Prefix": prefix},
                                               ExpiresIn=PRESIGNED_MAX_S) if endpoint_url
              else S3RunFolderLink().format_link(**common, prefix=prefix))
    links: dict[str, str | None] = {"S3 run folder": folder, "lineage.md": obj(f"{prefix}lineage.md")}
    images: dict[str, str | None] = {}
    for name, title in FIGURES.items():
        key = FIGURE_KEYS[name]
        drawn = bool(((lineage.get("figures") or {}).get(name) or {}).get("uri"))
        if not drawn and name not in (lineage.get("figures") or {}):
            continue  # not a picture of this run (rounds, canary)
        links[title] = obj(f"{prefix}{key}") if drawn else None
        if endpoint_url and drawn:
            images[title] = links[title]
    return links, images


def write_run_note(lineage: Mapping[str, Any], *, plan: Mapping[str, Any], env: Mapping[str, Any],
                   endpoint_url: str | None = None, s3_client: Any = None) -> dict[str, Any]:
    """Render the run note (:func:`sim2real.orchestration.run_note.render_run_note`, with the quality gate's
    warnings) and set it on the DAG run; never raises.

    :return: :func:`sim2real.orchestration.run_note.set_run_note`'s result plus ``markdown`` and ``warnings``.
    """
    from sim2real.orchestration.run_note import render_run_note, set_run_note

    warnings = gate_warnings(plan.get("params") or lineage.get("params") or {})
    for warning in warnings:
        log.warning("quality gate: %s", warning)
    links, images = note_links(plan, lineage, endpoint_url, s3_client)
    markdown = render_run_note(lineage, warnings=warnings, links=links, images=images)
    result = set_run_note(dag_id=lineage["dag_id"], run_id=lineage["run_id"], note=markdown, env=env)
    return {**result, "warnings": warnings, "markdown": markdown}


def write_run_report(*, plan: Mapping[str, Any], params: Mapping[str, Any], dag_run: Any, ti: Any,
                     rounds_entry: RoundsEntry) -> dict[str, Any]:
    """Build the lineage from the run's XComs and write it (JSON + Markdown) under the run prefix, after
    the report's pictures (:func:`write_figures`).

    :param rounds_entry: computes the lineage's ``rounds`` entry (:data:`sim2real.orchestration.lineage.RoundsEntry`).

    The document is checked against ``sim2real/contract/schemas/lineage.schema.json``; it is written even
    when it does not match (the record of the run is kept), and the task then fails with the list.

    Then sets the DAG run's note (:func:`write_run_note`).

    :return: ``{"lineage_uri", "markdown_uri", "chain", "figures", "run_note"}`` (``figures``: the PNG URIs by
        name, ``None`` for one that was skipped; ``run_note``: :func:`write_run_note`'s result).
    :raises botocore.exceptions.ClientError: when the artifacts bucket cannot be written.
    :raises sim2real.orchestration.lineage.LineageSchemaError: when the document does not match the schema.
    """
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

    parts: dict[str, Any] = {key: _pull(ti, task_id) for key, task_id in stage_sources(plan).items()}
    if not parts.get("quality_gate"):  # a failed gate returns nothing: its verdict XCom has the value and reason
        parts["quality_gate"] = _pull(ti, stage_sources(plan)["quality_gate"], key=VERDICT_KEY)
    # the canary's verdict and evidence: pushed whether it promoted or rolled back (a failed task returns nothing)
    parts["field"] = _pull(ti, ids.CANARY_VERDICT, key=CANARY_VERDICT_KEY)
    canary_review = _pull(ti, ids.CANARY_REVIEW, key=CANARY_REVIEW_KEY)  # a person promoted or aborted the canary
    rounds = rounds_entry(plan, run_id=dag_run.run_id, evaluation=parts.get("evaluation"),
                          checkpoint=parts.get("checkpoint"), next_run_id=_pull(ti, ids.NEXT_ROUND, key="trigger_run_id"))
    scaling = None
    if plan.get("backend") == "hyperpod":
        scaling = {key: _pull(ti, task_id) for key, task_id in HYPERPOD_SCALING_SOURCES.items()}
    bucket, prefix = plan["bucket"], plan["run_prefix"]
    hook = S3Hook()
    env = _environment()
    endpoint = sandbox_endpoint(env, hook.get_conn())  # sandbox: links open the PNGs on its S3, not the console
    figures = write_figures(plan=plan, parts={**parts, "rounds": rounds}, hook=hook, ti=ti, endpoint_url=endpoint)
    try:
        sagemaker = SageMakerHook().conn if parts.get("vla") else None
    except Exception as err:  # noqa: BLE001 - no client: the fine-tune's cost is reported unknown
        log.warning("no SageMaker client for the fine-tune's billed time: %s", err)
        sagemaker = None
    lineage = build_lineage(
        run_key=plan["run_key"], dag_id=dag_run.dag_id, run_id=dag_run.run_id, params=params, plan=plan,
        task_states=collect_task_states(dag_run.dag_id, dag_run.run_id), figures=figures,
        hyperpod_scaling=scaling,
        cost_actual=with_loop_cost(plan, run_actual_cost(plan, parts, ti, sagemaker), dag_run.run_id, hook),
        deploy_check=_pull(ti, SOURCES["deployment"], key="model_package_check"),
        approval=_pull(ti, SOURCES["model_package"], key="decision"),  # also there when the package was Rejected
        rounds=rounds, canary_review=canary_review, **parts,
        field_dataset=_pull(ti, ids.FIELD_DATASET, key="field_dataset"),  # the version the fine-tune included
    )
    errors = lineage_errors(lineage)
    hook.load_string(json.dumps(lineage, indent=2, sort_keys=True, default=str), key=f"{prefix}lineage.json",
                     bucket_name=bucket, replace=True)
    hook.load_string(render_markdown(lineage), key=f"{prefix}lineage.md", bucket_name=bucket, replace=True)
    uri = f"s3://{bucket}/{prefix}lineage.json"
    log.info("lineage written to %s", uri)
    note = write_run_note(lineage, plan=plan, env=env, endpoint_url=endpoint, s3_client=hook.get_conn())
    if errors:
        raise LineageSchemaError(errors)
    log.info("lineage matches lineage.schema.json")
    return {"lineage_uri": uri, "markdown_uri": f"s3://{bucket}/{prefix}lineage.md", "chain": lineage["chain"],
            "figures": {name: fig["uri"] for name, fig in figures.items()}, "run_note": note}
