"""Edge deployment (group ``deploy``): the approved model to the robots' thing group with AWS IoT Greengrass v2."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow.sdk import Asset

from sim2real.contract import task_ids as ids
from sim2real.orchestration.dag_defaults import FIELD_POLL, POLL
from sim2real.orchestration.hooks.greengrass import CANARY_SUFFIX
from sim2real.orchestration.params import SECTION_DEPLOY, _range
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs

#: The model running on the robots: one event per successful deployment (``sim_to_real`` and ``sim_to_real_release``).
DEPLOYED_MODEL_PACKAGE_ASSET = Asset(name="sim2real_deployed_model_package",
                                     uri="sim2real://edge/deployed-model-package")

DOC = """\
**Deploy to the robots (AWS IoT Greengrass v2).** Calls IoT `DescribeThingGroup`, SageMaker
`DescribeModelPackage` (read again: a package no longer Approved is refused, nothing deployed), Greengrass
`ListCoreDevices` (a group without core devices is refused before any deployment), `CreateDeployment`
(configuration merge `ModelS3Uri`/`ModelSha256` of the RL policy, ROLLBACK on failure, rollout, abort and timeout config),
`ListEffectiveDeployments`; `CancelDeployment` on failure, timeout or kill. Waits (deferred) until every
core device of the thing group reports SUCCEEDED, at most the form's `deployment_timeout_minutes` (then
cancelled and failed without retry, naming each unfinished robot). Hands on the deployment id, each
device's status and the package's status at deploy time; a "deployed" SNS notification lists them, and
the `sim2real_deployed_model_package` asset gets an event (none when the deployment is skipped or fails).

**Canary (form field `canary_thing_group_name`; empty: none, the fleet group at once as above).** The release goes
to the canary thing group first (`deploy_to_canary`, the same deployment and checks, named `sim2real-<run key>-canary`);
`canary_verdict` then waits (deferred) up to `canary_window_minutes` for the field episodes the canary robots
upload (S3 `ListObjectsV2` every 5 min per robot, then `GetObject` of each), checks them and promotes the release to
the fleet group once at least `canary_min_episodes` episodes in all, at least one from every canary robot, give a
95 % Wilson interval whose lower bound is at or above `field_min_success_rate`. It rolls the canary group back to
its last good release (`CreateDeployment`, waited for) when the whole interval falls below the threshold, or when
the window ends undecided, short of episodes or with a robot silent, and then fails naming the rate, the interval,
the threshold and the episode count; the fleet group is not deployed. A canary group with no earlier release has
nothing to go back to: the task fails saying so and the canary robots keep the release. Hands on the verdict's evidence (XCom
`canary_verdict`: rate, interval, episodes, refused objects, per robot counts). The canary deployment carries its
verdict as the tag `sim2real:field-verdict` (`pending` from its creation, then `promoted` or `rejected`,
`TagResource`): a later rollback of the group never goes back to a canary that was not promoted, and the orphan
sweep rolls back a dead run's canary still `pending`.

