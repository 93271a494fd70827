"""Resource shapes of the synthesized stacks (aws_cdk.assertions on the real templates)."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match

from sim2real.contract import evaluator
from sim2real_infra.batch import GPU_AMI_PARAMETER

from .conftest import Synth, render, resources


def test_multinode_job_definition(synth: Synth) -> None:
    t = synth.template(synth.stacks.batch)
    t.resource_count_is("AWS::Batch::JobDefinition", 1)
    t.has_resource_properties("AWS::Batch::JobDefinition", {
        "Type": "multinode",
        "JobDefinitionName": "sim2real-train",
        "PlatformCapabilities": ["EC2"],
        "PropagateTags": True,
        "Timeout": {"AttemptDurationSeconds": 24 * 3600},
        "NodeProperties": {
            "NumNodes": 2,
            "MainNode": 0,
            "NodeRangeProperties": [{
                # one open range, so SubmitJob's nodeOverrides.numNodes can resize the job
                "TargetNodes": "0:",
                "Container": Match.object_like({
                    "Command": ["/usr/local/bin/distributed_run.bash"],
                    "ResourceRequirements": Match.array_with([{"Type": "MEMORY", "Value": "180000"},
                                                              {"Type": "VCPU", "Value": "48"},
                                                              {"Type": "GPU", "Value": "4"}]),
                    "LinuxParameters": {"SharedMemorySize": 65536},
                    "MountPoints": [{"ContainerPath": "/mnt/efs", "SourceVolume": "checkpoints"}],
                    "Volumes": [{"Name": "checkpoints", "EfsVolumeConfiguration": Match.object_like(
                        {"TransitEncryption": "ENABLED", "FileSystemId": Match.any_value()})}],
                    "Environment": Match.array_with([
                        {"Name": "NCCL_SOCKET_IFNAME", "Value": "^lo,docker"},
                        {"Name": "NCCL_IB_DISABLE", "Value": "1"},
                    ]),
                    "JobRoleArn": Match.any_value(),
                }),
            }],
        },
        "RetryStrategy": {
            "Attempts": 3,
            "EvaluateOnExit": [
                {"Action": "RETRY", "OnStatusReason": "Host EC2*"},
                {"Action": "EXIT", "OnReason": "*"},
            ],
        },
    })


def test_the_job_definitions_task_is_the_isaac_lab_images_default(synth: Synth) -> None:
    # The image defaults to Isaac Lab 3.0, whose task ids have no -v0 suffix; the job definition's TASK (what a
    # job submitted without the DAG's override trains) names the same task, one the form offers.
    from sim2real.contract.tasks import ISAACLAB_TASKS
    from tests.workloads.test_containers import DOCKERFILES, arg_defaults, instructions

    image_task = arg_defaults(instructions(DOCKERFILES["isaaclab"]))["TASK"]
    t = synth.template(synth.stacks.batch)
    definition = next(iter(t.find_resources("AWS::Batch::JobDefinition").values()))["Properties"]
    env = {e["Name"]: e["Value"]
           for e in definition["NodeProperties"]["NodeRangeProperties"][0]["Container"]["Environment"]}
    assert env["TASK"] == image_task == "Isaac-Velocity-Rough-H1"
    assert env["TASK"] in ISAACLAB_TASKS


def test_queue_cancels_jobs_stuck_runnable_for_capacity(synth: Synth) -> None:
    t = synth.template(synth.stacks.batch)
    queue = next(iter(t.find_resources("AWS::Batch::JobQueue").values()))["Properties"]
    assert queue["JobQueueName"] == "sim2real-gpu"
    actions = queue["JobStateTimeLimitActions"]
    assert {a["Reason"] for a in actions} == {
        "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
        "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
        "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
    }
    assert all(a["Action"] == "CANCEL" and a["State"] == "RUNNABLE" and a["MaxTimeSeconds"] == 1800 for a in actions)


def test_compute_environment_scales_to_zero_on_configured_types(synth: Synth) -> None:
    t = synth.template(synth.stacks.batch)
    t.has_resource_properties("AWS::Batch::ComputeEnvironment", {
        "ComputeEnvironmentName": "sim2real-gpu-ce",
        "Type": "managed",
        "ComputeResources": Match.object_like({
            "Type": "EC2", "MinvCpus": 0, "MaxvCpus": 96, "InstanceTypes": ["g6.12xlarge"],
            "LaunchTemplate": {"LaunchTemplateId": Match.any_value()},
            "Subnets": Match.any_value(), "SecurityGroupIds": Match.any_value(),
        }),
    })
    # the launch template: GPU AMI from the public SSM parameter, large encrypted gp3 root volume, IMDSv2
    lt = next(iter(t.find_resources("AWS::EC2::LaunchTemplate").values()))["Properties"]["LaunchTemplateData"]
    assert lt["MetadataOptions"]["HttpTokens"] == "required"
    (device,) = lt["BlockDeviceMappings"]
    assert device["DeviceName"] == "/dev/xvda"
    assert {"VolumeType": "gp3", "Encrypted": True, "VolumeSize": 500, "DeleteOnTermination": True}.items() <= device["Ebs"].items()
    ami_param = lt["ImageId"]["Ref"]
    assert t.to_json()["Parameters"][ami_param] == {
        "Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>", "Default": GPU_AMI_PARAMETER}


def test_batch_security_group_allows_itself(synth: Synth) -> None:
    t = synth.template(synth.stacks.network)
    rules = [r["Properties"] for r in t.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    self_rules = [r for r in rules if r.get("IpProtocol") == "-1"
                  and r.get("SourceSecurityGroupId") == r.get("GroupId")]
    assert self_rules, "the Batch node security group must allow all traffic from itself (NCCL, rendezvous)"
    batch_sg = t.find_resources("AWS::EC2::SecurityGroup",
                                {"Properties": {"GroupDescription": Match.string_like_regexp("Batch GPU nodes")}})
    assert any(r["GroupId"] == {"Fn::GetAtt": [lid, "GroupId"]} for r in self_rules for lid in batch_sg)


def test_network_multi_az_private_subnets_and_endpoints(synth: Synth) -> None:
    t = synth.template(synth.stacks.network)
    private = t.find_resources("AWS::EC2::Subnet", {"Properties": {"MapPublicIpOnLaunch": False}})
    azs = {json.dumps(p["Properties"]["AvailabilityZone"]) for p in private.values()}
    assert len(private) >= 2 and len(azs) >= 2
    services = [json.dumps(r["Properties"]["ServiceName"]) for r in t.find_resources("AWS::EC2::VPCEndpoint").values()]
    for name in (".s3", ".ecr.api", ".ecr.dkr", ".ssm", ".logs"):
        assert any(name in s for s in services), name
    t.resource_count_is("AWS::EC2::FlowLog", 1)


def test_buckets_versioned_encrypted_private_and_ssl_only(synth: Synth) -> None:
    t = synth.template(synth.stacks.storage)
    buckets = t.find_resources("AWS::S3::Bucket")
    named = {render(b["Properties"].get("BucketName")): lid for lid, b in buckets.items()}
    for name in ("sim2real-artifacts-123456789012", "sim2real-mwaa-123456789012"):
        lid = named[name]
        props = buckets[lid]["Properties"]
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
        assert props["LoggingConfiguration"]["DestinationBucketName"]
        policy = next(p["Properties"]["PolicyDocument"] for p in t.find_resources("AWS::S3::BucketPolicy").values()
                      if p["Properties"]["Bucket"] == {"Ref": lid})
        assert {"Effect": "Deny", "Action": "s3:*", "Principal": {"AWS": "*"},
                "Condition": {"Bool": {"aws:SecureTransport": "false"}}}.items() <= next(
            s for s in policy["Statement"] if s.get("Condition", {}).get("Bool")).items()
    t.has_resource_properties("AWS::EFS::FileSystem", {"Encrypted": True})


def test_ecr_and_codebuild(synth: Synth) -> None:
    t = synth.template(synth.stacks.images)
    for name in ("sim2real-training", "sim2real-groot"):
        t.has_resource_properties("AWS::ECR::Repository", {
            "RepositoryName": name, "ImageTagMutability": "IMMUTABLE",
            "ImageScanningConfiguration": {"ScanOnPush": True}})
    project = next(iter(t.find_resources("AWS::CodeBuild::Project").values()))["Properties"]
    assert project["Name"] == "sim2real-training-image"
    assert project["Environment"]["PrivilegedMode"] is True
    buildspec = project["Source"]["BuildSpec"]
    assert "containers/rl/Dockerfile" in buildspec
    assert "docker push ${REGISTRY}/${IMAGE_REPO_NAME}:${IMAGE_TAG}" in buildspec


def test_evaluation_document_and_workstation_off_by_default(synth: Synth, synth_full: Synth) -> None:
    t = synth.template(synth.stacks.evaluation)
    doc = next(iter(t.find_resources("AWS::SSM::Document").values()))["Properties"]
    assert doc["Name"] == "sim2real-evaluate" and doc["DocumentType"] == "Command"
    # generated from the evaluator contract: its version in the command, one parameter per argument
    line = doc["Content"]["mainSteps"][0]["inputs"]["runCommand"][-1]
    assert line.startswith(f"sim2real-evaluate --contract-version {evaluator.CONTRACT_VERSION} --manifest-uri"), line
    assert sorted(doc["Content"]["parameters"]) == sorted(a.document_parameter for a in evaluator.ARGUMENTS)
    assert doc["Content"]["parameters"]["episodes"]["default"] == str(evaluator.DEFAULTS["episodes"])
    t.resource_count_is("AWS::EC2::Instance", 0)
    t.resource_count_is("AWS::IAM::InstanceProfile", 1)
    full = synth_full.template(synth_full.stacks.evaluation)
    full.has_resource_properties("AWS::EC2::Instance", {
        "Tags": Match.array_with([{"Key": "sim2real:role", "Value": "workstation"}])})


def test_sagemaker_group_and_role(synth: Synth) -> None:
    t = synth.template(synth.stacks.sagemaker)
    t.has_resource_properties("AWS::SageMaker::ModelPackageGroup", {"ModelPackageGroupName": "sim2real-groot-models"})
    t.has_resource_properties("AWS::IAM::Role", {"RoleName": "sim2real-pipeline", "AssumeRolePolicyDocument": {
        "Statement": [Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})],
        "Version": "2012-10-17"}})


def test_field_dataset_readable_by_the_pipeline_and_the_airflow_role(synth: Synth) -> None:
    """TransformDataset reads a field dataset's manifest and data files; vla.field_dataset checks the manifest."""
    bucket = "arn:aws:s3:::sim2real-artifacts-123456789012"

    def s3_reads(stack) -> set[str]:
        t = synth.template(stack).to_json()
        return {render(r) for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
                for p in resources(t, kind).values() for s in p["Properties"]["PolicyDocument"]["Statement"]
                if "s3:GetObject" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
                for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])}

    assert {f"{bucket}/field/datasets/*", f"{bucket}/field/data/*"} <= s3_reads(synth.stacks.sagemaker)
    assert f"{bucket}/field/datasets/*" in s3_reads(synth.stacks.mwaa)


