"""EventBridge envelopes of the AWS state changes the waits consume: parsing, resource keys, describe-like responses.

An SQS message delivered by an EventBridge rule target (no input transformer) carries the event envelope as its
body: ``version``, ``id``, ``detail-type``, ``source``, ``account``, ``time``, ``region``, ``resources`` and ``detail``
(EventBridge User Guide, "Amazon EventBridge events" / "Event structure reference").

Each supported detail-type maps to

* a **resource key** (:class:`ResourceKey`): the identity a wait registers for (Batch job id, CodeBuild build id,
  SSM command id + instance id, pipeline execution ARN, model package ARN, Greengrass deployment id, HyperPod
  cluster name), and
* a **describe-like response**: the shape the service's Describe*/Get* call returns for that resource (or the
  documented subset the event carries), so a wait's step function reads an event exactly as it reads a poll.

Sources of the event shapes (AWS documentation):

* Batch: AWS Batch User Guide, "AWS Batch events" / "Job state change events" (``detail`` is the job as
  ``DescribeJobs`` returns it).
* CodeBuild: CodeBuild User Guide, "Build notifications input format reference" (``build-status``,
  ``project-name``, ``build-id``, ``current-phase``, ``additional-information``).
* SSM Run Command: Systems Manager User Guide, "Amazon EventBridge event examples for Systems Manager"
  (``command-id``, ``document-name``, ``instance-id``, ``requested-date-time``, ``status``; no instance tags).
* SageMaker: SageMaker Developer Guide, "Events that Amazon SageMaker AI sends to Amazon EventBridge" (pipeline
  execution status change: ``currentPipelineExecutionStatus``, ``previousPipelineExecutionStatus``,
  ``pipelineExecutionArn``...; model package state change: ``detail`` is the ``DescribeModelPackage`` shape;
  HyperPod cluster state change: ``detail`` is the ``DescribeCluster`` shape; HyperPod cluster node health).
* Greengrass V2: AWS IoT Greengrass V2 Developer Guide, "Get deployment status notifications" (``deploymentId``,
  ``coreDeviceExecutionStatus``, ``coreDeviceThingName``, ``reason``, ``statusDetails``; best effort, may repeat).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

# -- detail-types (EventBridge ``detail-type`` values, by source) -------------------------------------------------
BATCH_JOB = "Batch Job State Change"
CODEBUILD_BUILD = "CodeBuild Build State Change"
SSM_INVOCATION = "EC2 Command Invocation Status-change Notification"
PIPELINE_EXECUTION = "SageMaker Model Building Pipeline Execution Status Change"
MODEL_PACKAGE = "SageMaker Model Package State Change"
GREENGRASS_DEPLOYMENT = "Greengrass V2 Effective Deployment Status Change"
HYPERPOD_CLUSTER = "SageMaker HyperPod Cluster State Change"
HYPERPOD_NODE_HEALTH = "SageMaker HyperPod Cluster Node Health Event"

#: detail-type -> the event's ``source``.
SOURCES: dict[str, str] = {
    BATCH_JOB: "aws.batch",
    CODEBUILD_BUILD: "aws.codebuild",
    SSM_INVOCATION: "aws.ssm",
    PIPELINE_EXECUTION: "aws.sagemaker",
    MODEL_PACKAGE: "aws.sagemaker",
    GREENGRASS_DEPLOYMENT: "aws.greengrass",
    HYPERPOD_CLUSTER: "aws.sagemaker",
    HYPERPOD_NODE_HEALTH: "aws.sagemaker",
}

# -- resource kinds (first element of a ResourceKey) -------------------------------------------------------------
BATCH = "batch-job"
CODEBUILD = "codebuild-build"
SSM = "ssm-command-invocation"
PIPELINE = "sagemaker-pipeline-execution"
PACKAGE = "sagemaker-model-package"
GREENGRASS = "greengrass-deployment"
HYPERPOD = "hyperpod-cluster"


class EventParseError(ValueError):
    """A message body that is not an EventBridge envelope of a supported detail-type (message says why)."""


class ResourceKey(NamedTuple):
    """What a wait waits on: ``kind`` (one of the module's kind constants) and ``ident`` (the service's id).

    ``ident`` forms: Batch job id; CodeBuild build id (``<project>:<uuid>``, as ``StartBuild`` returns it);
    ``<command id>/<instance id>`` for SSM; pipeline execution ARN; model package ARN; Greengrass deployment id;
    HyperPod cluster name.
    """

    kind: str
    ident: str


def batch_job(job_id: str) -> ResourceKey:
    return ResourceKey(BATCH, job_id)


def codebuild_build(build_id: str) -> ResourceKey:
    """Key of a build from its id (``project:uuid``) or ARN (``arn:...:build/project:uuid``)."""
    return ResourceKey(CODEBUILD, build_id.split(":build/", 1)[-1])


def ssm_invocation(command_id: str, instance_id: str) -> ResourceKey:
    return ResourceKey(SSM, f"{command_id}/{instance_id}")


def pipeline_execution(execution_arn: str) -> ResourceKey:
    return ResourceKey(PIPELINE, execution_arn)


def model_package(package_arn: str) -> ResourceKey:
    return ResourceKey(PACKAGE, package_arn)


def greengrass_deployment(deployment_id: str) -> ResourceKey:
    return ResourceKey(GREENGRASS, deployment_id)


def hyperpod_cluster(cluster_name: str) -> ResourceKey:
    return ResourceKey(HYPERPOD, cluster_name)


@dataclass(frozen=True)
class EventEnvelope:
    """One EventBridge event. ``time`` is the envelope's ISO 8601 string (UTC) as EventBridge sends it."""

    id: str
    source: str
    detail_type: str
    account: str
    region: str
    time: str
    resources: tuple[str, ...]
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, body: str | bytes | dict[str, Any]) -> EventEnvelope:
        """The envelope of an SQS message body (JSON text) or an already decoded event.

        :raises EventParseError: not JSON, not an object, a required envelope field missing, or a detail-type
            this module does not support (the message names which).
        """
        if isinstance(body, (str, bytes)):
            try:
                data = json.loads(body)
            except ValueError as err:
                raise EventParseError(f"message body is not JSON: {err}") from None
        else:
            data = body
        if not isinstance(data, dict):
            raise EventParseError(f"message body is a JSON {type(data).__name__}, not an EventBridge event object")
        missing = [k for k in ("id", "source", "detail-type", "detail") if k not in data]
        if missing:
            raise EventParseError(f"not an EventBridge event: missing {', '.join(missing)}")
        detail_type = data["detail-type"]
        if detail_type not in SOURCES:
            raise EventParseError(f"unsupported detail-type {detail_type!r} (source {data['source']!r})")
        if data["source"] != SOURCES[detail_type]:
            raise EventParseError(f"detail-type {detail_type!r} comes from {SOURCES[detail_type]!r}, "
                                  f"not {data['source']!r}")
        if not isinstance(data["detail"], dict):
            raise EventParseError(f"{detail_type}: detail is not an object")
        return cls(id=str(data["id"]), source=data["source"], detail_type=detail_type,
                   account=str(data.get("account", "")), region=str(data.get("region", "")),
                   time=str(data.get("time", "")), resources=tuple(data.get("resources") or ()),
                   detail=data["detail"])

    # -- resource keys --------------------------------------------------------------------------------------
    def resource_key(self) -> ResourceKey:
        """The key of the resource this event is about.

        :raises EventParseError: when the detail lacks the identifying field.
        """
        d = self.detail
        try:
            if self.detail_type == BATCH_JOB:
                return batch_job(d["jobId"])
            if self.detail_type == CODEBUILD_BUILD:
                return codebuild_build(d["build-id"])
            if self.detail_type == SSM_INVOCATION:
                return ssm_invocation(d["command-id"], d["instance-id"])
            if self.detail_type == PIPELINE_EXECUTION:
                return pipeline_execution(d["pipelineExecutionArn"])
            if self.detail_type == MODEL_PACKAGE:
                return model_package(d["ModelPackageArn"])
            if self.detail_type == GREENGRASS_DEPLOYMENT:
                return greengrass_deployment(d["deploymentId"])
            if self.detail_type == HYPERPOD_CLUSTER:
                return hyperpod_cluster(d["ClusterName"])
            if self.detail_type == HYPERPOD_NODE_HEALTH:
                return hyperpod_cluster(d.get("ClusterName") or _cluster_name(self.resources))
        except (KeyError, TypeError) as err:
            raise EventParseError(f"{self.detail_type} event {self.id}: detail lacks {err}") from None
        raise EventParseError(f"unsupported detail-type {self.detail_type!r}")  # pragma: no cover - parse() checks

    # -- describe-like responses -----------------------------------------------------------------------------
    def describe_response(self) -> dict[str, Any]:
        """The event as the response of the call a polling wait makes for the same resource.

        ====================================================  ==========================================================
        detail-type                                           shape
        ====================================================  ==========================================================
        Batch Job State Change                                ``DescribeJobs``: ``{"jobs": [detail]}`` (the full job)
        CodeBuild Build State Change                          ``BatchGetBuilds``: ``{"builds": [build]}``; ``id``,
                                                              ``arn``, ``projectName``, ``buildStatus``,
                                                              ``currentPhase``, ``buildComplete``, ``phases``
                                                              (``phaseType``/``phaseStatus``/``contexts``...), ``logs``
        EC2 Command Invocation Status-change Notification     ``GetCommandInvocation`` subset: ``CommandId``,
                                                              ``InstanceId``, ``DocumentName``, ``Status``,
                                                              ``StatusDetails`` (= status); no
                                                              ``ResponseCode`` nor output (read them with a describe)
        SageMaker Model Building Pipeline Execution ...       ``DescribePipelineExecution`` subset:
                                                              ``PipelineArn``, ``PipelineExecutionArn``,
                                                              ``PipelineExecutionDisplayName``,
                                                              ``PipelineExecutionStatus``, ``CreationTime``,
                                                              ``LastModifiedTime``
        SageMaker Model Package State Change                  ``DescribeModelPackage``: the detail as is
        Greengrass V2 Effective Deployment Status Change      ``ListEffectiveDeployments`` of one core device:
                                                              ``{"effectiveDeployments": [{deploymentId,
                                                              coreDeviceExecutionStatus, reason, statusDetails}],
                                                              "coreDeviceThingName": ...}``
        SageMaker HyperPod Cluster State Change               ``DescribeCluster``: the detail as is
        SageMaker HyperPod Cluster Node Health Event          the detail with ``ClusterName`` (no describe equivalent)
        ====================================================  ==========================================================

        Timestamps stay as the event carries them (ISO 8601 strings or epoch milliseconds), not datetimes.
        """
        d = self.detail
        t = self.detail_type
        if t == BATCH_JOB:
            return {"jobs": [dict(d)]}
        if t == CODEBUILD_BUILD:
            return {"builds": [_codebuild_build(d)]}
        if t == SSM_INVOCATION:
            return {"CommandId": d.get("command-id"), "InstanceId": d.get("instance-id"),
                    "DocumentName": d.get("document-name"), "Status": d.get("status"),
                    "StatusDetails": d.get("status")}
        if t == PIPELINE_EXECUTION:
            execution_arn = d.get("pipelineExecutionArn", "")
            return {"PipelineArn": d.get("pipelineArn") or execution_arn.split("/execution/", 1)[0],
                    "PipelineExecutionArn": execution_arn,
                    "PipelineExecutionDisplayName": d.get("pipelineExecutionDisplayName"),
                    "PipelineExecutionStatus": d.get("currentPipelineExecutionStatus"),
                    "CreationTime": d.get("executionStartTime"),
                    "LastModifiedTime": d.get("executionEndTime") or self.time}
        if t == GREENGRASS_DEPLOYMENT:
            item = {k: d[k] for k in ("deploymentId", "coreDeviceExecutionStatus", "reason", "statusDetails")
                    if k in d}
            return {"effectiveDeployments": [item], "coreDeviceThingName": d.get("coreDeviceThingName")}
        if t == HYPERPOD_NODE_HEALTH:
            return {**d, "ClusterName": d.get("ClusterName") or _cluster_name(self.resources)}
        return dict(d)  # model package, HyperPod cluster: the detail is the describe shape

    def to_dict(self) -> dict[str, Any]:
        """The envelope as EventBridge sends it (JSON-serializable)."""
        return {"version": "0", "id": self.id, "detail-type": self.detail_type, "source": self.source,
                "account": self.account, "time": self.time, "region": self.region,
                "resources": list(self.resources), "detail": self.detail}


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


