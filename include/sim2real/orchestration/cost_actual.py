"""The run's actual GPU cost after the run, in the shape of the estimate and at its prices.

:func:`actual_run_cost` gives the actual figures (the same items as
:func:`sim2real.orchestration.budget.estimate_run_cost`) from the Batch job's ``startedAt``/``stoppedAt`` (or the
training task's result and ``job_cost`` XCom: Batch or the HyperPod Slurm job) and, when known, the fine-tune's
billable time (:func:`finetune_billing`, from the SageMaker pipeline's training job); with retraining rounds,
:func:`loop_cost` adds the earlier rounds' actual costs (from their lineage) to give the loop's so far. The
estimate, its price table and the limits a running job is held to are in :mod:`sim2real.orchestration.budget`.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.budget import (ON_DEMAND_USD_PER_HOUR, PRICE_SOURCE, _item, _stage_item,
                                           batch_job_run_seconds)


def _epoch_s(value: Any) -> float | None:
    """Epoch seconds from epoch seconds, a ``datetime`` or an ISO 8601 string; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, _dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)).timestamp()
    if isinstance(value, str):
        try:
            return _epoch_s(_dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return float(value)
    return float(value)


def _result_run_seconds(training: Mapping[str, Any], now: float) -> float:
    """Seconds a training ran by its result's or ``job_cost`` XCom's times (epoch s): ``run_seconds`` when given
    (``job_cost`` counts earlier attempts too), else ``started_at``..``stopped_at`` (..``now`` without a stop)."""
    if training.get("run_seconds") is not None:
        return float(training["run_seconds"])
    stop = training.get("stopped_at")
    return max((now if stop is None else float(stop)) - float(training["started_at"]), 0.0)


def _budget_stop(training: Mapping[str, Any]) -> str:
    """``", stopped at the cost limit"`` when the training was stopped by its cost limit, else ``""``."""
    return ", stopped at the cost limit" if training.get("stopped_by_budget") else ""


def _training_actual(plan: Mapping[str, Any], training: Mapping[str, Any] | None, now: float,
                     prices: Mapping[str, float]) -> dict[str, Any]:
    estimate = plan.get("budget") or {}
    batch = plan.get("batch") or {}
    est_item = _stage_item(estimate, "training") or {}
    instance_type = est_item.get("instance_type") or batch.get("instance_type") or "unknown"
    price = est_item.get("usd_per_hour")
    price = prices.get(instance_type) if price is None else float(price)
    nodes = int(batch.get("num_nodes") or est_item.get("instances") or 1)
    seconds: float | None = None
    if not training:
        basis = "no training result: the job did not start or its result was not handed on"
    else:
        job_id = training.get("job_id") or training.get("jobId") or "?"
        nodes = int(training.get("num_nodes") or (training.get("nodeProperties") or {}).get("numNodes") or nodes)
        if training.get("gpu_seconds") is not None:  # the HyperPod EKS PyTorchJob's result or job_cost XCom
            seconds = float(training["gpu_seconds"])
            basis = (f"PyTorchJob {training.get('namespace') or ''}/{training.get('job_name') or job_id} on HyperPod "
                     f"EKS cluster {training.get('cluster_name') or '?'}: the seconds it held GPUs (time queued or "
                     "preempted not counted)")
        elif training.get("cluster_name"):  # the HyperPod Slurm job's result or job_cost XCom (epoch s)
            start, stop = training.get("started_at"), training.get("stopped_at")
            where = f"Slurm job {job_id} on HyperPod cluster {training['cluster_name']}"
            if start is not None:
                seconds = _result_run_seconds(training, now)
                basis = (f"{where}: Slurm Start..{'now (no end time)' if stop is None else 'End'}"
                         + _budget_stop(training))
            else:
                basis = f"{where}: no start time in the result (the job never ran, or see sacct Elapsed)"
        elif "startedAt" in training or isinstance(training.get("attempts"), list):  # a DescribeJobs entry (ms)
            seconds = batch_job_run_seconds(training, now)
            end = "stoppedAt" if training.get("stoppedAt") else "now (running)"
            basis = f"Batch job {job_id} startedAt..{end} (DescribeJobs)"
        elif training.get("started_at") is not None:  # the operator's result or job_cost XCom (epoch s)
            stop = training.get("stopped_at")
            seconds = _result_run_seconds(training, now)
            basis = (f"Batch job {job_id} started_at..{'now (no stopped_at)' if stop is None else 'stopped_at'}"
                     + _budget_stop(training))
        else:
            basis = f"Batch job {job_id}: no start time in the training result"
        if seconds is None and "startedAt" in basis:  # terminated or failed before RUNNING: no node ran it
            seconds, basis = 0.0, f"Batch job {job_id} never started (no startedAt)"
    hours = None if seconds is None else seconds / 3600
    return _item("training", instance_type, nodes, hours, {instance_type: price} if price is not None else {},
                 basis + (f" ({seconds:.0f} s)" if seconds is not None else ""))


def _finetune_actual(plan: Mapping[str, Any], vla: Mapping[str, Any] | None, now: float,
                     prices: Mapping[str, float]) -> dict[str, Any]:
    estimate = plan.get("budget") or {}
    est_item = _stage_item(estimate, "vla_finetune") or {}
    vla = vla or {}
    params = (plan.get("vla") or {}).get("parameters") or {}
    instance_type = (vla.get("instance_type") or params.get("InstanceType") or est_item.get("instance_type")
                     or "unknown")
    instances = int(vla.get("instance_count") or 1)
    hours: float | None = None
    billable = vla.get("billable_seconds", vla.get("BillableTimeInSeconds"))
    start = _epoch_s(vla.get("started_at", vla.get("CreationTime")))
    stop = _epoch_s(vla.get("stopped_at", vla.get("LastModifiedTime")))
    if billable is not None:
        hours = float(billable) / 3600
        basis = f"BillableTimeInSeconds {float(billable):.0f} s of the training job (per instance)"
    elif start is not None:
        hours = max((stop if stop is not None else now) - start, 0.0) / 3600
        basis = ("pipeline execution start..end (includes the CPU steps: an upper bound)" if stop is not None
                 else "pipeline execution start..now (running)")
    elif vla:
        basis = (f"pipeline execution {vla.get('pipeline_execution_arn', '?')}: no timing in its result "
                 "(pass the training step's BillableTimeInSeconds)")
    else:
        basis = "no fine-tune result: not run, or failed before handing on its result"
    if est_item.get("instance_type") == instance_type and est_item.get("usd_per_hour") is not None:
        prices = {instance_type: float(est_item["usd_per_hour"])}  # the estimate's price, as for training
    return _item("vla_finetune", instance_type, instances, hours, prices, basis)


def actual_run_cost(plan: Mapping[str, Any], training_result: Mapping[str, Any] | list | None,
                    vla_result: Mapping[str, Any] | None = None, now: float | None = None,
                    prices: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The run's actual GPU cost, in the estimate's shape, at the same prices.

    * **training** = nodes x USD/node-hour x run time. ``training_result`` is either the
      training task's result (``started_at``/``stopped_at`` epoch seconds, ``num_nodes``; also the
      ``job_cost`` XCom pushed when the job was stopped at the cost limit) or a ``DescribeJobs``
      entry (``startedAt``/``stoppedAt`` epoch ms, see :func:`batch_job_run_seconds`). A job still
      running is counted up to ``now``. The price is the estimate's (the plan's ``budget``), else
      the table's.
    * **fine-tune** (only when the plan's ``vla.enabled``) = instances x USD/hour x hours, hours from
      ``vla_result``: ``billable_seconds`` (or ``BillableTimeInSeconds``, per instance, from
      ``DescribeTrainingJob``) when given, else ``started_at``/``stopped_at`` (or the pipeline
      execution's ``CreationTime``/``LastModifiedTime``: epoch s, datetime or ISO 8601), an upper
      bound. The fine-tune operator's result (execution ARN and status only) gives "unknown".

    Prices are the estimate's (the plan's ``budget``) for the same instance type, else the table's.

    :param plan: the run's plan (``budget``, ``batch.instance_type``, ``batch.num_nodes``, ``vla``).
    :param training_result: see above; None = the job never handed on a result (cost unknown); a list: a
        sweep's candidates' results (one training item each, in candidate order).
    :param vla_result: see above; None = no fine-tune result.
    :param now: epoch seconds for running stages (default: the current time).
    :param prices: price table override (default :data:`ON_DEMAND_USD_PER_HOUR`).
    :return: ``{"currency": "USD", "price_source", "total_usd" (sum of the known items, rounded to
        cents), "max_budget_usd", "unknown": [stages whose cost is unknown: total_usd is then a lower
        bound], "within_budget": True | False | None (None: no budget, or below it with unknown
        stages), "items": [{"stage", "instance_type", "instances", "hours", "usd_per_hour", "usd",
        "basis"}, ...]}``.
    """
    prices = ON_DEMAND_USD_PER_HOUR if prices is None else prices
    now = time.time() if now is None else float(now)
    trainings = training_result if isinstance(training_result, list) else [training_result]
    items = [_training_actual(plan, t, now, prices) for t in trainings]  # a sweep: one item per candidate
    if (plan.get("vla") or {}).get("enabled") or vla_result:
        items.append(_finetune_actual(plan, vla_result, now, prices))
    unknown = [i["stage"] for i in items if i["usd"] is None]
    total = round(sum(i["usd"] for i in items if i["usd"] is not None), 2)
    budget = float((plan.get("budget") or {}).get("max_budget_usd") or 0)
    if budget <= 0:
        within: bool | None = None
    elif total > budget:
        within = False
    else:
        within = None if unknown else True
    return {
        "currency": "USD",
        "price_source": (plan.get("budget") or {}).get("price_source") or PRICE_SOURCE,
        "total_usd": total,
        "max_budget_usd": budget,
        "unknown": unknown,
        "within_budget": within,
        "items": items,
    }


def loop_cost(actual: Mapping[str, Any], *, round_: int, run_id: str, run_key: str,
              earlier: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The retraining loop's actual cost so far: this round's (``actual``, :func:`actual_run_cost`) plus every
    earlier round's, as each round's own lineage recorded it (``cost_actual.total_usd`` of
    ``runs/<run_key>/lineage.json``; :func:`sim2real.orchestration.report.earlier_round_costs` reads them).

    :param round_: this run's round; ``run_id`` / ``run_key``: this run's.
    :param earlier: one entry per earlier round, oldest first: ``{"round", "run_id", "run_key", "total_usd"
        (None: unknown), "unknown" (that run's unknown stages), "reason" (why unknown, or None)}``.
    :return: ``{"total_usd" (sum of the known rounds, rounded to cents), "unknown_rounds" (rounds whose cost is
        unknown or a lower bound: total_usd is then a lower bound), "rounds": [{"round", "run_id", "run_key",
        "total_usd", "reason"}, ...]}`` (this round last).
    """
    rows = [{"round": int(e["round"]), "run_id": e.get("run_id"), "run_key": e.get("run_key"),
             "total_usd": None if e.get("total_usd") is None else float(e["total_usd"]), "reason": e.get("reason"),
             "lower_bound": bool(e.get("unknown"))} for e in earlier]
    rows.append({"round": int(round_), "run_id": run_id, "run_key": run_key, "total_usd": float(actual["total_usd"]),
                 "reason": None, "lower_bound": bool(actual.get("unknown"))})
    unknown = [r["round"] for r in rows if r["total_usd"] is None or r["lower_bound"]]
    total = round(sum(r["total_usd"] for r in rows if r["total_usd"] is not None), 2)
    return {"total_usd": total, "unknown_rounds": unknown,
            "rounds": [{k: r[k] for k in ("round", "run_id", "run_key", "total_usd", "reason")} for r in rows]}


def finetune_billing(sagemaker_client: Any, pipeline_execution_arn: str) -> dict[str, Any]:
    """The fine-tune's billed time, for :func:`actual_run_cost`'s ``vla_result``.

    ``ListPipelineExecutionSteps`` gives the training step's job (``Metadata.TrainingJob.Arn``);
    ``DescribeTrainingJob`` its ``BillableTimeInSeconds`` (per instance; Managed Spot: the time
    billed) and ``ResourceConfig`` (instance type and count). Without a training job that reports
    it (not started, or the step failed before), ``DescribePipelineExecution``'s ``CreationTime`` and
    ``LastModifiedTime`` (an upper bound: includes the CPU steps).

    :param sagemaker_client: a boto3 SageMaker client (e.g. ``SageMakerHook().conn``).
    :param pipeline_execution_arn: the fine-tune task's ``pipeline_execution_arn``.
    :return: ``{"pipeline_execution_arn", "billable_seconds" (instance-seconds of all the training
        jobs), "instance_type", "instance_count": 1, "training_jobs": [names]}``, or
        ``{"pipeline_execution_arn", "started_at", "stopped_at"}`` (epoch seconds).
    :raises botocore.exceptions.ClientError: from the SageMaker API.
    """
    jobs: list[str] = []
    kwargs: dict[str, Any] = {"PipelineExecutionArn": pipeline_execution_arn}
    while True:
        page = sagemaker_client.list_pipeline_execution_steps(**kwargs)
        for step in page.get("PipelineExecutionSteps") or []:
            arn = ((step.get("Metadata") or {}).get("TrainingJob") or {}).get("Arn")
            if arn:
                jobs.append(arn.rsplit("/", 1)[-1])
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    billable, instance_type, names = 0.0, None, []
    for name in jobs:
        job = sagemaker_client.describe_training_job(TrainingJobName=name)
        if job.get("BillableTimeInSeconds") is None:
            continue
        config = job.get("ResourceConfig") or {}
        billable += float(job["BillableTimeInSeconds"]) * int(config.get("InstanceCount") or 1)
        instance_type = instance_type or config.get("InstanceType")
        names.append(name)
    if names:
        return {"pipeline_execution_arn": pipeline_execution_arn, "billable_seconds": billable,
                "instance_type": instance_type, "instance_count": 1, "training_jobs": names}
    execution = sagemaker_client.describe_pipeline_execution(PipelineExecutionArn=pipeline_execution_arn)
    running = execution.get("PipelineExecutionStatus") in ("Executing", "Stopping")
    return {"pipeline_execution_arn": pipeline_execution_arn, "started_at": _epoch_s(execution.get("CreationTime")),
            "stopped_at": None if running else _epoch_s(execution.get("LastModifiedTime"))}