def test_greengrass_components_render_the_bucket(synth: Synth) -> None:
    t = synth.template(synth.stacks.greengrass)
    components = t.find_resources("AWS::GreengrassV2::ComponentVersion")
    assert len(components) == 4
    names = set()
    for c in components.values():
        recipe = json.loads(render(c["Properties"]["InlineRecipe"]))
        names.add(recipe["ComponentName"])
        uris = [a["Uri"] for m in recipe["Manifests"] for a in m.get("Artifacts", [])]
        assert all(u.startswith("s3://sim2real-artifacts-123456789012/greengrass/artifacts/") for u in uris), uris
        assert "${ARTIFACTS_BUCKET}" not in json.dumps(recipe)
        if recipe["ComponentName"] == "com.sim2real.FieldUploader":  # the bucket it writes the field episodes to
            assert recipe["ComponentConfiguration"]["DefaultConfiguration"]["FieldBucket"] == (
                "sim2real-artifacts-123456789012")
    assert names == set(synth.stacks.greengrass.components)
    t.has_resource_properties("AWS::IoT::ThingGroup", {"ThingGroupName": "sim2real-robots"})
    t.has_resource_properties("AWS::IoT::RoleAlias", {"RoleAlias": "sim2real-robots-tes"})


def test_token_exchange_role_reads_only_artifact_and_run_prefixes(synth: Synth) -> None:
    t = synth.template(synth.stacks.greengrass).to_json()
    role_id = next(k for k, r in resources(t, "AWS::IAM::Role").items()
                   if "credentials.iot.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"]))
    (policy,) = [p for p in resources(t, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]]
    s3_resources = [render(r) for s in policy["Properties"]["PolicyDocument"]["Statement"]
                    for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
                    if any(a.startswith("s3:") for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]))]
    bucket = "arn:aws:s3:::sim2real-artifacts-123456789012"
    assert set(s3_resources) == {bucket, f"{bucket}/greengrass/artifacts/*", f"{bucket}/runs/*",
                                 f"{bucket}/field/episodes/${{credentials-iot:ThingName}}/*",
                                 f"{bucket}/field/data/${{credentials-iot:ThingName}}/*"}
    actions = {a for s in policy["Properties"]["PolicyDocument"]["Statement"]
               for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]) if a.startswith("s3:")}
    assert actions == {"s3:GetObject", "s3:GetObjectVersion", "s3:ListBucket", "s3:PutObject"}
    # writing is the field episodes' (and their data files') PutObject alone, under the robot's own thing name, and
    # only as a conditional write (no read, list or delete there; nothing else writable)
    writes = [(s["Effect"], s["Action"], sorted(render(r) for r in (s["Resource"] if isinstance(s["Resource"], list) else
                                                       [s["Resource"]])))
              for s in policy["Properties"]["PolicyDocument"]["Statement"]
              if "s3:PutObject" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]
    own = [f"{bucket}/field/data/${{credentials-iot:ThingName}}/*", f"{bucket}/field/episodes/${{credentials-iot:ThingName}}/*"]
    assert writes == [("Allow", "s3:PutObject", own), ("Deny", "s3:PutObject", own)]


