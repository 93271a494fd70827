"""IAM helpers: explicit S3 prefix grants (no action wildcards) and stable bucket references."""

from __future__ import annotations

from collections.abc import Iterable

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct


def artifacts_bucket_name(prefix: str) -> str:
    """Physical name of the artifacts bucket: ``<prefix>-artifacts-<account>``."""
    return f"{prefix}-artifacts-{cdk.Aws.ACCOUNT_ID}"


def mwaa_bucket_name(prefix: str) -> str:
    """Physical name of the MWAA source bucket: ``<prefix>-mwaa-<account>``."""
    return f"{prefix}-mwaa-{cdk.Aws.ACCOUNT_ID}"


def bucket_by_name(scope: Construct, cid: str, name: str) -> s3.IBucket:
    """Reference a bucket of the storage stack by its fixed name (no cross-stack export)."""
    return s3.Bucket.from_bucket_name(scope, cid, name)


def grant_prefixes(grantee: iam.IGrantable | iam.ManagedPolicy, bucket: s3.IBucket, *, read: Iterable[str] = (),
                   write: Iterable[str] = (), sid: str) -> None:
    """Grant object access under key prefixes with exact actions.

    :param grantee: a role/grantable, or a managed policy to add the statements to.
    :param read: prefixes (``runs/``) whose objects may be read (``s3:GetObject``).
    :param write: prefixes whose objects may be written (``s3:PutObject``, multipart abort); also readable.
    :param sid: statement id prefix (``<sid>Read``, ``<sid>Write``, ``<sid>List``).
    """
    read, write = list(read), list(write)
    add = (grantee.add_statements if isinstance(grantee, iam.ManagedPolicy)
           else grantee.grant_principal.add_to_principal_policy)
    objects = lambda prefixes: [bucket.arn_for_objects(f"{p}*") for p in prefixes]  # noqa: E731
    if read or write:
        add(iam.PolicyStatement(
            sid=f"{sid}Read", actions=["s3:GetObject", "s3:GetObjectVersion"], resources=objects(read + write)))
        add(iam.PolicyStatement(
            sid=f"{sid}List", actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{p}*" for p in read + write]}}))
    if write:
        add(iam.PolicyStatement(
            sid=f"{sid}Write", actions=["s3:PutObject", "s3:AbortMultipartUpload"], resources=objects(write)))


def as_bucket(scope: Construct, bucket: s3.IBucket | str, cid: str = "ArtifactsBucket") -> s3.IBucket:
    """``bucket`` itself, or the bucket of that fixed name referenced in ``scope``'s stack."""
    return bucket_by_name(scope, cid, bucket) if isinstance(bucket, str) else bucket
