"""Edge deployment (group ``deploy``): the approved model to the robots' thing group with AWS IoT Greengrass v2."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs

DOC = """\
**Deploy to the robots (AWS IoT Greengrass v2).** Calls IoT `DescribeThingGroup`, SageMaker
`DescribeModelPackage` (read again: a package no longer Approved is refused, nothing deployed), Greengrass
`ListCoreDevices` (a group without core devices is refused before any deployment), `CreateDeployment`
(configuration merge with the model URI, ROLLBACK on failure, rollout, abort and timeout config),
`ListEffectiveDeployments`; `CancelDeployment` on failure, timeout or kill. Waits (deferred) until every
core device of the thing group reports SUCCEEDED, at most the form's `deployment_timeout_minutes` (then
cancelled and failed without retry, naming each unfinished robot). Hands on the deployment id, each
device's status and the package's status at deploy time; a "deployed" SNS notification lists them.
"""

GROUP_ID = ids.DEPLOY_GROUP
TASK_IDS = (ids.DEPLOY_ENABLED, ids.DEPLOYMENT_COMPONENTS, ids.DEPLOY_TO_ROBOTS)
LINEAGE_SOURCES = {"deployment": ids.DEPLOY_TO_ROBOTS}


@dataclass(frozen=True)
class DeployPlan(PlanSection):
    """The Greengrass deployment of a run."""

    SECTION = "deploy"
    enabled: bool  #: deploy_to_edge and run_vla_finetune
    thing_group_name: str
    components: dict[str, str]  #: component name → version
    deployment_name: str
    iot_job_configuration: dict[str, Any]  #: :func:`iot_job_configuration`
    timeout_seconds: int  #: :func:`deployment_timeout_seconds`


def params() -> dict[str, Any]:
    """The deployment's fields of the trigger form."""
    from airflow.sdk import Param

    from sim2real.orchestration.params import SECTION_DEPLOY, _range

    return {
        "deploy_to_edge": Param(True, type="boolean", title="Deploy to robots", section=SECTION_DEPLOY),
        "thing_group_name": Param(None, type=["null", "string"], maxLength=128, pattern=r"^[a-zA-Z0-9:_-]*$",
                                  title="Thing group", description="Empty: the environment config's group.",
                                  section=SECTION_DEPLOY),
        "rollout_max_per_minute": Param(10, type="integer", title="Rollout: devices per minute",
                                        section=SECTION_DEPLOY, **_range(minimum=1, maximum=1000)),
        "abort_failure_threshold_percent": Param(10.0, type="number",
                                                 title="Abort when this % of devices fail",
                                                 section=SECTION_DEPLOY, **_range(minimum=0, maximum=100)),
        "deployment_timeout_minutes": Param(
            60, type="integer", title="Deployment timeout (min)",
            description="Cancel the Greengrass deployment and fail (no retry), naming each robot that has not "
            "finished, when the robots have not all finished after this long (below the stage's 2 h limit).",
            section=SECTION_DEPLOY, **_range(minimum=1, maximum=110)),
    }


def plan(ctx: PlanContext) -> DeployPlan:
    p, gg = ctx.params, ctx.env["greengrass"]
    return DeployPlan(
        enabled=bool(p["deploy_to_edge"]) and bool(p["run_vla_finetune"]),
        thing_group_name=p.get("thing_group_name") or gg["thing_group_name"],
        components=dict(gg["components"]),
        deployment_name=f"sim2real-{ctx.run_key}",
        iot_job_configuration=iot_job_configuration(p),
        timeout_seconds=deployment_timeout_seconds(p),
    )


def deployment_timeout_seconds(params: Mapping[str, Any]) -> int:
    """The one bound on the Greengrass deployment wait, in seconds: the form's ``deployment_timeout_minutes``
    (default 60) × 60. When it passes, the deploy task cancels the deployment and fails without retry."""
    return int(params.get("deployment_timeout_minutes") or 60) * 60


