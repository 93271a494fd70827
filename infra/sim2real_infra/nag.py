"""cdk-nag AwsSolutions findings that were reviewed and accepted, each with its written reason.

cdk-nag 3.x reports through CDK's policy-validation plugins (``Validations.of(app).add_plugins``);
``app.synth()`` raises ``ValidationFailed`` while any finding is unacknowledged. A finding is accepted
with ``Validations.of(scope).acknowledge(Acknowledgment(id=..., reason=...))``; the id must match the
finding exactly (``AwsSolutions-IAM5[Resource::<rendered ARN>]``), one per wildcard.

Instead of copying rendered ids by hand, :func:`acknowledge_findings` walks every IAM policy of the
app, renders each wildcard the way cdk-nag does, and acknowledges it **only if** it matches a
reviewed pattern in :data:`IAM5_REASONS` — a new wildcard without a reason still fails the synth.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

if TYPE_CHECKING:
    from .app import Sim2RealStacks

_ACCOUNT = r"<AWS::AccountId>"
_ARN = r"arn:<AWS::Partition>"

#: Reviewed wildcard patterns (regex over ``Action::...`` / ``Resource::...``) and why each is needed.
IAM5_REASONS: list[tuple[str, str]] = [
    # --- resources that AWS cannot scope (no resource-level permissions for the action)
    (r"Resource::\*", "Only actions without resource-level permissions are granted on '*' (ECR "
     "GetAuthorizationToken, Batch/EC2/SSM describe and list calls, CloudWatch metrics with a namespace "
     "condition, S3 GetAccountPublicAccessBlock); see sim2real_infra.mwaa.UNSCOPED_ACTIONS."),
    # --- S3 keys under fixed prefixes of our own buckets
    (rf"Resource::{_ARN}:s3:::[a-z0-9-]+-artifacts-{_ACCOUNT}/(runs|datasets|ssm-output|greengrass|greengrass/artifacts|hyperpod/lifecycle)/\*",
     "Object keys under one fixed prefix of the artifacts bucket; the keys are created per run "
     "(runs/<run_key>/...) or per component version, so they cannot be listed in advance."),
    (rf"Resource::{_ARN}:s3:::[a-z0-9-]+-artifacts-{_ACCOUNT}/field/(episodes|data)/<credentials-iot:ThingName>/\*",
     "Each robot writes (PutObject only, and only with If-None-Match or If-Match: a Deny on the same keys refuses "
     "any other PutObject) under its own thing name only (the IoT credentials provider's credentials-iot:ThingName "
     "policy variable): one summary per field episode, field/episodes/<thing name>/<episode id>.json, and with "
     "RecordData its data file, field/data/<thing name>/<episode id>.parquet; the episode ids are the robot's "
     "own, so the keys cannot be listed in advance."),
    (rf"Resource::{_ARN}:s3:::[a-z0-9-]+-artifacts-{_ACCOUNT}/field/episodes/\*",
     "The Airflow role reads the robots' field episode summaries, field/episodes/<thing name>/<episode id>.json "
     "(GetObject, ListBucket under the prefix: the canary verdict, the field dataset publisher); the episode ids "
     "are the robots' own, so the keys cannot be listed in advance."),
    (rf"Resource::{_ARN}:s3:::[a-z0-9-]+-artifacts-{_ACCOUNT}/field/data/\*",
     "The field dataset publisher reads the robots' data files, field/data/<thing name>/<episode id>.parquet "
     "(HeadObject for S3's checksum) and the fine-tune's processing job downloads them; the episode ids are the "
     "robots' own, so the keys cannot be listed in advance."),
    (rf"Resource::{_ARN}:s3:::[a-z0-9-]+-artifacts-{_ACCOUNT}/field/datasets/\*",
     "The field dataset publisher writes each field dataset version's manifest once (field/datasets/<version>/"
     "manifest.json, content-addressed) and the fine-tune reads it; the versions cannot be listed in advance."),
    (rf"Resource::{_ARN}:s3:::[a-z0-9-]+-artifacts-{_ACCOUNT}/images/\*",
     ("The image records (images/<repository>/<image key>.json: the digest built for a source commit and build "
      "context); the keys are content hashes, so they cannot be listed in advance.")),
    (rf"Resource::{_ARN}:s3:::[a-z0-9-]+-artifacts-{_ACCOUNT}/runs/\*/eval/\*",
     "The workstation writes only the eval/ folder of a run; the run key is not known in advance."),
    (rf"Resource::{_ARN}:s3:::[a-z0-9-]+-mwaa-{_ACCOUNT}/\*",
     "MWAA reads dags/, plugins.zip, requirements.txt and startup.sh from its own source bucket "
     "(MWAA execution-role policy)."),
    (r"Action::s3:(GetObject|GetBucket|List)\*",
     "MWAA execution-role policy as documented by MWAA, on the MWAA source bucket only."),
    # --- logs
    (rf"Resource::{_ARN}:logs:<AWS::Region>:{_ACCOUNT}:log-group:(/aws/batch/job|/aws/sagemaker/\*|/aws/greengrass/\*|airflow-[a-z0-9-]+-\*|\*|/aws/codebuild/.+)(:\*|:log-stream:.+)?",
     "Log streams are created per job/build/device/task with generated names; scoped to the service's "
     "log group (DescribeLogGroups needs the log-group:* form)."),
    # --- the Hugging Face token of the GR00T jobs (read at job start by the pipeline role)
    (rf"Resource::{_ARN}:secretsmanager:<AWS::Region>:{_ACCOUNT}:secret:[a-z0-9-]+-groot/\*",
     "Secrets under the <prefix>-groot/ path only (the Hugging Face token GR00TFinetune and SmokeEval read at start); "
     "Secrets Manager appends a random suffix to every secret ARN, so even one named secret needs a trailing "
     "wildcard."),
    # --- the robots' policy-server api token (read at component install by the token exchange role)
    (rf"Resource::{_ARN}:secretsmanager:<AWS::Region>:{_ACCOUNT}:secret:[a-z0-9-]+-robots/\*",
     "Secrets under the fleet's <prefix>-robots/ path only; Secrets Manager appends a random suffix to "
     "every secret ARN, so even one named secret needs a trailing wildcard."),
    (rf"Resource::{_ARN}:ssm:<AWS::Region>:{_ACCOUNT}:parameter/[a-z0-9-]+/robots/\*",
     "SecureString parameters under the fleet's /<prefix>/robots/ path only; the operator chooses the "
     "token parameter's name when configuring the inference component."),
    # --- per-execution resources with generated ids
    (rf"Resource::{_ARN}:batch:<AWS::Region>:{_ACCOUNT}:job-definition/[a-z0-9-]+-train:\*",
     "Every revision of the training job definition: the DAG registers a revision pinned to each image digest."),
    (rf"Resource::{_ARN}:batch:<AWS::Region>:{_ACCOUNT}:job/\*",
     "TerminateJob on the run's job; Batch job ids are generated at SubmitJob."),
    (rf"Resource::{_ARN}:ec2:<AWS::Region>:{_ACCOUNT}:instance/\*",
     "Start/Stop/SendCommand only on instances tagged sim2real:role=workstation (tag condition on the statement)."),
    (rf"Resource::{_ARN}:sagemaker:<AWS::Region>:{_ACCOUNT}:(processing-job|training-job)/pipelines-\*",
     "Jobs the pipeline starts are named pipelines-<execution>-<step>-... by SageMaker."),
    (rf"Resource::{_ARN}:sagemaker:<AWS::Region>:{_ACCOUNT}:model-package/[a-z0-9-]+-groot-models/\*",
     "Model package versions of our group only; versions are numbered at registration."),
    (rf"Resource::{_ARN}:sagemaker:<AWS::Region>:{_ACCOUNT}:pipeline/[a-z0-9-]+-groot-finetune/execution/\*",
     "Executions of our pipeline only; execution ids are generated at StartPipelineExecution."),
    (rf"Resource::{_ARN}:sagemaker:<AWS::Region>:{_ACCOUNT}:cluster/\*",
     "HyperPod cluster ARNs carry a generated id, not the name."),
    (rf"Resource::{_ARN}:greengrass:<AWS::Region>:{_ACCOUNT}:(deployments|coreDevices):\*",
     "Deployment ids are generated at CreateDeployment; core devices are the robots registered to the group."),
    (rf"Resource::{_ARN}:greengrass:<AWS::Region>:{_ACCOUNT}:components:com\.sim2real\.[A-Za-z]+:versions:\*",
     "Every version of our own components: the version to deploy comes from the environment config."),
    (rf"Resource::{_ARN}:iot:<AWS::Region>:{_ACCOUNT}:(job|thing)/\*",
     "Greengrass CreateDeployment runs an IoT job (generated id) on the group's things and their shadows."),
    (rf"Resource::{_ARN}:sqs:<AWS::Region>:\*:airflow-celery-\*",
     "MWAA's Celery queues live in an account owned by MWAA (MWAA execution-role policy)."),
    (rf"Resource::{_ARN}:codebuild:<AWS::Region>:{_ACCOUNT}:report-group/.+-\*",
     "CodeBuild's default grant for test report groups of this project only."),
    (r"Action::kms:(ReEncrypt|GenerateDataKey)\*",
     "Data-key operations on one customer managed key (CodeBuild artifacts / SNS topic) or, for MWAA, "
     "the SQS-owned key via kms:ViaService."),
]

#: AWS managed policies kept on purpose.
IAM4_REASONS: dict[str, str] = {
    "service-role/AmazonEC2ContainerServiceforEC2Role": "The ECS agent on Batch nodes needs exactly this "
    "AWS-maintained policy (register the container instance, pull images, send logs); AWS Batch documents it.",
    "AmazonSSMManagedInstanceCore": "SSM agent (Run Command for evaluation, Session Manager instead of SSH); "
    "AWS-maintained minimal policy for managed instances.",
    "AmazonSageMakerClusterInstanceRolePolicy": "HyperPod nodes need this AWS-maintained policy "
    "(cluster agent, health reporting); SageMaker documents it for the cluster execution role.",
}

#: Other reviewed findings: (construct path regex, rule id, reason).
OTHER_REASONS: list[tuple[str, str, str]] = [
    (r"/Vpc/[A-Za-z0-9]+/SecurityGroup$", "AwsSolutions-EC23",
     "Interface endpoint security groups allow 443 from the VPC CIDR only; the CIDR is a token at synth "
     "time so the rule cannot evaluate it."),
    (r"Evaluation/Workstation$", "AwsSolutions-EC29",
     "The optional workstation is disposable (the DAG starts and stops it); termination protection "
     "would block stack deletion."),
]


def _render(value: Any) -> str:
    """A resolved CloudFormation value as cdk-nag renders it in finding ids."""
    if isinstance(value, str):  # an IAM policy variable ${key} is rendered <key>
        return re.sub(r"\$\{([^}]+)\}", r"<\1>", value)
    if isinstance(value, dict) and len(value) == 1:
        (fn, arg), = value.items()
        if fn == "Ref":
            return f"<{arg}>"
        if fn == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>" if isinstance(arg, list) else f"<{arg}>"
        if fn == "Fn::Join":
            return arg[0].join(_render(p) for p in arg[1])
        if fn == "Fn::ImportValue":
            return _render(arg)
    return str(value)


def _listify(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _reason(finding: str) -> str | None:
    for pattern, reason in IAM5_REASONS:
        if re.fullmatch(pattern, finding):
            return reason
    return None


def _ack(scope: Construct, rule: str, reason: str) -> None:
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions::{rule}", reason=reason))


def policy_wildcards(policy: iam.CfnPolicy | iam.CfnManagedPolicy) -> list[str]:
    """The IAM5 finding keys (``Action::x*`` / ``Resource::arn...*``) of one policy resource."""
    document = cdk.Stack.of(policy).resolve(policy.policy_document)
    keys: list[str] = []
    for statement in document.get("Statement", []):
        if statement.get("Effect") != "Allow":
            continue
        keys += [f"Action::{a}" for a in _listify(statement.get("Action", [])) if "*" in a]
        keys += [f"Resource::{r}" for r in map(_render, _listify(statement.get("Resource", []))) if "*" in r]
    return list(dict.fromkeys(keys))


def acknowledge_findings(stacks: Sim2RealStacks) -> list[tuple[str, str, str]]:
    """Acknowledge every reviewed finding on the narrowest scope.

    :return: ``(construct path, rule id, reason)`` for every acknowledgment made (for the docs/tests).
    """
    made: list[tuple[str, str, str]] = []
    for stack in stacks.all():
        for node in stack.node.find_all():
            if isinstance(node, (iam.CfnPolicy, iam.CfnManagedPolicy)):
                for key in policy_wildcards(node):
                    reason = _reason(key)
                    if reason:
                        rule = f"AwsSolutions-IAM5[{key}]"
                        _ack(node.node.scope, rule, reason)
                        made.append((node.node.path, rule, reason))
            elif isinstance(node, iam.CfnRole):
                for arn in _listify(stack.resolve(node.managed_policy_arns) or []):
                    rendered = _render(arn)
                    name = rendered.split(":policy/", 1)[-1]
                    if name in IAM4_REASONS:
                        rule = f"AwsSolutions-IAM4[Policy::{rendered}]"
                        _ack(node.node.scope, rule, IAM4_REASONS[name])
                        made.append((node.node.path, rule, IAM4_REASONS[name]))
            for path_re, rule, reason in OTHER_REASONS:
                if re.search(path_re, node.node.path):
                    _ack(node, rule, reason)
                    made.append((node.node.path, rule, reason))
    return made
