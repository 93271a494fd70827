"""Provision the sandbox with every resource the ``sim_to_real`` DAG uses (what infra/ creates in AWS).

:func:`provision` returns the environment config (shape: :mod:`sim2real.orchestration.config`) with
``"sandbox": true`` and stores it on the Sandbox (``sandbox.config``; ``airflow_env()`` exports it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim2real.contract import groot
from sim2real.orchestration.config import validate_environment

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox

COMPONENTS = ("com.sim2real.PolicySetup", "com.sim2real.PolicyInference", "com.sim2real.PolicyBenchmark",
              "com.sim2real.FieldUploader")
TRUST = {
    "batch": "batch.amazonaws.com", "ec2": "ec2.amazonaws.com", "codebuild": "codebuild.amazonaws.com",
    "sagemaker": "sagemaker.amazonaws.com", "ecs-tasks": "ecs-tasks.amazonaws.com",
}

#: The Secrets Manager secret of the Hugging Face token GR00T N1.7 loads its gated backbone with (infra/:
#: ``<prefix>-groot/hf-token``), and the fake token the sandbox stores in it (no real token ever reaches the sandbox).
HF_TOKEN_SECRET_ID = "sim2real-groot/hf-token"
SANDBOX_HF_TOKEN = "hf_SANDBOXfakeTokenNeverLogged0123456789"

DEFAULT_JOB_ENVIRONMENT = {
    "TASK": "Reacher-v5",
    "MAX_ITERATIONS": "20",
    "NUM_ENVS": "8",
    "SEED": "0",
    "CHECKPOINT_INTERVAL": "10",
}


def _role(iam: Any, name: str, service: str, account: str) -> str:
    doc = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}]}
    try:
        return iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(doc))["Role"]["Arn"]
    except iam.exceptions.EntityAlreadyExistsException:
        return f"arn:aws:iam::{account}:role/{name}"


def _default_recipe(name: str, version: str) -> dict[str, Any]:
    lifecycle = {
        "com.sim2real.PolicySetup": "echo export the policy to ONNX/TensorRT",
        "com.sim2real.PolicyInference": "echo serve the policy on ZMQ 5555",
        "com.sim2real.PolicyBenchmark": "echo benchmark the policy latency",
        "com.sim2real.FieldUploader": "echo upload the spooled field episodes",
    }.get(name, "echo run")
    return {
        "RecipeFormatVersion": "2020-01-25",
        "ComponentName": name,
        "ComponentVersion": version,
        "ComponentDescription": f"{name} (placeholder recipe from the sim2real sandbox)",
        "ComponentPublisher": "sim2real",
        "ComponentConfiguration": {"DefaultConfiguration": {"ModelUri": "", "Port": 5555}},
        "Manifests": [{"Platform": {"os": "linux"}, "Lifecycle": {"Run": lifecycle}}],
    }


def _load_recipes(repo_root: Path) -> dict[str, dict[str, Any]]:
    """Recipes under containers/greengrass/ (JSON or YAML files with ComponentName), by name."""
    found: dict[str, dict[str, Any]] = {}
    base = repo_root / "containers" / "greengrass"
    if not base.is_dir():
        return found
    for path in sorted(base.rglob("*")):
        if path.suffix.lower() not in (".json", ".yaml", ".yml") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
            if path.suffix.lower() == ".json":
                recipe = json.loads(text)
            else:
                import yaml

                recipe = yaml.safe_load(text)
        except Exception:  # noqa: BLE001 - not a recipe
            continue
        if isinstance(recipe, dict) and recipe.get("ComponentName") and recipe.get("ComponentVersion"):
            found[recipe["ComponentName"]] = recipe
    return found


def approval_section(approvers: list[str] | None = None) -> dict[str, Any]:
    """The sandbox's ``approval`` section: four-eyes among ``approvers`` (default ``SIM2REAL_APPROVERS``,
    comma-separated), or, with none, self-approval (one anonymous admin is every user of ``make ui``)."""
    if approvers is None:
        approvers = [a.strip() for a in os.environ.get("SIM2REAL_APPROVERS", "").split(",") if a.strip()]
    return {"approvers": list(approvers), "aws_identities": {}, "self_approval": not approvers}


#: The sandbox's canary thing group: robot 1 (``sim2real-robot-1``), also in the fleet group ``sim2real-robots``.
CANARY_THING_GROUP = "sim2real-robots-canary"


def provision(
    sandbox: Sandbox,
    *,
    repo_root: str | os.PathLike | None = None,
    instance_type: str = "g6.12xlarge",
    max_vcpus: int = 96,
    workstation_instance_type: str = "g6.12xlarge",
    robots: int = 2,
    hyperpod: bool = True,
    job_environment: dict[str, str] | None = None,
    approvers: list[str] | None = None,
    groot_versions: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Create the sandbox's AWS resources and return the environment config.

    :param sandbox: a running :class:`~sim2real.dev.sandbox.server.Sandbox`.
    :param repo_root: repository root (Greengrass recipes are read from
        ``containers/greengrass/`` when present); default ``sandbox.repo_root``.
    :param instance_type: EC2 type of the Batch compute environment (default g6.12xlarge: 48 vCPU, 4 L4).
    :param max_vcpus: compute environment maxvCpus (default 96 = two g6.12xlarge nodes).
    :param workstation_instance_type: EC2 type of the evaluation workstation.
    :param robots: number of emulated robots (IoT things + Greengrass core devices), 1..10.
    :param hyperpod: also create the HyperPod cluster (groups ``head`` and ``gpu``) and its head/login node
        (EC2 instance tagged ``sim2real:role=hyperpod-head``, SSM-managed, emulated Slurm client).
    :param job_environment: extra/overriding container environment of the job definition.
    :param approvers: the Airflow user ids that may release a model (the config's ``approval.approvers``,
        four-eyes: never the run's trigger). Default: ``SIM2REAL_APPROVERS`` (comma-separated) when set; else none
        and ``self_approval: true``, since the local sandbox UI's one anonymous admin is every user there.
    :param groot_versions: GR00T versions other than the default (``groot_version``) that runs will fine-tune: their
        base models, images and the Hugging Face token's secret (:func:`_provision_groot_versions`); default none
        (the config then has infra/'s shape, which names no other version's images).
    :return: the environment config dict (validated by :func:`sim2real.orchestration.config.validate_environment`).
    :raises ValueError: on ``robots`` outside 1..10.
    """
    if not 1 <= robots <= 10:
        raise ValueError(f"robots must be 1..10, got {robots}")
    root = Path(repo_root).resolve() if repo_root else sandbox.repo_root
    acct, region = sandbox.account_id, sandbox.region
    c = lambda service: sandbox.client(service, internal=True)  # noqa: E731

    bucket = f"sim2real-artifacts-{acct}"
    c("s3").create_bucket(Bucket=bucket)
    # CodeBuild's S3 source: a versioned archive of the training image's build context (the build skip keys on
    # its object version, as it keys on the commit of a git source).
    c("s3").put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    c("s3").put_object(Bucket=bucket, Key="source/sim2real.zip", Body=_source_archive(root))
    _put_base_model_placeholder(c("s3"), bucket, groot.DEFAULT_VERSION)

    iam = c("iam")
    batch_service_role = _role(iam, "sim2real-batch-service", TRUST["batch"], acct)
    instance_role = _role(iam, "sim2real-batch-instance", TRUST["ec2"], acct)
    del instance_role
    try:
        profile_arn = iam.create_instance_profile(InstanceProfileName="sim2real-batch-instance")["InstanceProfile"]["Arn"]
        iam.add_role_to_instance_profile(InstanceProfileName="sim2real-batch-instance", RoleName="sim2real-batch-instance")
    except iam.exceptions.EntityAlreadyExistsException:
        profile_arn = f"arn:aws:iam::{acct}:instance-profile/sim2real-batch-instance"
    job_role = _role(iam, "sim2real-batch-job", TRUST["ecs-tasks"], acct)
    codebuild_role = _role(iam, "sim2real-codebuild", TRUST["codebuild"], acct)
    pipeline_role = _role(iam, "sim2real-pipeline", TRUST["sagemaker"], acct)
    hyperpod_role = _role(iam, "sim2real-hyperpod", TRUST["sagemaker"], acct)
    workstation_role = _role(iam, "sim2real-workstation", TRUST["ec2"], acct)
    del workstation_role

    # image build
    repo_name = "sim2real-training"
    c("ecr").create_repository(repositoryName=repo_name, imageTagMutability="MUTABLE")
    project = "sim2real-training-image"
    c("codebuild").create_project(
        name=project,
        description="Builds the training image and pushes it to ECR",
        source={"type": "S3", "location": f"{bucket}/source/sim2real.zip"},
        artifacts={"type": "NO_ARTIFACTS"},
        environment={"type": "LINUX_CONTAINER", "image": "aws/codebuild/standard:7.0",
                     "computeType": "BUILD_GENERAL1_LARGE", "privilegedMode": True},
        serviceRole=codebuild_role,
    )

    # network + Batch
    ec2 = c("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.42.1.0/24", AvailabilityZone=f"{region}a")["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName="sim2real-batch", Description="sim2real Batch nodes (NCCL between nodes)",
                                   VpcId=vpc)["GroupId"]
    batch = c("batch")
    ce_name, queue_name, jd_name = "sim2real-gpu-ce", "sim2real-gpu", "sim2real-train"
    batch.create_compute_environment(
        computeEnvironmentName=ce_name, type="MANAGED", state="ENABLED", serviceRole=batch_service_role,
        computeResources={"type": "EC2", "minvCpus": 0, "maxvCpus": max_vcpus, "desiredvCpus": 0,
                          "instanceTypes": [instance_type], "subnets": [subnet], "securityGroupIds": [sg],
                          "instanceRole": profile_arn},
    )
    batch.create_job_queue(jobQueueName=queue_name, state="ENABLED", priority=1,
                           computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce_name}])
    vcpus = _instance_vcpus(ec2, instance_type)
    gpus = _instance_gpus(ec2, instance_type)
    environment = {**DEFAULT_JOB_ENVIRONMENT, **(job_environment or {})}
    batch.register_job_definition(
        jobDefinitionName=jd_name,
        type="multinode",
        nodeProperties={
            "numNodes": 1, "mainNode": 0,
            "nodeRangeProperties": [{
                "targetNodes": "0:",
                "container": {
                    "image": f"{acct}.dkr.ecr.{region}.amazonaws.com/{repo_name}:latest",
                    "command": ["/usr/local/bin/distributed_run.bash"],  # the images' CMD
                    "jobRoleArn": job_role,
                    "resourceRequirements": [
                        {"type": "GPU", "value": str(gpus or 4)},
                        {"type": "VCPU", "value": str(vcpus or 48)},
                        {"type": "MEMORY", "value": "180000"},
                    ],
                    "environment": [{"name": k, "value": v} for k, v in environment.items()],
                    "linuxParameters": {"sharedMemorySize": 65536},
                    "logConfiguration": {"logDriver": "awslogs"},
                },
            }],
        },
        retryStrategy={"attempts": 1},
        tags={"sim2real:component": "training"},
    )
    logs = c("logs")
    try:
        logs.create_log_group(logGroupName="/aws/batch/job")
    except logs.exceptions.ResourceAlreadyExistsException:
        pass

    # evaluation workstation
    instance = ec2.run_instances(
        ImageId=_ami(ec2), InstanceType=workstation_instance_type, MinCount=1, MaxCount=1, SubnetId=subnet,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "sim2real:role", "Value": "workstation"}, {"Key": "Name", "Value": "sim2real-workstation"}]}],
    )["Instances"][0]["InstanceId"]
    sandbox.ssm.register_instance(instance, "sim2real-workstation")
    sandbox.events.emit("ssm", "managed-instance", f"workstation {instance} runs an emulated SSM agent (Online "
                        "while running); its commands run on this machine", instance_id=instance)

    # SageMaker: pipeline role, registry group, the pipeline itself (the DAG upserts its definition)
    sm = c("sagemaker")
    group = "sim2real-groot-models"
    sm.create_model_package_group(ModelPackageGroupName=group, ModelPackageGroupDescription="GR00T fine-tunes")
    pipeline_name = "sim2real-groot-finetune"
    sm.create_pipeline(PipelineName=pipeline_name, RoleArn=pipeline_role,
                       PipelineDefinition=json.dumps(_placeholder_pipeline(group)))

    images_by_version = _provision_groot_versions(c, bucket, f"{acct}.dkr.ecr.{region}.amazonaws.com",
                                                  groot_versions) if groot_versions else {}

    # IoT + Greengrass
    iot = c("iot")
    thing_group = "sim2real-robots"
    iot.create_thing_group(thingGroupName=thing_group)
    # The canary group: the first robot, also a member of the fleet group (a release goes to it first).
    iot.create_thing_group(thingGroupName=CANARY_THING_GROUP)
    things = []
    for i in range(1, robots + 1):
        thing = f"sim2real-robot-{i}"
        iot.create_thing(thingName=thing)
        iot.add_thing_to_thing_group(thingGroupName=thing_group, thingName=thing)
        groups = [thing_group]
        if i == 1:
            iot.add_thing_to_thing_group(thingGroupName=CANARY_THING_GROUP, thingName=thing)
            groups.append(CANARY_THING_GROUP)
        sandbox.greengrass.register_core_device(thing, groups)
        things.append(thing)
    recipes = _load_recipes(root)
    versions: dict[str, str] = {}
    for name in COMPONENTS:
        recipe = recipes.get(name) or _default_recipe(name, "1.0.0")
        record = sandbox.greengrass.put_component(name, str(recipe["ComponentVersion"]), recipe)
        versions[name] = record["componentVersion"]
    for name, recipe in recipes.items():
        if name not in versions:
            sandbox.greengrass.put_component(name, str(recipe["ComponentVersion"]), recipe)

    topic = c("sns").create_topic(Name="sim2real-notifications")["TopicArn"]

    config: dict[str, Any] = {
        "region": region,
        "account_id": acct,
        "artifacts_bucket": bucket,
        "image_build": {"codebuild_project": project, "ecr_repository": repo_name, "source_version": "main"},
        "batch": {"job_queue": queue_name, "job_definition": jd_name, "compute_environment": ce_name,
                  "instance_type": instance_type, "log_group": "/aws/batch/job"},
        "quota": {"service_code": "ec2", "quota_code": "L-DB2E81BA"},
        "evaluation": {"workstation_tag_key": "sim2real:role", "workstation_tag_value": "workstation",
                       "output_prefix": "ssm-output"},
        "sagemaker": {"pipeline_name": pipeline_name, "pipeline_role_arn": pipeline_role, "model_package_group": group,
                      "hf_token_secret_path": "sim2real-groot/",  # infra/'s <prefix>-groot/
                      **({"images_by_groot_version": images_by_version} if images_by_version else {})},
        "greengrass": {"thing_group_name": thing_group, "components": versions},
        "notifications": {"sns_topic_arn": topic},
        "approval": approval_section(approvers),
        "schedule_timezone": "UTC",
        "sandbox": True,
    }
    if hyperpod:
        lifecycle_bucket = f"sagemaker-sim2real-hyperpod-lifecycle-{acct}"
        c("s3").create_bucket(Bucket=lifecycle_bucket)
        lifecycle = {"SourceS3Uri": f"s3://{lifecycle_bucket}/lifecycle/", "OnCreate": "on_create.sh"}
        sm.create_cluster(ClusterName="sim2real-hyperpod", InstanceGroups=[
            {"InstanceGroupName": "head", "InstanceType": "ml.m5.xlarge", "InstanceCount": 1,
             "LifeCycleConfig": lifecycle, "ExecutionRole": hyperpod_role, "ThreadsPerCore": 1},
            {"InstanceGroupName": "gpu", "InstanceType": "ml.g5.12xlarge", "InstanceCount": 0,
             "LifeCycleConfig": lifecycle, "ExecutionRole": hyperpod_role, "ThreadsPerCore": 1},
        ])
        # The head/login node that submits Slurm jobs: an SSM-managed EC2 instance whose commands have the
        # emulated Slurm client on PATH (HyperPod's own nodes take no SSM Run Command).
        head = ec2.run_instances(
            ImageId=_ami(ec2), InstanceType="m5.xlarge", MinCount=1, MaxCount=1, SubnetId=subnet,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": "sim2real:role", "Value": "hyperpod-head"}, {"Key": "Name", "Value": "sim2real-hyperpod-head"}]}],
        )["Instances"][0]["InstanceId"]
        sandbox.ssm.register_instance(head, "sim2real-hyperpod-head",
                                      env=lambda: sandbox.slurm.head_node_env("sim2real-hyperpod", "gpu"))
        sandbox.events.emit("ssm", "managed-instance", f"HyperPod head node {head} runs an emulated SSM agent and an "
                            "emulated Slurm client (sbatch/srun/squeue/sacct/scontrol/scancel); jobs run on this "
                            "machine", instance_id=head)
        config["hyperpod"] = {"cluster_name": "sim2real-hyperpod", "gpu_instance_group": "gpu",
                              "instance_type": "ml.g5.12xlarge",
                              "head_instance_group": "head", "min_count": 0,
                              "submit_host_tag_key": "sim2real:role", "submit_host_tag_value": "hyperpod-head",
                              "partition": "dev", "shared_dir": sandbox.slurm.shared_dir,
                              "launcher": str(root / "containers" / "rl" / "distributed_run.bash"),
                              "use_container_image": False, "container_mounts": ""}
        from sim2real.dev.sandbox.kubernetes_api import provision_hyperpod_eks

        config["hyperpod_eks"] = provision_hyperpod_eks(
            sandbox, launcher=str(root / "containers" / "rl" / "distributed_run.bash"))
    from sim2real.dev.sandbox.aws_events import provision_wait_events

    config["events"] = provision_wait_events(sandbox, config)
    config = validate_environment(config)
    sandbox.config = config
    sandbox.events.emit(
        "sandbox", "provisioned",
        f"provisioned bucket {bucket}, Batch {ce_name}/{queue_name}/{jd_name}, workstation {instance}, "
        f"pipeline {pipeline_name}, thing group {thing_group} ({', '.join(things)}), canary group "
        f"{CANARY_THING_GROUP} ({things[0]})",
    )
    return config


