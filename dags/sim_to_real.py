"""
### Sim-to-Real loop

Check every named AWS resource and the job definition's shape → build the training image (keyed on
source commit + build context) → check GPU capacity → train a policy with RL on AWS Batch (multi-node)
or on a SageMaker HyperPod cluster (scale up, Slurm job via SSM, scale down) → wait for the checkpoint → evaluate it in closed-loop simulation on the workstation (SSM)
→ quality gate → fine-tune GR00T with SageMaker Pipelines → wait for approval in the Model
Registry → deploy to robots with AWS IoT Greengrass → write the lineage report.

Every name is derived from the run key (`sim2real:run-key` tag, `runs/<run_key>/` in the
artifacts bucket); account-specific names come from the Airflow Variable `sim2real_environment`
(written by infra/), read at run time. Every long wait is deferrable.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import Asset, CronTriggerTimetable, TaskGroup, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from sim2real.orchestration import assets
from sim2real.orchestration import notifications as notify
from sim2real.orchestration.dag_defaults import DEFAULT_ARGS, POLL, schedule_timezone
from sim2real.orchestration import stage_docs as docs
from sim2real.orchestration.links.mlflow import MlflowRunLink
from sim2real.orchestration.links.s3 import S3EvalOutcomeLink, S3RunFolderLink, S3TrainingCurveLink
from sim2real.orchestration.operators.batch import BatchTrainingOperator
from sim2real.orchestration.operators.codebuild import CodeBuildImageOperator
from sim2real.orchestration.operators.greengrass import GreengrassDeploymentOperator
from sim2real.orchestration.operators.hyperpod import HyperPodScaleOperator, HyperPodSlurmJobOperator
from sim2real.orchestration.operators.preflight import ResourcePreflightOperator
from sim2real.orchestration.operators.quota import GpuCapacityPreflightOperator, HyperPodCapacityPreflightOperator
from sim2real.orchestration.operators.sagemaker_pipeline import PipelineDefinitionUpsertOperator, PipelineExecutionOperator
from sim2real.orchestration.operators.ssm import WorkstationCommandOperator, WorkstationStopOperator
from sim2real.orchestration.params import build_params
from sim2real.orchestration.sensors.checkpoint import CheckpointManifestSensor
from sim2real.orchestration.sensors.model_package import ModelPackageApprovalSensor

CHECKPOINT_ASSET = Asset(name="sim2real_rl_checkpoint", uri="sim2real://rl/checkpoint")
EVAL_REPORT_ASSET = Asset(name="sim2real_eval_report", uri="sim2real://rl/eval-report")
MODEL_PACKAGE_ASSET = Asset(name="sim2real_approved_model_package", uri="sim2real://vla/approved-model-package")
SCHEDULE_TZ = schedule_timezone()  # the environment config's schedule_timezone, through the Airflow configuration


@dag(
    dag_id="sim_to_real",
    dag_display_name="Sim-to-Real: train, evaluate, fine-tune, release",
    description="RL training on AWS Batch or SageMaker HyperPod → closed-loop eval → GR00T fine-tune → approval → "
    f"Greengrass; nightly at 02:00 {SCHEDULE_TZ}",
    doc_md=__doc__,
    # Nightly at 02:00 in the configured time zone (one run at a time, no backfill of missed nights). Scheduled
    # runs take their params from the environment config's run_defaults (production-sized), manual runs from the form.
    schedule=CronTriggerTimetable("0 2 * * *", timezone=SCHEDULE_TZ),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=dt.timedelta(days=3),
    default_args=DEFAULT_ARGS,
    params=build_params(),
    tags=["sim2real", "robotics", "rl", "vla"],
    # SNS topic read from the environment config at send time (skipped when none is configured).
    on_failure_callback=notify.run_failed(),
)
def sim_to_real():
    @task(multiple_outputs=True, retries=0, execution_timeout=dt.timedelta(minutes=2), doc_md=docs.PREPARE_RUN)
    def prepare_run(params=None, dag_run=None, dag=None) -> dict:
        """Validate params (cross-field rules), load the environment config, derive the run key and plan."""
        from sim2real.orchestration.config import load_environment
        from sim2real.orchestration.params import ParamRuleError, check_conf_keys
        from sim2real.orchestration.stages import plan_run

        try:
            check_conf_keys(dag_run.conf, dag.params)  # a typo'd key would otherwise run on the default
            plan = plan_run(dag_id=dag.dag_id, run_id=dag_run.run_id, params=dict(params), env=load_environment(),
                            run_type=dag_run.run_type)  # scheduled runs: the config's run_defaults
        except (ParamRuleError, ValueError) as err:
            raise AirflowFailException(str(err)) from err
        S3RunFolderLink.persist_for_plan(get_current_context(), plan)
        # MLflow: the parent run and the stages' child runs; their ids go into the jobs' environments.
        from sim2real.orchestration.tracking import apply_tracking, start_tracking

        apply_tracking(plan, start_tracking(plan=plan, env=load_environment(), dag_id=dag.dag_id,
                                            run_id=dag_run.run_id), load_environment())
        MlflowRunLink.persist(get_current_context()["ti"], plan["tracking"])
        # Record this run (runs/<run_key>/run.json) and stop what earlier, dead runs left running.
        from sim2real.orchestration.sweeper import sweep_before_run

        # Its own deadline (PREPARE_RUN_DEADLINE_S of this task's 2 minutes); executions older than a run can
        # last are not listed.
        sweep_before_run(get_current_context()["ti"], plan, dag_id=dag.dag_id, run_id=dag_run.run_id,
                         env=load_environment(), max_active_runs=dag.max_active_runs, run_type=dag_run.run_type,
                         max_age=dag.dagrun_timeout)
        # One XCom per "section.key" so operators get native values (XComArg["key"] pulls that key),
        # plus the nested plan for the Python tasks.
        flat = {"plan": plan, "run_key": plan["run_key"]}
        for section, value in plan.items():
            if isinstance(value, dict):
                flat.update({f"{section}.{key}": item for key, item in value.items()})
        return flat

    plan = prepare_run()
    plan.operator.operator_extra_links = (S3RunFolderLink(), MlflowRunLink())  # runs/<run_key>/, MLflow run

    # Every named resource of the stages this run uses, and the job definition's shape: before the build.
    resources = ResourcePreflightOperator(
        task_id="check_resources",
        plan=plan["plan"],
        retries=1,
        execution_timeout=dt.timedelta(minutes=5),
        doc_md=docs.CHECK_RESOURCES,
    )

    with TaskGroup("build", tooltip="CodeBuild → ECR image digest", doc_md=docs.BUILD):
        image = CodeBuildImageOperator(
            task_id="build_image",
            deferrable=True,
            project_name=plan["image.project_name"],
            repository_name=plan["image.repository_name"],
            record_bucket=plan["image.record_bucket"],  # images/<repo>/<image key>.json: the digest of a key
            source_version=plan["image.source_version"],
            waiter_delay=POLL,
            multiple_outputs=True,
            execution_timeout=dt.timedelta(hours=2),
            doc_md=docs.BUILD,
        )

    @task.branch(retries=0, execution_timeout=dt.timedelta(minutes=1), doc_md=docs.TRAINING_BACKEND)
    def training_backend(plan: dict) -> str:
        """AWS Batch (preflight.check_capacity) or SageMaker HyperPod (hyperpod.check_capacity)."""
        return "hyperpod.check_capacity" if plan["backend"] == "hyperpod" else "preflight.check_capacity"

    backend = training_backend(plan["plan"])
    resources >> [image, backend]  # no build, no capacity check, no training before it passed

    with TaskGroup("preflight", tooltip="GPU quota and compute environment, before any spend",
                   doc_md=docs.PREFLIGHT):
        preflight = GpuCapacityPreflightOperator(
            task_id="check_capacity",
            instance_type=plan["batch.instance_type"],
            num_nodes=plan["batch.num_nodes"],
            compute_environment=plan["batch.compute_environment"],
            job_definition=plan["batch.job_definition"],  # its per-node GPU/VCPU/MEMORY must fit one instance
            retries=1,
            execution_timeout=dt.timedelta(minutes=5),
            doc_md=docs.PREFLIGHT,
        )

    with TaskGroup("train", tooltip="AWS Batch multi-node training job", doc_md=docs.TRAIN):
        training = BatchTrainingOperator(
            task_id="train_policy",
            deferrable=True,
            job_name=plan["batch.job_name"],
            job_queue=plan["batch.job_queue"],
            job_definition=plan["batch.job_definition"],
            image_uri=image.output["image_uri"],
            num_nodes=plan["batch.num_nodes"],
            run_key=plan["run_key"],
            environment=plan["batch.environment"],
            runnable_timeout_seconds=plan["batch.runnable_timeout_seconds"],
            cost_limit_usd=plan["batch.cost_limit_usd"],  # stop the job before it passes the budget
            usd_per_node_hour=plan["batch.usd_per_node_hour"],
            poll_interval=POLL,
            multiple_outputs=True,
            execution_timeout=dt.timedelta(hours=12),
            doc_md=docs.TRAIN,
        )
        preflight >> training  # no spend before the capacity check passed
    backend >> preflight

    with TaskGroup("hyperpod", tooltip="SageMaker HyperPod: scale up, Slurm job via SSM, scale down",
                   doc_md=docs.HYPERPOD):
        hyperpod_preflight = HyperPodCapacityPreflightOperator(
            task_id="check_capacity",
            cluster_name=plan["hyperpod.cluster_name"],
            instance_group_name=plan["hyperpod.instance_group_name"],
            target_count=plan["hyperpod.target_count"],
            retries=1,
            execution_timeout=dt.timedelta(minutes=5),
            doc_md=docs.HYPERPOD,
        )
        # The setup only sends UpdateCluster: once it succeeded the scale-down teardown always runs, also
        # when the nodes then fail to come up (a setup that failed while waiting would skip its teardown
        # and leave the requested nodes running).
        scale_up = HyperPodScaleOperator(
            task_id="scale_up",
            cluster_name=plan["hyperpod.cluster_name"],
            instance_group_name=plan["hyperpod.instance_group_name"],
            target_count=plan["hyperpod.target_count"],
            wait_for_completion=False,
            execution_timeout=dt.timedelta(minutes=10),
            doc_md=docs.HYPERPOD,
        )
        # Same target: no second UpdateCluster, waits until the group's nodes are Running.
        wait_for_nodes = HyperPodScaleOperator(
            task_id="wait_for_nodes",
            deferrable=True,
            cluster_name=plan["hyperpod.cluster_name"],
            instance_group_name=plan["hyperpod.instance_group_name"],
            target_count=plan["hyperpod.target_count"],
            waiter_delay=POLL,
            waiter_max_attempts=max(1, 3600 // max(1, POLL)),
            execution_timeout=dt.timedelta(hours=2),
            doc_md=docs.HYPERPOD,
        )
        slurm_job = HyperPodSlurmJobOperator(
            task_id="train_policy",
            deferrable=True,
            cluster_name=plan["hyperpod.cluster_name"],
            submit_host_tag_key=plan["hyperpod.submit_host_tag_key"],
            submit_host_tag_value=plan["hyperpod.submit_host_tag_value"],
            job_name=plan["hyperpod.job_name"],
            submit_commands=plan["hyperpod.submit_commands"],
            log_path=plan["hyperpod.log_path"],
            container_image=image.output["image_uri"],
            poll_interval=POLL,
            num_nodes=plan["hyperpod.target_count"],
            cost_limit_usd=plan["hyperpod.cost_limit_usd"],
            usd_per_node_hour=plan["hyperpod.usd_per_node_hour"],
            execution_timeout=dt.timedelta(hours=12),
            doc_md=docs.HYPERPOD,
        )
        # Teardown: runs once scale_up succeeded, whatever the Slurm job did (failed, killed, timed out).
        scale_down = HyperPodScaleOperator(
            task_id="scale_down",
            deferrable=True,
            only_after_task_id="hyperpod.scale_up",  # a Batch run never resizes the cluster
            cluster_name=plan["hyperpod.cluster_name"],
            instance_group_name=plan["hyperpod.instance_group_name"],
            target_count=plan["hyperpod.min_count"],
            retries=5,  # nodes left up cost money: outlast a slow scale-up or a transient error
            waiter_delay=POLL,
            waiter_max_attempts=max(1, 3600 // max(1, POLL)),
            execution_timeout=dt.timedelta(hours=2),
            doc_md=docs.HYPERPOD,
        ).as_teardown(setups=scale_up, on_failure_fail_dagrun=True)  # nodes left up: the run must say so
        backend >> hyperpod_preflight >> scale_up >> wait_for_nodes >> slurm_job >> scale_down

    with TaskGroup("checkpoint", tooltip="manifest.json written last by the trainer", doc_md=docs.CHECKPOINT):

        # Joins the two backends (the other one is skipped). A task of its own: the sensor also reads the
        # plan, and a task right after prepare_run (the lineage's setup) must keep trigger rule all_success.
        @task(trigger_rule="none_failed_min_one_success", multiple_outputs=True,
              execution_timeout=dt.timedelta(minutes=1), doc_md=docs.TRAINING_JOB)
        def training_job(ti=None) -> dict:
            """Which backend trained and its job: ``backend``, ``batch_job_id`` or the Slurm job's facts."""
            # Only the backend that ran is read (pulling the skipped one's XCom logs a 404 at error level).
            # The plan is pulled, not passed: a task right after prepare_run (a setup) must be all_success.
            backend = (ti.xcom_pull(task_ids="prepare_run") or {}).get("plan", {}).get("backend", "batch")
            result = ti.xcom_pull(task_ids="hyperpod.train_policy" if backend == "hyperpod" else "train.train_policy")
            batch, hyperpod = (None, result) if backend == "hyperpod" else (result, None)
            if batch:
                return {"backend": "batch", "batch_job_id": batch.get("job_id"), "slurm_job_id": None,
                        "hyperpod_cluster_name": None, "slurm_log_path": None}
            if hyperpod:
                return {"backend": "hyperpod", "batch_job_id": None, "slurm_job_id": hyperpod.get("job_id"),
                        "hyperpod_cluster_name": hyperpod.get("cluster_name"),
                        "slurm_log_path": hyperpod.get("log_path")}
            raise AirflowFailException("neither train.train_policy nor hyperpod.train_policy handed on a job")

        trained = training_job()
        [training, slurm_job] >> trained
        manifest = CheckpointManifestSensor(
            task_id="wait_for_checkpoint",
            deferrable=True,
            manifest_uri=plan["checkpoint.manifest_uri"],
            expected_task=plan["checkpoint.task"],
            # None on a HyperPod run (its Slurm job has ended before this sensor starts).
            batch_job_id=trained["batch_job_id"],
            poke_interval=POLL,
            timeout=30 * 60,
            execution_timeout=dt.timedelta(minutes=40),
            outlets=[CHECKPOINT_ASSET],
            post_execute=assets.checkpoint_post_execute,  # checkpoint URI + sha256 on the asset event
            doc_md=docs.CHECKPOINT,
        )

    with TaskGroup("evaluate", tooltip="closed-loop evaluation on the workstation via SSM",
                   doc_md=docs.EVALUATE):

        @task(execution_timeout=dt.timedelta(minutes=1))
        def eval_command(plan: dict, manifest: dict) -> list:
            from sim2real.orchestration.stages import eval_commands

            return eval_commands(plan, manifest)

        commands = eval_command(plan["plan"], manifest.output)
        evaluation = WorkstationCommandOperator(
            task_id="run_evaluation",
            deferrable=True,
            workstation_tag_key=plan["evaluation.workstation_tag_key"],
            workstation_tag_value=plan["evaluation.workstation_tag_value"],
            commands=commands,
            execution_timeout_seconds=plan["evaluation.execution_timeout_seconds"],
            output_s3_bucket=plan["evaluation.output_s3_bucket"],
            output_s3_key_prefix=plan["evaluation.output_s3_key_prefix"],
            waiter_delay=POLL,
            execution_timeout=dt.timedelta(hours=2),
            doc_md=docs.EVALUATE,
        )

        @task(multiple_outputs=True, outlets=[EVAL_REPORT_ASSET], execution_timeout=dt.timedelta(minutes=5))
        def read_eval_report(plan: dict, manifest: dict, evaluation: dict, outlet_events=None) -> dict:
            """Read eval/report.json from S3 and check it belongs to this checkpoint."""
            import json

            from airflow.providers.amazon.aws.hooks.s3 import S3Hook

            from sim2real.orchestration.stages import check_report

            report = json.loads(S3Hook().read_key(key=plan["evaluation"]["report_uri"]))
            try:
                check_report(report, expected_sha256=manifest["sha256"],
                             expected_episodes=plan["evaluation"]["episodes"])
            except ValueError as err:
                raise AirflowFailException(f"{plan['evaluation']['report_uri']}: {err}") from err
            report["report_uri"] = plan["evaluation"]["report_uri"]
            assets.set_eval_report_extra(outlet_events, EVAL_REPORT_ASSET, report, plan["run_key"])
            return report

        report = read_eval_report(plan["plan"], manifest.output, evaluation.output)
        stop_workstation = WorkstationStopOperator(
            task_id="stop_workstation",
            command_task_id="evaluate.run_evaluation",
            trigger_rule="all_done",
            execution_timeout=dt.timedelta(minutes=15),
        )
        # Runs whatever happened to the evaluation (all_done): a workstation this run started is stopped
        # even when the command failed or timed out. (Not an Airflow teardown: a teardown whose setup
        # failed would be skipped.)
        [evaluation, report] >> stop_workstation

    @task(multiple_outputs=True, retries=0, execution_timeout=dt.timedelta(minutes=1), doc_md=docs.QUALITY_GATE,
          on_failure_callback=notify.gate_failed())
    def quality_gate(report: dict, plan: dict) -> dict:
        """Pass → the release goes on. Fail → the run stops here with the reason (not an infra failure)."""
        from sim2real.orchestration.stages import quality_gate as decide

        verdict = decide(report, min_success_rate=plan["quality_gate"]["min_success_rate"],
                         on_lower_bound=plan["quality_gate"]["on_lower_bound"])
        if not verdict["passed"]:
            raise AirflowFailException("QUALITY GATE FAILED: " + verdict["reason"])
        return verdict

    gate = quality_gate(report, plan["plan"])

    with TaskGroup("vla", tooltip="GR00T fine-tune (SageMaker Pipelines) and Model Registry approval",
                   doc_md=docs.VLA):

        @task.short_circuit(ignore_downstream_trigger_rules=False)
        def vla_enabled(plan: dict) -> bool:
            return bool(plan["vla"]["enabled"])

        @task(execution_timeout=dt.timedelta(minutes=1))
        def pipeline_definition(plan: dict, image: dict) -> str:
            # The SDK-generated template (make pipeline-definition) with this environment's values
            # substituted as plain JSON: no SageMaker SDK in the Airflow runtime, same bytes for
            # the same values (the upsert stays a no-op and step caching survives).
            import hashlib
            import logging

            from sim2real.orchestration.pipelines.groot import pipeline_definition_json

            configured = plan["vla"]["images"]
            images = {"processing": image["image_uri"], "training": image["image_uri"],
                      "smoke_eval": image["image_uri"], **configured}
            fallback = sorted({"processing", "training", "smoke_eval"} - set(configured))
            if fallback:
                logging.getLogger(__name__).warning(
                    "environment config sagemaker.images lacks %s: using this run's training image %s",
                    ", ".join(fallback), image["image_uri"])
            text = pipeline_definition_json(role_arn=plan["vla"]["role_arn"],
                                            model_package_group=plan["vla"]["model_package_group"],
                                            images=images, bucket=plan["bucket"],
                                            mlflow=plan["vla"].get("mlflow"))  # MlflowConfig when tracked
            logging.getLogger(__name__).info("GR00T pipeline definition sha256 %s (%d bytes)",
                                             hashlib.sha256(text.encode()).hexdigest(), len(text))
            return text

        enabled = vla_enabled(plan["plan"])
        definition = pipeline_definition(plan["plan"], image.output)
        upsert = PipelineDefinitionUpsertOperator(
            task_id="upsert_pipeline",
            pipeline_name=plan["vla.pipeline_name"],
            definition=definition,
            role_arn=plan["vla.role_arn"],
            execution_timeout=dt.timedelta(minutes=5),
        )
        finetune = PipelineExecutionOperator(
            task_id="finetune_groot",
            deferrable=True,
            pipeline_name=plan["vla.pipeline_name"],
            display_name=plan["vla.display_name"],
            pipeline_params=plan["vla.parameters"],
            check_interval=POLL,
            multiple_outputs=True,
            execution_timeout=dt.timedelta(hours=30),
            doc_md=docs.VLA,
        )
        approval = ModelPackageApprovalSensor(
            task_id="wait_for_approval",
            deferrable=True,
            model_package_group_name=plan["vla.model_package_group"],
            run_key=plan["run_key"],
            pipeline_execution_arn=finetune.output["pipeline_execution_arn"],
            poke_interval=POLL,
            timeout=24 * 3600,
            execution_timeout=dt.timedelta(days=2),
            outlets=[MODEL_PACKAGE_ASSET],
            multiple_outputs=True,  # approval.output["model_package_arn"] for the deploy-time check
            post_execute=assets.model_package_post_execute,  # package ARN on the asset event
            doc_md=docs.VLA,
            on_execute_callback=notify.approval_needed(),
        )
        gate >> enabled >> definition >> upsert >> finetune >> approval

    with TaskGroup("deploy", tooltip="AWS IoT Greengrass v2 deployment to the robots' thing group",
                   doc_md=docs.DEPLOY):

        @task.short_circuit(ignore_downstream_trigger_rules=False)
        def deploy_enabled(plan: dict) -> bool:
            return bool(plan["deploy"]["enabled"])

        @task(multiple_outputs=True, execution_timeout=dt.timedelta(minutes=1))
        def deployment_components(plan: dict, approval: dict, manifest: dict) -> dict:
            from sim2real.orchestration.stages import deployment_components as build

            return build(plan, approval, manifest)

        components = deployment_components(plan["plan"], approval.output, manifest.output)
        deployment = GreengrassDeploymentOperator(
            task_id="deploy_to_robots",
            deferrable=True,
            thing_group_name=plan["deploy.thing_group_name"],
            components=components,
            deployment_name=plan["deploy.deployment_name"],
            iot_job_configuration=plan["deploy.iot_job_configuration"],
            deployment_timeout_seconds=plan["deploy.timeout_seconds"],  # the form's deployment_timeout_minutes
            model_package_arn=approval.output["model_package_arn"],  # read again: deployed only if still Approved
            waiter_delay=POLL,
            execution_timeout=dt.timedelta(hours=2),
            doc_md=docs.DEPLOY,
            on_success_callback=notify.deployed(),
        )
        approval >> deploy_enabled(plan["plan"]) >> components >> deployment

    @task(multiple_outputs=True, retries=1, execution_timeout=dt.timedelta(minutes=5), doc_md=docs.WRITE_LINEAGE)
    def write_lineage(plan: dict, dag_run=None, ti=None) -> dict:
        """Write runs/<run_key>/lineage.json and lineage.md, whatever happened upstream."""
        from sim2real.orchestration.report import write_run_report

        S3RunFolderLink.persist_for_plan(get_current_context(), plan)
        MlflowRunLink.persist(ti, plan.get("tracking"))
        return write_run_report(plan=plan, params=plan["params"], dag_run=dag_run, ti=ti)

    # The report is the run's teardown: it runs whatever failed upstream (once prepare_run succeeded), also
    # when the run is marked failed (teardowns are left to run); a report that cannot be written fails the run.
    lineage = write_lineage(plan["plan"]).as_teardown(setups=plan, on_failure_fail_dagrun=True)
    lineage.operator.operator_extra_links = (S3RunFolderLink(), S3TrainingCurveLink(), S3EvalOutcomeLink(),
                                             MlflowRunLink())
    [deployment, gate, stop_workstation] >> lineage

    @task(multiple_outputs=False, retries=0, execution_timeout=dt.timedelta(minutes=2), doc_md=docs.RUN_OUTCOME)
    def run_outcome(dag_run=None, ti=None) -> dict:
        """Fail when any task of the run failed (the run's state is this verdict: sim2real.orchestration.run_state)."""
        from sim2real.orchestration.run_state import check_run_outcome
        from sim2real.orchestration.tracking import close_dag_run

        try:
            outcome = check_run_outcome(dag_run.dag_id, dag_run.run_id, own_task_id=ti.task_id)
        except Exception:
            close_dag_run(ti, dag_run.dag_id, dag_run.run_id, succeeded=False)  # MLflow parent run: FAILED
            raise
        close_dag_run(ti, dag_run.dag_id, dag_run.run_id, succeeded=True)
        return outcome

    # Last teardown, the run's only effective leaf with scale_down: the leaves before the report no longer
    # decide the run's state (sim2real.orchestration.run_state says why), this task does, from every task's state.
    [lineage, scale_down] >> run_outcome().as_teardown(setups=plan, on_failure_fail_dagrun=True)


sim_to_real()
