"""CodeBuild → ECR digest; EC2 quotas and their AWS/Usage metric; throttling fault."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from sandbox_helpers import wait_until

from sim2real.dev.sandbox import Sandbox

# integration (not in make test-unit): one sandbox per module (tests/dev/sandbox/conftest.py)
pytestmark = pytest.mark.integration

PROJECT, REPO = "sim2real-training-image", "sim2real-training"


def _build(sb: Sandbox, tag: str) -> dict:
    cb = sb.client("codebuild")
    build_id = cb.start_build(projectName=PROJECT, sourceVersion="abc123", environmentVariablesOverride=[
        {"name": "IMAGE_TAG", "value": tag, "type": "PLAINTEXT"},
        {"name": "IMAGE_REPO_NAME", "value": REPO, "type": "PLAINTEXT"}])["build"]["id"]
    first = cb.batch_get_builds(ids=[build_id])["builds"][0]
    assert first["buildStatus"] == "IN_PROGRESS"  # moto alone flips to SUCCEEDED on the first read
    return wait_until(lambda: (b := cb.batch_get_builds(ids=[build_id])["builds"][0])["buildStatus"] != "IN_PROGRESS" and b)


def test_build_pushes_image_with_digest(sb: Sandbox) -> None:
    build = _build(sb, "src-1111")
    assert build["buildStatus"] == "SUCCEEDED"
    assert [p["phaseType"] for p in build["phases"]][-3:] == ["UPLOAD_ARTIFACTS", "FINALIZING", "COMPLETED"]
    image = sb.client("ecr").describe_images(repositoryName=REPO, imageIds=[{"imageTag": "src-1111"}])["imageDetails"][0]
    assert image["imageDigest"].startswith("sha256:") and len(image["imageDigest"]) == 71
    assert [e.data["digest"] for e in sb.events.find("codebuild", "image", tag="src-1111")] == [image["imageDigest"]]
    # the buildspec's env.exported-variables, and the source version the build checked out
    assert build["exportedEnvironmentVariables"] == [{"name": "IMAGE_DIGEST", "value": image["imageDigest"]}]
    assert build["resolvedSourceVersion"] == "abc123"


def test_build_fault_fails_the_phase(sb: Sandbox) -> None:
    sb.faults["codebuild_fail_phase"] = "BUILD"
    build = _build(sb, "src-broken")
    assert build["buildStatus"] == "FAILED"
    failed = [p for p in build["phases"] if p.get("phaseStatus") == "FAILED"]
    assert [p["phaseType"] for p in failed] == ["BUILD"]
    with pytest.raises(ClientError):
        sb.client("ecr").describe_images(repositoryName=REPO, imageIds=[{"imageTag": "src-broken"}])


def test_ec2_quotas(sb: Sandbox) -> None:
    sq = sb.client("service-quotas")
    quota = sq.get_service_quota(ServiceCode="ec2", QuotaCode="L-DB2E81BA")["Quota"]
    assert (quota["QuotaName"], quota["Value"]) == ("Running On-Demand G and VT instances", 96.0)
    assert quota["UsageMetric"]["MetricDimensions"]["Class"] == "G/OnDemand"
    codes = {q["QuotaCode"] for q in sq.list_service_quotas(ServiceCode="ec2")["Quotas"]}
    assert {"L-DB2E81BA", "L-417A185B", "L-1216C47A"} <= codes


def test_usage_metric(sb: Sandbox) -> None:
    sb.quotas.set_usage("G", 48)
    now = dt.datetime.now(dt.timezone.utc)
    stats = sb.client("cloudwatch").get_metric_statistics(
        Namespace="AWS/Usage", MetricName="ResourceCount", StartTime=now - dt.timedelta(minutes=5),
        EndTime=now + dt.timedelta(minutes=1), Period=60, Statistics=["Maximum"],
        Dimensions=[{"Name": "Service", "Value": "EC2"}, {"Name": "Type", "Value": "Resource"},
                    {"Name": "Resource", "Value": "vCPU"}, {"Name": "Class", "Value": "G/OnDemand"}])
    assert max(p["Maximum"] for p in stats["Datapoints"]) == 48.0
    sb.quotas.set_usage("G", 0)


def test_throttle_fault(sb: Sandbox) -> None:
    no_retry = boto3.client("batch", endpoint_url=sb.endpoint_url, region_name=sb.region,
                            config=Config(retries={"max_attempts": 1, "mode": "standard"}))
    sb.faults["throttle"] = {"DescribeJobQueues": 5}  # a burst longer than the client's retries
    with pytest.raises(ClientError) as info:
        no_retry.describe_job_queues(jobQueues=["sim2real-gpu"])
    assert info.value.response["Error"]["Code"] == "ThrottlingException"
    sb.faults["throttle"] = {}
    assert no_retry.describe_job_queues(jobQueues=["sim2real-gpu"])["jobQueues"][0]["state"] == "ENABLED"
    # a burst shorter than botocore's retries is absorbed by the client
    sb.faults["throttle"] = {"DescribeJobQueues": 1}
    assert sb.client("batch").describe_job_queues(jobQueues=["sim2real-gpu"])["jobQueues"][0]["state"] == "ENABLED"
    assert sb.faults["throttle"]["DescribeJobQueues"] == 0


def test_a_request_does_not_list_motos_package_folder(sb, monkeypatch):
    """moto's dispatcher asks for moto's backend names on every request; the sandbox lists the folder once (at
    start), not once per request (a listdir and ~175 isdir calls: 1 ms of CPU per request)."""
    import os

    from moto import backends

    listed: list[str] = []

    class CountingOs:
        """``os`` for ``moto.backends`` only, counting its folder listings."""

        def __getattr__(self, name):
            return getattr(os, name)

        def listdir(self, path):
            listed.append(path)
            return os.listdir(path)

    monkeypatch.setattr(backends, "os", CountingOs())
    ec2 = sb.client("ec2")
    assert ec2.describe_regions()["Regions"]  # dispatched by moto's server (the Host header names no backend)
    assert sb.client("codebuild").list_projects()["projects"]
    assert listed == []
    assert "ec2" in backends.list_of_moto_modules() and "codebuild" in backends.list_of_moto_modules()
