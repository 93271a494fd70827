"""
### Sim-to-Real release: deploy an approved model package to the robots

Releases a model package that was approved **outside** a `sim_to_real` run (in SageMaker Studio, an
older approved version, a rollback), without training: resolve the package in the SageMaker Model
Registry (the given ARN, or the latest **Approved** version of the group) → refuse anything that is
not Approved → re-verify the RL policy the robots serve with it (the form's checkpoint manifest; empty: the
checkpoint of the `sim_to_real` run that registered the package, from its lineage record) → deploy to
the robots' thing group with AWS IoT Greengrass v2 (same components and configuration as the main
DAG) → write `runs/<run_key>/release.json` and `release.md` in the artifacts bucket (a teardown:
written whatever happened to the deployment).

Account-specific names come from the Airflow Variable `sim2real_environment`, read at run time.
Logic: `sim2real.orchestration.release`.
"""

from __future__ import annotations

import datetime as dt

# Airflow's dag-processor forks a fresh process for every parse of this file; its long-lived manager first imports,
# once, the airflow.* modules a DAG file names at its top level ([dag_processor] parsing_pre_import_modules, on by
# default). Naming the provider modules this DAG's operators are built on keeps boto3/botocore/requests out of
# every parse (tests/orchestration/dags/test_dag_parse_imports.py checks it).
import airflow.providers.amazon.aws.hooks.base_aws  # noqa: F401
import airflow.providers.amazon.aws.hooks.s3  # noqa: F401
import airflow.providers.amazon.aws.notifications.sns  # noqa: F401

from airflow.sdk import dag, task
from airflow.sdk.exceptions import AirflowFailException

from sim2real.orchestration import notifications as notify
from sim2real.orchestration.dag_defaults import DEFAULT_ARGS, POLL
from sim2real.orchestration.operators.greengrass import GreengrassDeploymentOperator
from sim2real.orchestration.release import build_release_params
# the asset is also sim_to_real's outlet
from sim2real.orchestration.stages.deploy import DEPLOY_EXECUTION_TIMEOUT, DEPLOYED_MODEL_PACKAGE_ASSET, add_canary_tasks


def _deployed_post_execute(context, result=None) -> None:
    """``post_execute`` of the deployment: package, deployment id and devices on the asset event."""
    from sim2real.orchestration.release import deployed_asset_extra

    ti = context["ti"]
    extra = deployed_asset_extra(ti.xcom_pull(task_ids="prepare_release", key="plan") or {},
                                 ti.xcom_pull(task_ids="resolve_model_package"), result)
    for asset in context["task"].outlets or []:
        context["outlet_events"][asset].extra.update(extra)


