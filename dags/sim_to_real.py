"""
### Sim-to-Real loop

Check every named AWS resource and the job definition's shape → build the training image (keyed on
source commit + build context) → check GPU capacity → train a policy with RL on AWS Batch (multi-node)
or on a SageMaker HyperPod cluster (scale up, Slurm job via SSM, scale down), or a sweep of candidates on AWS
Batch (one mapped task group index each, evaluated in closed loop; the best Wilson lower bound goes on) → wait
for the checkpoint → evaluate it in
closed-loop simulation on the workstation (SSM)
→ quality gate (below the bar: the next retraining round, a new run resuming from the best checkpoint,
up to `max_rounds`) → fine-tune GR00T with SageMaker Pipelines → wait for approval in the Model
Registry → deploy to robots with AWS IoT Greengrass → write the lineage report. Runs nightly at 02:00 and
whenever `sim_to_real_field_data` publishes a new field dataset version (asset `sim2real_field_dataset`).

Every name is derived from the run key (`sim2real:run-key` tag, `runs/<run_key>/` in the
artifacts bucket); account-specific names come from the Airflow Variable `sim2real_environment`
(written by infra/), read at run time. Every long wait is deferrable.
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
import airflow.providers.amazon.aws.operators.batch  # noqa: F401
import airflow.providers.amazon.aws.operators.sagemaker  # noqa: F401
import airflow.providers.amazon.aws.operators.ssm  # noqa: F401
import airflow.providers.standard.operators.hitl  # noqa: F401
import airflow.providers.standard.operators.trigger_dagrun  # noqa: F401

from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, dag

from sim2real.orchestration import notifications as notify
from sim2real.orchestration.assets import FIELD_DATASET_ASSET
from sim2real.orchestration.dag_defaults import DEFAULT_ARGS, schedule_timezone
from sim2real.orchestration.stages import (build, checkpoint, deploy, evaluate, gate, hyperpod, hyperpod_eks, rounds, run,
                                          sweep, train, vla)

SCHEDULE_TZ = schedule_timezone()  # the environment config's schedule_timezone, through the Airflow configuration


@dag(
    dag_id="sim_to_real",
    dag_display_name="Sim-to-Real: train, evaluate, fine-tune, release",
    description="RL training on AWS Batch or SageMaker HyperPod → closed-loop eval → GR00T fine-tune → approval → "
    f"Greengrass; nightly at 02:00 {SCHEDULE_TZ} and on each new field dataset version",
    doc_md=__doc__,
    # Nightly at 02:00 in the configured time zone (one run at a time, no backfill of missed nights). Scheduled
    # runs take their params from the environment config's run_defaults (production-sized), manual runs from the form.
    # No start_date: with one in the past, CronTriggerTimetable without catchup schedules the latest 02:00 already
    # gone (a past "Next Run", and a training started the moment the DAG is deployed). Without one, the first run is
    # the past 02:00 when it is at most run_immediately ago: False still means "within a tenth of the period" (until
    # 04:24) in Airflow 3.3.1's CronTriggerTimetable._calc_first_run, so a zero delta: always the next 02:00 to come.
    # Also on each new field dataset version (the asset sim2real_field_dataset, published by sim_to_real_field_data
    # once enough new field episodes arrived): an asset-triggered run, validated and budget-checked like any other.
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 2 * * *", timezone=SCHEDULE_TZ, run_immediately=dt.timedelta(0)),
        assets=FIELD_DATASET_ASSET),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=dt.timedelta(days=3),
    # Every wait defers to the triggerer, whatever [operators] default_deferrable says (operators that take
    # no deferrable argument ignore it).
    default_args={**DEFAULT_ARGS, "deferrable": True},
    params=run.build_params(),  # every stage's fields of the trigger form
    tags=["sim2real", "robotics", "rl", "vla"],
    # SNS topic read from the environment config at send time (skipped when none is configured).
    on_failure_callback=notify.run_failed(),
)
def sim_to_real():
    # Each stage module adds its task group and returns what later stages wait for or read.
    plan, resources, backend = run.add_opening_tasks()
    image = build.add_tasks(plan)
    resources >> [image, backend]  # no build, no capacity check, no training before it passed
    batch_training = train.add_tasks(plan, image=image, backend=backend)
    slurm_job, scale_down, slurm_array = hyperpod.add_tasks(plan, image=image, backend=backend)
    eks_job, eks_capacity = hyperpod_eks.add_tasks(plan, image=image, backend=backend)
    best_candidate = sweep.add_tasks(plan, image=image, backend=backend,  # a run with a sweep only
                                     slurm_array=slurm_array, scale_down=scale_down, eks_capacity=eks_capacity)
    manifest, trained = checkpoint.add_tasks(plan, trained_by=[batch_training, slurm_job, eks_job, best_candidate])
    report, stop_workstation = evaluate.add_tasks(plan, manifest=manifest, trained=trained)
    verdict = gate.add_tasks(plan, report=report)
    next_round = rounds.add_tasks(plan, gate=verdict, report=report, manifest=manifest)  # only when the gate failed
    approval = vla.add_tasks(plan, image=image, gate=verdict, resources=resources)
    deployment = deploy.add_tasks(plan, approval=approval, manifest=manifest)
    run.add_closing_tasks(plan, leaves=[deployment, verdict, stop_workstation, next_round], teardowns=[scale_down])


sim_to_real()
