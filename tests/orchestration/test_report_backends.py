"""The report task per training backend, and the run's actual cost in lineage.json (moto S3).

A HyperPod run's lineage names its Slurm job and cluster (not a Batch job) and records the scale-up and
scale-down; a Batch job stopped at the cost limit (its task failed, no return value) still gets its
actual cost from the ``job_cost`` XCom. Both documents match lineage.schema.json.
"""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from sim2real.orchestration.stages.rounds import lineage_entry
from sim2real.contract import task_ids as ids
from sim2real.orchestration.budget import ON_DEMAND_USD_PER_HOUR
from sim2real.orchestration.lineage import lineage_errors, render_markdown
from sim2real.orchestration.stages.run import plan_run

from tests.orchestration.test_config import GOOD as _GOOD
from tests.orchestration.stages.test_stages import HYPERPOD_ENV as _HYPERPOD_ENV
from tests.orchestration.stages.test_stages import PARAMS

# The unit configs' bucket "b" is too short for S3: the same configs with a valid bucket name.
GOOD = {**_GOOD, "artifacts_bucket": "sim2real-report-test"}
HYPERPOD_ENV = {**_HYPERPOD_ENV, "artifacts_bucket": "sim2real-report-test"}


class Operator:
    do_xcom_push = True


class RunningTask:
    """XComs of the run's tasks by (task id, key); ``None`` for a task that handed nothing on."""

    def __init__(self, outputs: dict):
        self.outputs = outputs
        self.task = Operator()

    def xcom_pull(self, task_ids, key="return_value"):
        return self.outputs.get((task_ids, key))

    def xcom_push(self, key, value):
        pass


class DagRun:
    dag_id = "sim_to_real"
    run_id = "manual__2026-11-30T03:00:00+00:00"


def write(plan, outputs):
    from sim2real.orchestration.report import write_run_report

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=plan["bucket"])
        write_run_report(rounds_entry=lineage_entry, plan=plan, params=plan["params"], dag_run=DagRun(), ti=RunningTask(outputs))
        body = s3.get_object(Bucket=plan["bucket"], Key=f"{plan['run_prefix']}lineage.json")["Body"].read()
    return json.loads(body)


def scale(previous, target):
    return {"cluster_name": "sim2real-hyperpod", "cluster_arn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc",
            "instance_group_name": "gpu", "previous_count": previous, "target_count": target,
            "current_count": target, "updated": True}


def test_a_hyperpod_run_records_its_slurm_job_cluster_and_scaling():
    params = {**PARAMS, "training_backend": "hyperpod", "run_vla_finetune": False, "deploy_to_edge": False}
    plan = plan_run(dag_id="sim_to_real", run_id=DagRun.run_id, params=params, env=HYPERPOD_ENV)
    slurm = {"cluster_name": "sim2real-hyperpod", "job_id": "17", "job_name": plan["hyperpod"]["job_name"],
             "state": "COMPLETED", "exit_code": "0:0", "log_path": "/fsx/sim2real/logs/x-17.out",
             "submit_host_instance_id": "i-0123456789abcdef0", "reattached": False}
    lineage = write(plan, {
        (ids.HYPERPOD_CHECK_CAPACITY, "return_value"): {"ok": True, "instance_type": "ml.g5.12xlarge"},
        (ids.HYPERPOD_SCALE_UP, "return_value"): scale(0, 1),
        (ids.HYPERPOD_TRAIN_POLICY, "return_value"): slurm,
        (ids.HYPERPOD_SCALE_DOWN, "return_value"): scale(1, 0),
        # A Batch task of the same run (skipped branch) must not be read.
        (ids.BATCH_TRAIN_POLICY, "return_value"): {"job_id": "not-this-one"},
    })
    assert lineage_errors(lineage) == []
    chain = lineage["chain"]
    assert chain["training_backend"] == "hyperpod"
    assert (chain["slurm_job_id"], chain["hyperpod_cluster_name"], chain["batch_job_id"]) == (
        "17", "sim2real-hyperpod", None)
    assert lineage["stages"]["training"]["state"] == "COMPLETED"
    assert lineage["stages"]["preflight"]["instance_type"] == "ml.g5.12xlarge"
    assert lineage["stages"]["hyperpod_scaling"]["scale_down"]["target_count"] == 0
    # The Slurm result has no timing: the training cost is reported unknown, and says why.
    actual = lineage["cost_actual"]
    assert actual["unknown"] == ["training"] and "Slurm job 17" in actual["items"][0]["basis"]
    assert "Slurm job (HyperPod)" in render_markdown(lineage)


def test_a_batch_job_stopped_at_the_cost_limit_still_gets_its_actual_cost():
    params = {**PARAMS, "run_vla_finetune": False, "deploy_to_edge": False, "num_nodes": 1,
              "max_budget_usd": 5}
    plan = plan_run(dag_id="sim_to_real", run_id=DagRun.run_id, params=params, env=GOOD)
    price = ON_DEMAND_USD_PER_HOUR[GOOD["batch"]["instance_type"]]
    job_cost = {"job_id": "712d25ad-4769-4599-bcfc-4605b0af382a", "num_nodes": 1, "started_at": 1_000.0,
                "stopped_at": 4_600.0, "run_seconds": 3_600.0, "usd_per_node_hour": price,
                "cost_usd": round(price, 2), "stopped_by_budget": True}
    # The training task failed (stopped at the limit): no return value, only its job_cost XCom.
    lineage = write(plan, {(ids.BATCH_TRAIN_POLICY, "job_cost"): job_cost})
    assert lineage_errors(lineage) == []
    assert lineage["chain"]["training_backend"] == "batch" and lineage["stages"]["training"] is None
    actual = lineage["cost_actual"]
    [training] = actual["items"]
    assert training["hours"] == pytest.approx(1.0) and training["usd"] == pytest.approx(round(price, 2))
    assert "stopped at the cost limit" in training["basis"]
    assert actual["within_budget"] is (price <= 5)
    assert actual["max_budget_usd"] == 5
