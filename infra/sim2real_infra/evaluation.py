"""Evaluation: the SSM document of the evaluation command, the workstation role/profile and the
optional workstation instance (tagged ``sim2real:role=workstation``, found by the DAG by tag)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_efs as efs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from sim2real.contract import evaluator

from .policies import as_bucket, grant_prefixes
from .settings import Settings

WORKSTATION_TAG_KEY = "sim2real:role"
WORKSTATION_TAG_VALUE = "workstation"
SSM_OUTPUT_PREFIX = "ssm-output"
#: NVIDIA-driver Deep Learning base AMI (Ubuntu 22.04), resolved by CloudFormation from public SSM.
WORKSTATION_AMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"


def evaluate_document(name: str) -> dict:
    """The ``Command`` document (schema 2.2) that runs ``sim2real-evaluate`` with typed parameters.

    Generated from the evaluator contract (:mod:`sim2real.contract.evaluator`): one parameter per argument (the
    contract's defaults; required ones without a default), the contract version fixed in the command line.
    Parameters are validated by SSM (``allowedPattern``), so no shell text can be injected through them.
    """
    parameters: dict[str, dict] = {}
    for arg in evaluator.ARGUMENTS:
        spec = {"type": "String", "allowedPattern": arg.pattern, "description": arg.help}
        if arg.default is not None:
            spec["default"] = str(arg.default)
        elif not arg.required:  # may stay empty: then left out of the command
            spec.update({"default": "", "allowedPattern": f"^$|{arg.pattern}"})
        parameters[arg.document_parameter] = spec
    line = " ".join(
        [evaluator.EXECUTABLE, evaluator.VERSION_FLAG, str(evaluator.CONTRACT_VERSION)]
        + [f"{a.flag} '{{{{ {a.document_parameter} }}}}'" for a in evaluator.ARGUMENTS if a.required or a.default is not None])
    optional = [a for a in evaluator.ARGUMENTS if not a.required and a.default is None]
    run_command = ["set -eu", "set --"]
    for a in optional:  # an empty optional parameter is not passed (the evaluator then uses its own default)
        run_command.append(f"if [ -n '{{{{ {a.document_parameter} }}}}' ]; then "
                           f"set -- \"$@\" {a.flag} '{{{{ {a.document_parameter} }}}}'; fi")
    run_command.append(f'{line} "$@"')
    return {
        "schemaVersion": "2.2",
        "description": f"{name}: closed-loop evaluation of a checkpoint (evaluator contract version "
                       f"{evaluator.CONTRACT_VERSION}); writes eval/report.json",
        "parameters": parameters,
        "mainSteps": [{
            "action": "aws:runShellScript",
            "name": "evaluate",
            "inputs": {"timeoutSeconds": "7200", "runCommand": run_command},
        }],
    }


class EvaluationStack(cdk.Stack):
    """SSM document ``<prefix>-evaluate``, the workstation role + instance profile, and — with
    ``sim2real:workstation=true`` — a GPU workstation in a private subnet (SSM only, no SSH)."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, vpc: ec2.IVpc,
                 security_group: ec2.ISecurityGroup, artifacts: s3.IBucket | str, file_system: efs.IFileSystem,
                 **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        artifacts = as_bucket(self, artifacts)
        self.document_name = settings.name("evaluate")
        self.document = ssm.CfnDocument(self, "EvaluateDocument", name=self.document_name, document_type="Command",
                                        document_format="JSON", update_method="NewVersion",
                                        content=evaluate_document(self.document_name))
        self.role = iam.Role(
            self, "WorkstationRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="sim2real evaluation workstation: SSM agent, run folders, SSM command output",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore")],
        )
        grant_prefixes(self.role, artifacts, read=["runs/"], sid="Runs")
        grant_prefixes(self.role, artifacts, write=[f"{SSM_OUTPUT_PREFIX}/"], sid="CommandOutput")
        self.role.add_to_policy(iam.PolicyStatement(sid="EvalReports", actions=["s3:PutObject"],
                                                    resources=[artifacts.arn_for_objects("runs/*/eval/*")]))
        file_system.grant(self.role, "elasticfilesystem:ClientMount")
        self.instance_profile = iam.InstanceProfile(self, "WorkstationProfile", role=self.role,
                                                    instance_profile_name=settings.name("workstation"))
        self.instance: ec2.Instance | None = None
        if settings.workstation:
            self.instance = ec2.Instance(
                self, "Workstation",
                vpc=vpc,
                vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
                security_group=security_group,
                instance_type=ec2.InstanceType(settings.workstation_instance_type),
                machine_image=ec2.MachineImage.from_ssm_parameter(WORKSTATION_AMI_PARAMETER),
                instance_profile=self.instance_profile,
                require_imdsv2=True,
                detailed_monitoring=True,
                block_devices=[ec2.BlockDevice(device_name="/dev/sda1", volume=ec2.BlockDeviceVolume.ebs(
                    300, volume_type=ec2.EbsDeviceVolumeType.GP3, encrypted=True, delete_on_termination=True))],
            )
            cdk.Tags.of(self.instance).add(WORKSTATION_TAG_KEY, WORKSTATION_TAG_VALUE)
            cdk.Tags.of(self.instance).add("Name", settings.name("workstation"))
