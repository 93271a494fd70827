"""Console link for a Greengrass v2 deployment (AWS IoT console URL layout)."""

from __future__ import annotations

from airflow.providers.amazon.aws.links.base_aws import BASE_AWS_CONSOLE_LINK, BaseAwsLink


class GreengrassDeploymentLink(BaseAwsLink):
    """Link to the deployment ``deployment_id`` in the IoT console (Greengrass devices > Deployments)."""

    name = "Greengrass deployment"
    key = "sim2real_greengrass_deployment"
    format_str = BASE_AWS_CONSOLE_LINK + "/iot/home?region={region_name}#/greengrass/v2/deployments/{deployment_id}"
