"""ResourcePreflightOperator against the provisioned sandbox (the resources infra/ creates), and the S3 bucket
naming rules. Every problem of a run is reported at once, each with the resource and what to change."""

from __future__ import annotations

import copy

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from sim2real.contract import task_ids as ids
from sim2real.orchestration.operators.preflight import (
    ResourcePreflightOperator,
    bucket_name_problems,
    job_node_requirements,
    job_shape_problems,
)
from sim2real.dev.sandbox import Sandbox
from sim2real.orchestration.stages import vla_field

# integration (not in make test-unit): one sandbox for the module
pytestmark = pytest.mark.integration


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
    from sim2real.orchestration.stages.run import build_params
    from sim2real.orchestration.stages.run import plan_run

    params = {k: p.value for k, p in build_params().items()}
    return plan_run(dag_id="sim_to_real", run_id="manual__preflight", params=params, env=sandbox.config)


def run(plan: dict, context: dict | None = None) -> dict:
    return ResourcePreflightOperator(task_id=ids.CHECK_RESOURCES, plan=plan,
                                     field_dataset_check=vla_field.preflight_check).execute(context or {})


def refused(plan: dict, context: dict | None = None) -> str:
    with pytest.raises(AirflowFailException) as err:
        run(plan, context)
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
    rl_only["vla"]["field_dataset_version"] = "fd-0000000000000000"  # no such version: not the fine-tune's run
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


def test_hyperpod_eks_cluster_is_checked_not_the_slurm_one(plan):
    eks = copy.deepcopy(plan)
    eks["backend"] = "hyperpod_eks"
    eks["hyperpod"]["cluster_name"] = "no-slurm-cluster-in-an-eks-account"  # not this backend's
    verdict = run(eks)
    assert verdict["ok"] is True and "HyperPod EKS cluster sim2real-hyperpod-eks" in " ".join(verdict["checked"])
    eks["hyperpod_eks"]["cluster_name"] = "sim2real-hyperpod"  # a Slurm-orchestrated cluster
    assert "sim2real-hyperpod' has no Orchestrator.Eks.ClusterArn" in refused(eks)
    eks["hyperpod_eks"]["cluster_name"] = "no-cluster"
    assert "HyperPod cluster 'no-cluster' does not exist" in refused(eks)


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


def _answer(monkeypatch, errors: dict[str, tuple[str, int]]):
    """Make AWS answer ``errors[operation] = (code, HTTP status)`` for those operations (the sandbox enforces no
    IAM), everything else as usual."""
    import botocore.client
    from botocore.exceptions import ClientError

    original = botocore.client.BaseClient._make_api_call

    def make_api_call(self, operation_name, api_params):
        if operation_name in errors:
            code, status = errors[operation_name]
            raise ClientError({"Error": {"Code": code, "Message": f"{code} for {operation_name}"},
                               "ResponseMetadata": {"HTTPStatusCode": status}}, operation_name)
        return original(self, operation_name, api_params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", make_api_call)


def test_aws_errors_of_the_checks_are_listed_with_the_resource_code_and_what_to_do(plan, monkeypatch):
    """A thing group overridden in the form that the role may not describe, a job queue it may not describe and
    a model package group answering ResourceNotFound: each is one listed problem; the other checks still run."""
    bad = copy.deepcopy(plan)
    bad["deploy"]["thing_group_name"] = "robots-canary"
    _answer(monkeypatch, {"DescribeThingGroup": ("AccessDeniedException", 403),
                          "DescribeJobQueues": ("AccessDeniedException", 403),
                          "DescribeModelPackageGroup": ("ResourceNotFoundException", 400)})
    message = refused(bad)
    assert "(3 problem(s)" in message
    assert ("IoT thing group 'robots-canary': iot:DescribeThingGroup failed (AccessDeniedException: "
            "AccessDeniedException for DescribeThingGroup). The Airflow role lacks iot:DescribeThingGroup on it: grant"
            " iot:DescribeThingGroup to the MWAA execution role") in message
    assert "or set thing_group_name in the form or greengrass.thing_group_name in the environment config" in message
    assert "Batch job queue 'sim2real-gpu': batch:DescribeJobQueues failed (AccessDeniedException" in message
    assert ("SageMaker model package group 'sim2real-groot-models': sagemaker:DescribeModelPackageGroup failed "
            "(ResourceNotFoundException") in message and "create it or set sagemaker.model_package_group" in message


def test_core_devices_that_cannot_be_listed_are_a_listed_problem(plan, monkeypatch):
    _answer(monkeypatch, {"ListCoreDevices": ("AccessDeniedException", 403)})
    message = refused(plan)
    assert "(1 problem(s)" in message
    assert "Greengrass core devices of IoT thing group 'sim2real-robots': greengrass:ListCoreDevices failed" in message


def test_a_programming_error_in_a_check_is_raised_not_listed(plan, monkeypatch):
    from sim2real.orchestration.hooks.greengrass import GreengrassV2Hook

    def broken(self, name):
        raise TypeError("thing_group_arn() got an unexpected keyword argument")

    monkeypatch.setattr(GreengrassV2Hook, "thing_group_arn", broken)
    with pytest.raises(TypeError):
        run(plan)


def test_the_project_and_the_job_definition_are_read_through_the_hooks(plan, monkeypatch):
    """One reading of "the latest ACTIVE revision" and of "the project exists" for the preflight and the run."""
    from sim2real.orchestration.hooks.batch import BatchTrainingHook
    from sim2real.orchestration.hooks.codebuild import CodeBuildHook

    seen = []
    for cls, name in ((BatchTrainingHook, "latest_active_job_definition"), (CodeBuildHook, "get_project")):
        original = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda self, arg, _o=original, _n=name: seen.append((_n, arg)) or _o(self, arg))
    assert run(plan)["ok"] is True
    assert seen == [("get_project", "sim2real-training-image"), ("latest_active_job_definition", "sim2real-train")]


