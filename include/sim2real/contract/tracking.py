"""Experiment tracking (MLflow): the environment variables and tags every runtime agrees on.

The Airflow side (``sim2real.orchestration.tracking``) creates one MLflow *parent* run per DAG run and one
*child* run per stage (RL training, evaluation, GR00T fine-tune), then hands each workload its child run
through the environment variables below; the workloads (``sim2real.workloads.tracking``) log params,
metrics and artefacts into that run. With no tracking URI set, tracking is off and nothing is logged.

Standard library only (imported in the MWAA environment and in every image).

Variable names: :mod:`sim2real.contract.env_vars` (``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_ID``,
``MLFLOW_RUN_ID`` are MLflow's own; the parent run id is ours: MLflow links a child to its parent with the
``mlflow.parentRunId`` tag).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: MLflow's system tag naming a run's parent (``mlflow.utils.mlflow_tags.MLFLOW_PARENT_RUN_ID``).
PARENT_RUN_TAG = "mlflow.parentRunId"
#: Our tags on every run: the run key (as on every AWS resource of the run) and the stage.
RUN_KEY_TAG = "sim2real.run_key"
STAGE_TAG = "sim2real.stage"
#: A sweep candidate's runs: its ``c<i>`` (``sim2real.orchestration.candidates``).
CANDIDATE_TAG = "sim2real.candidate"
#: What a workload could not record while the server was unreachable (set by the workload when the server answers
#: again, or by the DAG's last task from the workload's manifest/report).
NOT_RECORDED_TAG = "sim2real.tracking.not_recorded"

#: The child runs of a DAG run: stage → run name suffix.
STAGES = ("rl_training", "evaluation", "vla_finetune")

#: Experiment a DAG run's parent run goes to when the environment config names none.
DEFAULT_EXPERIMENT_NAME = "sim2real"

#: The MLflow client version the images install (requirements-workload.txt) and the SageMaker managed MLflow
#: tracking server must run: MLflow requires client and server of the same version, and SageMaker's
#: ``DescribeMlflowTrackingServer`` reports the server's as ``MlflowVersion``.
MLFLOW_CLIENT_VERSION = "3.17.2"

_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:([a-z0-9-]+):(\d{12}):(mlflow-tracking-server|mlflow-app)/([\w-]+)$")


def is_sagemaker_arn(uri: str) -> bool:
    """True when ``uri`` is a SageMaker managed MLflow tracking server (or MLflow App) ARN."""
    return bool(_ARN.match(str(uri or "")))


def parse_sagemaker_arn(uri: str) -> dict[str, str]:
    """Split a SageMaker MLflow ARN into ``region``, ``account``, ``resource_type``, ``name``.

    :raises ValueError: when ``uri`` is not such an ARN.
    """
    match = _ARN.match(str(uri or ""))
    if not match:
        raise ValueError(f"{uri!r} is not a SageMaker MLflow ARN "
                         "(arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name>)")
    region, account, resource_type, name = match.groups()
    return {"region": region, "account": account, "resource_type": resource_type, "name": name}


def check_tracking_uri(uri: str) -> str:
    """Return ``uri`` when it is a usable tracking URI (``http(s)://...`` or a SageMaker MLflow ARN).

    :raises ValueError: naming the value and what is accepted (a file path or ``databricks`` URI is refused:
        the containers and the Airflow workers do not share a disk).
    """
    text = str(uri or "").strip()
    if is_sagemaker_arn(text) or re.match(r"^https?://[^\s/]+(/\S*)?$", text):
        return text
    raise ValueError(f"MLflow tracking URI {uri!r} is neither http(s)://host[:port] nor a SageMaker MLflow "
                     "tracking server ARN (arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name>)")


def describe_not_recorded(summary: Mapping[str, Any] | None) -> str | None:
    """One phrase for what a job's tracking did not record, e.g. ``3 metric batches (150 values), 1 artefact not
    recorded (server unreachable since 2026-12-03T10:00:00Z)``; ``None`` when everything was (or no summary).

    :param summary: ``sim2real.workloads.tracking.RunLogger.summary()`` (the manifest's or report's ``tracking``).
    """
    lost = {k: int(v) for k, v in ((summary or {}).get("not_recorded") or {}).items() if v}
    if not lost:
        return None
    parts = []
    if lost.get("metric_batches"):
        n = lost["metric_batches"]
        parts.append(f"{n} metric batch{'es' if n != 1 else ''} ({lost.get('metrics', 0)} values)")
    for key, word in (("params", "param"), ("tags", "tag"), ("artifacts", "artefact")):
        if lost.get(key):
            parts.append(f"{lost[key]} {word}{'s' if lost[key] != 1 else ''}")
    if lost.get("status"):
        parts.append("the run's final status")
    if lost.get("run"):
        parts.append("the run's start")
    why = ""
    since = summary.get("unreachable_since") or summary.get("first_unreachable_at")
    if since:
        why = f" (server unreachable since {since})"
    elif summary.get("last_error"):
        why = f" ({summary['last_error']})"
    return f"{', '.join(parts)} not recorded{why}"