**Canary review (form field `canary_review`; off by default: the verdict alone decides, `canary_review` succeeds at
once).** On: `canary_verdict` still waits for the field episodes and computes its verdict, but does not roll back;
`canary_review` then asks a person in Airflow (Browse → Required Actions; the request shows the rate, its interval,
the episodes, the threshold, the verdict's recommendation, each robot's counts and the refused objects): **Approve =
Promote** (the fleet deployment runs; the decision — who, when, comment — is its XCom `decision`), **Reject =
Abort** (the canary group is rolled back as above, waited for, and the task fails naming who aborted and why). No
answer within 24 h fails the task (clear it to be asked again); the fleet group is not deployed.
"""

GROUP_ID = ids.DEPLOY_GROUP
TASK_IDS = (ids.DEPLOY_ENABLED, ids.DEPLOYMENT_COMPONENTS, ids.CANARY_MODEL_VERSION, ids.DEPLOY_TO_CANARY, ids.CANARY_VERDICT,
            ids.CANARY_REVIEW, ids.DEPLOY_TO_ROBOTS)
#: The canary fields' defaults (``canary_thing_group_name`` empty, None or ""): no canary, the fleet group at once.
CANARY_DEFAULTS = {"canary_thing_group_name": None, "canary_min_episodes": 20, "canary_window_minutes": 60,
                   "field_min_success_rate": 0.8, "canary_review": False}
#: The longest canary window the form takes, in minutes (the verdict task's limit follows from it).
CANARY_WINDOW_MAX_MINUTES = 720


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
    # the canary (:func:`canary_plan`)
    canary_thing_group_name: str  #: "": no canary
    canary_deployment_name: str
    canary_min_episodes: int
    canary_window_minutes: int
    field_min_success_rate: float  #: a fraction
    canary_review: bool  #: a person promotes or aborts the canary (the verdict only recommends)
    field_bucket: str  #: where the robots upload their field episodes
    field_prefix: str


#: The deploy task's limit: the release's wait and, when it ends badly after some robots ran it, the automatic
#: rollback's wait, each at most the form's deployment_timeout_minutes (at most 110 min).
DEPLOY_EXECUTION_TIMEOUT = dt.timedelta(hours=4)
#: The canary verdict's limit: the longest window, the rollback's wait (1 h) and a margin.
CANARY_VERDICT_EXECUTION_TIMEOUT = dt.timedelta(minutes=CANARY_WINDOW_MAX_MINUTES + 90)
#: How long the canary review waits for a person's answer.
CANARY_REVIEW_RESPONSE_TIMEOUT = dt.timedelta(hours=24)

def params() -> dict[str, Any]:
    """The deployment's fields of the trigger form."""
    from airflow.sdk import Param

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
            "finished, when the robots have not all finished after this long; robots that ran it are then rolled "
            "back to the group's last good release, waited for as long again (the stage's 4 h limit holds both).",
            section=SECTION_DEPLOY, **_range(minimum=1, maximum=110)),
        "canary_thing_group_name": Param(
            CANARY_DEFAULTS["canary_thing_group_name"], type=["null", "string"], maxLength=128, pattern=r"^[a-zA-Z0-9:_-]*$",
            title="Canary thing group",
            description="Empty: no canary (the release goes to the whole thing group at once). Else: deploy to this "
            "group first, judge its robots' field episodes, and deploy to the fleet group only when the canary is "
            "promoted; the canary group is rolled back otherwise.", section=SECTION_DEPLOY),
        "canary_min_episodes": Param(
            CANARY_DEFAULTS["canary_min_episodes"], type="integer", title="Canary: field episodes needed",
            description="Field episodes the canary robots must report before the success rate decides.",
            section=SECTION_DEPLOY, **_range(minimum=1, maximum=10000)),
        "canary_window_minutes": Param(
            CANARY_DEFAULTS["canary_window_minutes"], type="integer", title="Canary window (min)",
            description="The longest the verdict waits for field episodes after the canary deployment; too few "
            "episodes by then, or a canary robot with none, roll the canary back.",
            section=SECTION_DEPLOY, **_range(minimum=1, maximum=CANARY_WINDOW_MAX_MINUTES)),
        "field_min_success_rate": Param(
            CANARY_DEFAULTS["field_min_success_rate"], type="number", title="Canary: field success rate threshold",
            description="Promote only when the 95 % Wilson interval's lower bound of the canary robots' success "
            "rate is at or above this fraction.", section=SECTION_DEPLOY, **_range(minimum=0, maximum=1)),
        "canary_review": Param(
            CANARY_DEFAULTS["canary_review"], type="boolean", title="Canary: a person decides",
            description="Off: the canary verdict promotes or rolls back on its own. On: the verdict only recommends; "
            "a person promotes the canary to the fleet or aborts it (rolled back) in Airflow's Required Actions, "
            "with the field evidence shown.", section=SECTION_DEPLOY),
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
        **canary_plan(p, ctx.env, ctx.run_key),
    )


def canary_plan(params: Mapping[str, Any], env: Mapping[str, Any], run_key: str) -> dict[str, Any]:
    """The canary of a run from the form (:data:`CANARY_DEFAULTS` for a field it lacks) and the environment config:
    the robots upload their field episodes to the artifacts bucket without a prefix (``com.sim2real.FieldUploader``'s
    ``FieldBucket``; :mod:`sim2real.contract.field`)."""
    p = {**CANARY_DEFAULTS, **{k: params[k] for k in CANARY_DEFAULTS if params.get(k) is not None}}
    return {"canary_thing_group_name": p["canary_thing_group_name"] or "",
            "canary_deployment_name": f"sim2real-{run_key}{CANARY_SUFFIX}",
            "canary_min_episodes": int(p["canary_min_episodes"]),
            "canary_window_minutes": int(p["canary_window_minutes"]),
            "field_min_success_rate": float(p["field_min_success_rate"]),
            "canary_review": bool(p["canary_review"]),
            "field_bucket": env.get("artifacts_bucket", ""), "field_prefix": ""}


def rule_errors(params: Mapping[str, Any], env: Mapping[str, Any]) -> list[str]:
    """The canary's cross-field rule (:func:`sim2real.orchestration.stages.run.check_params` lists it): the canary
    thing group is not the fleet group (``thing_group_name``, else the environment config's).

    :return: one sentence per broken rule.
    """
    canary = params.get("canary_thing_group_name") or ""
    fleet = params.get("thing_group_name") or (env.get("greengrass") or {}).get("thing_group_name")
    if canary and canary == fleet:
        return [f"canary_thing_group_name {canary!r} is the fleet's thing group: a canary must be a separate group of "
                "a few robots (or leave it empty for no canary)"]
    return []


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