def _put_base_model_placeholder(s3: Any, bucket: str, version: str) -> None:
    """One small object directly under ``version``'s base model prefix
    (:func:`sim2real.contract.groot.base_model_prefix`), which the resource preflight lists; the emulated pipeline
    loads no model."""
    s3.put_object(Bucket=bucket, Key=f"{groot.base_model_prefix(version)}config.json",
                  Body=json.dumps({"sandbox_placeholder": f"GR00T {version} base model"}).encode())


def _provision_groot_versions(c: Any, bucket: str, registry: str,
                              versions: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """What a fine-tune of each of ``versions`` (GR00T versions other than the default) needs beyond what the
    default version needs: its base model under ``models/groot-base/<version>/`` (one small placeholder
    object: the preflight lists the prefix, the emulated pipeline loads no model) and the Hugging Face token's secret
    (:data:`HF_TOKEN_SECRET_ID`, holding :data:`SANDBOX_HF_TOKEN` as ``{"HF_TOKEN": ...}``, CreateSecret).

    :param c: makes the sandbox's boto3 clients (service name -> client).
    :param bucket: the artifacts bucket.
    :param registry: the sandbox account's ECR registry host.
    :param versions: the GR00T versions (:data:`sim2real.contract.groot.VERSIONS`).
    :return: ``sagemaker.images_by_groot_version`` (training and smoke-eval image URIs per version).
    """
    for version in versions:
        _put_base_model_placeholder(c("s3"), bucket, version)
    secrets = c("secretsmanager")
    try:
        secrets.create_secret(Name=HF_TOKEN_SECRET_ID, SecretString=json.dumps({"HF_TOKEN": SANDBOX_HF_TOKEN}),
                              Description="Hugging Face token of the GR00T fine-tune (sandbox: a fake one)")
    except secrets.exceptions.ResourceExistsException:  # provisioned before
        pass
    return {version: {key: f"{registry}/sim2real-groot:{version}-{key.replace('_', '-')}"
                      for key in ("training", "smoke_eval")} for version in versions}


def _source_archive(root: Path) -> bytes:
    """A zip of ``containers/rl`` (the training image's Dockerfile and launcher), the build context CodeBuild gets."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        base = root / "containers" / "rl"
        for path in sorted(base.rglob("*")) if base.is_dir() else []:
            if path.is_file():
                info = zipfile.ZipInfo(str(path.relative_to(root)), date_time=(2026, 1, 1, 0, 0, 0))
                archive.writestr(info, path.read_bytes())
    return buf.getvalue()


def _instance_info(ec2: Any, instance_type: str) -> dict[str, Any]:
    try:
        return ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
    except Exception:  # noqa: BLE001
        return {}


def _instance_vcpus(ec2: Any, instance_type: str) -> int | None:
    return _instance_info(ec2, instance_type).get("VCpuInfo", {}).get("DefaultVCpus")


def _instance_gpus(ec2: Any, instance_type: str) -> int | None:
    gpus = _instance_info(ec2, instance_type).get("GpuInfo", {}).get("Gpus", [])
    return sum(g.get("Count", 0) for g in gpus) or None


def _ami(ec2: Any) -> str:
    # moto does not validate AMI ids on RunInstances (listing its images takes seconds)
    return "ami-0abcdef1234567890"


def _placeholder_pipeline(group: str) -> dict[str, Any]:
    """A minimal pipeline definition with the GR00T steps (the DAG upserts the real one)."""
    return {
        "Version": "2020-12-01",
        "Parameters": [{"Name": "RunKey", "Type": "String", "DefaultValue": "manual"}],
        "Steps": [
            {"Name": "TransformDataset", "Type": "Processing", "Arguments": {}},
            {"Name": "GR00TFinetune", "Type": "Training", "Arguments": {}},
            {"Name": "SmokeEval", "Type": "Processing", "Arguments": {}},
            {"Name": "SmokeGate", "Type": "Condition", "Arguments": {}},
            {"Name": "RegisterModel", "Type": "RegisterModel", "Arguments": {"ModelPackageGroupName": group}},
        ],
    }
