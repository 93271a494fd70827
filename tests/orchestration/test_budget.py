"""Budget: the run's cost is estimated from the price table and a run above max_budget_usd is refused
in prepare_run, before any spend, with the numbers."""

from __future__ import annotations

import pytest

from sim2real.orchestration.budget import (ON_DEMAND_USD_PER_HOUR, PRICE_SOURCE, VLA_OVERHEAD_HOURS, VLA_SECONDS_PER_STEP,
                             BudgetExceeded, check_budget, estimate_run_cost)
from sim2real.orchestration.params import VLA_INSTANCE_GPUS
from sim2real.orchestration.stages.run import plan_run

from tests.orchestration.test_config import GOOD
from tests.orchestration.stages.test_stages import PARAMS


def test_every_offered_instance_type_has_a_price():
    assert GOOD["batch"]["instance_type"] in ON_DEMAND_USD_PER_HOUR
    for vla_type in VLA_INSTANCE_GPUS:
        assert vla_type in ON_DEMAND_USD_PER_HOUR and vla_type in VLA_SECONDS_PER_STEP
    assert PRICE_SOURCE.startswith("AWS on-demand list price, us-east-1, ")


def test_training_uses_the_time_budget_and_the_fine_tune_the_step_estimate():
    params = {**PARAMS, "num_nodes": 4, "train_time_budget_seconds": 7200, "vla_max_steps": 9000,
              "vla_global_batch_size": 64}
    est = estimate_run_cost(params, GOOD)
    train, vla = est["items"]
    price = ON_DEMAND_USD_PER_HOUR["g6.12xlarge"]
    assert train["hours"] == 2.0 and train["instances"] == 4
    assert train["usd"] == pytest.approx(round(4 * 2.0 * price, 2))
    hours = VLA_OVERHEAD_HOURS + 9000 * VLA_SECONDS_PER_STEP["ml.p4d.24xlarge"] * 2 / 3600
    assert vla["hours"] == pytest.approx(hours, abs=1e-4)
    assert vla["usd"] == pytest.approx(round(hours * ON_DEMAND_USD_PER_HOUR["ml.p4d.24xlarge"], 2))
    assert est["total_usd"] == pytest.approx(train["usd"] + vla["usd"])


def test_no_time_budget_counts_the_whole_training_timeout():
    est = estimate_run_cost({**PARAMS, "train_time_budget_seconds": 0, "training_timeout_hours": 12.0,
                             "run_vla_finetune": False, "deploy_to_edge": False}, GOOD)
    [train] = est["items"]
    assert train["hours"] == 12.0 and "training_timeout_hours" in train["basis"]


def test_a_run_above_the_budget_is_refused_in_prepare_run_with_the_numbers():
    params = {**PARAMS, "task": "Isaac-Velocity-Rough-H1-v0", "num_nodes": 8, "train_time_budget_seconds": 0,
              "training_timeout_hours": 24.0, "max_budget_usd": 500.0}
    with pytest.raises(BudgetExceeded) as err:
        plan_run(dag_id="sim_to_real", run_id="manual__1", params=params, env=GOOD)
    msg = str(err.value)
    total = estimate_run_cost(params, GOOD)["total_usd"]
    assert f"estimated cost ${total:.2f} is above max_budget_usd $500.00" in msg
    assert "8 x g6.12xlarge x 24 h" in msg and PRICE_SOURCE in msg


def test_the_estimate_is_in_the_plan():
    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params=PARAMS, env=GOOD)
    assert plan["budget"]["total_usd"] <= plan["budget"]["max_budget_usd"]
    assert [i["stage"] for i in plan["budget"]["items"]] == ["training", "vla_finetune"]


def test_zero_budget_means_no_limit_and_unknown_prices_refuse_under_a_budget():
    env = {**GOOD, "batch": {**GOOD["batch"], "instance_type": "x9.huge"}}
    est = estimate_run_cost({**PARAMS, "max_budget_usd": 0}, env)
    assert est["total_usd"] is None and est["missing_prices"] == ["x9.huge"]
    check_budget(est)  # no limit: runs, the estimate says what is unknown
    with pytest.raises(BudgetExceeded, match="no price for x9.huge"):
        check_budget(estimate_run_cost(PARAMS, env))


