"""Hook for the evaluation workstation: EC2 instance found by tag + SSM Run Command.

Sources: Amazon EC2 API Reference (DescribeInstances, StartInstances, StopInstances; waiters
``instance_running``/``instance_stopped`` from botocore), AWS Systems Manager API Reference
(SendCommand, GetCommandInvocation, CancelCommand, DescribeInstanceInformation), and the Run
Command S3 output layout ``<prefix>/<command-id>/<instance-id>/awsrunShellScript/0.awsrunShellScript/stdout``
(AWS Systems Manager User Guide, "Run Command output").
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.ssm import SsmHook

#: Characters SSM keeps in ``StandardOutputContent`` (GetCommandInvocation API reference).
SSM_INLINE_OUTPUT_LIMIT = 24_000


def ssm_output_key(prefix: str, command_id: str, instance_id: str, stream: str = "stdout") -> str:
    """S3 key where Run Command writes ``AWS-RunShellScript`` output for one instance.

    :param prefix: the ``OutputS3KeyPrefix`` given to SendCommand (may be empty).
    :param stream: ``stdout`` or ``stderr``.
    """
    parts = [p for p in (prefix.strip("/"), command_id, instance_id) if p]
    return "/".join([*parts, "awsrunShellScript", "0.awsrunShellScript", stream])


def shell_script_request(instance_id: str, commands: list[str], execution_timeout_seconds: int,
                         comment: str = "") -> dict[str, Any]:
    """The SendCommand request running ``commands`` with ``AWS-RunShellScript`` on one managed instance.

    :param execution_timeout_seconds: the document's ``executionTimeout`` (seconds; SSM ends the script then).
    :param comment: the command's comment (SSM keeps 100 characters).
    """
    return {"DocumentName": "AWS-RunShellScript", "InstanceIds": [instance_id],
            "Parameters": {"commands": list(commands), "executionTimeout": [str(int(execution_timeout_seconds))]},
            "Comment": comment[:100]}


def instance_information_request(instance_id: str) -> dict[str, Any]:
    """The DescribeInstanceInformation request for one managed instance."""
    return {"Filters": [{"Key": "InstanceIds", "Values": [instance_id]}]}


def ping_status_of(response: dict[str, Any]) -> str | None:
    """The SSM agent's ``PingStatus`` (``Online`` / ``ConnectionLost`` / ``Inactive``) in a DescribeInstanceInformation
    response for one instance; None when the instance is not registered with SSM."""
    listed = response.get("InstanceInformationList") or []
    return listed[0].get("PingStatus", "unknown") if listed else None


class WorkstationHook(SsmHook):
    """SSM hook plus the EC2 and S3 calls the workstation operators need.

    ``self.conn`` is the boto3 SSM client; :attr:`ec2` and :attr:`s3` are clients built from the
    same connection, region, SSL and botocore settings.
    """

    def _sibling_client(self, client_type: str):
        return AwsBaseHook(
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
            verify=self.verify,
            config=self.config,
            client_type=client_type,
        ).conn

    @cached_property
    def ec2(self):
        """boto3 EC2 client."""
        return self._sibling_client("ec2")

    @cached_property
    def s3(self):
        """boto3 S3 client."""
        return self._sibling_client("s3")

    def find_instance_by_tag(self, tag_key: str, tag_value: str) -> dict[str, Any]:
        """Return the one non-terminated EC2 instance tagged ``tag_key=tag_value``.

        :return: the DescribeInstances ``Instance`` dict.
        :raises ValueError: when no instance, or more than one, carries the tag (the message
            lists them: the tag must select exactly one workstation).
        """
        paginator = self.ec2.get_paginator("describe_instances")
        instances = [
            inst
            for page in paginator.paginate(
                Filters=[
                    {"Name": f"tag:{tag_key}", "Values": [tag_value]},
                    {
                        "Name": "instance-state-name",
                        "Values": ["pending", "running", "stopping", "stopped"],
                    },
                ]
            )
            for res in page.get("Reservations", [])
            for inst in res.get("Instances", [])
        ]
        if not instances:
            raise ValueError(
                f"No EC2 instance (pending/running/stopping/stopped) is tagged {tag_key}={tag_value}. "
                "Tag the evaluation workstation, or fix evaluation.workstation_tag_key/value in the "
                "environment config."
            )
        if len(instances) > 1:
            listed = ", ".join(f"{i['InstanceId']} ({i['State']['Name']})" for i in instances)
            raise ValueError(
                f"{len(instances)} EC2 instances are tagged {tag_key}={tag_value}: {listed}. "
                "The tag must select exactly one workstation; remove it from the others."
            )
        return instances[0]

    def agent_ping_status(self, instance_id: str) -> str | None:
        """The SSM agent's ``PingStatus`` (:func:`ping_status_of`; DescribeInstanceInformation)."""
        return ping_status_of(self.conn.describe_instance_information(**instance_information_request(instance_id)))

    def wait_for_agent_online(self, instance_id: str, timeout_seconds: float = 600, delay: float = 10) -> None:
        """Block until the SSM agent of the instance reports ``PingStatus == "Online"``.

        Source: DescribeInstanceInformation (``InstanceInformationList[].PingStatus`` ∈
        ``Online | ConnectionLost | Inactive``).

        :raises TimeoutError: after ``timeout_seconds`` (seconds) without ``Online``; the message
            says what to check (agent running, instance profile with AmazonSSMManagedInstanceCore).
        """
        deadline = time.monotonic() + timeout_seconds
        status = "not registered"
        while True:
            status = self.agent_ping_status(instance_id) or "not registered"
            if status == "Online":
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"SSM agent on {instance_id} is {status} after {timeout_seconds:.0f} s. Check that the "
                    "amazon-ssm-agent service runs and the instance profile has AmazonSSMManagedInstanceCore."
                )
            self.log.info("SSM agent on %s is %s; checking again in %s s", instance_id, status, delay)
            time.sleep(delay)

    def read_output(
        self,
        bucket: str,
        prefix: str,
        command_id: str,
        instance_id: str,
        stream: str = "stdout",
    ) -> str | None:
        """Read the full command output Run Command wrote to S3.

        :return: the text (UTF-8, undecodable bytes replaced), or ``None`` when the object does
            not exist (SSM writes no object for an empty stream).
        """
        key = ssm_output_key(prefix, command_id, instance_id, stream)
        try:
            body = self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return None
        return body.decode("utf-8", errors="replace")

    def cancel_command(self, command_id: str, instance_ids: list[str] | None = None) -> None:
        """CancelCommand for the given instances (all when ``None``)."""
        kwargs: dict[str, Any] = {"CommandId": command_id}
        if instance_ids:
            kwargs["InstanceIds"] = instance_ids
        self.conn.cancel_command(**kwargs)
