"""EventBridge rule patterns of the wait events, one per detail-type, filtered to this project's resources.

Used by infra/ (the rules deployed in front of the wait-event queue) and by the local sandbox (the same rules on
moto's EventBridge), so both filter alike. Each filter uses only fields the real event carries (see
:mod:`sim2real.orchestration.events.envelope` for the documentation pages):

* Batch: ``detail.jobQueue`` is the job queue ARN.
* CodeBuild: ``detail.project-name``.
* SSM Run Command: ``detail.document-name`` (the invocation event carries no instance tags, so commands of other
  callers that use the same document reach the queue; the consumer ignores those it has no wait for).
* Pipeline execution: ``resources`` holds the pipeline ARN (and the execution ARN).
* Model package: ``detail.ModelPackageGroupName``.
* Greengrass: the event names the core device and the deployment only (no thing group): filtered by source and
  detail-type; deployments this project did not start are ignored by the consumer.
* HyperPod: ``detail.ClusterName``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import envelope as ev


@dataclass(frozen=True)
class ProjectResources:
    """Names/ARNs the rules filter on. Empty strings leave a rule out (e.g. no HyperPod cluster)."""

    job_queue_arn: str
    codebuild_project: str
    ssm_documents: tuple[str, ...]
    pipeline_arn: str
    model_package_group: str
    greengrass: bool = True
    hyperpod_cluster: str = ""


def rule_patterns(r: ProjectResources) -> dict[str, dict[str, Any]]:
    """``{rule id: EventBridge event pattern}`` for the project's resources (ids are CamelCase, CDK-friendly)."""
    def base(detail_type: str) -> dict[str, Any]:
        return {"source": [ev.SOURCES[detail_type]], "detail-type": [detail_type]}

    patterns: dict[str, dict[str, Any]] = {
        "BatchJobStateChange": {**base(ev.BATCH_JOB), "detail": {"jobQueue": [r.job_queue_arn]}},
        "CodeBuildBuildStateChange": {**base(ev.CODEBUILD_BUILD), "detail": {"project-name": [r.codebuild_project]}},
        "SsmCommandInvocationStatusChange": {**base(ev.SSM_INVOCATION),
                                             "detail": {"document-name": list(r.ssm_documents)}},
        "PipelineExecutionStatusChange": {**base(ev.PIPELINE_EXECUTION), "resources": [r.pipeline_arn]},
        "ModelPackageStateChange": {**base(ev.MODEL_PACKAGE),
                                    "detail": {"ModelPackageGroupName": [r.model_package_group]}},
    }
    if r.greengrass:
        patterns["GreengrassEffectiveDeploymentStatusChange"] = base(ev.GREENGRASS_DEPLOYMENT)
    if r.hyperpod_cluster:
        patterns["HyperPodClusterStateChange"] = {**base(ev.HYPERPOD_CLUSTER),
                                                  "detail": {"ClusterName": [r.hyperpod_cluster]}}
        patterns["HyperPodClusterNodeHealth"] = {**base(ev.HYPERPOD_NODE_HEALTH),
                                                 "detail": {"ClusterName": [r.hyperpod_cluster]}}
    return patterns
