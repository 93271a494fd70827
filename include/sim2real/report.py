"""The report stage: collect what every stage handed on and write the run's lineage to S3.

Writes ``s3://<bucket>/runs/<run_key>/lineage.json`` and ``lineage.md``. Runs whatever
happened upstream (``trigger_rule=all_done``): a failed or stopped run still gets its record.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from sim2real.lineage import build_lineage, lineage_errors, render_markdown

log = logging.getLogger(__name__)

#: lineage key → task id whose return value fills it.
SOURCES = {
    "image": "build.build_image",
    "preflight": "preflight.check_capacity",
    "training": "train.train_policy",
    "checkpoint": "checkpoint.wait_for_checkpoint",
    "evaluation": "evaluate.read_eval_report",
    "quality_gate": "quality_gate",
    "vla": "vla.finetune_groot",
    "model_package": "vla.wait_for_approval",
    "deployment": "deploy.deploy_to_robots",
}


def collect_task_states(dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    """State and duration (s) of every finished task of the run, from the Task Execution API.

    Returns ``{}`` outside a task runner (unit tests) instead of failing the report.
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
        out[crumb["task_id"]] = {"state": getattr(state, "value", state), "duration_s": crumb.get("duration")}
    return out


def write_run_report(*, plan: Mapping[str, Any], params: Mapping[str, Any], dag_run: Any, ti: Any) -> dict[str, Any]:
    """Build the lineage from the run's XComs and write it (JSON + Markdown) under the run prefix.

    The document is checked against ``sim2real/schemas/lineage.schema.json``; it is written even
    when it does not match (the record of the run is kept), and the task then fails with the list.

    :return: ``{"lineage_uri", "markdown_uri", "chain"}``.
    :raises botocore.exceptions.ClientError: when the artifacts bucket cannot be written.
    :raises sim2real.lineage.LineageSchemaError: when the document does not match the schema.
    """
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    parts: dict[str, Any] = {}
    for key, task_id in SOURCES.items():
        try:
            parts[key] = ti.xcom_pull(task_ids=task_id)
        except Exception as err:  # noqa: BLE001 - a stage that never ran has no XCom
            log.info("no output from %s: %s", task_id, err)
            parts[key] = None
    lineage = build_lineage(
        run_key=plan["run_key"], dag_id=dag_run.dag_id, run_id=dag_run.run_id, params=params, plan=plan,
        task_states=collect_task_states(dag_run.dag_id, dag_run.run_id), **parts,
    )
    errors = lineage_errors(lineage)
    bucket, prefix = plan["bucket"], plan["run_prefix"]
    hook = S3Hook()
    hook.load_string(json.dumps(lineage, indent=2, sort_keys=True, default=str), key=f"{prefix}lineage.json",
                     bucket_name=bucket, replace=True)
    hook.load_string(render_markdown(lineage), key=f"{prefix}lineage.md", bucket_name=bucket, replace=True)
    uri = f"s3://{bucket}/{prefix}lineage.json"
    log.info("lineage written to %s", uri)
    if errors:
        from sim2real.lineage import LineageSchemaError

        raise LineageSchemaError(errors)
    log.info("lineage matches lineage.schema.json")
    return {"lineage_uri": uri, "markdown_uri": f"s3://{bucket}/{prefix}lineage.md", "chain": lineage["chain"]}