def _asking_for(plan: dict, version: str | None) -> dict:
    asks = copy.deepcopy(plan)
    asks["vla"]["field_dataset_version"] = version
    return asks


def test_a_missing_field_dataset_version_is_refused_with_the_other_problems(plan):
    """make demo's --conf '{"field_dataset_version": "fd-0000000000000000"}': refused here, before the build and any
    training (resources >> [image, backend] in the DAG), not by vla.field_dataset after the training."""
    bad = _asking_for(plan, "fd-0000000000000000")
    bad["vla"]["model_package_group"] = "no-such-group"
    message = refused(bad)
    assert "(2 problem(s)" in message and "model package group 'no-such-group' does not exist" in message
    assert (f"field dataset version fd-0000000000000000: no manifest at s3://{plan['bucket']}/field/datasets/"
            "fd-0000000000000000/manifest.json (HeadObject 404)") in message
    assert "set field_dataset_version in the form" in message


def test_latest_with_nothing_published_is_refused(plan):
    from tests.orchestration.stages.test_vla_field import _inlet

    message = refused(_asking_for(plan, "latest"), {"inlet_events": _inlet(bucket=plan["bucket"])})
    assert "(1 problem(s)" in message
    assert "field_dataset_version 'latest': no field dataset version is published yet" in message


def test_an_asset_event_without_a_version_is_refused(plan):
    from tests.orchestration.stages.test_vla_field import _triggering

    message = refused(_asking_for(plan, None), {"triggering_asset_events": _triggering(None, bucket=plan["bucket"])})
    assert "(1 problem(s)" in message and "names no field dataset version and manifest URI" in message


def test_the_resolved_field_dataset_is_handed_on(sandbox, plan):
    from tests.orchestration.stages.test_vla_field import _inlet, _publish

    s3 = sandbox.client("s3", internal=True)
    version = _publish(s3, 4, 6, bucket=plan["bucket"])
    verdict = run(_asking_for(plan, "latest"), {"inlet_events": _inlet(version, bucket=plan["bucket"])})
    assert verdict["field_dataset"] == {
        "dataset_version": version, "manifest_uri": f"s3://{plan['bucket']}/field/datasets/{version}/manifest.json",
        "episodes": 2, "frames": 10, "source": "latest"}
    assert f"field dataset {version}" in " ".join(verdict["checked"])
    assert run(plan)["field_dataset"] is None  # none asked for


