"""AWS Batch: GPU compute environment, job queue and the multinode job definition ``sim2real-train``."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_efs as efs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .policies import as_bucket, grant_prefixes
from .settings import Settings

#: ECS-optimized GPU AMI (Amazon Linux 2023, NVIDIA driver + container toolkit), resolved by
#: CloudFormation at deploy time from the public SSM parameter.
GPU_AMI_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"

#: Where the shared EFS file system appears inside the training container.
EFS_MOUNT = "/mnt/efs"

#: Container environment of every node. NCCL: sockets over the ENA interface (no EFA on g6),
#: loopback/docker bridges excluded; torch surfaces NCCL errors instead of hanging.
#: The training launcher's path in both training images (their CMD).
LAUNCHER = "/usr/local/bin/distributed_run.bash"

JOB_ENVIRONMENT = {
    # The Isaac Lab image's default task (containers/isaaclab/Dockerfile ARG TASK): Isaac Lab 3.0's id, without
    # 2.x's -v0 suffix (isaac-sim/IsaacLab, isaaclab_tasks/core/velocity/config/h1 gym.register). Every run's
    # SubmitJob overrides it with the form's task.
    "TASK": "Isaac-Velocity-Rough-H1",
    "MAX_ITERATIONS": "1000",
    "CHECKPOINT_INTERVAL": "50",
    "NCCL_DEBUG": "WARN",
    "NCCL_SOCKET_IFNAME": "^lo,docker",
    "NCCL_IB_DISABLE": "1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "SIM2REAL_EFS_ROOT": EFS_MOUNT,
}

#: RUNNABLE reasons the queue gives up on (the only ones ``JobStateTimeLimitAction`` accepts).
CAPACITY_REASONS = (
    batch.JobStateTimeLimitActionsReason.COMPUTE_ENVIRONMENT_MAX_RESOURCE,
    batch.JobStateTimeLimitActionsReason.JOB_RESOURCE_REQUIREMENT,
    batch.JobStateTimeLimitActionsReason.INSUFFICIENT_INSTANCE_CAPACITY,
)


class BatchStack(cdk.Stack):
    """Managed EC2 GPU compute environment (min 0 vCPU: nothing runs, nothing is billed), a job queue
    that cancels jobs stuck RUNNABLE for capacity reasons, and the multinode job definition.

    The job definition has one open node range ``0:`` so a run can set ``nodeOverrides.numNodes``;
    the DAG registers a revision pinned to the image digest before each submit.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, vpc: ec2.IVpc,
                 security_group: ec2.ISecurityGroup, file_system: efs.IFileSystem, artifacts: s3.IBucket | str,
                 repository: ecr.IRepository, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        artifacts = as_bucket(self, artifacts)
        self.instance_role = iam.Role(
            self, "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="sim2real Batch GPU nodes: ECS agent, SSM, image pull",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AmazonEC2ContainerServiceforEC2Role"),
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore"),
            ],
        )
        launch_template = ec2.LaunchTemplate(
            self, "GpuNodes",
            machine_image=ec2.MachineImage.from_ssm_parameter(GPU_AMI_PARAMETER, os=ec2.OperatingSystemType.LINUX),
            block_devices=[ec2.BlockDevice(
                device_name="/dev/xvda",
                volume=ec2.BlockDeviceVolume.ebs(settings.root_volume_gib, volume_type=ec2.EbsDeviceVolumeType.GP3,
                                                 encrypted=True, delete_on_termination=True, iops=6000,
                                                 throughput=500),
            )],
            require_imdsv2=True,
            http_put_response_hop_limit=2,  # containers reach IMDS through the docker bridge
        )
        self.compute_environment = batch.ManagedEc2EcsComputeEnvironment(
            self, "GpuCompute",
            compute_environment_name=settings.name("gpu-ce"),
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[security_group],
            instance_types=[ec2.InstanceType(t) for t in settings.instance_types],
            use_optimal_instance_classes=False,
            minv_cpus=0,
            maxv_cpus=settings.max_vcpus,
            allocation_strategy=batch.AllocationStrategy.BEST_FIT_PROGRESSIVE,
            launch_template=launch_template,
            instance_role=self.instance_role,
            update_to_latest_image_version=True,
            replace_compute_environment=False,
        )
        self.job_queue = batch.JobQueue(
            self, "GpuQueue",
            job_queue_name=settings.name("gpu"),
            priority=1,
            compute_environments=[batch.OrderedComputeEnvironment(compute_environment=self.compute_environment, order=1)],
            job_state_time_limit_actions=[
                batch.JobStateTimeLimitAction(
                    max_time=cdk.Duration.minutes(settings.runnable_timeout_minutes),
                    reason=reason,
                    action=batch.JobStateTimeLimitActionsAction.CANCEL,
                    state=batch.JobStateTimeLimitActionsState.RUNNABLE,
                )
                for reason in CAPACITY_REASONS
            ],
        )

        self.job_role = iam.Role(self, "JobRole", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
                                 description="sim2real training container: run folders in S3, EFS")
        grant_prefixes(self.job_role, artifacts, read=["datasets/"], write=["runs/"], sid="Artifacts")
        file_system.grant(self.job_role, "elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite")

        container = batch.EcsEc2ContainerDefinition(
            self, "TrainContainer",
            image=ecs.ContainerImage.from_ecr_repository(repository, "bootstrap"),
            command=[LAUNCHER],  # the images' CMD (containers/rl, containers/isaaclab)
            gpu=settings.gpus_per_node,
            cpu=settings.vcpus_per_node,
            memory=cdk.Size.mebibytes(settings.memory_mib_per_node),
            environment=dict(JOB_ENVIRONMENT),
            job_role=self.job_role,
            linux_parameters=batch.LinuxParameters(self, "TrainLinux",
                                                   shared_memory_size=cdk.Size.mebibytes(settings.shared_memory_mib)),
            volumes=[batch.EcsVolume.efs(name="checkpoints", file_system=file_system, container_path=EFS_MOUNT,
                                         enable_transit_encryption=True, root_directory="/")],
        )
        self.job_definition = batch.MultiNodeJobDefinition(
            self, "Train",
            job_definition_name=settings.name("train"),
            containers=[batch.MultiNodeContainer(container=container, start_node=0, end_node=settings.num_nodes - 1)],
            main_node=0,
            propagate_tags=True,
            timeout=cdk.Duration.hours(settings.job_timeout_hours),
            retry_attempts=3,
            retry_strategies=[
                # Spot reclaim / host loss: statusReason "Host EC2 (instance i-...) terminated."
                batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.SPOT_INSTANCE_RECLAIMED),
                # Anything else (user code, OOM, NCCL): the DAG classifies and decides; Batch does not retry.
                batch.RetryStrategy.of(batch.Action.EXIT, batch.Reason.custom(on_reason="*")),
            ],
        )
        cfn_jd: batch.CfnJobDefinition = self.job_definition.node.default_child  # type: ignore[assignment]
        # One open-ended range: SubmitJob's nodeOverrides.numNodes may then grow or shrink the job.
        cfn_jd.add_property_override("NodeProperties.NodeRangeProperties.0.TargetNodes", "0:")
        cfn_jd.add_property_override("NodeProperties.NumNodes", settings.num_nodes)
        cfn_jd.add_property_override("Tags", {"sim2real:component": "training"})
        self.log_group_name = "/aws/batch/job"
