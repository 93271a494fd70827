"""Build stage: the training image, built by CodeBuild, pushed to ECR and pinned by digest (group ``build``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration.dag_defaults import POLL
from sim2real.orchestration.params import SECTION_TRAINING
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs

DOC = """\
**Build the training image.** Calls CodeBuild, ECR and S3. Resolves the source version to a commit (a git branch or tag to the commit it
points at now; an S3 source to its object version), hashes the build context (CodeBuild `BatchGetProjects`:
buildspec, build environment, overrides) and keys the image on both. Reuses an image only when
`images/<repository>/<key>.json` in the artifacts bucket records its digest and ECR still has it (`DescribeImages`
by digest); otherwise CodeBuild `StartBuild` on that commit / `BatchGetBuilds` (`StopBuild` when the task is
killed). Waits (deferred) for the build to reach SUCCEEDED — not at all when it is already over.
Hands on the image URI pinned by **digest**, never a tag.
"""

GROUP_ID = ids.BUILD_GROUP
TASK_IDS = (ids.BUILD_IMAGE,)


@dataclass(frozen=True)
class ImagePlan(PlanSection):
    """The CodeBuild project and ECR repository of the training image, and the source version to build."""

    SECTION = "image"
    project_name: str
    repository_name: str
    source_version: str
    record_bucket: str  #: images/<repository>/<image key>.json: the digest built for a key


def params() -> dict[str, Any]:
    """The build's trigger-form fields."""
    from airflow.sdk import Param

    return {
        # Optional text fields are nullable: the trigger form sends an empty field as null, and a field
        # whose type does not allow null is required there (its Trigger button stays disabled).
        "image_source_version": Param(
            None, type=["null", "string"], maxLength=128, pattern=r"^[A-Za-z0-9._/-]*$",
            title="Training image source version",
            description="Git ref / commit CodeBuild builds. Empty: the environment config's source_version.",
            section=SECTION_TRAINING,
        ),
    }


def plan(ctx: PlanContext) -> ImagePlan:
    build = ctx.env["image_build"]
    return ImagePlan(
        project_name=build["codebuild_project"],
        repository_name=build["ecr_repository"],
        source_version=ctx.params.get("image_source_version") or build["source_version"],
        record_bucket=ctx.bucket,
    )


def add_tasks(plan: Any) -> Any:
    """Add the ``build`` group; return the image operator (its ``output["image_uri"]``: the digest URI)."""
    from airflow.sdk import TaskGroup

    from sim2real.orchestration.operators.codebuild import CodeBuildImageOperator

    image = refs(plan, ImagePlan)
    with TaskGroup(GROUP_ID, tooltip="CodeBuild → ECR image digest", doc_md=DOC):
        return CodeBuildImageOperator(
            task_id=ids.local(ids.BUILD_IMAGE),
            project_name=image.project_name,
            repository_name=image.repository_name,
            record_bucket=image.record_bucket,  # images/<repo>/<image key>.json: the digest of a key
            source_version=image.source_version,
            waiter_delay=POLL,
            multiple_outputs=True,
            execution_timeout=dt.timedelta(hours=2),
            doc_md=DOC,
        )