#: CodeBuild event ``additional-information`` keys whose BatchGetBuilds name is not the camelCase form.
_CODEBUILD_RENAMES = {"build-start-time": "startTime", "build-complete": "buildComplete",
                      "timeout-in-minutes": "timeoutInMinutes", "queued-timeout-in-minutes": "queuedTimeoutInMinutes"}


def _codebuild_build(d: dict[str, Any]) -> dict[str, Any]:
    info = d.get("additional-information") or {}
    build_arn = d.get("build-id", "")
    build: dict[str, Any] = {_CODEBUILD_RENAMES.get(k, _camel(k)): v for k, v in info.items()
                             if k not in ("phases", "logs")}
    build.update({"id": build_arn.split(":build/", 1)[-1], "arn": build_arn, "projectName": d.get("project-name"),
                  "buildStatus": d.get("build-status"), "currentPhase": d.get("current-phase")})
    if "phases" in info:
        build["phases"] = [
            {"phaseType": p.get("phase-type"), "phaseStatus": p.get("phase-status"),
             "startTime": p.get("start-time"), "endTime": p.get("end-time"),
             "durationInSeconds": p.get("duration-in-seconds"),
             "contexts": [_phase_context(c) for c in p.get("phase-context") or [] if c and c != ": "]}
            for p in info["phases"]
        ]
    logs = info.get("logs")
    if isinstance(logs, dict):
        build["logs"] = {_camel(k): v for k, v in logs.items()}
    return build


def _phase_context(context: Any) -> dict[str, Any]:
    """A phase context of the event (``"STATUS_CODE: message"`` text) as BatchGetBuilds gives it."""
    if isinstance(context, dict):
        return {"statusCode": context.get("statusCode") or context.get("status-code"),
                "message": context.get("message")}
    code, _, message = str(context).partition(": ")
    return {"statusCode": code, "message": message}


_CLUSTER_ARN = re.compile(r"^arn:[^:]+:sagemaker:[^:]*:\d*:cluster/(?P<id>[^/]+)$")


def _cluster_name(resources: tuple[str, ...]) -> str:
    """The last part of the first cluster ARN in ``resources`` (the name in the documented examples)."""
    for arn in resources:
        m = _CLUSTER_ARN.match(arn)
        if m:
            return m.group("id")
    raise KeyError("ClusterName")
