"""The orphan sweep rolls back a dead run's canary whose field verdict was never reached (its deployment's tag
``sim2real:field-verdict`` still ``pending``), also when every canary robot finished it: a CancelDeployment would
not undo those robots. Greengrass v2 through botocore's Stubber on the real service model; run records in moto S3."""

from __future__ import annotations

import pytest
from botocore.stub import Stubber

from airflow.providers.amazon.aws.hooks.s3 import S3Hook
from sim2real.orchestration.hooks.greengrass import FIELD_VERDICT_TAG, deployment_arn
from sim2real.orchestration.orphans import find_greengrass_deployments
from sim2real.orchestration.sweeper import summary_lines, sweep

from test_sweeper import ENV, FAILED, GROUP_ARN, REGION, FakeRuns, clients, stub_batch, stub_pipeline
from test_sweeper import s3  # noqa: F401 - the run records' fixture

CANARY, RB = "c0ffee00-5678-90ab-cdef-555555555555", "c0ffee00-5678-90ab-cdef-666666666666"
NAME = f"sim2real-{FAILED}-canary"
PREVIOUS = {"deploymentId": "old", "deploymentName": "sim2real-run-0", "targetArn": GROUP_ARN,
            "components": {"com.sim2real.PolicySetup": {"componentVersion": "1.0.0"}},
            "deploymentPolicies": {"failureHandlingPolicy": "ROLLBACK"}}


def effective() -> dict:
    """robot-1 finished the canary, after the group's earlier release (a promoted canary: no tag needed)."""
    return {"effectiveDeployments": [
        {"deploymentId": CANARY, "deploymentName": NAME, "targetArn": GROUP_ARN, "coreDeviceExecutionStatus": "SUCCEEDED",
         "creationTimestamp": 20.0, "modifiedTimestamp": 20.0},
        {"deploymentId": "old", "deploymentName": "sim2real-run-0", "targetArn": GROUP_ARN,
         "coreDeviceExecutionStatus": "SUCCEEDED", "creationTimestamp": 10.0, "modifiedTimestamp": 10.0}]}


def stub_found(gg) -> None:
    gg.add_response("list_deployments", {"deployments": [
        {"targetArn": GROUP_ARN, "deploymentId": CANARY, "deploymentName": NAME, "deploymentStatus": "ACTIVE",
         "isLatestForTarget": True}]}, {"historyFilter": "LATEST_ONLY"})
    gg.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": "robot-1"}]},
                    {"thingGroupArn": GROUP_ARN})
    gg.add_response("list_effective_deployments", effective(), {"coreDeviceThingName": "robot-1"})
    gg.add_response("get_deployment", {"deploymentId": CANARY, "deploymentName": NAME, "targetArn": GROUP_ARN,
                                       "tags": {FIELD_VERDICT_TAG: "pending"}}, {"deploymentId": CANARY})


@pytest.mark.usefixtures("s3")
def test_a_finished_canary_never_judged_is_found():
    """Before, a canary every robot had finished was not listed at all: the dead run's unjudged release stayed."""
    hook = clients()["greengrass"]
    with Stubber(hook.conn) as gg:
        stub_found(gg)
        found = find_greengrass_deployments(hook)
        gg.assert_no_pending_responses()
    assert [(f.id, f.run_key, f.extra) for f in found] == [
        (CANARY, FAILED, {"unfinished_devices": [], "field_verdict": "pending", "target_arn": GROUP_ARN})]


@pytest.mark.usefixtures("s3")  # the run records
def test_a_failed_runs_pending_canary_is_rolled_back_and_the_sweep_says_so():
    c = clients()
    with Stubber(c["batch"]) as b, Stubber(c["sagemaker"]) as sm, Stubber(c["greengrass"].conn) as gg:
        stub_batch(b, [])
        stub_pipeline(sm, [])
        stub_found(gg)
        gg.add_response("tag_resource", {}, {"resourceArn": deployment_arn(GROUP_ARN, CANARY),
                                             "tags": {FIELD_VERDICT_TAG: "rejected"}})
        gg.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": "robot-1"}]},
                        {"thingGroupArn": GROUP_ARN})
        gg.add_response("list_effective_deployments", effective(), {"coreDeviceThingName": "robot-1"})
        gg.add_response("get_deployment", PREVIOUS, {"deploymentId": "old"})
        gg.add_response("create_deployment", {"deploymentId": RB}, {
            "targetArn": GROUP_ARN, "deploymentName": f"{NAME}-rollback", "clientToken": f"{CANARY}-rollback",
            "components": PREVIOUS["components"], "deploymentPolicies": PREVIOUS["deploymentPolicies"]})
        report = sweep(ENV, clients=c, s3_hook=S3Hook(region_name=REGION), dry_run=False, runs=FakeRuns())
        for stub in (b, sm, gg):
            stub.assert_no_pending_responses()  # no CancelDeployment: it would not undo robot-1
    assert report["errors"] == []
    (row,) = report["stopped"]
    assert (row["id"], row["verdict"]) == (CANARY, "orphan") and "deploy task did not succeed" in row["why"]
    assert row["action"] == f"TagResource + CreateDeployment {RB} ({NAME}-rollback): back to sim2real-run-0 (old)"
    assert list(summary_lines(report)) == [
        f"stopped ({row['action']}): greengrass_deployment {CANARY} ({NAME}, ACTIVE) in target {GROUP_ARN}: "
        f"{row['why']}"]


def test_a_run_waiting_for_a_persons_canary_review_is_busy(monkeypatch):
    """A run whose canary_review waits for Promote / Abort (task state awaiting_input) is not dead: its pending
    canary must not be rolled back by another run's sweep (max_active_runs=1)."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    from sim2real.orchestration.sweeper import TaskApiRuns

    asked = {}

    def get_ti_count(**kwargs):
        asked.update(kwargs)
        return 1 if "awaiting_input" in kwargs["states"] else 0

    monkeypatch.setattr(RuntimeTaskInstance, "get_ti_count", staticmethod(get_ti_count))
    assert TaskApiRuns().busy("sim_to_real", "manual__1") is True
    assert asked["dag_id"] == "sim_to_real" and asked["run_ids"] == ["manual__1"]