#: The component that downloads and verifies the model (``containers/greengrass/recipes``).
SETUP_COMPONENT = "com.sim2real.PolicySetup"
#: ``Exporter`` of ``com.sim2real.PolicySetup`` when the policy ships as a torch checkpoint (no ONNX export named):
#: ``module:function`` that converts it on the device (needs torch and ``sim2real.workloads`` there).
CHECKPOINT_EXPORTER = "sim2real.workloads.export:export_onnx"


def deployment_configuration(approval: Mapping[str, Any], manifest: Mapping[str, Any] | None) -> dict[str, str]:
    """The configuration merge of every component: the keys the recipes in ``containers/greengrass/recipes`` read.

    ``com.sim2real.PolicySetup`` downloads ``ModelS3Uri``, refuses it unless its bytes hash to ``ModelSha256``
    and converts a torch checkpoint with ``Exporter``; ``ModelPackageArn`` goes into its ready marker. The robots
    serve the RL policy of the manifest: its ONNX export (``onnx_uri`` / ``onnx_sha256``) when the manifest names
    one, else its checkpoint (``checkpoint_uri`` / ``sha256``) with :data:`CHECKPOINT_EXPORTER`. Every other key
    (``Port``, ``EnginePrecision``, ``Host``, ...) keeps the recipe's default.

    :param approval: the approved model package (``model_package_arn``).
    :param manifest: the verified RL checkpoint manifest.
    :return: ``{"ModelS3Uri", "ModelSha256", "ModelPackageArn", "Exporter"}`` (strings).
    :raises ValueError: no manifest, or one without a URI and sha256 (the device would have nothing to verify).
    """
    if not manifest:
        raise ValueError("no RL checkpoint manifest: the robots' com.sim2real.PolicySetup needs ModelS3Uri and "
                         "ModelSha256 of the policy to serve")
    if manifest.get("onnx_uri"):
        uri, sha, exporter = manifest["onnx_uri"], manifest.get("onnx_sha256"), ""
    else:
        uri, sha, exporter = manifest.get("checkpoint_uri"), manifest.get("sha256"), CHECKPOINT_EXPORTER
    if not uri or not sha:
        raise ValueError(f"the RL checkpoint manifest names no policy URI with its sha256 (uri={uri!r}, "
                         f"sha256={sha!r}): com.sim2real.PolicySetup refuses a model it cannot verify")
    return {"ModelS3Uri": str(uri), "ModelSha256": str(sha),
            "ModelPackageArn": str(approval.get("model_package_arn") or ""), "Exporter": exporter}


