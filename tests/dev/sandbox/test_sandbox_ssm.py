"""SSM responder: commands run locally, output in S3 at AWS's layout, truncation, timeouts."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from sandbox_helpers import wait_until

from sim2real.dev.sandbox import Sandbox

# integration (not in make test-unit): one sandbox per module (tests/dev/sandbox/conftest.py)
pytestmark = pytest.mark.integration

BUCKET = "sim2real-artifacts-123456789012"


def _workstation(sb: Sandbox) -> str:
    reservations = sb.client("ec2").describe_instances(
        Filters=[{"Name": "tag:sim2real:role", "Values": ["workstation"]}])["Reservations"]
    return reservations[0]["Instances"][0]["InstanceId"]


def _send(sb: Sandbox, commands: list[str], timeout: str = "60") -> tuple[str, str]:
    instance = _workstation(sb)
    response = sb.client("ssm").send_command(
        InstanceIds=[instance], DocumentName="AWS-RunShellScript",
        Parameters={"commands": commands, "executionTimeout": [timeout]},
        OutputS3BucketName=BUCKET, OutputS3KeyPrefix="ssm-output/run-1",
    )
    assert response["Command"]["Status"] in ("Pending", "InProgress")
    return response["Command"]["CommandId"], instance


def _finished(sb: Sandbox, command_id: str, instance: str) -> dict:
    ssm = sb.client("ssm")

    def done():
        inv = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance)
        return inv if inv["Status"] not in ("Pending", "InProgress", "Delayed", "Cancelling") else None

    return wait_until(done, timeout=60)


def test_instance_information_online(sb: Sandbox) -> None:
    instance = _workstation(sb)
    info = sb.client("ssm").describe_instance_information(
        InstanceInformationFilterList=[{"key": "InstanceIds", "valueSet": [instance]}])["InstanceInformationList"]
    assert [(i["InstanceId"], i["PingStatus"]) for i in info] == [(instance, "Online")]


def test_command_runs_locally_with_output_in_s3(sb: Sandbox) -> None:
    command_id, instance = _send(sb, ["echo hello from $SIM2REAL_SANDBOX", "which sim2real-evaluate >/dev/null || true",
                                      "python -c 'import sys; print(sys.prefix)'", "echo err >&2"])
    inv = _finished(sb, command_id, instance)
    assert (inv["Status"], inv["ResponseCode"]) == ("Success", 0)
    assert inv["StandardOutputContent"].startswith("hello from 1\n")
    key = f"ssm-output/run-1/{command_id}/{instance}/awsrunShellScript/0.awsrunShellScript/stdout"
    body = sb.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
    assert body == inv["StandardOutputContent"]
    err_key = key.rsplit("/", 1)[0] + "/stderr"
    assert sb.client("s3").get_object(Bucket=BUCKET, Key=err_key)["Body"].read() == b"err\n"
    listed = sb.client("ssm").list_command_invocations(CommandId=command_id, Details=True)["CommandInvocations"]
    assert [(i["InstanceId"], i["Status"]) for i in listed] == [(instance, "Success")]
    assert listed[0]["CommandPlugins"][0]["Name"] == "aws:runShellScript"
    assert listed[0]["CommandPlugins"][0]["ResponseCode"] == 0
    assert sb.client("ssm").list_commands(CommandId=command_id)["Commands"][0]["Status"] == "Success"


def test_stdout_truncated_in_api_but_full_in_s3(sb: Sandbox) -> None:
    command_id, instance = _send(sb, ["python -c \"print('x' * 30000)\"", "exit 4"])
    inv = _finished(sb, command_id, instance)
    assert (inv["Status"], inv["ResponseCode"]) == ("Failed", 4)
    assert len(inv["StandardOutputContent"]) == 24000
    key = f"ssm-output/run-1/{command_id}/{instance}/awsrunShellScript/0.awsrunShellScript/stdout"
    assert len(sb.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read()) == 30001


def test_execution_timeout_gives_timed_out(sb: Sandbox) -> None:
    command_id, instance = _send(sb, ["echo start", "sleep 30"], timeout="1")
    inv = _finished(sb, command_id, instance)
    assert inv["Status"] == "TimedOut"
    assert inv["StandardOutputContent"] == "start\n"


def test_cancel_command(sb: Sandbox) -> None:
    command_id, instance = _send(sb, ["sleep 60"])
    ssm = sb.client("ssm")
    wait_until(lambda: ssm.get_command_invocation(CommandId=command_id, InstanceId=instance)["Status"] == "InProgress")
    ssm.cancel_command(CommandId=command_id)
    assert _finished(sb, command_id, instance)["Status"] == "Cancelled"


def test_stopped_instance_is_offline_and_refused(sb: Sandbox) -> None:
    instance = _workstation(sb)
    ec2, ssm = sb.client("ec2"), sb.client("ssm")
    ec2.stop_instances(InstanceIds=[instance])
    try:
        wait_until(lambda: ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
                   ["State"]["Name"] == "stopped")
        info = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": [instance]}])
        assert [i["PingStatus"] for i in info["InstanceInformationList"]] == ["ConnectionLost"]
        with pytest.raises(ClientError) as err:
            ssm.send_command(InstanceIds=[instance], DocumentName="AWS-RunShellScript",
                             Parameters={"commands": ["true"]})
        assert err.value.response["Error"]["Code"] == "InvalidInstanceId"
    finally:
        ec2.start_instances(InstanceIds=[instance])
        wait_until(lambda: ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
                   ["State"]["Name"] == "running")
    info = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": [instance]}])
    assert [i["PingStatus"] for i in info["InstanceInformationList"]] == ["Online"]


def test_commands_run_with_sh_like_aws_run_shell_script(sb: Sandbox) -> None:
    """AWS-RunShellScript uses sh (dash on Ubuntu): bash syntax fails unless the lines start bash."""
    from sim2real.orchestration.slurm import bash_commands

    command_id, instance = _send(sb, ["[[ -n x ]] && echo bash-syntax"])
    inv = _finished(sb, command_id, instance)
    assert inv["Status"] == "Failed" and "bash-syntax" not in inv["StandardOutputContent"]
    lines = ["export GREETING=hi", *bash_commands(["cat <<'EOF'\nit's $GREETING\nEOF", "[[ -n x ]] && echo $GREETING"])]
    command_id, instance = _send(sb, lines)
    inv = _finished(sb, command_id, instance)
    assert (inv["Status"], inv["StandardOutputContent"]) == ("Success", "it's $GREETING\nhi\n"), inv
