"""Console links for SageMaker pipeline executions and model packages (SageMaker Studio URLs)."""

from __future__ import annotations

from urllib.parse import quote

from airflow.providers.amazon.aws.links.base_aws import BASE_AWS_CONSOLE_LINK, BaseAwsLink


class SageMakerPipelineExecutionLink(BaseAwsLink):
    """Link to a pipeline execution (``pipeline_name``, ``execution_id`` = last ARN segment)."""

    name = "SageMaker pipeline execution"
    key = "sim2real_sagemaker_pipeline_execution"
    format_str = (
        BASE_AWS_CONSOLE_LINK
        + "/sagemaker/home?region={region_name}#/pipelines/{pipeline_name}/executions/{execution_id}"
    )


class SageMakerModelPackageLink(BaseAwsLink):
    """Link to a model package version (``group_name``, ``version``) in the model registry."""

    name = "SageMaker model package"
    key = "sim2real_sagemaker_model_package"
    format_str = (
        BASE_AWS_CONSOLE_LINK
        + "/sagemaker/home?region={region_name}#/model-registry/{group_name}/versions/{version}"
    )

    def format_link(self, **kwargs) -> str:
        kwargs["group_name"] = quote(str(kwargs.get("group_name", "")), safe="")
        return super().format_link(**kwargs)


class HyperPodClusterLink(BaseAwsLink):
    """Link to a HyperPod cluster."""

    name = "HyperPod cluster"
    key = "sim2real_hyperpod_cluster"
    format_str = BASE_AWS_CONSOLE_LINK + "/sagemaker/home?region={region_name}#/cluster-management/{cluster_name}"
