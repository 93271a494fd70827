"""Console links for SSM Run Command (AWS Systems Manager console URL layout)."""

from __future__ import annotations

from airflow.providers.amazon.aws.links.base_aws import BASE_AWS_CONSOLE_LINK, BaseAwsLink


class SsmRunCommandLink(BaseAwsLink):
    """Link to the Run Command details page of ``command_id``."""

    name = "SSM Run Command"
    key = "sim2real_ssm_run_command"
    format_str = BASE_AWS_CONSOLE_LINK + "/systems-manager/run-command/{command_id}?region={region_name}"


class WorkstationInstanceLink(BaseAwsLink):
    """Link to the workstation EC2 instance."""

    name = "Workstation instance"
    key = "sim2real_workstation_instance"
    format_str = BASE_AWS_CONSOLE_LINK + "/ec2/home?region={region_name}#InstanceDetails:instanceId={instance_id}"