def test_the_estimate_goes_into_the_lineage_and_matches_its_schema():
    from sim2real.orchestration.lineage import build_lineage, chain_rows, lineage_errors

    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params=PARAMS, env=GOOD)
    doc = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="manual__1", params=PARAMS, plan=plan)
    assert doc["cost_estimate"] == plan["budget"]
    assert lineage_errors(doc) == []
    row = dict(chain_rows(doc))["estimated cost"]
    assert row.startswith(f"${plan['budget']['total_usd']:.2f} of max $500.00 (AWS on-demand list price")


# -- while training: the cost limit ---------------------------------------------------------------
from sim2real.orchestration.budget import (batch_job_run_seconds, budget_verdict, elapsed_cost_usd,  # noqa: E402
                                           optional_usd, training_cost_limit, training_usd_per_node_hour)
from sim2real.orchestration.cost_actual import actual_run_cost  # noqa: E402

T0 = 1_700_000_000.0  # epoch seconds


def _estimate(max_budget, train_price=4.0, vla_usd=30.0, vla=True):
    items = [{"stage": "training", "instance_type": "g6.12xlarge", "instances": 2, "hours": 1.0,
              "usd_per_hour": train_price, "usd": None if train_price is None else 2 * train_price, "basis": "b"}]
    if vla:
        items.append({"stage": "vla_finetune", "instance_type": "ml.p4d.24xlarge", "instances": 1, "hours": 1.0,
                      "usd_per_hour": 30.0 if vla_usd is not None else None, "usd": vla_usd, "basis": "b"})
    return {"currency": "USD", "price_source": PRICE_SOURCE, "total_usd": None, "max_budget_usd": max_budget,
            "missing_prices": [], "items": items}


def test_training_cost_limit_is_the_budget_minus_the_other_stages():
    assert training_cost_limit(_estimate(100.0)) == 70.0
    assert training_cost_limit(_estimate(100.0, vla=False)) == 100.0
    assert training_usd_per_node_hour(_estimate(100.0)) == 4.0


def test_training_cost_limit_none_without_budget_or_price_and_zero_when_others_use_it_all():
    assert training_cost_limit(_estimate(0)) is None  # 0 = no limit
    assert training_cost_limit(_estimate(100.0, train_price=None)) is None
    assert training_usd_per_node_hour(_estimate(100.0, train_price=None)) is None
    assert training_cost_limit(_estimate(100.0, vla_usd=None)) is None
    assert training_cost_limit(_estimate(20.0)) == 0.0


def test_training_cost_limit_of_a_real_plan():
    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params=PARAMS, env=GOOD)
    vla = plan["budget"]["items"][1]["usd"]
    assert training_cost_limit(plan["budget"]) == pytest.approx(plan["budget"]["max_budget_usd"] - vla, abs=0.01)
    assert training_usd_per_node_hour(plan["budget"]) == ON_DEMAND_USD_PER_HOUR[GOOD["batch"]["instance_type"]]
    # The plan hands both to the Batch training operator (checked at each poll).
    assert plan["batch"]["cost_limit_usd"] == training_cost_limit(plan["budget"])
    assert plan["batch"]["usd_per_node_hour"] == training_usd_per_node_hour(plan["budget"])


def test_hyperpod_training_is_priced_by_the_gpu_group_instance_type():
    from tests.orchestration.stages.test_stages import HYPERPOD_ENV

    params = {**PARAMS, "training_backend": "hyperpod", "task": "Isaac-Velocity-Rough-H1-v0", "num_nodes": 2,
              "train_time_budget_seconds": 3600}
    train = estimate_run_cost(params, HYPERPOD_ENV)["items"][0]
    assert train["instance_type"] == "ml.g5.12xlarge" and train["instances"] == 2
    assert train["usd"] == pytest.approx(round(2 * ON_DEMAND_USD_PER_HOUR["ml.g5.12xlarge"], 2))
    # Without the group's type in the config the run cannot be priced: refused under a budget, with the key to set.
    env = {**HYPERPOD_ENV, "hyperpod": {k: v for k, v in HYPERPOD_ENV["hyperpod"].items() if k != "instance_type"}}
    with pytest.raises(BudgetExceeded, match=r"hyperpod\.instance_type"):
        plan_run(dag_id="sim_to_real", run_id="manual__1", params={**params, "max_budget_usd": 100}, env=env)


