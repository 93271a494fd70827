"""
### Sim-to-Real maintenance: stop what dead runs left running (orphan sweeper)

Every 30 minutes, lists what the `sim_to_real` and `sim_to_real_release` runs start — Batch jobs of the
training queue, Slurm jobs on the HyperPod cluster (`squeue` through SSM on its head node), executions of
the GR00T pipeline, Greengrass deployments still rolling out — each carrying a run key (tag, job name,
display name or deployment name). Which DAG run a run key belongs to, and which Airflow deployment ran it,
is read from `runs/<run_key>/run.json` (written by each run's first task); the run's state from the Task
Execution API. One whose DAG run was deleted or is no longer running is an orphan: it is stopped
(`TerminateJob`, `scancel`, `StopPipelineExecution`, `CancelDeployment`) and logged. A Greengrass deployment
is cancelled only when its run was deleted or ended without its deploy task succeeding: the release a
successful run deployed stays, even while a new or offline robot has it QUEUED. A record of another Airflow
deployment (option `[sim2real] deployment_id`: MWAA's `mwaa:<environment>`, a developer's `dag.test`
`local:<user>@<host>`) or without a record is only reported. With the `dry_run` param on, it only reports.

The run fails (after stopping what it could) when a service could not be listed or an orphan could not be
stopped, so the failure is seen. Logic: `sim2real.orchestration.sweeper`.
"""

from __future__ import annotations

import datetime as dt

# Airflow's dag-processor forks a fresh process for every parse of this file; its long-lived manager first imports,
# once, the airflow.* modules a DAG file names at its top level ([dag_processor] parsing_pre_import_modules, on by
# default). Naming the provider modules this DAG's operators are built on keeps boto3/botocore/requests out of
# every parse (tests/orchestration/dags/test_dag_parse_imports.py checks it).
import airflow.providers.amazon.aws.hooks.base_aws  # noqa: F401

from airflow.sdk import CronTriggerTimetable, Param, dag, task
from airflow.sdk.exceptions import AirflowFailException

from sim2real.orchestration.dag_defaults import DEFAULT_ARGS, periodic_dag
from sim2real.orchestration.params import declare_dialect


@dag(
    dag_id="sim_to_real_sweeper",
    dag_display_name="Sim-to-Real: stop orphaned jobs, executions and deployments",
    description="Batch / Slurm jobs, pipeline executions and Greengrass deployments of dead runs → stopped",
    doc_md=__doc__,
    schedule=CronTriggerTimetable("*/30 * * * *", timezone="UTC"),
    **periodic_dag(dagrun_timeout=dt.timedelta(minutes=25), retries=0),
    params=declare_dialect({
        "dry_run": Param(False, type="boolean", title="Dry run",
                         description="Only report the orphans found (nothing is stopped)."),
    }),
    tags=["sim2real", "maintenance"],
)
def sim_to_real_sweeper():
    @task(multiple_outputs=False, execution_timeout=dt.timedelta(minutes=20))
    def sweep_orphans(params=None) -> dict:
        """Find and stop (or, dry, report) every orphan; fail when something could not be listed or stopped."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from sim2real.orchestration.config import load_environment
        from sim2real.orchestration.sweeper import aws_clients, summary_lines, sweep

        report = sweep(load_environment(), clients=aws_clients("aws_default", DEFAULT_ARGS["botocore_config"]),
                       s3_hook=S3Hook(), dry_run=bool(params["dry_run"]))
        lines = list(summary_lines(report))
        if report["errors"]:
            raise AirflowFailException("orphan sweep incomplete:\n" + "\n".join(lines))
        return {k: report[k] for k in ("dry_run", "found", "orphans", "stopped", "errors", "skipped")}

    sweep_orphans()


sim_to_real_sweeper()