@dag(
    dag_id="sim_to_real_release",
    dag_display_name="Sim-to-Real: release an approved model package",
    description="Approved SageMaker model package → Greengrass deployment to the robots (no training)",
    doc_md=__doc__,
    schedule=None,  # manual trigger only
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    # the canary's deployment (4 h at most), window (12 h), rollback (1 h) and review (24 h), then the fleet's
    # deployment (4 h): a timeout skips every unfinished task, the record and a rollback's wait included
    dagrun_timeout=dt.timedelta(hours=48),
    default_args=DEFAULT_ARGS,
    params=build_release_params(),
    tags=["sim2real", "robotics", "vla", "release"],
    on_failure_callback=notify.run_failed(),
)
def sim_to_real_release():
    @task(multiple_outputs=True, retries=0, execution_timeout=dt.timedelta(minutes=2))
    def prepare_release(params=None, dag_run=None, dag=None) -> dict:
        """Validate params (cross-field rules), load the environment config, derive the run key and names."""
        from sim2real.orchestration.config import load_environment
        from sim2real.orchestration.params import ParamRuleError, check_conf_keys
        from sim2real.orchestration.release import plan_release

        try:
            check_conf_keys(dag_run.conf, dag.params)  # a typo'd key would otherwise deploy with the default
            plan = plan_release(dag_id=dag.dag_id, run_id=dag_run.run_id, params=dict(params),
                                env=load_environment())
        except (ParamRuleError, ValueError) as err:
            raise AirflowFailException(str(err)) from err
        # The run record (runs/<run_key>/run.json): lets the orphan sweeper tell whose deployment it finds.
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from sim2real.orchestration.run_records import register_run

        register_run(S3Hook(), plan["bucket"], dag_id=dag_run.dag_id, run_id=dag_run.run_id, run_key=plan["run_key"],
                     run_type=dag_run.run_type)
        flat = {"plan": plan, "run_key": plan["run_key"]}
        flat.update({f"deploy_{key}": value for key, value in plan["deploy"].items()})
        return flat

    @task(multiple_outputs=True, execution_timeout=dt.timedelta(minutes=10))
    def resolve_model_package(plan: dict) -> dict:
        """The package (ARN or latest Approved); refuse one that is not Approved; re-verify the manifest."""
        from botocore.config import Config

        from sim2real.orchestration.hooks.model_registry import ModelRegistryHook
        from sim2real.orchestration.release import resolve_release

        hook = ModelRegistryHook(aws_conn_id="aws_default", config=Config(**DEFAULT_ARGS["botocore_config"]))
        return resolve_release(hook, plan)

    @task(multiple_outputs=True, execution_timeout=dt.timedelta(minutes=1))
    def deployment_components(plan: dict, resolved: dict) -> dict:
        from sim2real.orchestration.release import release_components

        return release_components(plan, resolved, resolved.get("manifest"))

    @task(multiple_outputs=True, retries=1, execution_timeout=dt.timedelta(minutes=5))
    def write_release_record(plan: dict, dag_run=None, ti=None) -> dict:
        """Write runs/<run_key>/release.json and release.md, whatever happened to the deployment."""
        from sim2real.orchestration.release import write_release_record as write

        return write(plan=plan, dag_run=dag_run, ti=ti)

    @task(execution_timeout=dt.timedelta(minutes=1))
    def canary_model_version(plan: dict, components: dict) -> str:
        """The canary's model version (the components' ModelSha256); "" without a canary."""
        from sim2real.orchestration.stages.deploy import canary_model_version as model_version

        return model_version(plan, components)

    prepared = prepare_release()
    resolved = resolve_model_package(prepared["plan"])
    components = deployment_components(prepared["plan"], resolved)
    # the same release, checks and limits for the canary group and the fleet group
    release = {
        "components": components,
        "iot_job_configuration": prepared["deploy_iot_job_configuration"],
        "deployment_timeout_seconds": prepared["deploy_timeout_seconds"],  # the form's deployment_timeout_minutes
        "model_package_arn": resolved["model_package_arn"],  # read again: deployed only if still Approved
        "waiter_delay": POLL,
        "execution_timeout": DEPLOY_EXECUTION_TIMEOUT,  # the release's wait and an automatic rollback's
    }
    # With a canary group the release goes there first, and to the fleet only when its field episodes promote it (or,
    # with canary_review, a person does): sim_to_real's canary (sim2real.orchestration.stages.deploy); without one
    # the three tasks succeed at once.
    *_, review = add_canary_tasks(
        deploy_task_id="deploy_to_canary", verdict_task_id="canary_verdict", review_task_id="canary_review",
        thing_group_name=prepared["deploy_canary_thing_group_name"],
        deployment_name=prepared["deploy_canary_deployment_name"],
        model_version=canary_model_version(prepared["plan"], components),
        bucket=prepared["deploy_field_bucket"], prefix=prepared["deploy_field_prefix"],
        min_episodes=prepared["deploy_canary_min_episodes"], window_minutes=prepared["deploy_canary_window_minutes"],
        min_success_rate=prepared["deploy_field_min_success_rate"], review=prepared["deploy_canary_review"],
        release=release)
    deployment = GreengrassDeploymentOperator(
        task_id="deploy_to_robots",
        thing_group_name=prepared["deploy_thing_group_name"],
        deployment_name=prepared["deploy_deployment_name"],
        **release,
        outlets=[DEPLOYED_MODEL_PACKAGE_ASSET],
        post_execute=_deployed_post_execute,
        on_success_callback=notify.deployed(),
    )

    @task(multiple_outputs=False, retries=0, execution_timeout=dt.timedelta(minutes=2))
    def run_outcome(dag_run=None, ti=None) -> dict:
        """Fail when any task of the run failed (the run's state is this verdict: sim2real.orchestration.run_state)."""
        from sim2real.orchestration.run_state import check_run_outcome

        return check_run_outcome(dag_run.dag_id, dag_run.run_id, own_task_id=ti.task_id)

    # The record is the run's teardown: written whatever failed after prepare_release, also when the run is
    # marked failed; a record that cannot be written fails the run. run_outcome, the last teardown, gives the
    # run its state from every task's state (sim2real.orchestration.run_state).
    record = write_release_record(prepared["plan"]).as_teardown(setups=prepared, on_failure_fail_dagrun=True)
    review >> deployment
    deployment >> record >> run_outcome().as_teardown(setups=prepared, on_failure_fail_dagrun=True)


sim_to_real_release()