def test_elapsed_cost_is_nodes_times_price_times_hours():
    assert elapsed_cost_usd(T0, T0 + 1800, 4, 10.0) == pytest.approx(20.0)
    assert elapsed_cost_usd(T0, T0 - 5, 4, 10.0) == 0.0  # clock skew: never negative
    with pytest.raises(ValueError, match="instances must be >= 1"):
        elapsed_cost_usd(T0, T0 + 1, 0, 10.0)
    with pytest.raises(ValueError, match="usd_per_hour must be >= 0"):
        elapsed_cost_usd(T0, T0 + 1, 1, -1.0)


def test_verdict_stops_when_the_next_poll_would_exceed_the_limit():
    # 2 nodes x $3.60/h: $0.002/s; after 3600 s $7.20, 600 s later $8.40
    kw = dict(elapsed_s=3600, instances=2, usd_per_hour=3.6)
    assert budget_verdict(**kw, limit_usd=8.0, poll_interval_s=0).over_budget is False
    stop = budget_verdict(**kw, limit_usd=8.0, poll_interval_s=600)
    assert stop.over_budget is True and stop.cost_usd == pytest.approx(7.2) and stop.next_poll_cost_usd == pytest.approx(8.4)
    assert budget_verdict(**kw, limit_usd=8.4, poll_interval_s=600).over_budget is False  # exactly at: not above
    assert budget_verdict(**kw, limit_usd=9.0, poll_interval_s=600).over_budget is False
    assert stop.describe() == "elapsed cost $7.20 of limit $8.00 (2 node(s) x $3.6/h x 1 h)"


def test_verdict_limit_already_spent_at_first_poll_and_no_check_without_limit_or_price():
    assert budget_verdict(elapsed_s=60, instances=1, usd_per_hour=3.6, limit_usd=0.0, poll_interval_s=0).over_budget
    assert budget_verdict(elapsed_s=7200, instances=8, usd_per_hour=98.32, limit_usd=50.0,
                          poll_interval_s=30).over_budget
    assert budget_verdict(elapsed_s=1e6, instances=8, usd_per_hour=9.0, limit_usd=None, poll_interval_s=30) is None
    assert budget_verdict(elapsed_s=1e6, instances=8, usd_per_hour=None, limit_usd=1.0, poll_interval_s=30) is None


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("", None), ("None", None), ("12.5", 12.5), (0, 0.0)])
def test_optional_usd_accepts_rendered_values(value, expected):
    assert optional_usd("cost_limit_usd", value) == expected


@pytest.mark.parametrize("value", ["abc", -0.01, float("nan")])
def test_optional_usd_names_the_field(value):
    with pytest.raises(ValueError, match="cost_limit_usd must be a number of USD >= 0 or None"):
        optional_usd("cost_limit_usd", value)


def test_batch_job_run_seconds_from_describe_jobs():
    ms = lambda s: int(s * 1000)  # noqa: E731
    assert batch_job_run_seconds({"status": "RUNNABLE"}, T0) is None
    assert batch_job_run_seconds({"startedAt": ms(T0 - 90)}, T0) == pytest.approx(90)
    assert batch_job_run_seconds({"startedAt": ms(T0 - 90), "stoppedAt": ms(T0 - 30)}, T0) == pytest.approx(60)
    # an earlier attempt (Batch retryStrategy) is counted; the current one (same startedAt) only once
    job = {"startedAt": ms(T0 - 100), "stoppedAt": ms(T0),
           "attempts": [{"startedAt": ms(T0 - 500), "stoppedAt": ms(T0 - 400)},
                        {"startedAt": ms(T0 - 100), "stoppedAt": ms(T0)}]}
    assert batch_job_run_seconds(job, T0 + 999) == pytest.approx(200)


def _plan(vla=True, max_budget=100.0):
    return {"budget": _estimate(max_budget, vla=vla), "batch": {"instance_type": "g6.12xlarge", "num_nodes": 2},
            "vla": {"enabled": vla, "parameters": {"InstanceType": "ml.p4d.24xlarge"}}}


