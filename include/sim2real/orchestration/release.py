"""Release an already-approved model package to the robots (the ``sim_to_real_release`` DAG's logic).

The ``sim_to_real`` DAG deploys the package its own fine-tune registered. This module releases a
package approved **outside** a run (SageMaker Studio, an older approved version, a rollback), without
training: resolve the package in the SageMaker Model Registry, refuse anything that is not Approved,
re-verify the RL policy that ships with it (the form's checkpoint manifest, else the checkpoint of the run that
registered the package, found through that run's lineage record), deploy with AWS IoT
Greengrass v2 (the same components and configuration merge as the main DAG,
:func:`sim2real.orchestration.stages.deployment_components`) and write ``runs/<run_key>/release.json`` (+
``release.md``) in the artifacts bucket.

Plain functions; the DAG file wraps them in tasks and tests call them directly.

Sources: Amazon SageMaker API Reference — DescribeModelPackage (``ModelApprovalStatus`` ∈ Approved |
Rejected | PendingManualApproval, ``ModelPackageGroupName``, ``ModelPackageVersion``,
``InferenceSpecification.Containers[].ModelDataUrl``), ListModelPackages (``ModelApprovalStatus``,
``SortBy=CreationTime``); model package ARN ``arn:<partition>:sagemaker:<region>:<account>:model-package/<group>/<version>``
(the group part is lower-case in ARNs); AWS IoT Greengrass V2 API Reference — ListDeployments, GetDeployment,
ListEffectiveDeployments.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from sim2real.contract import schemas
from sim2real.contract.run_key import make_run_key, run_prefix
from sim2real.orchestration.config import RUN_KEY_TAG
from sim2real.orchestration.lineage import CANARY_REVIEW_KEY, CANARY_VERDICT_KEY, field_entry, field_lines
from sim2real.orchestration.params import ParamRuleError, declare_dialect
from sim2real.orchestration.stages import deployment_components, deployment_timeout_seconds, iot_job_configuration
from sim2real.orchestration.stages.deploy import CANARY_DEFAULTS, canary_plan
from sim2real.orchestration.stages.deploy import rule_errors as canary_rule_errors
from sim2real.orchestration.stages.run import build_params

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
#: JSON schema (draft 2020-12) of ``release.json``, in the contract package (``sim2real.contract.schemas``).
SCHEMA_PATH = schemas.path("release")

SECTION_PACKAGE = "Model package"
SECTION_DEPLOY = "Edge deployment"
SECTION_POLICY = "RL policy"

#: SageMaker ``ModelPackageGroupName`` pattern (API reference).
GROUP_PATTERN = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
#: A versioned model package ARN (a package of a model package group).
ARN_PATTERN = (r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:model-package/"
               r"(?P<group>" + GROUP_PATTERN + r")/(?P<version>[0-9]+)")
_ARN_RE = re.compile(f"^{ARN_PATTERN}$")
MANIFEST_PATTERN = r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/(.+/)?manifest\.json"

#: Greengrass per-device statuses that mean the device runs the release.
DEVICE_SUCCESS = frozenset({"SUCCEEDED", "COMPLETED"})

#: release.json task key → task id of the release DAG.
TASKS = {
    "prepare": "prepare_release",
    "resolve": "resolve_model_package",
    "components": "deployment_components",
    "canary_deploy": "deploy_to_canary",
    "canary_verdict": "canary_verdict",
    "canary_review": "canary_review",
    "deploy": "deploy_to_robots",
}


def build_release_params() -> dict[str, Any]:
    """The release DAG's ``params`` (``airflow.sdk.Param`` objects; no I/O, safe at parse time).

    The rollout fields reuse the ``sim_to_real`` form's definitions (:func:`sim2real.orchestration.stages.run.build_params`),
    so both DAGs accept the same limits.
    """
    from airflow.sdk import Param

    main = build_params()

    def same_as_main(name: str) -> Any:
        spec = main[name]
        return Param(spec.value, description=spec.description, **spec.schema)

    return declare_dialect({
        # Optional text fields are nullable: the trigger form sends an empty field as null.
        "model_package_arn": Param(
            None, type=["null", "string"], maxLength=2048, pattern=f"^({ARN_PATTERN})?$", title="Model package ARN",
            description="The versioned package to release (arn:aws:sagemaker:<region>:<account>:model-package/"
            "<group>/<version>); it must be Approved. Empty: the latest Approved version of the model package "
            "group.",
            section=SECTION_PACKAGE,
        ),
        "model_package_group_name": Param(
            None, type=["null", "string"], maxLength=63, pattern=f"^({GROUP_PATTERN})?$", title="Model package group",
            description="Empty: the ARN's group, else the environment config's sagemaker.model_package_group. "
            "When an ARN is given too, it must belong to this group.",
            section=SECTION_PACKAGE,
        ),
        "thing_group_name": same_as_main("thing_group_name"),
        "rollout_max_per_minute": same_as_main("rollout_max_per_minute"),
        "abort_failure_threshold_percent": same_as_main("abort_failure_threshold_percent"),
        "deployment_timeout_minutes": same_as_main("deployment_timeout_minutes"),
        # the canary, as in sim_to_real (empty group: none)
        **{name: same_as_main(name) for name in CANARY_DEFAULTS},
        "policy_checkpoint_manifest_uri": Param(
            None, type=["null", "string"], maxLength=1024, pattern=f"^({MANIFEST_PATTERN})?$",
            title="RL checkpoint manifest",
            description="s3://.../manifest.json written by an RL training run: its checkpoint (and ONNX "
            "export, when the manifest names one) is the policy the robots' policy server serves with the "
            "package, after its sha256 is verified again. Empty: the policy of the sim_to_real run that "
            "registered the package (its CustomerMetadataProperties sim2real:run-key → that run's lineage "
            "record runs/<run_key>/lineage.json), verified again; a package registered outside a run needs "
            "this field (refused before any deployment otherwise).",
            section=SECTION_POLICY,
        ),
    })


def parse_model_package_arn(arn: str) -> tuple[str, int]:
    """``(group name, version)`` of a versioned model package ARN.

    The group comes back as written in the ARN (SageMaker writes it lower-case there).

    :raises ValueError: ``arn`` is not ``arn:<partition>:sagemaker:<region>:<account>:model-package/<group>/<version>``.
    """
    match = _ARN_RE.match(arn or "")
    if not match:
        raise ValueError(f"model_package_arn {arn!r} is not a versioned model package ARN "
                         "(arn:aws:sagemaker:<region>:<account>:model-package/<group>/<version>)")
    return match["group"], int(match["version"])


def check_release_params(params: Mapping[str, Any], env: Mapping[str, Any] | None = None) -> None:
    """The release form's cross-field rules (each field's own limits are checked by Airflow before the run).

    :param env: the environment config (its fleet thing group, for the canary's rule); None: the form alone.
    :raises sim2real.orchestration.params.ParamRuleError: listing every broken rule with its fix: an ARN that is not a
        versioned model package ARN; an ARN whose group is not ``model_package_group_name``; a canary thing group
        that is the fleet's (:func:`sim2real.orchestration.stages.deploy.rule_errors`).
    """
    errors: list[str] = list(canary_rule_errors(params, env or {}))
    arn = (params.get("model_package_arn") or "").strip()
    group = (params.get("model_package_group_name") or "").strip()
    if arn:
        try:
            arn_group, _ = parse_model_package_arn(arn)
        except ValueError as err:
            errors.append(str(err))
        else:
            if group and arn_group.lower() != group.lower():
                errors.append(f"model_package_arn {arn} belongs to model package group {arn_group!r}, not to "
                              f"model_package_group_name {group!r}: leave model_package_group_name empty or give "
                              "the ARN of a version of that group")
    if errors:
        raise ParamRuleError(errors)


def plan_release(*, dag_id: str, run_id: str, params: Mapping[str, Any], env: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the release and compute every name the tasks use.

    :param params: the run's params (Airflow-validated field by field).
    :param env: the environment config (``sim2real.orchestration.config.load_environment()``).
    :return: ``{"run_key", "bucket", "run_prefix", "run_uri", "runs_uri", "release_uri", "markdown_uri", "region",
        "params", "model_package_arn" (None: the latest Approved), "model_package_group",
        "policy_checkpoint_manifest_uri" (or None), "deploy": {"thing_group_name", "components"
        {name: version}, "deployment_name", "iot_job_configuration", "timeout_seconds", and the canary's
        (:func:`sim2real.orchestration.stages.deploy.canary_plan`)}}``. ``run_key`` and ``deploy`` are what
        :func:`sim2real.orchestration.stages.deployment_components` reads.
    :raises sim2real.orchestration.params.ParamRuleError: a cross-field rule is broken (:func:`check_release_params`).
    """
    check_release_params(params, env)
    run_key = make_run_key(dag_id, run_id)
    bucket = env["artifacts_bucket"]
    prefix = run_prefix(run_key)
    arn = (params.get("model_package_arn") or "").strip() or None
    group = ((params.get("model_package_group_name") or "").strip()
             or (parse_model_package_arn(arn)[0] if arn else env["sagemaker"]["model_package_group"]))
    gg = env["greengrass"]
    return {
        "run_key": run_key,
        "bucket": bucket,
        "run_prefix": prefix,
        "run_uri": f"s3://{bucket}/{prefix}",
        "runs_uri": f"s3://{bucket}/runs/",  # every run's folder
        "release_uri": f"s3://{bucket}/{prefix}release.json",
        "markdown_uri": f"s3://{bucket}/{prefix}release.md",
        "region": env["region"],
        "params": dict(params),
        "model_package_arn": arn,
        "model_package_group": group,
        "policy_checkpoint_manifest_uri": (params.get("policy_checkpoint_manifest_uri") or "").strip() or None,
        "deploy": {
            "thing_group_name": (params.get("thing_group_name") or "").strip() or gg["thing_group_name"],
            "components": dict(gg["components"]),
            "deployment_name": f"sim2real-{run_key}",
            "iot_job_configuration": iot_job_configuration(params),
            "timeout_seconds": deployment_timeout_seconds(params),
            **canary_plan(params, env, run_key),
        },
    }


def resolve_model_package(hook: Any, plan: Mapping[str, Any]) -> dict[str, Any]:
    """The package to release: the given ARN, else the newest Approved version of the plan's group.

    :param hook: a :class:`sim2real.orchestration.hooks.model_registry.ModelRegistryHook`.
    :param plan: :func:`plan_release`'s output.
    :return: ``{"model_package_arn", "model_package_group_name", "version", "approval_status": "Approved",
        "approval_description", "model_data_url", "creation_time" (ISO 8601), "selected_by": "arn" | "latest_approved"}``.
    :raises AirflowFailException: (not retried) no such package; a package of another group than the
        plan's; no Approved version in the group; a package that is not Approved (message names the
        ARN, its status and how to approve it).
    """
    from botocore.exceptions import ClientError

    from airflow.providers.common.compat.sdk import AirflowFailException
    from sim2real.orchestration.hooks.model_registry import approval_result, not_approved_message

    group, arn = plan["model_package_group"], plan.get("model_package_arn")
    try:
        package = hook.describe_model_package(arn) if arn else hook.latest_approved_model_package(group)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code")
        if code in ("ValidationException", "ResourceNotFound", "ResourceNotFoundException"):
            what = f"model package {arn}" if arn else f"model package group {group}"
            raise AirflowFailException(f"{what} not found in the SageMaker Model Registry ({err}); check the "
                                       "ARN / group name and the region of the AWS connection") from err
        raise
    if package is None:
        raise AirflowFailException(
            f"model package group {group} has no Approved version: approve one in SageMaker Studio (Models > "
            f"Registered models > {group}) or give model_package_arn")
    actual_group = package.get("ModelPackageGroupName") or ""
    if actual_group and actual_group.lower() != group.lower():
        raise AirflowFailException(f"model package {package['ModelPackageArn']} belongs to group {actual_group}, "
                                   f"not {group}")
    if package.get("ModelApprovalStatus") != "Approved":
        raise AirflowFailException(not_approved_message(package))
    created = package.get("CreationTime")
    result = approval_result(package)
    if not result.get("model_data_url"):
        raise AirflowFailException(f"model package {result['model_package_arn']} has no "
                                   "InferenceSpecification.Containers[0].ModelDataUrl: nothing to deploy")

    return {
        **result,
        "model_package_group_name": actual_group or group,
        "version": package.get("ModelPackageVersion"),
        "creation_time": created.isoformat() if isinstance(created, dt.datetime) else created,
        "selected_by": "arn" if arn else "latest_approved",
        # The sim_to_real run that registered it (the pipeline's RegisterModel step), None for one registered by hand.
        "run_key": (package.get("CustomerMetadataProperties") or {}).get(RUN_KEY_TAG),
    }


def resolve_release(hook: Any, plan: Mapping[str, Any], aws_conn_id: str | None = "aws_default") -> dict[str, Any]:
    """The ``resolve_model_package`` task: :func:`resolve_model_package`, then :func:`verify_policy_manifest` of the
    plan's manifest, or (none given) :func:`lineage_policy`.

    :return: :func:`resolve_model_package`'s dict plus ``"manifest"`` (the verified manifest: the form's, else the
        one :func:`lineage_policy` finds through the package's run).
    :raises AirflowFailException: as those functions.
    """
    package = resolve_model_package(hook, plan)
    uri = plan.get("policy_checkpoint_manifest_uri")
    manifest = verify_policy_manifest(uri, aws_conn_id) if uri else lineage_policy(plan, package, aws_conn_id)
    return {**package, "manifest": manifest}


def lineage_uri(plan: Mapping[str, Any], run_key: str) -> str:
    """``<runs_uri><run_key>/lineage.json``: the lineage record a ``sim_to_real`` run writes (``runs_uri``:
    ``s3://<artifacts bucket>/runs/``, :func:`plan_release`)."""
    return f"{plan.get('runs_uri') or 's3://' + plan['bucket'] + '/runs/'}{run_key}/lineage.json"


def lineage_policy(plan: Mapping[str, Any], package: Mapping[str, Any],
                   aws_conn_id: str | None = "aws_default") -> dict[str, Any]:
    """The RL policy that ships with ``package`` when the form names no manifest: the checkpoint of the
    ``sim_to_real`` run that registered it, as that run's lineage record says (``stages.checkpoint``), its manifest
    (``manifest.json`` beside the checkpoint, where the trainer writes it) verified again
    (:func:`verify_policy_manifest`) and naming the same sha256 the run evaluated.

    The robots' policy server serves an RL policy (the deployment's ``ModelS3Uri`` / ``ModelSha256``, which
    ``com.sim2real.PolicySetup`` downloads and verifies): a release without one has nothing to serve, so it is refused here, before any
    deployment.

    :return: :func:`verify_policy_manifest`'s dict.
    :raises AirflowFailException: the package names no run (registered outside ``sim_to_real``), the run has no
        lineage record (still running, or deleted) or no checkpoint in it, or the manifest differs from the lineage.
    """
    from airflow.providers.common.compat.sdk import AirflowFailException
    from sim2real.orchestration.triggers.checkpoint import manifest_path

    arn, run_key = package.get("model_package_arn"), package.get("run_key")
    fix = ("give policy_checkpoint_manifest_uri (s3://.../manifest.json of the RL training run whose policy the "
           "robots should serve with this package)")
    if not run_key:
        raise AirflowFailException(
            f"model package {arn} was not registered by a sim_to_real run (no CustomerMetadataProperties "
            f"sim2real:run-key), so no RL policy is known for it and the robots would have nothing to serve: {fix}")
    uri = lineage_uri(plan, run_key)
    try:
        lineage = json.loads(manifest_path(uri, aws_conn_id).read_text())
    except FileNotFoundError as err:
        raise AirflowFailException(f"model package {arn} was registered by run {run_key}, which has no lineage "
                                   f"record at {uri} (the run is still going, or its folder was deleted): {fix}") from err
    checkpoint = (lineage.get("stages") or {}).get("checkpoint") or {}
    if not checkpoint.get("checkpoint_uri") or not checkpoint.get("sha256"):
        raise AirflowFailException(f"the lineage record {uri} of run {run_key} (which registered model package "
                                   f"{arn}) names no checkpoint: {fix}")
    manifest_uri = str(checkpoint["checkpoint_uri"]).rsplit("/", 1)[0] + "/manifest.json"
    manifest = verify_policy_manifest(manifest_uri, aws_conn_id)
    if manifest["sha256"] != checkpoint["sha256"]:
        raise AirflowFailException(f"{manifest_uri} names checkpoint sha256 {manifest['sha256']}, but run {run_key} "
                                   f"evaluated and registered {checkpoint['sha256']} (lineage {uri}): {fix}")
    log.info("policy of model package %s: run %s's checkpoint %s (sha256 %s, from its lineage %s)", arn, run_key,
             manifest["checkpoint_uri"], manifest["sha256"], uri)
    return manifest


def verify_policy_manifest(manifest_uri: str, aws_conn_id: str | None = "aws_default") -> dict[str, Any]:
    """Read an RL checkpoint manifest and verify the sha256 of what it names, again.

    Uses the checkpoint sensor's helpers (:func:`sim2real.orchestration.sensors.checkpoint.validate_manifest`,
    :func:`~sim2real.orchestration.sensors.checkpoint.sha256_of`, streamed): the checkpoint's bytes must hash to
    ``sha256``; when the manifest names an ONNX export (``onnx_uri`` + ``onnx_sha256``), that too.

    :param manifest_uri: ``s3://.../manifest.json`` (or a local path).
    :return: the manifest plus ``"verified_sha256": True`` and ``"manifest_uri"``.
    :raises AirflowFailException: the manifest or an object it names is missing, not valid JSON, lacks
        ``sha256`` / ``checkpoint_uri``, or a hash differs (message has both hashes).
    """
    from airflow.providers.common.compat.sdk import AirflowFailException
    from sim2real.orchestration.sensors.checkpoint import sha256_of, validate_manifest
    from sim2real.orchestration.triggers.checkpoint import manifest_path

    try:
        manifest = json.loads(manifest_path(manifest_uri, aws_conn_id).read_text())
    except FileNotFoundError as err:
        raise AirflowFailException(f"policy_checkpoint_manifest_uri {manifest_uri} does not exist") from err
    except json.JSONDecodeError as err:
        raise AirflowFailException(f"checkpoint manifest {manifest_uri} is not valid JSON: {err}") from err
    manifest = validate_manifest(manifest, manifest_uri)
    pairs = [("checkpoint", manifest["checkpoint_uri"], manifest["sha256"])]
    if manifest.get("onnx_uri"):
        if not manifest.get("onnx_sha256"):
            raise AirflowFailException(f"checkpoint manifest {manifest_uri} names onnx_uri without onnx_sha256")
        pairs.append(("ONNX policy", manifest["onnx_uri"], manifest["onnx_sha256"]))
    for what, uri, expected in pairs:
        try:
            actual = sha256_of(uri, aws_conn_id)
        except FileNotFoundError as err:
            raise AirflowFailException(f"{what} {uri} named by {manifest_uri} does not exist") from err
        if actual != str(expected).lower():
            raise AirflowFailException(f"{what} {uri} sha256 mismatch: manifest {manifest_uri} says {expected}, "
                                       f"the object hashes to {actual}")
        log.info("%s %s verified (sha256 %s)", what, uri, actual)
    return {**manifest, "manifest_uri": manifest_uri, "verified_sha256": True}


def release_components(plan: Mapping[str, Any], package: Mapping[str, Any],
                       manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    """Greengrass ``components`` of the release: :func:`sim2real.orchestration.stages.deployment_components` on the
    release plan (``run_key``, ``deploy.components``), the resolved package and the verified manifest."""
    return deployment_components(plan, package, manifest or None)


def deployment_state(hook: Any, plan: Mapping[str, Any], deploy_output: Mapping[str, Any] | None,
                     rollback: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """What Greengrass says about this release's deployment, also when the deploy task failed.

    :param hook: a :class:`sim2real.orchestration.hooks.greengrass.GreengrassV2Hook`.
    :param deploy_output: the deploy task's return value (``deployment_id``, ``iot_job_id``, ``target_arn``,
        ``devices``) or ``None`` (failed / not run): then the deployment is looked up by name on the thing
        group (ListDeployments, newest first).
    :param rollback: the deploy task's XCom ``rollback`` (the automatic rollback it started after the release
        failed on some robots: ``deployment_id``, ``deployment_name``, ``previous_deployment_id``,
        ``previous_deployment_name``), or ``None``.
    :return: ``{"deployment_id", "deployment_name", "iot_job_id", "target_arn", "deployment_status",
        "devices": {thing: status}, "device_reasons": {thing: reason}}`` (plus ``rollback``: that rollback with
        its ``deployment_status`` and ``devices``), or ``None`` when no deployment was created. Device statuses
        come from ListEffectiveDeployments.
    """
    deploy = plan["deploy"]
    out = dict(deploy_output or {})
    if not out.get("deployment_id"):
        try:
            target = hook.thing_group_arn(deploy["thing_group_name"])
        except ValueError:
            return None
        found = None
        kwargs: dict[str, Any] = {"targetArn": target, "historyFilter": "ALL"}
        while found is None:
            page = hook.conn.list_deployments(**kwargs)
            found = next((d for d in page.get("deployments", [])
                          if d.get("deploymentName") == deploy["deployment_name"]), None)
            if found is None and not page.get("nextToken"):
                return None
            kwargs["nextToken"] = page.get("nextToken")
        out = {"deployment_id": found["deploymentId"], "target_arn": target}
    deployment = hook.conn.get_deployment(deploymentId=out["deployment_id"])
    target = out.get("target_arn") or deployment.get("targetArn")
    things = hook.list_core_device_names(target) if target else []
    reports = hook.device_reports(out["deployment_id"], things)
    state = {
        "deployment_id": out["deployment_id"],
        "deployment_name": deploy["deployment_name"],
        "iot_job_id": out.get("iot_job_id") or deployment.get("iotJobId"),
        "target_arn": target,
        "deployment_status": deployment.get("deploymentStatus"),
        "devices": {t: r["status"] for t, r in sorted(reports.items())},
        "device_reasons": {t: r["reason"] for t, r in sorted(reports.items()) if r.get("reason")},
    }
    if rollback and rollback.get("deployment_id"):
        back = hook.device_reports(rollback["deployment_id"], things)
        state["rollback"] = {
            **{k: rollback.get(k) for k in ("deployment_id", "deployment_name", "previous_deployment_id",
                                            "previous_deployment_name")},
            "deployment_status": hook.conn.get_deployment(deploymentId=rollback["deployment_id"]).get(
                "deploymentStatus"),
            "devices": {t: r["status"] for t, r in sorted(back.items())},
        }
    return state


def release_outcome(package: Mapping[str, Any] | None, deployment: Mapping[str, Any] | None) -> str:
    """``deployed`` (every device SUCCEEDED/COMPLETED), ``deployment_failed`` (a deployment exists, not every
    device succeeded) or ``not_deployed`` (refused or stopped before any deployment)."""
    if not deployment:
        return "not_deployed"
    devices = deployment.get("devices") or {}
    if package and devices and set(devices.values()) <= DEVICE_SUCCESS:
        return "deployed"
    return "deployment_failed"


def build_release_record(*, plan: Mapping[str, Any], dag_id: str, run_id: str,
                         package: Mapping[str, Any] | None, manifest: Mapping[str, Any] | None,
                         components: Mapping[str, Any] | None, deployment: Mapping[str, Any] | None,
                         task_states: Mapping[str, Mapping[str, Any]] | None = None,
                         started_at: dt.datetime | None = None, now: dt.datetime | None = None,
                         deploy_check: Mapping[str, Any] | None = None,
                         canary: Mapping[str, Any] | None = None,
                         canary_review: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``release.json`` document (shape: ``schemas/release.schema.json``).

    :param canary: the canary's verdict and evidence (XCom ``canary_verdict`` of the ``canary_verdict`` task) →
        ``field`` (:func:`sim2real.orchestration.lineage.field_entry`, without a simulation side: a release trains
        and evaluates nothing); ``None``: no canary.
    :param canary_review: a person's promote or abort (XCom ``decision`` of ``canary_review``); ``None``: none.

    :param deploy_check: the deploy task's reading of the package right before CreateDeployment (XCom
        ``model_package_check``: ``model_approval_status``) → ``model_package.approval_status_at_deploy``.

    :param task_states: ``{task_id: {"state", "duration_s"}}`` (:func:`sim2real.orchestration.report.collect_task_states`).
    :param started_at: the DAG run's start (for ``elapsed_s``), optional.
    :return: a JSON-serialisable dict; a part that was not produced is ``null``, never left out.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    states = dict(task_states or {})
    tasks = {key: {"task_id": task_id, "state": (states.get(task_id) or {}).get("state"),
                   "duration_s": (states.get(task_id) or {}).get("duration_s")}
             for key, task_id in TASKS.items()}
    policy = None
    if manifest:
        policy = {k: manifest.get(k) for k in ("manifest_uri", "checkpoint_uri", "sha256", "onnx_uri",
                                                "onnx_sha256", "task", "iteration", "run_key")}
        policy["verified_sha256"] = bool(manifest.get("verified_sha256"))
    pkg = None
    if package:
        pkg = {k: package.get(k) for k in ("model_package_arn", "model_package_group_name", "version",
                                           "approval_status", "approval_description", "model_data_url",
                                           "creation_time", "selected_by")}
        pkg["approval_status_at_deploy"] = (deploy_check or {}).get("model_approval_status")
    elapsed = (now - started_at).total_seconds() if started_at else None
    return {
        "schema_version": SCHEMA_VERSION,
        "run_key": plan["run_key"],
        "dag_id": dag_id,
        "run_id": run_id,
        "created_at": now.isoformat().replace("+00:00", "Z"),
        "outcome": release_outcome(package, deployment),
        "params": dict(plan.get("params") or {}),
        "requested": {"model_package_arn": plan.get("model_package_arn"),
                      "model_package_group": plan["model_package_group"],
                      "policy_checkpoint_manifest_uri": plan.get("policy_checkpoint_manifest_uri")},
        "model_package": pkg,
        "policy": policy,
        "thing_group_name": plan["deploy"]["thing_group_name"],
        "deployment_name": plan["deploy"]["deployment_name"],
        "components": dict(components) if components else None,
        "deployment": dict(deployment) if deployment else None,
        "field": field_entry(canary, None, canary_review),
        "tasks": tasks,
        "durations": {
            "elapsed_s": elapsed,
            "deploy_s": tasks["deploy"]["duration_s"],
            "tasks_total_s": sum(t["duration_s"] or 0.0 for t in tasks.values()),
        },
    }


@lru_cache(maxsize=1)
def release_schema() -> dict[str, Any]:
    """The ``release.json`` JSON schema (parsed once)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def release_errors(record: Mapping[str, Any]) -> list[str]:
    """Every mismatch between ``record`` and ``release.schema.json`` (``"<json path>: <message>"``; empty = valid)."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(release_schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)
    doc = json.loads(json.dumps(record, default=str))
    found = list(validator.iter_errors(doc))
    if doc.get("field") is not None:  # its shape is the lineage's field entry, checked with that schema
        lineage = schemas.load("lineage")
        field = Draft202012Validator({"$defs": lineage["$defs"], **lineage["properties"]["field"]},
                                     format_checker=Draft202012Validator.FORMAT_CHECKER)
        found += [type(e)(e.message, path=["field", *e.absolute_path]) for e in field.iter_errors(doc["field"])]
    return [f"{e.json_path}: {e.message}" for e in sorted(found, key=lambda e: e.json_path)]


class ReleaseSchemaError(ValueError):
    """A release record does not match ``release.schema.json``; ``errors`` lists each mismatch."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("release.json does not match release.schema.json:\n- " + "\n- ".join(errors))


def render_release_markdown(record: Mapping[str, Any]) -> str:
    """A short human summary of a release record (``release.md``)."""
    pkg = record.get("model_package") or {}
    dep = record.get("deployment") or {}
    pol = record.get("policy")
    lines = [
        f"# Release {record['run_key']}: {record['outcome']}",
        "",
        f"- Run: `{record['dag_id']}` / `{record['run_id']}`, written {record['created_at']}",
        f"- Model package: `{pkg.get('model_package_arn') or record['requested'].get('model_package_arn') or '-'}` "
        f"(version {pkg.get('version', '-')}, {pkg.get('approval_status') or 'not resolved'}, "
        f"selected by {pkg.get('selected_by') or '-'})",
        f"- Model data: `{pkg.get('model_data_url') or '-'}`",
        "- RL policy: " + (f"`{pol['checkpoint_uri']}` sha256 `{pol['sha256']}` (verified)" if pol else "none"),
        f"- Thing group: `{record['thing_group_name']}`, deployment `{dep.get('deployment_id') or '-'}` "
        f"({dep.get('deployment_status') or 'not created'})",
    ]
    for name, spec in sorted((record.get("components") or {}).items()):
        lines.append(f"  - component `{name}` {spec.get('componentVersion')}")
    for thing, status in sorted((dep.get("devices") or {}).items()):
        reason = (dep.get("device_reasons") or {}).get(thing)
        lines.append(f"  - device `{thing}`: {status}" + (f" ({reason})" if reason else ""))
    back = dep.get("rollback")
    if back:
        devices = back.get("devices") or {}
        done = bool(devices) and set(devices.values()) <= DEVICE_SUCCESS
        lines.append(("- Rolled back automatically to" if done else "- Automatic rollback NOT finished (the fleet "
                      "may be mixed): back to")
                     + f" `{back['previous_deployment_name']}` (deployment `{back['previous_deployment_id']}`): "
                     f"rollback deployment `{back['deployment_id']}` ({back.get('deployment_status') or '-'}), "
                     "devices: " + (", ".join(f"`{t}` {s}" for t, s in sorted(devices.items())) or "none"))
    lines += field_lines(record.get("field"))
    lines += ["", "| task | state | duration (s) |", "|---|---|---|"]
    for task in record["tasks"].values():
        d = task.get("duration_s")
        lines.append(f"| {task['task_id']} | {task.get('state') or '-'} | {'' if d is None else f'{d:.1f}'} |")
    return "\n".join(lines) + "\n"


def write_release_record(*, plan: Mapping[str, Any], dag_run: Any, ti: Any,
                         aws_conn_id: str | None = "aws_default") -> dict[str, Any]:
    """Collect the release's task outputs and Greengrass' view of the deployment, validate, and write
    ``runs/<run_key>/release.json`` and ``release.md``.

    Runs as the DAG's teardown: a task that failed or never ran has no output, its part is ``null``.

    :return: ``{"release_uri", "markdown_uri", "outcome", "deployment_id"}``.
    :raises ReleaseSchemaError: the record does not match ``release.schema.json`` (nothing written).
    :raises botocore.exceptions.ClientError: the artifacts bucket cannot be written.
    """
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from sim2real.orchestration.hooks.greengrass import GreengrassV2Hook
    from sim2real.orchestration.report import _pull, collect_task_states

    outputs: dict[str, Any] = {}
    for key in ("resolve", "components", "deploy"):
        try:
            outputs[key] = ti.xcom_pull(task_ids=TASKS[key])
        except Exception as err:  # noqa: BLE001 - a task that never ran has no XCom
            log.info("no output from %s: %s", TASKS[key], err)
            outputs[key] = None
    resolved = dict(outputs["resolve"] or {})
    manifest = resolved.pop("manifest", None)
    deployment = deployment_state(GreengrassV2Hook(aws_conn_id=aws_conn_id), plan, outputs["deploy"],
                                  _deploy_xcom(ti, "rollback"))
    record = build_release_record(
        plan=plan, dag_id=dag_run.dag_id, run_id=dag_run.run_id,
        package=resolved or None, manifest=manifest,
        components=outputs["components"], deployment=deployment,
        task_states=collect_task_states(dag_run.dag_id, dag_run.run_id),
        started_at=getattr(dag_run, "start_date", None),
        deploy_check=_deploy_xcom(ti, "model_package_check"),
        canary=_pull(ti, TASKS["canary_verdict"], CANARY_VERDICT_KEY),
        canary_review=_pull(ti, TASKS["canary_review"], CANARY_REVIEW_KEY),
    )
    errors = release_errors(record)
    if errors:
        raise ReleaseSchemaError(errors)
    hook = S3Hook(aws_conn_id=aws_conn_id)
    bucket, prefix = plan["bucket"], plan["run_prefix"]
    hook.load_string(json.dumps(record, indent=2, sort_keys=True, default=str), key=f"{prefix}release.json",
                     bucket_name=bucket, replace=True)
    hook.load_string(render_release_markdown(record), key=f"{prefix}release.md", bucket_name=bucket, replace=True)
    log.info("release record written to %s (outcome %s)", plan["release_uri"], record["outcome"])
    return {"release_uri": plan["release_uri"], "markdown_uri": plan["markdown_uri"], "outcome": record["outcome"],
            "deployment_id": (deployment or {}).get("deployment_id")}


def _deploy_xcom(ti: Any, key: str) -> dict[str, Any] | None:
    """The deploy task's XCom ``key`` (``model_package_check``, ``rollback``); ``None`` when it has none."""
    from sim2real.orchestration.report import _pull

    return _pull(ti, TASKS["deploy"], key)


def deployed_asset_extra(plan: Mapping[str, Any], package: Mapping[str, Any] | None,
                         result: Mapping[str, Any] | None) -> dict[str, Any]:
    """Extra of the deployed-model-package asset event: package, deployment and devices, with the run key."""
    p, r = package or {}, result or {}
    extra = {"run_key": plan.get("run_key"), "model_package_arn": p.get("model_package_arn"),
             "model_data_url": p.get("model_data_url"), "version": p.get("version"),
             "deployment_id": r.get("deployment_id"), "thing_group_name": plan.get("deploy", {}).get("thing_group_name"),
             "devices": r.get("devices")}
    return {k: v for k, v in extra.items() if v is not None}