def test_the_dags_preflight_checks_the_field_dataset_before_any_training():
    """``latest`` is the inlet's newest event: the DAG's check_resources has the asset among its inlets and the
    field dataset check (the build and every training path wait for it: test_dag_integrity)."""
    from airflow.sdk import DAG

    from sim2real.orchestration.assets import FIELD_DATASET_ASSET
    from sim2real.orchestration.stages.run import add_opening_tasks

    with DAG("t", schedule=None) as dag:
        _, resources, _ = add_opening_tasks()
    operator = dag.get_task(ids.CHECK_RESOURCES)
    assert operator is resources and operator.field_dataset_check is vla_field.preflight_check
    assert [a.name for a in operator.inlets] == [FIELD_DATASET_ASSET.name]


def _n17(plan: dict, secret_id: str) -> dict:
    """``plan`` fine-tuning GR00T N1.7 with the Hugging Face token in ``secret_id``."""
    n17 = copy.deepcopy(plan)
    n17["vla"]["parameters"].update(GrootVersion="n1.7", HfTokenSecretId=secret_id,
                                    BaseModelS3Uri=f"s3://{plan['bucket']}/models/groot-base/n1.7/")
    return n17


def test_n17_token_secret_and_base_model_are_checked_before_any_spend(sandbox, plan):
    """DescribeSecret on the token's secret (exists, not scheduled for deletion) and an object directly under the
    version's base model prefix (ListObjectsV2, Delimiter "/"): a bad one is refused before the RL training, not
    after it."""
    sm, s3 = sandbox.client("secretsmanager", internal=True), sandbox.client("s3", internal=True)
    sm.create_secret(Name="sim2real-groot/hf-token", SecretString="hf_fake")
    sm.create_secret(Name="sim2real-groot/old-token", SecretString="hf_old")
    sm.delete_secret(SecretId="sim2real-groot/old-token", RecoveryWindowInDays=7)
    message = refused(_n17(plan, "sim2real-groot/old-token"))
    assert "(2 problem(s)" in message
    assert ("Hugging Face token secret 'sim2real-groot/old-token' is scheduled for deletion on ") in message
    assert "aws secretsmanager restore-secret --secret-id sim2real-groot/old-token" in message
    uri = f"s3://{plan['bucket']}/models/groot-base/n1.7/"
    assert (f"GR00T n1.7 base model {uri} is empty: the fine-tune's GR00TFinetune step would find no checkpoint. "
            f"Upload nvidia/GR00T-N1.7-3B there") in message
    assert "hf download nvidia/GR00T-N1.7-3B" in message and "aws s3 sync" in message
    missing = refused(_n17(plan, "sim2real-groot/none"))
    assert ("Hugging Face token secret 'sim2real-groot/none': secretsmanager:DescribeSecret failed "
            "(ResourceNotFoundException") in missing and "create it or set hf_token_secret_id" in missing
    s3.put_object(Bucket=plan["bucket"], Key="models/groot-base/n1.7/config.json", Body=b"{}")
    try:
        checked = " ".join(run(_n17(plan, "sim2real-groot/hf-token"))["checked"])
        assert "Hugging Face token secret sim2real-groot/hf-token" in checked
        assert f"GR00T n1.7 base model {uri}" in checked
    finally:
        s3.delete_object(Bucket=plan["bucket"], Key="models/groot-base/n1.7/config.json")


def test_the_default_version_needs_no_secret_and_its_base_model_is_checked_directly_under_its_prefix(
        sandbox, plan, monkeypatch):
    """N1.6 (the sandbox's default) loads no gated model: no secret is read. Its base model is models/groot-base/
    itself, the prefix that also holds the other versions' folders: only an object directly under it is its
    checkpoint, so a bucket with nothing but models/groot-base/n1.7/ is refused before the RL training."""
    s3 = sandbox.client("s3", internal=True)
    uri = f"s3://{plan['bucket']}/models/groot-base/"
    with monkeypatch.context() as m:
        _answer(m, {"DescribeSecret": ("AccessDeniedException", 403)})
        checked = " ".join(run(plan)["checked"])  # the sandbox provisions the default's placeholder object
    assert "Hugging Face token secret" not in checked and f"GR00T n1.6 base model {uri}" in checked
    elsewhere = copy.deepcopy(plan)
    never = f"s3://{plan['bucket']}/models/never-written/"
    elsewhere["vla"]["parameters"]["BaseModelS3Uri"] = never
    assert (f"GR00T n1.6 base model {never} is empty: the fine-tune's GR00TFinetune step would find no "
            "checkpoint. Upload nvidia/GR00T-N1.6-3B there") in refused(elsewhere)
    placeholder = s3.get_object(Bucket=plan["bucket"], Key="models/groot-base/config.json")["Body"].read()
    try:
        s3.delete_object(Bucket=plan["bucket"], Key="models/groot-base/config.json")
        s3.put_object(Bucket=plan["bucket"], Key="models/groot-base/n1.7/config.json", Body=b"{}")
        # the zero-byte "folder" object the S3 console makes for models/groot-base/ is no checkpoint either
        s3.put_object(Bucket=plan["bucket"], Key="models/groot-base/", Body=b"")
        message = refused(plan)
        assert f"GR00T n1.6 base model {uri} holds only the folders [" in message and "'n1.7/'" in message
        assert f"aws s3 sync base {uri} --exclude '.cache/*') or pick another groot_version" in message
    finally:
        s3.delete_object(Bucket=plan["bucket"], Key="models/groot-base/")
        s3.delete_object(Bucket=plan["bucket"], Key="models/groot-base/n1.7/config.json")
        s3.put_object(Bucket=plan["bucket"], Key="models/groot-base/config.json", Body=placeholder)