def test_actual_cost_from_the_operator_result_and_describe_jobs():
    # The operator's result as the DAG hands it on: "attempts" is a count there, not DescribeJobs' list.
    result = {"job_id": "j-1", "num_nodes": 2, "started_at": T0, "stopped_at": T0 + 1800, "cost_usd": 4.0,
              "attempts": 1, "status": "SUCCEEDED"}
    actual = actual_run_cost(_plan(vla=False), result, now=T0 + 9999)
    [train] = actual["items"]
    assert (train["stage"], train["instances"], train["hours"], train["usd_per_hour"], train["usd"]) == \
        ("training", 2, 0.5, 4.0, 4.0)
    assert "j-1" in train["basis"] and "1800 s" in train["basis"]
    assert actual["total_usd"] == 4.0 and actual["within_budget"] is True and actual["unknown"] == []
    assert actual["currency"] == "USD" and actual["price_source"] == PRICE_SOURCE
    described = {"jobId": "j-1", "startedAt": int(T0 * 1000), "stoppedAt": int((T0 + 1800) * 1000),
                 "nodeProperties": {"numNodes": 2}}
    assert actual_run_cost(_plan(vla=False), described, now=T0)["items"][0]["usd"] == 4.0
    running = actual_run_cost(_plan(vla=False), {**described, "stoppedAt": None}, now=T0 + 3600)
    assert running["items"][0]["usd"] == 8.0 and "now (running)" in running["items"][0]["basis"]
    never = actual_run_cost(_plan(vla=False), {"jobId": "j-2", "status": "FAILED", "attempts": []}, now=T0)
    assert never["items"][0]["usd"] == 0.0 and "never started" in never["items"][0]["basis"]


def test_actual_cost_of_a_job_stopped_at_the_limit_is_over_budget():
    record = {"job_id": "j-1", "num_nodes": 2, "started_at": T0, "stopped_at": T0 + 36000, "run_seconds": 36000,
              "stopped_by_budget": True}
    actual = actual_run_cost(_plan(vla=False, max_budget=50.0), record, now=T0)
    assert actual["total_usd"] == 80.0 and actual["within_budget"] is False
    assert "stopped at the cost limit" in actual["items"][0]["basis"]


def test_actual_fine_tune_from_billable_seconds_or_the_execution_window_else_unknown():
    train = {"job_id": "j-1", "num_nodes": 2, "started_at": T0, "stopped_at": T0 + 1800}
    billed = actual_run_cost(_plan(), train, {"pipeline_execution_arn": "arn:x", "billable_seconds": 7200},
                             now=T0)
    vla = billed["items"][1]
    assert vla["stage"] == "vla_finetune" and vla["hours"] == 2.0
    assert vla["usd_per_hour"] == 30.0 and vla["usd"] == 60.0  # the estimate's price for the type
    assert "BillableTimeInSeconds" in vla["basis"] and billed["unknown"] == []
    assert billed["total_usd"] == 64.0 and billed["within_budget"] is True
    other_type = actual_run_cost(_plan(), train, {"instance_type": "ml.p5.48xlarge", "billable_seconds": 3600},
                                 now=T0)
    assert other_type["items"][1]["usd"] == ON_DEMAND_USD_PER_HOUR["ml.p5.48xlarge"]
    assert other_type["within_budget"] is False
    window = actual_run_cost(_plan(), train, {"CreationTime": "2023-11-14T22:13:20+00:00",
                                              "LastModifiedTime": "2023-11-14T23:13:20Z"}, now=T0)
    assert window["items"][1]["hours"] == 1.0 and "upper bound" in window["items"][1]["basis"]
    # the fine-tune operator's own result has no timing: unknown, total is a lower bound
    unknown = actual_run_cost(_plan(), train, {"pipeline_execution_arn": "arn:x", "status": "Succeeded"}, now=T0)
    assert unknown["items"][1]["usd"] is None and unknown["unknown"] == ["vla_finetune"]
    assert unknown["total_usd"] == 4.0 and unknown["within_budget"] is None
    no_budget = actual_run_cost(_plan(max_budget=0), train, None, now=T0)
    assert no_budget["within_budget"] is None and "no fine-tune result" in no_budget["items"][1]["basis"]


EXEC_ARN = "arn:aws:sagemaker:us-east-1:123456789012:pipeline/groot/execution/abc123"