def deployment_components(plan: Mapping[str, Any], approval: Mapping[str, Any],
                          manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    """Greengrass ``components`` for CreateDeployment, each with :func:`deployment_configuration` merged.

    :param approval: the approval sensor's output (``model_package_arn``).
    :param manifest: the RL checkpoint manifest (the policy the robots serve).
    :return: ``{component_name: {"componentVersion": v, "configurationUpdate": {"merge": json}}}`` (``Exporter``
        only in :data:`SETUP_COMPONENT`'s merge).
    :raises ValueError: as :func:`deployment_configuration`.
    """
    config = deployment_configuration(approval, manifest)
    # The model keys are declared by every component (inference and benchmark keep them for their logs);
    # Exporter only by the setup component.
    shared = {k: v for k, v in config.items() if k != "Exporter"}
    return {
        name: {"componentVersion": version, "configurationUpdate": {
            "merge": json.dumps(config if name == SETUP_COMPONENT else shared, sort_keys=True)}}
        for name, version in plan["deploy"]["components"].items()
    }


def canary_model_version(plan: Mapping[str, Any], components: Mapping[str, Any]) -> str:
    """What the canary is judged on: the ``ModelSha256`` the components deploy (the field episodes'
    ``model_version``), or ``""`` when the run has no canary."""
    if not plan["deploy"]["canary_thing_group_name"]:
        return ""
    return json.loads(components[SETUP_COMPONENT]["configurationUpdate"]["merge"])["ModelSha256"]


def add_canary_tasks(*, deploy_task_id: str, verdict_task_id: str, review_task_id: str, thing_group_name: Any,
                     deployment_name: Any, model_version: Any, bucket: Any, prefix: Any, min_episodes: Any,
                     window_minutes: Any, min_success_rate: Any, review: Any,
                     release: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """The canary's three tasks, as both DAGs run them, chained: the release to the canary thing group
    (:class:`~sim2real.orchestration.operators.canary.CanaryDeploymentOperator`, ``release``: the fleet deployment's
    own arguments), the verdict on its robots' field episodes
    (:class:`~sim2real.orchestration.operators.canary.CanaryVerdictOperator`, listing them every :data:`FIELD_POLL`
    seconds) and, with ``review`` true, a person's promote or abort
    (:class:`~sim2real.orchestration.operators.canary_review.CanaryReviewOperator`). Every other argument may be an
    XComArg or a template (the DAG's plan).

    :return: ``(deploy_to_canary, canary_verdict, canary_review)``; with an empty ``thing_group_name`` all three
        succeed at once and do nothing (the review also with ``review`` false).
    """
    from sim2real.orchestration.operators.canary import CanaryDeploymentOperator, CanaryVerdictOperator
    from sim2real.orchestration.operators.canary_review import CanaryReviewOperator

    to_canary = CanaryDeploymentOperator(task_id=deploy_task_id, thing_group_name=thing_group_name,
                                         deployment_name=deployment_name, **release)
    verdict = CanaryVerdictOperator(
        task_id=verdict_task_id,
        thing_group_name=thing_group_name,
        deployment_id=f"{{{{ (ti.xcom_pull(task_ids='{to_canary.task_id}') or {{}}).get('deployment_id', '') }}}}",
        deployment_name=deployment_name, model_version=model_version, bucket=bucket, prefix=prefix,
        min_episodes=min_episodes, window_minutes=window_minutes, min_success_rate=min_success_rate,
        review=review,  # on: the verdict only recommends, the review decides
        waiter_delay=FIELD_POLL, execution_timeout=CANARY_VERDICT_EXECUTION_TIMEOUT, doc_md=DOC,
    )
    person = CanaryReviewOperator(
        task_id=review_task_id, thing_group_name=thing_group_name, deployment_name=deployment_name,
        verdict_task_id=verdict.task_id,
        review=review,  # off (the default): succeeds at once, the verdict decided
        response_timeout=CANARY_REVIEW_RESPONSE_TIMEOUT,
        # each run of the task: the request, reading the answer, starting an abort's rollback (its wait is deferred
        # with its own limit)
        execution_timeout=dt.timedelta(minutes=15), doc_md=DOC,
    )
    to_canary >> verdict >> person
    return to_canary, verdict, person


def add_tasks(plan: Any, *, approval: Any, manifest: Any) -> Any:
    """Add the ``deploy`` group after the approval; return the deployment operator (the fleet group's)."""
    from airflow.sdk import TaskGroup, task

    from sim2real.orchestration import assets, notifications as notify
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

        # With a canary group, the release goes there first and on to the fleet only when it is promoted; without
        # one, the canary's tasks succeed at once and do nothing (the fleet deployment follows every one of its
        # upstream tasks' success: a skipped canary would skip it).
        @task(task_id=ids.local(ids.CANARY_MODEL_VERSION), execution_timeout=dt.timedelta(minutes=1))
        def canary_model_version_of(plan: dict, components: dict) -> str:
            return canary_model_version(plan, components)

        model_version = canary_model_version_of(plan["plan"], components)
        # the same release, checks and limits for the canary group and the fleet group
        release = {
            "components": components,
            "iot_job_configuration": deploy.iot_job_configuration,
            "deployment_timeout_seconds": deploy.timeout_seconds,  # the form's deployment_timeout_minutes
            "model_package_arn": approval.output["model_package_arn"],  # read again: deployed only if still Approved
            "waiter_delay": POLL,
            # the release's wait and an automatic rollback's, each at most deployment_timeout_minutes (110)
            "execution_timeout": DEPLOY_EXECUTION_TIMEOUT,
            "doc_md": DOC,
        }
        to_canary, _, review = add_canary_tasks(
            deploy_task_id=ids.local(ids.DEPLOY_TO_CANARY), verdict_task_id=ids.local(ids.CANARY_VERDICT),
            review_task_id=ids.local(ids.CANARY_REVIEW),
            thing_group_name=deploy.canary_thing_group_name, deployment_name=deploy.canary_deployment_name,
            model_version=model_version, bucket=deploy.field_bucket, prefix=deploy.field_prefix,
            min_episodes=deploy.canary_min_episodes, window_minutes=deploy.canary_window_minutes,
            min_success_rate=deploy.field_min_success_rate, review=deploy.canary_review, release=release)
        deployment = GreengrassDeploymentOperator(
            task_id=ids.local(ids.DEPLOY_TO_ROBOTS),
            thing_group_name=deploy.thing_group_name,
            deployment_name=deploy.deployment_name,
            **release,
            on_success_callback=notify.deployed(),
            outlets=[DEPLOYED_MODEL_PACKAGE_ASSET],  # emitted only when every robot reports SUCCEEDED
            post_execute=assets.deployed_model_post_execute,  # package, deployment id, devices on the event
        )
        approval >> deploy_enabled(plan["plan"]) >> components >> deployment
        # add_canary_tasks chains its three tasks; no canary: they succeed at once; no review: the review does
        model_version >> to_canary
        review >> deployment
    return deployment