def test_a_refused_bucket_is_one_problem_not_a_second_for_the_base_model_in_it(plan):
    """The base model prefix is in the artifacts bucket: a bucket name S3 (and botocore) refuses is reported once by
    the bucket check, and the base model listing is not tried (botocore would raise before any request)."""
    bad = copy.deepcopy(plan)
    bad["bucket"] = "bad!bucket"
    bad["vla"]["parameters"]["BaseModelS3Uri"] = "s3://bad!bucket/models/groot-base/"
    bad["vla"]["field_dataset_version"] = "fd-0000000000000000"  # in the same bucket: not read either
    message = refused(bad)
    assert "artifacts bucket name 'bad!bucket' is not a valid S3 bucket name" in message
    assert "base model" not in message and "field dataset" not in message


def test_a_model_package_group_that_cannot_be_read_still_leaves_the_groot_inputs_checked(plan, monkeypatch):
    """Every problem at once: an AccessDenied on DescribeModelPackageGroup is listed, and the base model is still
    checked (before, the check returned there and an empty base model prefix went unseen)."""
    _answer(monkeypatch, {"DescribeModelPackageGroup": ("AccessDeniedException", 400)})
    denied = copy.deepcopy(plan)
    never = f"s3://{plan['bucket']}/models/never-written/"
    denied["vla"]["parameters"]["BaseModelS3Uri"] = never
    message = refused(denied)
    assert "(2 problem(s)" in message and "sagemaker:DescribeModelPackageGroup" in message, message
    assert f"GR00T n1.6 base model {never} is empty" in message


class _Pages:
    """``s3.get_paginator("list_objects_v2")`` answering ``pages`` (a page that is an exception raises when read)."""

    def __init__(self, pages: list) -> None:
        self.pages, self.calls, self.read = pages, [], 0

    def get_paginator(self, name: str):
        assert name == "list_objects_v2"
        return self

    def paginate(self, **kwargs):
        self.calls.append(kwargs)
        for page in self.pages:
            self.read += 1
            if isinstance(page, Exception):
                raise page
            yield page


def test_the_base_model_listing_reads_pages_until_the_first_object_and_skips_the_prefix_itself():
    from sim2real.orchestration.operators.preflight import _objects_and_folders

    prefix = "models/groot-base/"
    s3 = _Pages([{"CommonPrefixes": [{"Prefix": prefix + "n1.5/"}]},  # a page of folders only (1000 in S3)
                 {"Contents": [{"Key": prefix}], "CommonPrefixes": [{"Prefix": prefix + "n1.7/"}]},  # console folder
                 {"Contents": [{"Key": prefix + "config.json"}]},
                 RuntimeError("a page after the first object is not read")])
    assert _objects_and_folders(s3, "bkt", prefix) == ([prefix + "config.json"], [prefix + "n1.5/", prefix + "n1.7/"])
    assert s3.calls == [{"Bucket": "bkt", "Prefix": prefix, "Delimiter": "/"}] and s3.read == 3
    empty = _Pages([{"CommonPrefixes": [{"Prefix": prefix + "n1.7/"}]}, {"Contents": [{"Key": prefix}]}])
    assert _objects_and_folders(empty, "bkt", prefix) == ([], [prefix + "n1.7/"])