def test_finetune_billing_from_the_training_step_and_into_the_actual_cost():
    import boto3
    from botocore.stub import Stubber

    from sim2real.orchestration.cost_actual import finetune_billing

    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response("list_pipeline_execution_steps", {"PipelineExecutionSteps": [
            {"StepName": "Preprocess", "StepStatus": "Succeeded"},
            {"StepName": "FineTune", "StepStatus": "Succeeded", "Metadata": {"TrainingJob": {
                "Arn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/pipelines-ft-1"}}}]},
            {"PipelineExecutionArn": EXEC_ARN})
        stub.add_response("describe_training_job", {
            "TrainingJobName": "pipelines-ft-1", "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/pipelines-ft-1",
            "ModelArtifacts": {"S3ModelArtifacts": "s3://b/m.tar.gz"}, "TrainingJobStatus": "Completed",
            "SecondaryStatus": "Completed", "AlgorithmSpecification": {"TrainingInputMode": "File"},
            "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
            "StoppingCondition": {}, "CreationTime": T0, "BillableTimeInSeconds": 1800},
            {"TrainingJobName": "pipelines-ft-1"})
        billing = finetune_billing(client, EXEC_ARN)
    assert billing["billable_seconds"] == 3600 and billing["instance_type"] == "ml.p4d.24xlarge"
    assert billing["training_jobs"] == ["pipelines-ft-1"]
    vla = actual_run_cost(_plan(), None, billing, now=T0)["items"][1]
    assert vla["hours"] == 1.0 and vla["usd"] == 30.0


def test_finetune_billing_falls_back_to_the_execution_window():
    import datetime as dt

    import boto3
    from botocore.stub import Stubber

    from sim2real.orchestration.cost_actual import finetune_billing

    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    start = dt.datetime.fromtimestamp(T0, dt.timezone.utc)
    with Stubber(client) as stub:
        stub.add_response("list_pipeline_execution_steps", {"PipelineExecutionSteps": [
            {"StepName": "Preprocess", "StepStatus": "Failed"}]}, {"PipelineExecutionArn": EXEC_ARN})
        stub.add_response("describe_pipeline_execution", {
            "PipelineExecutionArn": EXEC_ARN, "PipelineExecutionStatus": "Failed", "CreationTime": start,
            "LastModifiedTime": start + dt.timedelta(minutes=30)}, {"PipelineExecutionArn": EXEC_ARN})
        billing = finetune_billing(client, EXEC_ARN)
    assert billing == {"pipeline_execution_arn": EXEC_ARN, "started_at": T0, "stopped_at": T0 + 1800}
    vla = actual_run_cost(_plan(), None, billing, now=T0)["items"][1]
    assert vla["hours"] == 0.5 and "upper bound" in vla["basis"]


#: Fragment for lineage.schema.json's "cost_actual" property (see actual_run_cost).
COST_ACTUAL_SCHEMA = {
    "oneOf": [
        {"type": "null"},
        {"type": "object",
         "required": ["currency", "price_source", "total_usd", "max_budget_usd", "unknown", "within_budget", "items"],
         "properties": {
             "currency": {"const": "USD"}, "price_source": {"type": "string"},
             "total_usd": {"type": "number", "minimum": 0}, "max_budget_usd": {"type": "number", "minimum": 0},
             "unknown": {"type": "array", "items": {"enum": ["training", "vla_finetune"]}},
             "within_budget": {"type": ["boolean", "null"]},
             "items": {"type": "array", "items": {
                 "type": "object",
                 "required": ["stage", "instance_type", "instances", "hours", "usd_per_hour", "usd", "basis"],
                 "properties": {
                     "stage": {"enum": ["training", "vla_finetune"]}, "instance_type": {"type": "string"},
                     "instances": {"type": "integer", "minimum": 1},
                     "hours": {"type": ["number", "null"], "minimum": 0},
                     "usd_per_hour": {"type": ["number", "null"], "minimum": 0},
                     "usd": {"type": ["number", "null"], "minimum": 0}, "basis": {"type": "string"}}}}}},
    ],
}


def test_actual_cost_matches_the_lineage_fragment_for_a_real_plan():
    import json

    import jsonschema

    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params=PARAMS, env=GOOD)
    train = {"job_id": "j", "num_nodes": plan["batch"]["num_nodes"], "started_at": T0, "stopped_at": T0 + 120}
    for vla in (None, {"pipeline_execution_arn": EXEC_ARN, "status": "Succeeded"}, {"billable_seconds": 900}):
        doc = json.loads(json.dumps(actual_run_cost(plan, train, vla, now=T0 + 200)))
        jsonschema.validate(doc, COST_ACTUAL_SCHEMA)
        assert doc["items"][0]["usd"] == round(train["num_nodes"] * doc["items"][0]["usd_per_hour"] / 30, 2)


