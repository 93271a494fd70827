"""A plain Amazon-provider DAG of about the size of ``dags/sim_to_real.py``, for ``make bench``.

The installed ``apache-airflow-providers-amazon`` ships no example DAGs (they live in the provider's
system tests, not in the wheel), so this file stands in for one: the provider's own operators
(BatchOperator + BatchSensor, S3KeySensor, SsmRunCommandOperator + its sensor,
SageMakerStartPipelineOperator, S3CreateObjectOperator) plus ``@task`` functions: 19 tasks in 5 task
groups (``sim_to_real`` has 19), no I/O at import. Only its parse time is measured; it is never run.
"""

from __future__ import annotations

import datetime as dt

from airflow.providers.amazon.aws.operators.batch import BatchOperator
from airflow.providers.amazon.aws.operators.s3 import S3CreateObjectOperator
from airflow.providers.amazon.aws.operators.sagemaker import SageMakerStartPipelineOperator
from airflow.providers.amazon.aws.operators.ssm import SsmRunCommandOperator
from airflow.providers.amazon.aws.sensors.batch import BatchSensor
from airflow.providers.amazon.aws.sensors.s3 import S3KeySensor
from airflow.providers.amazon.aws.sensors.ssm import SsmRunCommandCompletedSensor
from airflow.sdk import Param, TaskGroup, dag, task

BUCKET = "example-bucket"


@dag(
    dag_id="provider_plain_example",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=20)},
    params={
        "num_nodes": Param(1, type="integer", minimum=1, maximum=64),
        "max_iterations": Param(100, type="integer", minimum=1),
        "eval_episodes": Param(50, type="integer", minimum=1),
        "min_success_rate": Param(0.15, type="number", minimum=0, maximum=1),
        "run_vla_finetune": Param(True, type="boolean"),
    },
    tags=["bench"],
)
def provider_plain_example():
    @task
    def prepare(params=None, run_id=None) -> dict:
        return {"run_key": str(run_id).replace(":", "-"), "num_nodes": params["num_nodes"]}

    plan = prepare()

    with TaskGroup("train"):
        submit = BatchOperator(
            task_id="submit_training", job_name="train", job_queue="gpu", job_definition="train",
            node_overrides={"numNodes": 1}, deferrable=True,
        )
        watch = BatchSensor(task_id="watch_training", job_id=submit.output, deferrable=True)
        submit >> watch

    with TaskGroup("checkpoint"):
        manifest = S3KeySensor(task_id="wait_for_manifest", bucket_name=BUCKET, bucket_key="runs/*/manifest.json",
                               wildcard_match=True, deferrable=True)

        @task
        def read_manifest(plan: dict) -> dict:
            return {"checkpoint_uri": f"s3://{BUCKET}/runs/{plan['run_key']}/agent.pt"}

        ckpt = read_manifest(plan)
        watch >> manifest >> ckpt

    with TaskGroup("evaluate"):
        @task
        def eval_commands(ckpt: dict) -> list:
            return [f"sim2real-evaluate --checkpoint {ckpt['checkpoint_uri']}"]

        run_eval = SsmRunCommandOperator(
            task_id="run_evaluation", document_name="AWS-RunShellScript",
            run_command_kwargs={"Targets": [{"Key": "tag:role", "Values": ["workstation"]}],
                                "Parameters": {"commands": ["echo eval"]}},
            deferrable=True,
        )
        eval_done = SsmRunCommandCompletedSensor(task_id="wait_for_evaluation", command_id=run_eval.output,
                                                 deferrable=True)
        report = S3KeySensor(task_id="wait_for_report", bucket_name=BUCKET, bucket_key="runs/*/eval/report.json",
                             wildcard_match=True, deferrable=True)
        eval_commands(ckpt) >> run_eval >> eval_done >> report

        @task(trigger_rule="all_done")
        def stop_workstation() -> None:
            return None

        eval_done >> stop_workstation()

    @task
    def quality_gate(params=None) -> dict:
        return {"passed": True, "min": params["min_success_rate"]}

    gate = quality_gate()
    report >> gate

    with TaskGroup("vla"):
        @task.short_circuit
        def vla_enabled(params=None) -> bool:
            return bool(params["run_vla_finetune"])

        finetune = SageMakerStartPipelineOperator(
            task_id="finetune", pipeline_name="groot-finetune", display_name="run",
            pipeline_params={"MaxSteps": "1000"}, wait_for_completion=True, deferrable=True,
        )
        approval = S3KeySensor(task_id="wait_for_approval_marker", bucket_name=BUCKET,
                               bucket_key="runs/*/approved", wildcard_match=True, deferrable=True)
        gate >> vla_enabled() >> finetune >> approval

    with TaskGroup("deploy"):
        @task
        def deployment_components(ckpt: dict) -> dict:
            return {"com.example.Policy": {"componentVersion": "1.0.0"}}

        @task
        def deploy(components: dict) -> str:
            return "deployment-id"

        @task
        def export_policy(ckpt: dict) -> str:
            return ckpt["checkpoint_uri"].replace(".pt", ".onnx")

        @task
        def check_devices(deployment_id: str) -> dict:
            return {"deployment_id": deployment_id}

        deployed = check_devices(deploy(deployment_components(ckpt)))
        export_policy(ckpt) >> deployed
        approval >> deployed

    lineage = S3CreateObjectOperator(task_id="write_lineage", s3_bucket=BUCKET, s3_key="runs/lineage.json",
                                     data="{}", trigger_rule="all_done")
    [deployed, gate] >> lineage


provider_plain_example()