def iot_job_configuration(params: Mapping[str, Any]) -> dict[str, Any]:
    """Greengrass ``CreateDeployment`` ``iotJobConfiguration`` from the form's rollout fields.

    :param params: ``rollout_max_per_minute`` (devices per minute), ``abort_failure_threshold_percent``
        (cancel the rollout once this percentage of devices failed, after at least one) and
        ``deployment_timeout_minutes`` (``timeoutConfig.inProgressTimeoutInMinutes``: a device still
        IN_PROGRESS after that long reports TIMED_OUT, the same bound the deploy task waits for).
    """
    return {
        "jobExecutionsRolloutConfig": {"maximumPerMinute": int(params["rollout_max_per_minute"])},
        "timeoutConfig": {"inProgressTimeoutInMinutes": deployment_timeout_seconds(params) // 60},
        "abortConfig": {"criteriaList": [{
            "failureType": "ALL", "action": "CANCEL",
            "thresholdPercentage": float(params["abort_failure_threshold_percent"]),
            "minNumberOfExecutedThings": 1,
        }]},
    }


def deployment_components(plan: Mapping[str, Any], approval: Mapping[str, Any],
                          manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    """Greengrass ``components`` for CreateDeployment, with the model URI merged into the configuration.

    :param approval: the approval sensor's output (``model_package_arn``, ``model_data_url``).
    :param manifest: the RL checkpoint manifest (its ONNX export / sha256 go to the setup component).
    :return: ``{component_name: {"componentVersion": v, "configurationUpdate": {"merge": json}}}``.
    """
    merge = {
        "ModelS3Uri": approval.get("model_data_url"),
        "ModelPackageArn": approval.get("model_package_arn"),
        "RunKey": plan["run_key"],
    }
    if manifest:
        merge["PolicyCheckpointUri"] = manifest.get("checkpoint_uri")
        merge["PolicyCheckpointSha256"] = manifest.get("sha256")
        if manifest.get("onnx_uri"):
            merge["PolicyOnnxUri"] = manifest["onnx_uri"]
            merge["PolicyOnnxSha256"] = manifest.get("onnx_sha256")
    return {
        name: {"componentVersion": version, "configurationUpdate": {"merge": json.dumps(merge, sort_keys=True)}}
        for name, version in plan["deploy"]["components"].items()
    }


def add_tasks(plan: Any, *, approval: Any, manifest: Any) -> Any:
    """Add the ``deploy`` group after the approval; return the deployment operator."""
    from airflow.sdk import TaskGroup, task

    from sim2real.orchestration import notifications as notify
    from sim2real.orchestration.dag_defaults import POLL
    from sim2real.orchestration.operators.greengrass import GreengrassDeploymentOperator

    deploy = refs(plan, DeployPlan)
    with TaskGroup(GROUP_ID, tooltip="AWS IoT Greengrass v2 deployment to the robots' thing group", doc_md=DOC):

        @task.short_circuit(task_id=ids.local(ids.DEPLOY_ENABLED), ignore_downstream_trigger_rules=False)
        def deploy_enabled(plan: dict) -> bool:
            return DeployPlan.from_plan(plan).enabled

        @task(task_id=ids.local(ids.DEPLOYMENT_COMPONENTS), multiple_outputs=True,
              execution_timeout=dt.timedelta(minutes=1))
        def components_for(plan: dict, approval: dict, manifest: dict) -> dict:
            return deployment_components(plan, approval, manifest)

        components = components_for(plan["plan"], approval.output, manifest.output)
        deployment = GreengrassDeploymentOperator(
            task_id=ids.local(ids.DEPLOY_TO_ROBOTS),
            thing_group_name=deploy.thing_group_name,
            components=components,
            deployment_name=deploy.deployment_name,
            iot_job_configuration=deploy.iot_job_configuration,
            deployment_timeout_seconds=deploy.timeout_seconds,  # the form's deployment_timeout_minutes
            model_package_arn=approval.output["model_package_arn"],  # read again: deployed only if still Approved
            waiter_delay=POLL,
            execution_timeout=dt.timedelta(hours=2),
            doc_md=DOC,
            on_success_callback=notify.deployed(),
        )
        approval >> deploy_enabled(plan["plan"]) >> components >> deployment
    return deployment