def test_token_exchange_role_reads_only_the_robots_api_token(synth: Synth) -> None:
    t = synth.template(synth.stacks.greengrass).to_json()
    role_id = next(k for k, r in resources(t, "AWS::IAM::Role").items()
                   if "credentials.iot.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"]))
    (policy,) = [p for p in resources(t, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]]
    grants = {s["Sid"]: (s["Action"], render(s["Resource"])) for s in policy["Properties"]["PolicyDocument"]["Statement"]
              if s.get("Sid", "").startswith("PolicyServerApiToken")}
    assert grants == {
        "PolicyServerApiToken": ("secretsmanager:GetSecretValue",
                                 "arn:aws:secretsmanager:us-east-1:123456789012:secret:sim2real-robots/*"),
        "PolicyServerApiTokenParameter": ("ssm:GetParameter",
                                          "arn:aws:ssm:us-east-1:123456789012:parameter/sim2real/robots/*"),
    }


def test_pipeline_role_reads_only_the_groot_hugging_face_token_secrets(synth: Synth) -> None:
    t = synth.template(synth.stacks.sagemaker).to_json()
    statements = [s for p in resources(t, "AWS::IAM::Policy").values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"]]
    reads = [(s.get("Sid"), render(s["Resource"])) for s in statements if "secretsmanager:GetSecretValue" in s["Action"]]
    assert reads == [("HuggingFaceToken", "arn:aws:secretsmanager:us-east-1:123456789012:secret:sim2real-groot/*")]


def test_hyperpod_stack_is_optional(synth: Synth, synth_full: Synth) -> None:
    assert synth.stacks.hyperpod is None
    t = synth_full.template(synth_full.stacks.hyperpod)
    cluster = next(iter(t.find_resources("AWS::SageMaker::Cluster").values()))["Properties"]
    assert cluster["ClusterName"] == "sim2real-hyperpod"
    assert {(g["InstanceGroupName"], g["InstanceCount"]) for g in cluster["InstanceGroups"]} == {("head", 1), ("gpu", 0)}
