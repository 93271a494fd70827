"""Storage: the artifacts bucket, the MWAA source bucket, their access-log bucket and EFS."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_efs as efs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .policies import artifacts_bucket_name, mwaa_bucket_name
from .settings import Settings


def secure_bucket(scope: Construct, cid: str, *, name: str | None, log_bucket: s3.IBucket | None,
                  log_prefix: str, **kwargs) -> s3.Bucket:
    """A versioned, encrypted, SSL-only bucket with Block Public Access and server access logs."""
    return s3.Bucket(
        scope, cid,
        bucket_name=name,
        versioned=True,
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        server_access_logs_bucket=log_bucket,
        server_access_logs_prefix=log_prefix if log_bucket else None,
        removal_policy=cdk.RemovalPolicy.RETAIN,
        **kwargs,
    )


class StorageStack(cdk.Stack):
    """Buckets and the shared checkpoint file system.

    * ``artifacts`` (``<prefix>-artifacts-<account>``): ``runs/<run_key>/`` (checkpoints, eval,
      lineage), ``ssm-output/``, ``greengrass/artifacts/``, ``datasets/``. Noncurrent versions expire
      after 90 days.
    * ``mwaa`` (``<prefix>-mwaa-<account>``): ``dags/``, ``plugins.zip``, ``requirements.txt``,
      ``startup.sh`` (MWAA requires versioning and Block Public Access on it).
    * ``access_logs``: server access logs of both.
    * ``file_system``: EFS (encrypted, elastic throughput) mounted by the Batch nodes at ``/mnt/efs``
      and by the workstation; NFS allowed from their security groups only.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, vpc: ec2.IVpc,
                 client_security_groups: list[ec2.ISecurityGroup], **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.access_logs = s3.Bucket(
            self, "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            # Log delivery is granted by a bucket policy (logging.s3.amazonaws.com, scoped to the source
            # buckets and this account; cdk.json's @aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy), not by the
            # legacy LogDeliveryWrite ACL, so ACLs stay disabled on every bucket.
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(365),
                                              noncurrent_version_expiration=cdk.Duration.days(30))],
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        self.artifacts = secure_bucket(
            self, "Artifacts", name=artifacts_bucket_name(settings.prefix),
            log_bucket=self.access_logs, log_prefix="artifacts/",
            lifecycle_rules=[s3.LifecycleRule(noncurrent_version_expiration=cdk.Duration.days(90),
                                              abort_incomplete_multipart_upload_after=cdk.Duration.days(7))],
        )
        self.mwaa_bucket = secure_bucket(
            self, "MwaaSource", name=mwaa_bucket_name(settings.prefix),
            log_bucket=self.access_logs, log_prefix="mwaa/",
        )
        self.efs_sg = ec2.SecurityGroup(self, "EfsSg", vpc=vpc, allow_all_outbound=False,
                                        description="sim2real EFS: NFS from Batch nodes and the workstation")
        self.file_system = efs.FileSystem(
            self, "Checkpoints",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_group=self.efs_sg,
            encrypted=True,
            throughput_mode=efs.ThroughputMode.ELASTIC,
            performance_mode=efs.PerformanceMode.GENERAL_PURPOSE,
            lifecycle_policy=efs.LifecyclePolicy.AFTER_30_DAYS,
            enable_automatic_backups=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        for sg in client_security_groups:
            self.file_system.connections.allow_default_port_from(sg, "NFS from sim2real compute")