def test_actual_cost_of_a_hyperpod_slurm_job_from_its_start_and_end():
    from sim2real.orchestration import slurm

    from tests.orchestration.stages.test_stages import HYPERPOD_ENV

    params = {**PARAMS, "training_backend": "hyperpod", "task": "Isaac-Velocity-Rough-H1-v0", "num_nodes": 2,
              "run_vla_finetune": False, "deploy_to_edge": False}
    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params=params, env=HYPERPOD_ENV)
    price = ON_DEMAND_USD_PER_HOUR["ml.g5.12xlarge"]
    # The HyperPod operator's result: the job's Slurm Start/End (epoch s) and its node count.
    result = {"cluster_name": "sim2real-hyperpod", "job_id": "1001", "job_name": "sim2real-train-x",
              "state": "COMPLETED", "exit_code": "0:0", "num_nodes": 2, "started_at": T0, "stopped_at": T0 + 1800,
              "cost_usd": round(2 * 0.5 * price, 2)}
    [train] = actual_run_cost(plan, result, now=T0 + 9999)["items"]
    assert (train["instance_type"], train["instances"], train["hours"], train["usd_per_hour"]) == \
        ("ml.g5.12xlarge", 2, 0.5, price)
    assert train["usd"] == result["cost_usd"] == round(2 * 0.5 * price, 2)
    assert "Slurm job 1001 on HyperPod cluster sim2real-hyperpod" in train["basis"] and "Start..End" in train["basis"]
    assert "1800 s" in train["basis"] and "Batch" not in train["basis"]
    # The job_cost XCom of a job cancelled at the cost limit (the task failed: no result).
    record = slurm.job_cost_record(job_id="1002", cluster_name="sim2real-hyperpod", started_at=T0,
                                   stopped_at=T0 + 3600, elapsed_s=3600, num_nodes=2, usd_per_node_hour=price,
                                   stopped_by_budget=True)
    [train] = actual_run_cost(plan, record, now=T0)["items"]
    assert train["usd"] == record["cost_usd"] == round(2 * price, 2)
    assert "stopped at the cost limit" in train["basis"]
    # A job that never started (no Start): unknown, said so.
    [train] = actual_run_cost(plan, {**result, "started_at": None, "stopped_at": None}, now=T0)["items"]
    assert train["usd"] is None and "no start time" in train["basis"]


def test_a_training_job_a_person_stopped_is_costed_from_describe_jobs():
    """A person marked the training task (or the run) failed: the wait terminated the job, the task left no result
    and no job_cost; its cost comes from DescribeJobs by the job id of its console link (it was 'at least $0.00')."""
    import boto3
    from botocore.stub import Stubber

    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.report import run_actual_cost

    class TI:
        def xcom_pull(self, task_ids=None, key="return_value"):
            if (task_ids, key) == (ids.BATCH_TRAIN_POLICY, "batch_job_details"):
                return {"job_id": "j-killed", "region_name": "us-east-1", "aws_partition": "aws"}
            return None

    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    plan = {**_plan(vla=False), "backend": "batch"}
    with Stubber(client) as stub:
        # DescribeJobs' documented shape (AWS Batch API Reference, JobDetail): a job terminated 30 min in
        stub.add_response("describe_jobs", {"jobs": [{
            "jobName": "sim2real-train-k", "jobId": "j-killed", "jobQueue": "q", "status": "FAILED",
            "statusReason": "Airflow task killed by the user", "startedAt": int(T0 * 1000),
            "stoppedAt": int((T0 + 1800) * 1000), "jobDefinition": "d", "createdAt": int(T0 * 1000),
            "nodeProperties": {"numNodes": 2, "mainNode": 0, "nodeRangeProperties": []}}]}, {"jobs": ["j-killed"]})
        actual = run_actual_cost(plan, {"training": None}, TI(), batch_client=client)
    [train] = actual["items"]
    assert train["usd"] == 4.0 and "j-killed" in train["basis"] and actual["unknown"] == [], actual
