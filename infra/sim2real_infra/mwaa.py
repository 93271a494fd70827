"""MWAA: the Airflow 3 environment that runs the ``sim_to_real`` DAG and its execution role.

The execution role is scoped to exactly the resources of the other stacks; the few statements on
``*`` are API actions that have no resource-level permissions (listed in :data:`UNSCOPED_ACTIONS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_mwaa as mwaa
from aws_cdk import aws_s3 as s3
from constructs import Construct

from sim2real.orchestration.dag_defaults import NAMESPACE_LEVELS

from .hyperpod_eks import add_access_entry, describe_statements
from .policies import as_bucket, grant_prefixes
from .settings import Settings

#: ``AirflowConfigurationOptions``: every wait longer than a minute defers (no worker slot held),
#: and Airflow Variables are read from SSM (``/sim2real/airflow/variables/sim2real_environment`` holds
#: the environment config) through the Amazon provider's secrets backend.
def airflow_configuration(variables_prefix: str, schedule_timezone: str = "UTC",
                          environment_name: str = "sim2real") -> dict[str, str]:
    """MWAA ``AirflowConfigurationOptions`` of the environment.

    ``sim2real.schedule_timezone`` (a custom option: MWAA sets it as ``AIRFLOW__SIM2REAL__SCHEDULE_TIMEZONE``) is
    the IANA time zone of the nightly schedule, the environment config's ``schedule_timezone``; the DAG file reads
    it at parse time from the Airflow configuration (no Variable lookup while parsing).
    ``sim2real.deployment_id`` (``mwaa:<environment_name>``) names this Airflow deployment in each run record
    (``sim2real.orchestration.run_records.deployment_id``): the orphan sweeper never stops what another deployment started.
    """
    return {
        "sim2real.schedule_timezone": schedule_timezone,
        "sim2real.deployment_id": f"mwaa:{environment_name}",
        "operators.default_deferrable": "true",
        "secrets.backend": "airflow.providers.amazon.aws.secrets.systems_manager.SystemsManagerParameterStoreBackend",
        "secrets.backend_kwargs": '{"variables_prefix": "%s", "connections_prefix": null, "config_prefix": null}'
        % variables_prefix,
        "core.load_examples": "false",
        # the Amazon provider's "credentials retrieved" INFO line on every poll; its warnings and errors still show
        "logging.namespace_levels": NAMESPACE_LEVELS,
    }


#: Actions the DAG needs that IAM cannot scope to a resource (Service Authorization Reference:
#: no resource type for these actions), with the DAG stage that calls them.
UNSCOPED_ACTIONS: dict[str, str] = {
    "batch:DescribeComputeEnvironments": "preflight: compute environment state",
    "batch:DescribeJobQueues": "train: queue state",
    "batch:DescribeJobDefinitions": "train: current revision before pinning the image digest",
    "batch:DescribeJobs": "train: job status (deferred trigger)",
    "batch:ListJobs": "train: reattach to the run's job after a retry; orphan sweeper: active jobs of the queue",
    "ec2:DescribeInstanceTypes": "preflight: vCPUs/GPUs of the instance type",
    "ec2:DescribeInstances": "evaluate: find the workstation by tag",
    "cloudwatch:GetMetricStatistics": "preflight: AWS/Usage vCPU in use",
    "ssm:DescribeInstanceInformation": "evaluate: is the workstation's SSM agent online",
    "ssm:GetCommandInvocation": "evaluate: command status",
    "ssm:ListCommandInvocations": "evaluate: command status per instance",
    "ssm:CancelCommand": "evaluate: on kill, cancel the command (a command id is not an IAM resource)",
    "sagemaker:ListModelPackages": "approval: the run's model package in the group",
    "greengrass:ListCoreDevices": "deploy: core devices of the thing group",
    "greengrass:CreateDeployment": "deploy: the target thing group is checked through iot:* on the group",
    "greengrass:ListDeployments": "deploy: find the run's deployment after a retry; orphan sweeper: deployments of dead runs",
    "ecr:GetAuthorizationToken": "build: registry login is account-wide",
}

#: The tag key the MWAA role may set on Greengrass deployments (the canary's field verdict).
FIELD_VERDICT_TAG = "sim2real:field-verdict"

#: MWAA's own needs on ``*`` (MWAA execution-role documentation).
MWAA_UNSCOPED = {
    "cloudwatch:PutMetricData": "MWAA publishes Airflow metrics (condition: namespace AmazonMWAA)",
    "s3:GetAccountPublicAccessBlock": "MWAA checks the account's Block Public Access before using the bucket",
}


@dataclass
class MwaaTargets:
    """Names/ARNs of what the DAG drives (filled by :func:`sim2real_infra.app.build_app`)."""

    artifacts: s3.IBucket | str
    mwaa_bucket: s3.IBucket | str
    codebuild_project_arn: str
    ecr_repository_arns: list[str]
    compute_environment_arn: str
    job_queue_arn: str
    job_definition_name: str
    batch_job_role_arn: str
    batch_log_group: str
    evaluate_document_name: str
    workstation_tag: tuple[str, str]
    pipeline_name: str
    pipeline_role_arn: str
    model_package_group_name: str
    thing_group_name: str
    canary_thing_group_name: str
    component_names: list[str]
    topic_arn: str
    topic_key: kms.IKey
    environment_parameter_names: list[str]
    quota_code: str = "L-DB2E81BA"
    hyperpod_role_arn: str | None = None
    #: EC2 tag ``(key, value)`` of the HyperPod submit (head/login) node; ``None`` without HyperPod.
    hyperpod_submit_host_tag: tuple[str, str] | None = None
    #: ARN of the wait-event SQS queue (``WaitEventsStack``); ``None``: no wait events.
    wait_events_queue_arn: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


class MwaaStack(cdk.Stack):
    """``AWS::MWAA::Environment`` ``<prefix>`` (Airflow 3, private web server, all logs at INFO).

    ``plugins.zip``, ``requirements.txt`` and ``startup.sh`` are referenced by S3 object version
    (``Settings.mwaa_versions``; ``make deploy`` uploads the bundle first and passes them in).
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, vpc: ec2.IVpc,
                 targets: MwaaTargets, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.environment_name = settings.prefix
        self.variables_prefix = f"/{settings.prefix}/airflow/variables"
        self.security_group = ec2.SecurityGroup(self, "MwaaSg", vpc=vpc, allow_all_outbound=True,
                                                description="sim2real MWAA (components talk to each other)")
        self.security_group.add_ingress_rule(self.security_group, ec2.Port.all_traffic(),
                                             "MWAA components: self-referencing rule MWAA requires")
        self.role = iam.Role(self, "ExecutionRole",
                             assumed_by=iam.CompositePrincipal(iam.ServicePrincipal("airflow.amazonaws.com"),
                                                               iam.ServicePrincipal("airflow-env.amazonaws.com")),
                             description="sim2real MWAA execution role: the DAG's AWS calls")
        targets.artifacts = as_bucket(self, targets.artifacts)
        targets.mwaa_bucket = as_bucket(self, targets.mwaa_bucket, "MwaaBucket")
        self.policies: list[iam.ManagedPolicy] = []
        self._mwaa_statements(targets)
        self._dag_statements(settings, targets)
        # HyperPod on EKS (optional): the role's Kubernetes group on the EKS cluster; RBAC gives the group its rights
        self.eks_access_entry = add_access_entry(self, settings, self.role) if settings.hyperpod_eks else None

        versions = settings.mwaa_versions
        self.airflow = mwaa.CfnEnvironment(
            self, "Environment",
            name=self.environment_name,
            airflow_version=settings.airflow_version,
            environment_class=settings.mwaa_environment_class,
            execution_role_arn=self.role.role_arn,
            source_bucket_arn=targets.mwaa_bucket.bucket_arn,
            dag_s3_path="dags",
            plugins_s3_path="plugins.zip",
            plugins_s3_object_version=versions.get("plugins.zip"),
            requirements_s3_path="requirements.txt",
            requirements_s3_object_version=versions.get("requirements.txt"),
            startup_script_s3_path="startup.sh",
            startup_script_s3_object_version=versions.get("startup.sh"),
            airflow_configuration_options=airflow_configuration(self.variables_prefix, settings.schedule_timezone,
                                                                self.environment_name),
            network_configuration=mwaa.CfnEnvironment.NetworkConfigurationProperty(
                security_group_ids=[self.security_group.security_group_id],
                subnet_ids=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids[:2],
            ),
            webserver_access_mode="PRIVATE_ONLY",
            max_workers=5,
            min_workers=1,
            schedulers=2,
            weekly_maintenance_window_start="SUN:03:00",
            logging_configuration=mwaa.CfnEnvironment.LoggingConfigurationProperty(**{
                kind: mwaa.CfnEnvironment.ModuleLoggingConfigurationProperty(enabled=True, log_level="INFO")
                for kind in ("dag_processing_logs", "scheduler_logs", "task_logs", "webserver_logs", "worker_logs")
            }),
        )
        # MWAA checks the role's permissions when it creates the environment: attach them first (the role
        # itself is already a dependency through ExecutionRoleArn's GetAtt; naming it again is cfn-lint W3005).
        default_policy = self.role.node.try_find_child("DefaultPolicy")
        self.airflow.node.add_dependency(*self.policies, *([default_policy] if default_policy else []))
        if not all(versions.get(k) for k in ("plugins.zip", "requirements.txt", "startup.sh")):
            cdk.Annotations.of(self).add_warning_v2(
                "sim2real:mwaa-versions",
                "MWAA bundle object versions not given: MWAA will use the latest objects. Run `make deploy` "
                "(it uploads dist/mwaa and writes dist/mwaa/versions.json) to pin them.",
            )

    # -- policy ---------------------------------------------------------------------------------
    def _add(self, sid: str, actions: list[str], resources: list[str], conditions: dict | None = None) -> None:
        """Add a statement to the policy being filled (``self._target``: the role or a managed policy)."""
        statement = iam.PolicyStatement(sid=sid, actions=actions, resources=resources, conditions=conditions)
        target = getattr(self, "_target", None)
        if target is None:
            self.role.add_to_policy(statement)
        else:
            target.add_statements(statement)

    def _policy(self, cid: str, description: str) -> iam.ManagedPolicy:
        """Start a customer managed policy on the role (each stays under IAM's 6,144-character limit;
        one inline policy for everything would exceed the role's 10,240-character inline limit)."""
        self._target = iam.ManagedPolicy(self, cid, description=description, roles=[self.role])
        self.policies.append(self._target)
        return self._target

    def _mwaa_statements(self, t: MwaaTargets) -> None:
        """What every MWAA execution role needs (MWAA User Guide, "Amazon MWAA execution role")."""
        s = cdk.Stack.of(self)
        self._add("MwaaPublishMetrics", ["airflow:PublishMetrics"],
                  [s.format_arn(service="airflow", resource="environment", resource_name=self.environment_name)])
        self._add("MwaaBucketCheck", ["s3:GetAccountPublicAccessBlock"], ["*"])
        self._add("MwaaBucketRead", ["s3:GetObject*", "s3:GetBucket*", "s3:List*"],
                  [t.mwaa_bucket.bucket_arn, t.mwaa_bucket.arn_for_objects("*")])
        self._add("MwaaLogs", ["logs:CreateLogStream", "logs:CreateLogGroup", "logs:PutLogEvents", "logs:GetLogEvents",
                               "logs:GetLogRecord", "logs:GetLogGroupFields", "logs:GetQueryResults"],
                  [s.format_arn(service="logs", resource="log-group", resource_name=f"airflow-{self.environment_name}-*",
                                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)])
        self._add("MwaaLogGroups", ["logs:DescribeLogGroups"],
                  [s.format_arn(service="logs", resource="log-group", resource_name="*",
                                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)])
        self._add("MwaaMetrics", ["cloudwatch:PutMetricData"], ["*"],
                  {"StringEquals": {"cloudwatch:namespace": "AmazonMWAA"}})
        self._add("MwaaCeleryQueues", ["sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
                                       "sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:SendMessage"],
                  [f"arn:{cdk.Aws.PARTITION}:sqs:{cdk.Aws.REGION}:*:airflow-celery-*"])
        self.role.add_to_policy(iam.PolicyStatement(
            sid="MwaaCeleryQueueEncryption",
            actions=["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey*", "kms:Encrypt"],
            not_resources=[f"arn:{cdk.Aws.PARTITION}:kms:*:{cdk.Aws.ACCOUNT_ID}:key/*"],
            conditions={"StringLike": {"kms:ViaService": [f"sqs.{cdk.Aws.REGION}.amazonaws.com"]}},
        ))

    def _dag_statements(self, settings: Settings, t: MwaaTargets) -> None:
        """What the ``sim_to_real`` DAG calls, stage by stage, on the resources of the other stacks."""
        s = cdk.Stack.of(self)
        self._policy("DagBuildTrainPolicy", "sim2real DAG: environment config, build, preflight, train, evaluate")
        arn = lambda service, resource, name=None, fmt=cdk.ArnFormat.SLASH_RESOURCE_NAME, region=None, account=None: s.format_arn(  # noqa: E731
            service=service, resource=resource, resource_name=name, arn_format=fmt, region=region, account=account)
        # environment config (the secrets backend reads Variables from SSM)
        self._add("EnvironmentConfig", ["ssm:GetParameter", "ssm:GetParameters"],
                  [arn("ssm", "parameter", name.lstrip("/")) for name in t.environment_parameter_names])
        # run folders, checkpoints, reports, lineage, SSM command output
        # images/: the build's image records (image key -> digest), read and written by build.build_image
        # field/episodes/: the robots' field episodes, listed and read by deploy.canary_verdict and the field dataset
        # publisher (sim_to_real_field_data), which also checks each episode's data file under field/data/
        # (HeadObject: s3:GetObject) and writes each field dataset version's manifest once under field/datasets/,
        # where vla.field_dataset checks the version a fine-tune names (HeadObject, GetObject)
        grant_prefixes(self._target, t.artifacts,
                       read=["ssm-output/", "greengrass/", "field/episodes/", "field/data/"],
                       write=["runs/", "images/", "field/datasets/"],
                       sid="Artifacts")
        # a field dataset manifest is written once (publish_manifest: PutObject with IfNoneMatch="*"): a PutObject
        # there without If-None-Match (condition key s3:if-none-match, S3 User Guide "Enforce conditional writes on
        # Amazon S3 buckets") is denied, so a published version cannot be replaced
        self._target.add_statements(iam.PolicyStatement(
            sid="FieldDatasetManifestsCreateOnly", effect=iam.Effect.DENY, actions=["s3:PutObject"],
            resources=[t.artifacts.arn_for_objects("field/datasets/*")],
            conditions={"Null": {"s3:if-none-match": "true"}}))
        # 1 build
        self._add("BuildImage", ["codebuild:StartBuild", "codebuild:BatchGetBuilds", "codebuild:StopBuild",
                                 "codebuild:BatchGetProjects",  # check_resources, build: project and context
                                 "codebuild:ListBuildsForProject"],  # build: reattach to an earlier try's build
                  [t.codebuild_project_arn])
        self._add("ImageDigest", ["ecr:DescribeImages", "ecr:DescribeRepositories", "ecr:BatchGetImage"],
                  t.ecr_repository_arns)
        # 2 preflight
        self._add("GpuQuota", ["servicequotas:GetServiceQuota"],
                  [arn("servicequotas", "ec2", t.quota_code)])
        # 3 train
        jd = arn("batch", "job-definition", t.job_definition_name)
        self._add("TrainRegisterAndSubmit", ["batch:RegisterJobDefinition", "batch:SubmitJob", "batch:TagResource"],
                  [jd, f"{jd}:*", t.job_queue_arn])
        self._add("TrainTerminate", ["batch:TerminateJob"], [arn("batch", "job", "*")])
        self._add("TrainPassJobRole", ["iam:PassRole"], [t.batch_job_role_arn],
                  {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}})
        if settings.hyperpod_eks:  # train on HyperPod EKS: the HyperPod and the EKS cluster, described (hyperpod_eks)
            self._target.add_statements(*describe_statements(self, settings))
        self._add("TrainLogs", ["logs:GetLogEvents", "logs:DescribeLogStreams"],
                  [arn("logs", "log-group", f"{t.batch_log_group}:log-stream:{t.job_definition_name}/*",
                       cdk.ArnFormat.COLON_RESOURCE_NAME),
                   arn("logs", "log-group", f"{t.batch_log_group}:*", cdk.ArnFormat.COLON_RESOURCE_NAME)])
        # 5 evaluate: start/stop and command only the tagged workstation
        key, value = t.workstation_tag
        tag = {"StringEquals": {f"aws:ResourceTag/{key}": value}}
        ssm_tag = {"StringEquals": {f"ssm:resourceTag/{key}": value}}
        instances = arn("ec2", "instance", "*")
        self._add("WorkstationStartStop", ["ec2:StartInstances", "ec2:StopInstances"], [instances], tag)
        self._add("WorkstationCommand", ["ssm:SendCommand"], [instances], ssm_tag)
        self._add("WorkstationDocuments", ["ssm:SendCommand"],
                  [arn("ssm", "document", "AWS-RunShellScript", account=""),
                   arn("ssm", "document", t.evaluate_document_name)])
        self._policy("DagReleasePolicy", "sim2real DAG: VLA pipeline, approval, edge deploy, notifications")
        # 7 VLA pipeline
        pipeline = arn("sagemaker", "pipeline", t.pipeline_name)
        self._add("Pipeline", ["sagemaker:DescribePipeline", "sagemaker:CreatePipeline", "sagemaker:UpdatePipeline",
                               "sagemaker:StartPipelineExecution", "sagemaker:ListPipelineExecutions",
                               "sagemaker:AddTags"], [pipeline])
        self._add("PipelineExecution", ["sagemaker:DescribePipelineExecution", "sagemaker:ListPipelineExecutionSteps",
                                        "sagemaker:StopPipelineExecution"], [f"{pipeline}/execution/*"])
        self._add("PipelinePassRole", ["iam:PassRole"], [t.pipeline_role_arn],
                  {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}})
        self._add("PipelineRoleExists", ["iam:GetRole"], [t.pipeline_role_arn])  # check_resources
        # check_resources: a GR00T version's Hugging Face token secret exists (only the <prefix>-groot/* secrets the
        # pipeline role may read) and its base model prefix (models/groot-base/, or .../<version>/) holds an object
        self._add("GrootTokenSecretExists", ["secretsmanager:DescribeSecret"],
                  [arn("secretsmanager", "secret", f"{settings.name('groot')}/*", cdk.ArnFormat.COLON_RESOURCE_NAME)])
        self._add("GrootBaseModelList", ["s3:ListBucket"], [t.artifacts.bucket_arn],
                  {"StringLike": {"s3:prefix": ["models/groot-base/*"]}})
        # 8 approval
        self._add("ModelPackages", ["sagemaker:DescribeModelPackage", "sagemaker:DescribeModelPackageGroup"],
                  [arn("sagemaker", "model-package-group", t.model_package_group_name),
                   arn("sagemaker", "model-package", f"{t.model_package_group_name}/*")])
        # the reviewer's answer in Airflow is written to the package (UpdateModelPackage): this group's versions only
        self._add("ModelPackageApproval", ["sagemaker:UpdateModelPackage"],
                  [arn("sagemaker", "model-package", f"{t.model_package_group_name}/*")])
        # 9 deploy (Greengrass CreateDeployment drives an IoT job on the thing group)
        thing_groups = [arn("iot", "thinggroup", t.thing_group_name), arn("iot", "thinggroup", t.canary_thing_group_name)]
        self._add("EdgeDeploymentState", ["greengrass:GetDeployment", "greengrass:CancelDeployment"],
                  [arn("greengrass", "deployments", "*", cdk.ArnFormat.COLON_RESOURCE_NAME)])
        # the canary's field verdict is recorded on its deployment (CreateDeployment tags, TagResource): that one
        # tag key only (sim2real.orchestration.hooks.greengrass.FIELD_VERDICT_TAG)
        self._add("EdgeDeploymentVerdict", ["greengrass:TagResource"],
                  [arn("greengrass", "deployments", "*", cdk.ArnFormat.COLON_RESOURCE_NAME)],
                  conditions={"ForAllValues:StringEquals": {"aws:TagKeys": [FIELD_VERDICT_TAG]}})
        self._add("EdgeComponents", ["greengrass:DescribeComponent", "greengrass:GetComponent"],
                  [arn("greengrass", "components", f"{name}:versions:*", cdk.ArnFormat.COLON_RESOURCE_NAME)
                   for name in t.component_names])
        self._add("EdgeDevices", ["greengrass:ListEffectiveDeployments", "greengrass:GetCoreDevice"],
                  [arn("greengrass", "coreDevices", "*", cdk.ArnFormat.COLON_RESOURCE_NAME)])
        self._add("EdgeThingGroup", ["iot:DescribeThingGroup", "iot:CreateJob", "iot:UpdateJob"], thing_groups)
        self._add("EdgeJobs", ["iot:CreateJob", "iot:DescribeJob", "iot:CancelJob", "iot:UpdateJob"],
                  [arn("iot", "job", "*")])
        self._add("EdgeThings", ["iot:DescribeThing", "iot:GetThingShadow", "iot:UpdateThingShadow",
                                 "iot:DeleteThingShadow"], [arn("iot", "thing", "*")])
        # notifications
        self._add("Notify", ["sns:Publish"], [t.topic_arn])
        self._add("NotifyEncrypt", ["kms:Decrypt", "kms:GenerateDataKey*"], [t.topic_key.key_arn])
        # 10 report: write_lineage sets its DAG run's note through MWAA's REST API (InvokeRestApi, PATCH
        # dagRuns), as this environment's User Airflow role (MWAA User Guide, "Using the Apache Airflow REST API")
        self._add("RunNote", ["airflow:InvokeRestApi"],
                  [arn("airflow", "role", f"{self.environment_name}/User")])
        # HyperPod (optional backend)
        if t.hyperpod_role_arn:
            self._add("HyperPodScale", ["sagemaker:DescribeCluster", "sagemaker:UpdateCluster",
                                        "sagemaker:ListClusterNodes"], [arn("sagemaker", "cluster", "*")])
            self._add("HyperPodPassRole", ["iam:PassRole"], [t.hyperpod_role_arn],
                      {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}})
        if t.hyperpod_role_arn and t.hyperpod_submit_host_tag:
            # train (sbatch/sacct/scancel) and the orphan sweeper (squeue/scancel): AWS-RunShellScript on the
            # submit node only (the document is granted with the workstation's, above)
            head_key, head_value = t.hyperpod_submit_host_tag
            self._add("HyperPodHeadCommand", ["ssm:SendCommand"], [instances],
                      {"StringEquals": {f"ssm:resourceTag/{head_key}": head_value}})
        # wait events: consume the wait-event queue (SSE-SQS: no KMS permission needed)
        if t.wait_events_queue_arn:
            self._add("WaitEventsConsume", ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
                                            "sqs:GetQueueAttributes"], [t.wait_events_queue_arn])
        # calls with no resource-level permissions
        self._add("Unscoped", sorted(UNSCOPED_ACTIONS), ["*"])
        self._target = None
