"""Resource preflight: every named AWS resource and shape a run needs, checked before any spend.

Runs right after ``prepare_run`` and before the image build, the capacity check and the training: a
run whose bucket name is invalid, whose job queue is disabled, whose job definition asks for more GPUs
than the instance type has, or whose model package group does not exist is refused in seconds with
every problem listed at once (the resource, what is wrong, what to change) instead of failing after the
GPU fine-tune.

What is checked (stages the run does not use are not checked: the HyperPod cluster only on the hyperpod
backend, the Batch queue/definition only on the batch backend, the fine-tune's resources only with
``run_vla_finetune``, the thing group only with ``deploy_to_edge``):

=====================  ============================================================================
resource               check (API)
=====================  ============================================================================
artifacts bucket       name follows the S3 general purpose bucket naming rules; reachable (``ListObjectsV2``
                       under the run's prefix, which the role may list)
CodeBuild project      exists (``BatchGetProjects``)
ECR repository         exists (``DescribeRepositories``)
Batch job queue        exists, ``state`` ENABLED, ``status`` VALID, and lists the configured compute
                       environment (``DescribeJobQueues``)
compute environment    exists, ENABLED and VALID (``DescribeComputeEnvironments``)
job definition         has an ACTIVE revision (``DescribeJobDefinitions``), and its per-node
                       ``resourceRequirements`` (GPU, VCPU, MEMORY) fit the instance type
                       (``DescribeInstanceTypes``: :func:`job_shape_problems`)
pipeline role          exists (IAM ``GetRole``)
model package group    exists (``DescribeModelPackageGroup``)
GR00T inputs           the run's version's Hugging Face token secret exists and is not scheduled for deletion
                       (Secrets Manager ``DescribeSecret``, versions that need a token), and its base model prefix
                       (``models/groot-base/`` for the default ``n1.6``, ``models/groot-base/<version>/`` for the
                       others) holds an object directly under it (``ListObjectsV2``, ``Delimiter="/"``)
field dataset          the version the fine-tune includes (form ``field_dataset_version``, the ``latest`` inlet
                       event or the triggering asset event: :mod:`sim2real.orchestration.stages.vla_field`) has a
                       valid manifest at its key (S3 ``HeadObject``, ``GetObject``); handed on as ``field_dataset``
thing group            exists (IoT ``DescribeThingGroup``) with at least one Greengrass core device
                       (``ListCoreDevices`` ``thingGroupArn``)
HyperPod cluster       exists, is not Failed, and has the GPU instance group (``DescribeCluster``)
=====================  ============================================================================

Quota (vCPUs × nodes against the EC2 On-Demand quota) is :mod:`sim2real.orchestration.operators.quota`'s check, which
runs after the build on the chosen backend; it applies the same :func:`job_shape_problems`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook
from airflow.providers.amazon.aws.hooks.s3 import S3Hook
from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook
from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from botocore.exceptions import ClientError

from sim2real.contract.storage import split_s3
from sim2real.orchestration.assets import FIELD_DATASET_ASSET
from sim2real.orchestration.hooks.batch import BatchTrainingHook
from sim2real.orchestration.hooks.codebuild import CodeBuildHook, EcrImageHook
from sim2real.orchestration.hooks.greengrass import GreengrassV2Hook

if TYPE_CHECKING:
    from airflow.sdk import Context

#: S3 general purpose bucket naming rules (Amazon S3 User Guide, "General purpose bucket naming rules").
_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def bucket_name_problems(name: str) -> list[str]:
    """Why ``name`` is not a valid S3 general purpose bucket name (empty list: valid).

    Rules (Amazon S3 User Guide, "General purpose bucket naming rules"): 3-63 characters; only lower-case
    letters, digits, dots and hyphens; begins and ends with a letter or digit; no two adjacent dots; not
    an IPv4 address; none of the reserved prefixes ``xn--``, ``sthree-``, ``amzn-s3-demo-`` or suffixes
    ``-s3alias``, ``--ol-s3``, ``.mrap``, ``--x-s3``, ``--table-s3``.
    """
    problems = []
    if not isinstance(name, str) or not 3 <= len(name) <= 63:
        problems.append(f"must be 3-63 characters long (has {len(name) if isinstance(name, str) else 0})")
        if not isinstance(name, str):
            return problems
    if name != name.lower():
        problems.append("must not contain upper-case letters")
    if not _BUCKET_CHARS.match(name.lower() if name else name):
        problems.append("may contain only lower-case letters, digits, dots and hyphens, and must begin and end "
                        "with a letter or digit")
    if ".." in name:
        problems.append("must not contain two adjacent dots")
    try:
        ipaddress.IPv4Address(name)
        problems.append("must not be formatted as an IP address")
    except ValueError:
        pass
    problems += [f"must not start with the reserved prefix {p!r}" for p in _BUCKET_PREFIXES if name.startswith(p)]
    problems += [f"must not end with the reserved suffix {s!r}" for s in _BUCKET_SUFFIXES if name.endswith(s)]
    return problems


def instance_shape(info: Mapping[str, Any]) -> dict[str, int]:
    """``{"gpus", "vcpus", "memory_mib"}`` of an EC2 ``DescribeInstanceTypes`` entry (``GpuInfo.Gpus[].Count``,
    ``VCpuInfo.DefaultVCpus``, ``MemoryInfo.SizeInMiB``)."""
    return {
        "gpus": sum(int(g.get("Count", 0)) for g in (info.get("GpuInfo") or {}).get("Gpus", [])),
        "vcpus": int((info.get("VCpuInfo") or {}).get("DefaultVCpus") or 0),
        "memory_mib": int((info.get("MemoryInfo") or {}).get("SizeInMiB") or 0),
    }


def job_node_requirements(job_definition: Mapping[str, Any]) -> list[tuple[str, dict[str, int]]]:
    """Per-node resource requirements of a Batch job definition (``DescribeJobDefinitions`` entry).

    :return: ``[(target, {"gpus", "vcpus", "memory_mib"})]``, one per ``nodeRangeProperties`` entry of a
        multinode definition (``target`` = its ``targetNodes``) or one ``("container", ...)`` for a container
        definition. Values come from ``resourceRequirements`` (``GPU``, ``VCPU``, ``MEMORY`` in MiB), else the
        deprecated ``vcpus`` / ``memory`` fields; 0 where none is given.
    """

    def read(container: Mapping[str, Any]) -> dict[str, int]:
        req = {r.get("type"): r.get("value") for r in container.get("resourceRequirements") or []}
        return {
            "gpus": int(float(req.get("GPU") or 0)),
            "vcpus": int(float(req.get("VCPU") or container.get("vcpus") or 0)),
            "memory_mib": int(float(req.get("MEMORY") or container.get("memory") or 0)),
        }

    ranges = ((job_definition.get("nodeProperties") or {}).get("nodeRangeProperties")) or []
    if ranges:
        return [(str(r.get("targetNodes")), read(r.get("container") or {})) for r in ranges if r.get("container")]
    if job_definition.get("containerProperties"):
        return [("container", read(job_definition["containerProperties"]))]
    return []


def job_shape_problems(job_definition: Mapping[str, Any], instance_type: str,
                       instance_info: Mapping[str, Any]) -> list[str]:
    """Where a job definition's per-node requirements exceed one ``instance_type`` (empty: it fits).

    A Batch node (one container of a multinode job) runs on one instance: its GPUs, vCPUs and memory must
    each be at most the instance's. Otherwise AWS Batch never places the job and it sits RUNNABLE. Memory is
    compared with the instance's full ``SizeInMiB``; the ECS agent reserves a little of it, so a definition
    at the very limit may still not be placed (AWS Batch User Guide, "Compute resource memory management").

    :param job_definition: a ``DescribeJobDefinitions`` entry.
    :param instance_type: the compute environment's instance type, e.g. ``g6.12xlarge``.
    :param instance_info: its ``DescribeInstanceTypes`` entry.
    :return: one message per requirement that does not fit, naming the definition, the nodes and the fix.
    """
    shape = instance_shape(instance_info)
    name = f"{job_definition.get('jobDefinitionName')}:{job_definition.get('revision')}"
    problems = []
    labels = {"gpus": ("GPU", ""), "vcpus": ("VCPU", ""), "memory_mib": ("MEMORY", " MiB")}
    for target, need in job_node_requirements(job_definition):
        for key, (label, unit) in labels.items():
            if need[key] > shape[key]:
                problems.append(
                    f"Batch job definition {name} asks for {label} {need[key]}{unit} per node (nodes {target}) but "
                    f"{instance_type} has {shape[key]}{unit}: AWS Batch would never place the job (it stays "
                    f"RUNNABLE). Use an instance type with at least {need[key]}{unit} {label} per instance in the "
                    f"compute environment and batch.instance_type, or register a revision that asks for at most "
                    f"{shape[key]}{unit}")
    return problems


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


_ACCESS_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException",
                  "Forbidden", "403"}
_NOT_FOUND = {"ResourceNotFound", "ResourceNotFoundException", "NotFound", "NoSuchEntity", "404"}
_THROTTLED = {"Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded",
              "SlowDown"}


def client_error_problem(resource: str, action: str, err: ClientError, change: str) -> str:
    """One preflight problem for an AWS error answered while checking ``resource``.

    :param resource: what was checked, e.g. ``"IoT thing group 'robots-canary'"``.
    :param action: the IAM action of the call that failed, e.g. ``"iot:DescribeThingGroup"``.
    :param err: the botocore ``ClientError``.
    :param change: the setting that names ``resource`` (form field / environment config key).
    :return: ``"<resource>: <action> failed (<code>: <message>). <what to do>"``; an access denial says the
        Airflow role lacks ``action``, a missing resource says to create it or change ``change``.
    """
    code = _code(err) or "error"
    message = err.response.get("Error", {}).get("Message") or str(err)
    if code in _ACCESS_DENIED:
        todo = (f"The Airflow role lacks {action} on it: grant {action} to the MWAA execution role (infra/), "
                f"or set {change} to a resource the role may use")
    elif code in _NOT_FOUND:
        todo = f"It does not exist in this account and region: create it or set {change}"
    elif code in _THROTTLED:
        todo = "AWS throttled the check: trigger the run again"
    else:
        todo = f"Check {change}"
    return f"{resource}: {action} failed ({code}: {message}). {todo}"


def _describe_one(describe, problems: list[str], resource: str, action: str, config_key: str) -> dict | None:
    """The one item ``describe()`` lists for ``resource``, or None with the problem appended: the AWS error
    (:func:`client_error_problem`, naming ``action``) or "does not exist" (set ``config_key``)."""
    try:
        items = describe() or []
    except ClientError as err:
        problems.append(client_error_problem(resource, action, err, f"{config_key} in the environment config"))
        return None
    if not items:
        problems.append(f"{resource} does not exist. Set {config_key} in the environment config")
        return None
    return items[0]


def _answer_or_problem(call: Callable[[], Any], problems: list[str], resource: str, action: str, setting: str, *,
                       missing: type[Exception] | tuple[type[Exception], ...], hint: str = "") -> Any:
    """``call()``'s answer, or None with the problem appended: "<resource> does not exist. Set <setting><hint>"
    when it raised one of ``missing``, the AWS error (:func:`client_error_problem`, naming ``action``) on another
    ``ClientError``. For calls that answer something (not None) when ``resource`` exists."""
    try:
        return call()
    except missing:
        problems.append(f"{resource} does not exist. Set {setting}{hint}")
    except ClientError as err:
        problems.append(client_error_problem(resource, action, err, setting))
    return None


def _objects_and_folders(s3: Any, bucket: str, prefix: str) -> tuple[list[str], list[str]]:
    """The keys of the objects directly under ``prefix`` (not the zero-byte "folder" object named ``prefix`` itself)
    and the folders under it (``CommonPrefixes``), by ``ListObjectsV2`` with ``Delimiter="/"``; pages are read until
    the first object (a page holds 1000 entries, objects and folders together).

    :raises botocore.exceptions.ClientError: from ListObjectsV2 (e.g. AccessDenied, NoSuchBucket).
    """
    objects: list[str] = []
    folders: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        objects += [o["Key"] for o in page.get("Contents", []) if o["Key"] != prefix]
        folders += [f["Prefix"] for f in page.get("CommonPrefixes", [])]
        if objects:
            break
    return objects, folders


def _enabled_and_valid(item: Mapping[str, Any], resource: str, fix: str, problems: list[str]) -> None:
    """Append a problem unless a Batch queue / compute environment is ENABLED and VALID (``fix``: the command)."""
    if item.get("state") != "ENABLED" or item.get("status") != "VALID":
        problems.append(f"{resource} is state={item.get('state')} status={item.get('status')} "
                        f"(reason: {item.get('statusReason')}); it must be ENABLED and VALID ({fix})")


class ResourcePreflightOperator(AwsBaseOperator[AwsBaseHook]):
    """Check every AWS resource a run names, and the job definition's shape, before any spend.

    Read-only: every call is a Describe/Get/List/Head (see the module docstring for the table). All problems
    are collected and reported together, each naming the resource, what is wrong and what to change. An AWS
    error answered by a check (``ClientError``: access denied, not found, throttled...) is such a problem too,
    with its error code and the IAM action the call needs (:func:`client_error_problem`); any other exception
    is raised.

    :param plan: the run's plan (``prepare_run``'s ``plan`` XCom, :func:`sim2real.orchestration.stages.run.plan_run`) (templated).
    :param field_dataset_check: with the fine-tune on, called as ``(plan["vla"], s3_client, context, problems,
        checked)``; appends its problems and returns the field dataset version the fine-tune includes, or None
        (:func:`sim2real.orchestration.stages.vla_field.preflight_check`, which the DAG passes). None: not checked.
    :return: ``{"ok": True, "checked": [str], "instance_shape": {...} | None, "field_dataset": {...} | None}``
        (what was checked; ``field_dataset``: what ``field_dataset_check`` returned, ``None`` when none
        is asked for or the run has no fine-tune). ``vla.field_dataset`` hands this version to the pipeline: ``latest`` is
        resolved once, here, so the fine-tune includes the version checked before any spend even when a newer
        one is published during the training.
    :raises AirflowFailException: (no retry) listing every problem found.

    The task has the field dataset asset among its inlets (``latest``: the context's ``inlet_events``); a run
    started by the asset reads the context's ``triggering_asset_events``.
    """

    aws_hook_class = AwsBaseHook
    ui_color = "#f3e5ab"
    template_fields: Sequence[str] = aws_template_fields("plan")
    template_fields_renderers = {"plan": "json"}

    def __init__(self, *, plan: Mapping[str, Any] | str,
                 field_dataset_check: Callable[..., dict[str, Any] | None] | None = None, **kwargs) -> None:
        kwargs.setdefault("inlets", [FIELD_DATASET_ASSET])  # field_dataset_version "latest": its newest event
        super().__init__(**kwargs)
        self.plan = plan
        self.field_dataset_check = field_dataset_check

    def _hooks(self, hook_class, **extra):
        """A hook of ``hook_class`` with this operator's connection, region, verify and botocore config."""
        return hook_class(**self._hook_parameters, **extra)

    def execute(self, context: Context) -> dict[str, Any]:
        plan = self.plan
        if not isinstance(plan, Mapping):
            raise TypeError(f"plan must be the prepare_run plan (a mapping), got {type(plan).__name__}")
        problems: list[str] = []
        checked: list[str] = []
        bucket_ok = self._check_bucket(plan, problems, checked)
        self._check_image_build(plan, problems, checked)
        shape = field_dataset = None
        if plan.get("backend", "batch") == "batch":
            shape = self._check_batch(plan, problems, checked)
        elif plan.get("backend") == "hyperpod_eks":
            self._check_hyperpod_eks(plan, problems, checked)
        else:
            self._check_hyperpod(plan, problems, checked)
        if (plan.get("vla") or {}).get("enabled"):
            self._check_vla(plan, problems, checked, bucket_ok=bucket_ok)
            if self.field_dataset_check is not None and bucket_ok:  # the field dataset is in the artifacts bucket
                field_dataset = self.field_dataset_check(plan["vla"], self._hooks(S3Hook).get_conn(), context,
                                                         problems, checked)
        if (plan.get("deploy") or {}).get("enabled"):
            self._check_thing_group(plan, problems, checked)
        self.log.info("Resource preflight checked: %s", "; ".join(checked))
        if problems:
            raise AirflowFailException(
                f"Resource preflight refused the run ({len(problems)} problem(s); nothing was started): "
                + " | ".join(problems))
        return {"ok": True, "checked": checked, "instance_shape": shape, "field_dataset": field_dataset}

    # -- checks ---------------------------------------------------------------------------------------
    def _check_bucket(self, plan: Mapping[str, Any], problems: list[str], checked: list[str]) -> bool:
        """The artifacts bucket's name is valid and the bucket exists; False (the problem appended) if not, so the
        checks of objects in it (the GR00T base model, the field dataset) add no second problem for the same cause.
        A listing refused under ``runs/`` (403, another error) is appended too but returns True: the role may list
        the other prefixes under their own grants, which their checks then try."""
        bucket = plan["bucket"]
        checked.append(f"bucket {bucket}")
        invalid = bucket_name_problems(bucket)
        if invalid:
            problems.append(f"artifacts bucket name {bucket!r} is not a valid S3 bucket name: " + "; ".join(invalid)
                            + ". Set artifacts_bucket in the environment config to the bucket infra/ created")
            return False
        s3 = self._hooks(S3Hook).get_conn()
        try:  # not HeadBucket: the role may list the bucket only under its prefixes (s3:prefix condition)
            s3.list_objects_v2(Bucket=bucket, Prefix=str(plan.get("run_prefix") or "runs/"), MaxKeys=1)
        except ClientError as err:
            code = _code(err)
            if code in ("404", "NoSuchBucket", "NotFound"):
                problems.append(f"artifacts bucket {bucket!r} does not exist. Set artifacts_bucket in the "
                                "environment config to the bucket infra/ created")
                return False
            if code in ("403", "AccessDenied", "Forbidden"):
                problems.append(f"artifacts bucket {bucket!r} is not reachable with the Airflow role (ListObjectsV2: "
                                "403 Access Denied). Grant s3:ListBucket on its runs/ prefix to the MWAA execution "
                                "role, or check that the bucket is in this account")
            else:
                problems.append(client_error_problem(f"artifacts bucket {bucket!r}", "s3:ListBucket", err,
                                                     "artifacts_bucket in the environment config"))
        return True

    def _check_image_build(self, plan: Mapping[str, Any], problems: list[str], checked: list[str]) -> None:
        image = plan["image"]
        project, repo = image["project_name"], image["repository_name"]
        checked += [f"CodeBuild project {project}", f"ECR repository {repo}"]
        _answer_or_problem(lambda: self._hooks(CodeBuildHook).get_project(project), problems,
                           f"CodeBuild project {project!r}", "codebuild:BatchGetProjects",
                           "image_build.codebuild_project in the environment config", missing=LookupError,
                           hint=" (infra/ creates <prefix>-training-image)")
        ecr = self._hooks(EcrImageHook).conn
        _answer_or_problem(lambda: ecr.describe_repositories(repositoryNames=[repo]), problems,
                           f"ECR repository {repo!r}", "ecr:DescribeRepositories",
                           "image_build.ecr_repository in the environment config",
                           missing=ecr.exceptions.RepositoryNotFoundException)

    def _check_batch(self, plan: Mapping[str, Any], problems: list[str], checked: list[str]) -> dict | None:
        b = plan["batch"]
        queue_name, ce_name, jd_name, itype = b["job_queue"], b["compute_environment"], b["job_definition"], \
            b["instance_type"]
        checked += [f"job queue {queue_name}", f"compute environment {ce_name}", f"job definition {jd_name}",
                    f"instance type {itype}"]
        hook = self._hooks(BatchTrainingHook)
        batch = hook.client
        q = _describe_one(lambda: batch.describe_job_queues(jobQueues=[queue_name]).get("jobQueues"), problems,
                          f"Batch job queue {queue_name!r}", "batch:DescribeJobQueues", "batch.job_queue")
        if q:
            _enabled_and_valid(q, f"Batch job queue {queue_name!r}",
                               f"aws batch update-job-queue --job-queue {queue_name} --state ENABLED", problems)
            order = [o.get("computeEnvironment", "") for o in q.get("computeEnvironmentOrder") or []]
            if order and not any(ce == ce_name or ce.endswith(f"/{ce_name}") for ce in order):
                problems.append(f"Batch job queue {queue_name!r} does not use compute environment {ce_name!r} "
                                f"(it uses {order}). Set batch.compute_environment to the queue's environment")
        ce = _describe_one(
            lambda: batch.describe_compute_environments(computeEnvironments=[ce_name]).get("computeEnvironments"),
            problems, f"Batch compute environment {ce_name!r}", "batch:DescribeComputeEnvironments",
            "batch.compute_environment")
        if ce:
            _enabled_and_valid(ce, f"Batch compute environment {ce_name!r}",
                               f"aws batch update-compute-environment --compute-environment {ce_name} --state ENABLED",
                               problems)
            allowed = (ce.get("computeResources") or {}).get("instanceTypes") or []
            if allowed and itype not in allowed and itype.split(".")[0] not in allowed and "optimal" not in allowed:
                problems.append(f"Batch compute environment {ce_name!r} launches {allowed}, not batch.instance_type "
                                f"{itype!r}. Make them agree (the instance type drives the preflight and the cost)")
        latest = None
        try:
            latest = hook.latest_active_job_definition(jd_name)
        except ClientError as err:
            problems.append(client_error_problem(f"Batch job definition {jd_name!r}", "batch:DescribeJobDefinitions",
                                                 err, "batch.job_definition in the environment config"))
        except AirflowException:  # no ACTIVE revision
            problems.append(f"Batch job definition {jd_name!r} has no ACTIVE revision. Set batch.job_definition in "
                            "the environment config (infra/ registers <prefix>-train)")
        ec2 = self._hooks(EC2Hook, api_type="client_type").conn
        try:
            types = ec2.describe_instance_types(InstanceTypes=[itype]).get("InstanceTypes") or []
        except ClientError as err:
            if _code(err) not in ("InvalidInstanceType", "InvalidParameterValue"):
                problems.append(client_error_problem(f"EC2 instance type {itype!r}", "ec2:DescribeInstanceTypes",
                                                     err, "batch.instance_type in the environment config"))
                return None
            types = []
        if not types:
            problems.append(f"EC2 does not know instance type {itype!r} in this region. Set batch.instance_type "
                            "to the compute environment's instance type")
            return None
        if latest is not None:
            problems += job_shape_problems(latest, itype, types[0])
        return instance_shape(types[0])

    def _describe_cluster(self, cluster: str, setting: str, problems: list[str]) -> dict | None:
        """SageMaker ``DescribeCluster`` of ``cluster`` (a Failed cluster is a problem), or None with the problem
        (``setting``: where the cluster is named)."""
        try:
            desc = self._hooks(SageMakerHook).conn.describe_cluster(ClusterName=cluster)
        except ClientError as err:
            if _code(err) not in ("ResourceNotFound", "ValidationException"):
                problems.append(client_error_problem(f"SageMaker HyperPod cluster {cluster!r}",
                                                     "sagemaker:DescribeCluster", err, setting))
                return None
            problems.append(f"SageMaker HyperPod cluster {cluster!r} does not exist ({_code(err)}). Set {setting}")
            return None
        if desc.get("ClusterStatus") == "Failed":
            problems.append(f"SageMaker HyperPod cluster {cluster!r} is Failed ({desc.get('FailureMessage')}); "
                            "recreate it or pick another cluster")
        return desc

    def _check_hyperpod_eks(self, plan: Mapping[str, Any], problems: list[str], checked: list[str]) -> None:
        """The HyperPod cluster of ``training_backend: hyperpod_eks`` exists, is not Failed and is orchestrated by
        EKS (``Orchestrator.Eks.ClusterArn``); its team queue is checked by ``hyperpod_eks.check_capacity``."""
        from sim2real.orchestration.hooks.hyperpod_eks import eks_cluster_name_of

        cluster = plan["hyperpod_eks"]["cluster_name"]
        checked.append(f"HyperPod EKS cluster {cluster}")
        desc = self._describe_cluster(cluster, "hyperpod_eks_cluster_name in the form or hyperpod_eks.cluster_name "
                                               "in the environment config", problems)
        if desc is None:
            return
        try:
            eks_cluster_name_of(desc)
        except ValueError as err:
            problems.append(str(err))

    def _check_hyperpod(self, plan: Mapping[str, Any], problems: list[str], checked: list[str]) -> None:
        hp = plan["hyperpod"]
        cluster, group = hp["cluster_name"], hp["instance_group_name"]
        checked.append(f"HyperPod cluster {cluster} group {group}")
        desc = self._describe_cluster(cluster, "hyperpod_cluster_name in the form or hyperpod.cluster_name in the "
                                               "environment config", problems)
        if desc is None:
            return
        groups = sorted(g["InstanceGroupName"] for g in desc.get("InstanceGroups", []))
        if group not in groups:
            problems.append(f"SageMaker HyperPod cluster {cluster!r} has no instance group {group!r} (groups: "
                            f"{groups}). Set hyperpod.gpu_instance_group in the environment config")

    def _check_vla(self, plan: Mapping[str, Any], problems: list[str], checked: list[str], *,
                   bucket_ok: bool) -> None:
        vla = plan["vla"]
        role_arn, group = vla["role_arn"], vla["model_package_group"]
        checked += [f"pipeline role {role_arn}", f"model package group {group}"]
        iam = self._hooks(AwsBaseHook, client_type="iam").conn
        role_name = str(role_arn).rsplit("/", 1)[-1]
        _answer_or_problem(lambda: iam.get_role(RoleName=role_name), problems, f"SageMaker pipeline role {role_arn!r}",
                           "iam:GetRole", "sagemaker.pipeline_role_arn in the environment config",
                           missing=iam.exceptions.NoSuchEntityException, hint=" (infra/ creates <prefix>-pipeline)")
        sm = self._hooks(SageMakerHook).conn
        try:
            sm.describe_model_package_group(ModelPackageGroupName=group)
        except ClientError as err:
            if _code(err) not in ("ValidationException", "ResourceNotFound"):
                problems.append(client_error_problem(
                    f"SageMaker model package group {group!r}", "sagemaker:DescribeModelPackageGroup", err,
                    "sagemaker.model_package_group in the environment config"))
            else:
                problems.append(f"SageMaker model package group {group!r} does not exist: the pipeline's "
                                "RegisterModel step would fail after the whole fine-tune. Create it (aws sagemaker "
                                f"create-model-package-group --model-package-group-name {group}) or set "
                                "sagemaker.model_package_group in the environment config")
        self._check_groot_inputs(vla.get("parameters") or {}, problems, checked, bucket_ok=bucket_ok)

    def _check_groot_inputs(self, parameters: Mapping[str, Any], problems: list[str], checked: list[str], *,
                            bucket_ok: bool) -> None:
        """What the fine-tune of the run's GR00T version loads when it starts: the Hugging Face token's secret (a
        version that ``needs_hf_token``: ``DescribeSecret``, exists and no ``DeletedDate``) and the base checkpoint
        under ``BaseModelS3Uri``: an object directly under the prefix (``ListObjectsV2`` with ``Delimiter="/"``), where
        the pipeline's model channel hands the fine-tune its ``--base-model-path``. Directly under, because the
        default version's prefix ``models/groot-base/`` also holds the other versions' ``<version>/`` folders
        (:func:`sim2real.contract.groot.base_model_prefix`): a key in one of them is not its checkpoint, nor
        is a zero-byte "folder" object named as the prefix itself. The prefix is in the artifacts bucket: when that
        bucket was refused (``bucket_ok`` False) it is not listed again."""
        from sim2real.contract import groot

        version = str(parameters.get("GrootVersion") or groot.DEFAULT_VERSION)
        rel = groot.release(version)
        secret_id = str(parameters.get("HfTokenSecretId") or "")
        if rel.needs_hf_token and secret_id:
            checked.append(f"Hugging Face token secret {secret_id}")
            sm = self._hooks(AwsBaseHook, client_type="secretsmanager").conn
            resource = f"Hugging Face token secret {secret_id!r}"
            desc = _answer_or_problem(lambda: sm.describe_secret(SecretId=secret_id), problems, resource,
                                      "secretsmanager:DescribeSecret", "hf_token_secret_id in the form or "
                                      "sagemaker.hf_token_secret_id in the environment config", missing=())
            if desc and desc.get("DeletedDate"):
                problems.append(f"{resource} is scheduled for deletion on {desc['DeletedDate']}: the fine-tune "
                                f"could not read it. Restore it (aws secretsmanager restore-secret --secret-id "
                                f"{secret_id}) or name another in hf_token_secret_id")
        if not bucket_ok:
            return
        uri = str(parameters.get("BaseModelS3Uri") or "")
        bucket, prefix = split_s3(uri)
        checked.append(f"GR00T {version} base model {uri}")
        listed = _answer_or_problem(lambda: _objects_and_folders(self._hooks(S3Hook).get_conn(), bucket, prefix),
                                    problems, f"GR00T {version} base model {uri}", "s3:ListBucket",
                                    "artifacts_bucket", missing=())
        if listed is not None and not listed[0]:
            folders = sorted(f[len(prefix):] for f in listed[1])
            state = f"holds only the folders {folders}" if folders else "is empty"
            problems.append(f"GR00T {version} base model {uri} {state}: the fine-tune's GR00TFinetune step would "
                            f"find no checkpoint. Upload {rel.base_model} there (hf download {rel.base_model} "
                            f"--local-dir base && aws s3 sync base {uri} --exclude '.cache/*') or pick another "
                            "groot_version")

    def _check_thing_group(self, plan: Mapping[str, Any], problems: list[str], checked: list[str]) -> None:
        group = plan["deploy"]["thing_group_name"]
        change = "thing_group_name in the form or greengrass.thing_group_name in the environment config"
        checked.append(f"thing group {group}")
        gg = self._hooks(GreengrassV2Hook)
        arn = _answer_or_problem(lambda: gg.thing_group_arn(group), problems, f"IoT thing group {group!r}",
                                 "iot:DescribeThingGroup", change, missing=ValueError)
        if arn is None:
            return
        try:
            devices = gg.list_core_device_names(arn)
        except ClientError as err:
            problems.append(client_error_problem(f"Greengrass core devices of IoT thing group {group!r}",
                                                 "greengrass:ListCoreDevices", err, change))
            return
        if not devices:
            problems.append(f"IoT thing group {group!r} has no Greengrass core device: nothing would receive the "
                            "deployment. Add the robots' core devices to the group (aws iot "
                            f"add-thing-to-thing-group --thing-group-name {group} --thing-name <robot>) or pick "
                            "another group")
