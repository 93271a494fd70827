"""ResourcePreflightOperator against the provisioned sandbox (the resources infra/ creates), and the S3 bucket
naming rules. Every problem of a run is reported at once, each with the resource and what to change."""

from __future__ import annotations

import copy

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from sim2real.operators.preflight import (
    ResourcePreflightOperator,
    bucket_name_problems,
    job_node_requirements,
    job_shape_problems,
)
from sim2real.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    mp = pytest.MonkeyPatch()
    with Sandbox(step_seconds=0.05) as sb:
        sb.provision()
        for key, value in sb.airflow_env().items():
            mp.setenv(key, value)
        yield sb
    mp.undo()


@pytest.fixture(scope="module")
def plan(sandbox):
    from sim2real.params import build_params
    from sim2real.stages import plan_run

    params = {k: p.value for k, p in build_params().items()}
    return plan_run(dag_id="sim_to_real", run_id="manual__preflight", params=params, env=sandbox.config)


def run(plan: dict) -> dict:
    return ResourcePreflightOperator(task_id="check_resources", plan=plan).execute({})


def refused(plan: dict) -> str:
    with pytest.raises(AirflowFailException) as err:
        run(plan)
    return str(err.value)


def test_every_resource_of_the_provisioned_environment_passes(plan):
    verdict = run(plan)
    assert verdict["ok"] is True
    checked = " ".join(verdict["checked"])
    for name in ("bucket sim2real-artifacts-123456789012", "job queue sim2real-gpu", "job definition sim2real-train",
                 "model package group sim2real-groot-models", "thing group sim2real-robots",
                 "CodeBuild project sim2real-training-image"):
        assert name in checked
    assert verdict["instance_shape"] == {"gpus": 4, "vcpus": 48, "memory_mib": 196608}  # g6.12xlarge


def test_invalid_bucket_and_missing_model_package_group_are_both_reported(plan):
    bad = copy.deepcopy(plan)
    bad["bucket"] = "Sim2Real-Artifacts"
    bad["vla"]["model_package_group"] = "no-such-group"
    message = refused(bad)
    assert "2 problem(s)" in message
    assert "'Sim2Real-Artifacts' is not a valid S3 bucket name: must not contain upper-case letters" in message
    assert "model package group 'no-such-group' does not exist" in message and "create-model-package-group" in message


def test_missing_bucket_queue_role_and_thing_group(plan):
    bad = copy.deepcopy(plan)
    bad["bucket"] = "sim2real-no-such-bucket"
    bad["batch"]["job_queue"] = "no-queue"
    bad["batch"]["job_definition"] = "no-jobdef"
    bad["vla"]["role_arn"] = "arn:aws:iam::123456789012:role/no-role"
    bad["deploy"]["thing_group_name"] = "no-robots"
    message = refused(bad)
    for fragment in ("bucket 'sim2real-no-such-bucket' does not exist", "job queue 'no-queue' does not exist",
                     "job definition 'no-jobdef' has no ACTIVE revision", "role/no-role' does not exist",
                     "thing group 'no-robots' does not exist"):
        assert fragment in message
    assert "5 problem(s)" in message


def test_disabled_queue_and_compute_environment(sandbox, plan):
    batch = sandbox.client("batch", internal=True)
    batch.update_job_queue(jobQueue="sim2real-gpu", state="DISABLED")
    batch.update_compute_environment(computeEnvironment="sim2real-gpu-ce", state="DISABLED")
    try:
        message = refused(plan)
    finally:
        batch.update_job_queue(jobQueue="sim2real-gpu", state="ENABLED")
        batch.update_compute_environment(computeEnvironment="sim2real-gpu-ce", state="ENABLED")
    assert "job queue 'sim2real-gpu' is state=DISABLED" in message
    assert "compute environment 'sim2real-gpu-ce' is state=DISABLED" in message


def test_thing_group_without_core_devices(sandbox, plan):
    sandbox.client("iot", internal=True).create_thing_group(thingGroupName="empty-robots")
    bad = copy.deepcopy(plan)
    bad["deploy"]["thing_group_name"] = "empty-robots"
    assert "thing group 'empty-robots' has no Greengrass core device" in refused(bad)


def test_instance_type_with_fewer_gpus_than_the_job_definition(plan):
    bad = copy.deepcopy(plan)
    bad["batch"]["instance_type"] = "g6.xlarge"  # 1 L4, 4 vCPU, 16 GiB; the job definition: 4 GPU, 48 vCPU
    message = refused(bad)
    assert "asks for GPU 4 per node" in message and "g6.xlarge has 1" in message
    assert "asks for VCPU 48 per node" in message and "launches ['g6.12xlarge'], not" in message


def test_stages_the_run_does_not_use_are_not_checked(plan):
    rl_only = copy.deepcopy(plan)
    rl_only["vla"]["enabled"] = rl_only["deploy"]["enabled"] = False
    rl_only["vla"]["model_package_group"] = "no-such-group"
    rl_only["deploy"]["thing_group_name"] = "no-robots"
    assert run(rl_only)["ok"] is True


def test_hyperpod_cluster_and_group(plan):
    hp = copy.deepcopy(plan)
    hp["backend"] = "hyperpod"
    hp["batch"]["job_queue"] = "not-checked-on-hyperpod"
    assert run(hp)["ok"] is True
    hp["hyperpod"]["instance_group_name"] = "gpus"
    assert "has no instance group 'gpus'" in refused(hp)
    hp["hyperpod"]["cluster_name"] = "no-cluster"
    assert "HyperPod cluster 'no-cluster' does not exist" in refused(hp)


@pytest.mark.parametrize("name, fragment", [
    ("ab", "3-63 characters"), ("a" * 64, "3-63 characters"), ("My-Bucket", "upper-case"),
    ("my_bucket", "only lower-case letters"), ("-bucket", "begin and end"), ("my..bucket", "adjacent dots"),
    ("192.168.5.4", "IP address"), ("xn--bucket", "'xn--'"), ("sthree-x", "'sthree-'"),
    ("bucket-s3alias", "'-s3alias'"), ("bucket--ol-s3", "'--ol-s3'"), ("amzn-s3-demo-x", "'amzn-s3-demo-'"),
])
def test_bucket_naming_rules(name, fragment):
    assert any(fragment in p for p in bucket_name_problems(name)), bucket_name_problems(name)


@pytest.mark.parametrize("name", ["sim2real-artifacts-123456789012", "a.b-c", "abc", "a" * 63])
def test_valid_bucket_names(name):
    assert bucket_name_problems(name) == []


def test_job_requirements_of_a_container_definition_with_the_deprecated_fields():
    jd = {"jobDefinitionName": "x", "revision": 3, "containerProperties": {"vcpus": 8, "memory": 2048}}
    assert job_node_requirements(jd) == [("container", {"gpus": 0, "vcpus": 8, "memory_mib": 2048})]
    info = {"VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {"SizeInMiB": 16384}}
    assert job_shape_problems(jd, "g6.xlarge", info) == [
        p for p in job_shape_problems(jd, "g6.xlarge", info) if "x:3 asks for VCPU 8 per node" in p]
    assert len(job_shape_problems(jd, "g6.xlarge", info)) == 1
