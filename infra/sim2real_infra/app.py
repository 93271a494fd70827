"""Assemble the stacks of the sim2real app, the environment config and the cdk-nag checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from .batch import BatchStack
from .environment import EnvironmentStack
from .evaluation import SSM_OUTPUT_PREFIX, WORKSTATION_TAG_KEY, WORKSTATION_TAG_VALUE, EvaluationStack
from .greengrass import GreengrassStack
from .hyperpod import HyperPodStack
from .images import ImagesStack
from .mwaa import MwaaStack, MwaaTargets
from .nag import acknowledge_findings
from .network import NetworkStack
from .notifications import NotificationsStack
from .policies import artifacts_bucket_name, mwaa_bucket_name
from .sagemaker import SageMakerStack
from .settings import Settings
from sim2real.orchestration.events.patterns import ProjectResources
from .storage import StorageStack
from .wait_events import WaitEventsStack

#: Service Quotas code of "Running On-Demand G and VT instances" (vCPU), checked by the preflight.
GPU_QUOTA = {"service_code": "ec2", "quota_code": "L-DB2E81BA"}


@dataclass
class Sim2RealStacks:
    """Every stack of the app (``hyperpod`` is None unless enabled) and the environment config."""

    settings: Settings
    network: NetworkStack
    storage: StorageStack
    notifications: NotificationsStack
    images: ImagesStack
    batch: BatchStack
    evaluation: EvaluationStack
    sagemaker: SageMakerStack
    greengrass: GreengrassStack
    mwaa: MwaaStack
    environment: EnvironmentStack
    hyperpod: HyperPodStack | None
    config: dict[str, Any]
    wait_events: WaitEventsStack | None = None

    def all(self) -> list[cdk.Stack]:
        """The stacks in deployment order."""
        stacks = [self.network, self.storage, self.notifications, self.images, self.batch, self.evaluation,
                  self.sagemaker, self.greengrass, self.hyperpod, self.wait_events, self.environment, self.mwaa]
        return [s for s in stacks if s is not None]


def environment_config(settings: Settings, stacks: dict[str, Any]) -> dict[str, Any]:
    """The environment config (``sim2real.orchestration.config`` shape) naming what the stacks create.

    Names are literal (they are the physical names the stacks set); account, region and partition
    are CloudFormation pseudo parameters, resolved when the parameter is written.
    """
    partition, account, region = cdk.Aws.PARTITION, cdk.Aws.ACCOUNT_ID, cdk.Aws.REGION
    config: dict[str, Any] = {
        "region": region,
        "account_id": account,
        "artifacts_bucket": artifacts_bucket_name(settings.prefix),
        "image_build": {
            "codebuild_project": settings.name("training-image"),
            "ecr_repository": settings.name("training"),
            "source_version": settings.source_version,
        },
        "batch": {
            "job_queue": settings.name("gpu"),
            "job_definition": settings.name("train"),
            "compute_environment": settings.name("gpu-ce"),
            "instance_type": settings.instance_type,
            "log_group": stacks["batch"].log_group_name,
        },
        "quota": dict(GPU_QUOTA),
        "evaluation": {
            "workstation_tag_key": WORKSTATION_TAG_KEY,
            "workstation_tag_value": WORKSTATION_TAG_VALUE,
            "output_prefix": SSM_OUTPUT_PREFIX,
        },
        "sagemaker": {
            "pipeline_name": stacks["sagemaker"].pipeline_name,
            "pipeline_role_arn": f"arn:{partition}:iam::{account}:role/{settings.name('pipeline')}",
            "model_package_group": stacks["sagemaker"].model_package_group_name,
            # the secrets the pipeline role may read (SageMakerStack: GetSecretValue on <prefix>-groot/*)
            "hf_token_secret_path": f"{settings.name('groot')}/",
        },
        "greengrass": {
            "thing_group_name": stacks["greengrass"].thing_group_name,
            "components": dict(stacks["greengrass"].components),
        },
        "notifications": {
            "sns_topic_arn": f"arn:{partition}:sns:{region}:{account}:{settings.name('notifications')}",
        },
        "approval": {"approvers": list(settings.approvers),
                     "aws_identities": {k: list(v) for k, v in settings.approver_aws_identities.items()},
                     "self_approval": False},
        "schedule_timezone": settings.schedule_timezone,
        "sandbox": False,
    }
    if stacks.get("wait_events") is not None:
        config["events"] = {"mode": "events", "queue_url": stacks["wait_events"].queue_url,
                            "reconcile_interval_seconds": 600}
    if stacks.get("hyperpod") is not None:
        config["hyperpod"] = {"cluster_name": stacks["hyperpod"].cluster_name, "gpu_instance_group": "gpu",
                              "instance_type": stacks["hyperpod"].GPU_INSTANCE_TYPE, "head_instance_group": "head",
                              "submit_host_tag_key": settings.hyperpod_submit_host_tag_key,
                              "submit_host_tag_value": settings.hyperpod_submit_host_tag_value}
    return config


def build_app(app: cdk.App, settings: Settings | None = None, *, nag: bool = True,
              recipes_dir: str | Path | None = None) -> Sim2RealStacks:
    """Create every stack in ``app``.

    :param app: the CDK app (its context supplies the settings when ``settings`` is None).
    :param settings: explicit settings (tests); default :meth:`Settings.from_context`.
    :param nag: attach the cdk-nag AwsSolutions checks (``app.synth()`` then raises
        ``ValidationFailed`` on any unacknowledged finding) and acknowledge the reviewed ones.
    :param recipes_dir: Greengrass recipes folder (default ``containers/greengrass/recipes``).
    """
    s = settings or Settings.from_context(app.node)
    p = s.prefix.capitalize().replace("-", "")
    artifacts_name = artifacts_bucket_name(s.prefix)
    network = NetworkStack(app, f"{p}Network", settings=s, description="sim2real: VPC, endpoints, security groups")
    storage = StorageStack(app, f"{p}Storage", settings=s, vpc=network.vpc,
                           client_security_groups=[network.batch_sg, network.workstation_sg],
                           description="sim2real: artifacts and MWAA buckets, EFS for checkpoints")
    notifications = NotificationsStack(app, f"{p}Notifications", settings=s, description="sim2real: SNS topic")
    images = ImagesStack(app, f"{p}Images", settings=s, description="sim2real: ECR repositories, CodeBuild")
    batch = BatchStack(app, f"{p}Batch", settings=s, vpc=network.vpc, security_group=network.batch_sg,
                       file_system=storage.file_system, artifacts=artifacts_name,
                       repository=images.training_repository,
                       description="sim2real: Batch GPU compute environment, queue, multinode job definition")
    evaluation = EvaluationStack(app, f"{p}Evaluation", settings=s, vpc=network.vpc,
                                 security_group=network.workstation_sg, artifacts=artifacts_name,
                                 file_system=storage.file_system,
                                 description="sim2real: evaluation SSM document and workstation")
    sm = SageMakerStack(app, f"{p}SageMaker", settings=s, artifacts=artifacts_name,
                        repositories=list(images.repositories.values()),
                        description="sim2real: model package group, pipeline role")
    greengrass = GreengrassStack(app, f"{p}Greengrass", settings=s, artifacts=artifacts_name,
                                 recipes_dir=recipes_dir,
                                 description="sim2real: thing group, components, token exchange role")
    for stack in (batch, evaluation, sm, greengrass):
        stack.add_stack_dependency(storage, "uses the artifacts bucket by name")
    hyperpod = (HyperPodStack(app, f"{p}HyperPod", settings=s, vpc=network.vpc, artifacts=artifacts_name,
                              description="sim2real: optional HyperPod cluster") if s.hyperpod else None)
    arn = lambda service, rest: f"arn:{cdk.Aws.PARTITION}:{service}:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:{rest}"  # noqa: E731
    wait_events = WaitEventsStack(app, f"{p}WaitEvents", settings=s, resources=ProjectResources(
        job_queue_arn=arn("batch", f"job-queue/{s.name('gpu')}"),
        codebuild_project=s.name("training-image"),
        ssm_documents=(evaluation.document_name, "AWS-RunShellScript"),
        pipeline_arn=arn("sagemaker", f"pipeline/{sm.pipeline_name}"),
        model_package_group=sm.model_package_group_name,
        hyperpod_cluster=hyperpod.cluster_name if hyperpod else "",
    ), description="sim2real: EventBridge rules of the waited-on state changes, wait-event SQS queue")
    parts = {"batch": batch, "sagemaker": sm, "greengrass": greengrass, "hyperpod": hyperpod,
             "wait_events": wait_events}
    config = environment_config(s, parts)
    variables_prefix = f"/{s.prefix}/airflow/variables"
    environment = EnvironmentStack(app, f"{p}Environment", config=config, variables_prefix=variables_prefix,
                                   description="sim2real: environment config in SSM")
    for stack in (storage, images, batch, evaluation, sm, greengrass, notifications, wait_events) + ((hyperpod,) if hyperpod else ()):
        environment.add_stack_dependency(stack, "the config names these resources")
    targets = MwaaTargets(
        artifacts=artifacts_name,
        mwaa_bucket=mwaa_bucket_name(s.prefix),
        codebuild_project_arn=images.project.project_arn,
        ecr_repository_arns=[r.repository_arn for r in images.repositories.values()],
        compute_environment_arn=batch.compute_environment.compute_environment_arn,
        job_queue_arn=batch.job_queue.job_queue_arn,
        job_definition_name=s.name("train"),
        batch_job_role_arn=batch.job_role.role_arn,
        batch_log_group=batch.log_group_name,
        evaluate_document_name=evaluation.document_name,
        workstation_tag=(WORKSTATION_TAG_KEY, WORKSTATION_TAG_VALUE),
        pipeline_name=sm.pipeline_name,
        pipeline_role_arn=sm.role.role_arn,
        model_package_group_name=sm.model_package_group_name,
        thing_group_name=greengrass.thing_group_name,
        canary_thing_group_name=greengrass.canary_thing_group_name,
        component_names=sorted(greengrass.components),
        topic_arn=notifications.topic.topic_arn,
        topic_key=notifications.key,
        environment_parameter_names=environment.parameter_names,
        quota_code=GPU_QUOTA["quota_code"],
        hyperpod_role_arn=hyperpod.role.role_arn if hyperpod else None,
        wait_events_queue_arn=WaitEventsStack.queue_arn_for(s),
        hyperpod_submit_host_tag=((s.hyperpod_submit_host_tag_key, s.hyperpod_submit_host_tag_value)
                                  if hyperpod else None),
    )
    mwaa_stack = MwaaStack(app, f"{p}Mwaa", settings=s, vpc=network.vpc, targets=targets,
                           description="sim2real: MWAA environment (Airflow 3) and execution role")
    mwaa_stack.add_stack_dependency(storage, "uses the MWAA and artifacts buckets by name")
    mwaa_stack.add_stack_dependency(environment, "Variables come from the environment parameters")
    stacks = Sim2RealStacks(settings=s, network=network, storage=storage, notifications=notifications, images=images,
                            batch=batch, evaluation=evaluation, sagemaker=sm, greengrass=greengrass, mwaa=mwaa_stack,
                            environment=environment, hyperpod=hyperpod, config=config, wait_events=wait_events)
    for stack in stacks.all():
        cdk.Tags.of(stack).add("project", s.prefix)
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        acknowledge_findings(stacks)
    return stacks
