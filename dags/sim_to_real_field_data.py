"""
### Sim-to-Real field data: publish the field dataset, versioned

Every hour, reads every field episode summary the robots uploaded (`field/episodes/<thing>/<episode_id>.json` in
the artifacts bucket) and keeps those with recorded data whose data file S3 holds with the summary's sha256
(`HeadObject`, `ChecksumSHA256`); the others are counted by reason (malformed, duplicated, no_data, data_missing,
checksum_mismatch). With at least `min_new_episodes` episodes not in the latest version, the new version's
manifest is written once (`field/datasets/<dataset_version>/manifest.json`, content-addressed; a version only
grows from its parent) and announced as the asset `sim2real_field_dataset`, which starts a `sim_to_real` run.
Fewer: the task ends skipped ("N new episodes, M needed"), nothing is written, no event.

The latest version is the asset's latest event (its extra's `dataset_version` and `manifest_uri`). An episode of
that version whose summary or data file is gone fails the run, naming it. Logic:
`sim2real.orchestration.field_dataset`.
"""

from __future__ import annotations

import datetime as dt

# Airflow's dag-processor forks a fresh process for every parse of this file; its long-lived manager first imports,
# once, the airflow.* modules a DAG file names at its top level ([dag_processor] parsing_pre_import_modules, on by
# default). Naming the provider modules this DAG's operators are built on keeps boto3/botocore/requests out of
# every parse (tests/orchestration/dags/test_dag_parse_imports.py checks it).
import airflow.providers.amazon.aws.hooks.base_aws  # noqa: F401
import airflow.providers.amazon.aws.hooks.s3  # noqa: F401

from airflow.sdk import CronTriggerTimetable, Param, dag

from sim2real.orchestration.dag_defaults import periodic_dag
from sim2real.orchestration.operators.field_dataset import FieldDatasetPublishOperator
from sim2real.orchestration.params import _range, declare_dialect


@dag(
    dag_id="sim_to_real_field_data",
    dag_display_name="Sim-to-Real: publish the field dataset",
    description="Field episodes with recorded data → a new field dataset version (asset sim2real_field_dataset) "
    "once enough are new",
    doc_md=__doc__,
    schedule=CronTriggerTimetable("17 * * * *", timezone="UTC"),
    **periodic_dag(dagrun_timeout=dt.timedelta(minutes=50), retries=1),
    # params render as their own types (None stays None: the environment config's threshold)
    render_template_as_native_obj=True,
    params=declare_dialect({
        "min_new_episodes": Param(
            None, type=["null", "integer"], title="New episodes needed",
            description="Field episodes with recorded data, not in the latest version, that a new version needs. "
            "Empty: the environment config's field_data.min_new_episodes (default 50).", **_range(minimum=1)),
    }),
    tags=["sim2real", "field"],
)
def sim_to_real_field_data():
    FieldDatasetPublishOperator(
        task_id="publish_field_dataset",
        min_new_episodes="{{ params.min_new_episodes }}",
        execution_timeout=dt.timedelta(minutes=30),
    )


sim_to_real_field_data()
