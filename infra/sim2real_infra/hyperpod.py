"""Optional SageMaker HyperPod (Slurm) cluster: the ``hyperpod`` training backend (off by default)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from .policies import as_bucket, grant_prefixes
from .settings import Settings

#: Where the lifecycle scripts (``on_create.sh`` and what it calls) are uploaded before deploying.
LIFECYCLE_PREFIX = "hyperpod/lifecycle"


class HyperPodStack(cdk.Stack):
    """Cluster ``<prefix>-hyperpod`` with groups ``head`` (1 x ml.m5.xlarge, Slurm controller) and
    ``gpu`` (0 x ml.g6.12xlarge; the DAG scales it up for a run and back to 0 in a teardown).

    ``UpdateCluster`` must list every instance group, which the DAG's HyperPod operator does.
    """

    #: The GPU group's instance type (the environment config's hyperpod.instance_type prices it).
    GPU_INSTANCE_TYPE = "ml.g6.12xlarge"

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, vpc: ec2.IVpc,
                 artifacts: s3.IBucket | str, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        artifacts = as_bucket(self, artifacts)
        self.cluster_name = settings.name("hyperpod")
        self.role = iam.Role(
            self, "ClusterRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="sim2real HyperPod nodes",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSageMakerClusterInstanceRolePolicy")],
        )
        grant_prefixes(self.role, artifacts, read=[f"{LIFECYCLE_PREFIX}/"], write=["runs/"], sid="Artifacts")
        self.security_group = ec2.SecurityGroup(self, "ClusterSg", vpc=vpc, allow_all_outbound=True,
                                                description="sim2real HyperPod nodes (Slurm, NCCL between nodes)")
        self.security_group.add_ingress_rule(self.security_group, ec2.Port.all_traffic(), "nodes of the cluster")
        subnets = vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids[:1]
        lifecycle = sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
            on_create="on_create.sh", source_s3_uri=f"s3://{artifacts.bucket_name}/{LIFECYCLE_PREFIX}/")
        groups = [("head", "ml.m5.xlarge", 1), ("gpu", self.GPU_INSTANCE_TYPE, 0)]
        self.cluster = sagemaker.CfnCluster(
            self, "Cluster",
            cluster_name=self.cluster_name,
            node_recovery="Automatic",
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(security_group_ids=[self.security_group.security_group_id],
                                                              subnets=subnets),
            instance_groups=[
                sagemaker.CfnCluster.ClusterInstanceGroupProperty(
                    instance_group_name=name, instance_type=itype, instance_count=count,
                    execution_role=self.role.role_arn, life_cycle_config=lifecycle, threads_per_core=1)
                for name, itype, count in groups
            ],
        )
