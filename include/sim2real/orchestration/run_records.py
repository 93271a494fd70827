"""The run records: who a run key belongs to, written by each run at its start, read by the orphan sweeper.

The run key is a one-way digest of (dag id, run id) (:mod:`sim2real.contract.run_key`), so each run records who it
is at its start: ``prepare_run`` / ``prepare_release`` write ``runs/<run_key>/run.json`` (``{"dag_id", "run_id",
"run_key", "run_type", "deployment"}``, :func:`register_run`) in the artifacts bucket. ``deployment`` names the
Airflow deployment that ran it (:func:`deployment_id`). A run executed in one process (``dag.test``) also records
that process (``process``: :func:`current_process`, written only when :func:`in_process_run`), so that the sweeper
can tell when it died (:func:`process_gone`). How the sweeper judges what it finds by these records:
:mod:`sim2real.orchestration.sweeper`.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Mapping
from typing import Any

from sim2real.contract.run_key import run_prefix

#: The run record's object name under ``runs/<run_key>/``.
RUN_RECORD = "run.json"


def run_record_key(run_key: str) -> str:
    """``runs/<run_key>/run.json``: who the run key belongs to."""
    return f"{run_prefix(run_key)}{RUN_RECORD}"


def deployment_id() -> str:
    """The identity of this Airflow deployment, written into each run record (``deployment``).

    :return: the Airflow option ``[sim2real] deployment_id`` (``AIRFLOW__SIM2REAL__DEPLOYMENT_ID``; infra/ sets it
        on MWAA to ``mwaa:<environment name>``, the same on every worker and across restarts), else
        ``local:<user>@<host>`` (a developer's ``dag.test`` or a local Airflow: stable on that machine).
    """
    from airflow.providers.common.compat.sdk import conf

    value = (conf.get("sim2real", "deployment_id", fallback="") or "").strip()
    if value:
        return value
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container without passwd entry)
        user = "unknown"
    return f"local:{user}@{socket.gethostname()}"


def in_process_run() -> bool:
    """Whether this task runs inside the process that runs the whole DAG run (``dag.test``: the Task SDK's
    ``InProcessSupervisorComms``), so that the run lives exactly as long as this process."""
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:  # pragma: no cover - the pinned Airflow has it
        return False
    return type(getattr(task_runner, "SUPERVISOR_COMMS", None)).__name__ == "InProcessSupervisorComms"


def current_process() -> dict[str, Any]:
    """``{"host", "pid", "started"}`` of this process (``started``: its start, epoch seconds, from psutil)."""
    import psutil

    return {"host": socket.gethostname(), "pid": os.getpid(), "started": round(psutil.Process().create_time(), 3)}


def process_gone(process: Mapping[str, Any] | None) -> bool | None:
    """Whether the process a run record names has ended: True (no such pid on this host, or the pid now belongs to
    a process started at another time), False (it runs), None (no process recorded, or another host: unknown)."""
    import psutil

    if not isinstance(process, Mapping) or process.get("host") != socket.gethostname() or not process.get("pid"):
        return None
    try:
        started = psutil.Process(int(process["pid"])).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return True
    except psutil.Error:
        return None
    return abs(started - float(process.get("started") or 0)) > 1.0


def register_run(s3_hook: Any, bucket: str, *, dag_id: str, run_id: str, run_key: str,
                 run_type: str | None = None, deployment: str | None = None,
                 process: Mapping[str, Any] | None = None) -> str:
    """Write the run record ``s3://<bucket>/runs/<run_key>/run.json``.

    :param run_type: the DAG run's ``run_type`` (``manual``, ``scheduled``, ``backfill``, ...), when known.
    :param deployment: the Airflow deployment running it; default :func:`deployment_id`.
    :param process: the one process that runs the whole run (:func:`current_process`, under ``dag.test``), else
        None (not written).
    :return: the record's ``s3://`` URI; the record is ``{"dag_id", "run_id", "run_key", "run_type", "deployment"}``
        (and ``process`` when given).
    :raises botocore.exceptions.ClientError: the bucket cannot be written.
    """
    key = run_record_key(run_key)
    record = {"dag_id": dag_id, "run_id": run_id, "run_key": run_key,
              "run_type": str(getattr(run_type, "value", run_type)) if run_type is not None else None,
              "deployment": deployment or deployment_id()}
    if process:
        record["process"] = dict(process)
    s3_hook.load_string(json.dumps(record, sort_keys=True), key=key, bucket_name=bucket, replace=True)
    return f"s3://{bucket}/{key}"


def read_run_record(s3_hook: Any, bucket: str, run_key: str) -> dict[str, Any] | None:
    """The run record of ``run_key``, or ``None`` when there is none.

    Looked up with ListObjectsV2 under the record's own key (the MWAA role may list ``runs/*`` only; a
    HeadObject of a missing key would then answer 403, not 404).
    """
    key = run_record_key(run_key)
    if key not in (s3_hook.list_keys(bucket_name=bucket, prefix=key) or []):
        return None
    record = json.loads(s3_hook.read_key(key, bucket_name=bucket))
    return record if record.get("dag_id") and record.get("run_id") else None
