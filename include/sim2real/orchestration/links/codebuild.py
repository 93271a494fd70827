"""Console link for an AWS CodeBuild build (CodeBuild console URL layout:
``/codesuite/codebuild/<account>/projects/<project>/build/<build id, URL-encoded>/``)."""

from __future__ import annotations

from urllib.parse import quote

from airflow.providers.amazon.aws.links.base_aws import BASE_AWS_CONSOLE_LINK, BaseAwsLink


class CodeBuildBuildLink(BaseAwsLink):
    """Link to the build page of ``build_id`` (``<project>:<uuid>``) of ``project_name`` in ``account_id``."""

    name = "CodeBuild build"
    key = "sim2real_codebuild_build"
    format_str = (
        BASE_AWS_CONSOLE_LINK
        + "/codesuite/codebuild/{account_id}/projects/{project_name}/build/{build_id}/?region={region_name}"
    )

    def format_link(self, **kwargs) -> str:
        if "build_id" in kwargs:
            kwargs["build_id"] = quote(kwargs["build_id"], safe="")
        return super().format_link(**kwargs)
