"""Settings of the CDK app, read from CDK context (``cdk.json`` holds the defaults)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from constructs import Node

#: Context keys are namespaced so they never clash with CDK feature flags.
PREFIX = "sim2real:"


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _list(value: Any) -> list[str]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [v.strip() for v in value.split(",")]
    return [str(v) for v in value if str(v)]


def _identities(value: Any) -> dict[str, list[str]]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    return {str(k): _list(v) for k, v in dict(value or {}).items()}


@dataclass(frozen=True)
class Settings:
    """Every tunable of the app.

    :param prefix: name prefix of every named resource (``sim2real``).
    :param source_repository_url: GitHub HTTPS URL CodeBuild clones to build ``containers/rl``.
    :param source_version: default git ref the DAG builds (``image_build.source_version``).
    :param instance_types: EC2 types of the Batch GPU compute environment (first one = the config's
        ``batch.instance_type``).
    :param max_vcpus: compute environment maxvCpus (96 = two g6.12xlarge).
    :param num_nodes: default node count of the multinode job definition (open range ``0:``; the DAG
        overrides it per run with ``nodeOverrides.numNodes``).
    :param gpus_per_node / vcpus_per_node / memory_mib_per_node: resources of every node container.
    :param shared_memory_mib: ``/dev/shm`` of the container (NCCL and data loaders need a large one).
    :param root_volume_gib: gp3 root volume of each Batch node (images are ~10-20 GB, plus caches).
    :param runnable_timeout_minutes: the job queue cancels a job RUNNABLE this long for a capacity reason.
    :param job_timeout_hours: attempt timeout of the training job definition.
    :param workstation: create the evaluation workstation instance (off: bring your own, tagged).
    :param workstation_instance_type: EC2 type of that instance.
    :param hyperpod: create the optional HyperPod stack.
    :param hyperpod_submit_host_tag_key / hyperpod_submit_host_tag_value: the EC2 tag of the cluster's submit
        (head/login) node, an SSM-managed instance with the Slurm client: written to the environment config
        (``hyperpod.submit_host_tag_key``/``_value``, where the DAG and the sweeper find the node) and the only
        instances the MWAA role may send SSM commands to besides the workstation.
    :param hyperpod_eks_cluster_name / hyperpod_eks_cluster_arn / hyperpod_eks_namespace: the ``hyperpod_eks``
        training backend (optional, all three or none): the Amazon EKS cluster that orchestrates an existing
        SageMaker HyperPod cluster (its ``DescribeCluster`` ``Orchestrator.Eks.ClusterArn``, by name), the HyperPod
        cluster's ARN (``arn:<partition>:sagemaker:<region>:<account>:cluster/<id>``: IAM authorizes
        ``sagemaker:DescribeCluster`` on the ARN, whose last part is the generated id, not the name) and the team's
        Kubernetes namespace (task governance creates ``hyperpod-ns-<team>``). Given, the MWAA stack adds an EKS
        access entry for its execution role and the two ``Describe*`` grants (:mod:`sim2real_infra.hyperpod_eks`).
    :param schedule_timezone: IANA time zone of the nightly run (``0 2 * * *``), e.g. ``Europe/Berlin``; written to
        the environment config (``schedule_timezone``) and to MWAA's ``sim2real.schedule_timezone`` option.
    :param approvers: Airflow user ids allowed to release a model (the environment config's
        ``approval.approvers``: the release request's assigned users, less the run's trigger); empty: any user who
        may act on the task, except the one who triggered the run.
    :param approver_aws_identities: Airflow user id -> the SageMaker identities (IAM ARNs, Studio user profiles)
        the person decides with in the registry (``approval.aws_identities``: a registry approval by the run's
        trigger is then undone too).
    :param airflow_version: MWAA ``AirflowVersion``.
    :param mwaa_environment_class: MWAA ``EnvironmentClass``.
    :param mwaa_versions: S3 object versions of ``plugins.zip``, ``requirements.txt`` and
        ``startup.sh`` in the MWAA bucket (from ``dist/mwaa/versions.json`` written by
        ``scripts/package_mwaa.py upload``, or context ``sim2real:mwaa_versions``).
    """

    prefix: str = "sim2real"
    source_repository_url: str = "https://github.com/your-org/sim2real.git"
    source_version: str = "main"
    instance_types: tuple[str, ...] = ("g6.12xlarge",)
    max_vcpus: int = 96
    num_nodes: int = 2
    gpus_per_node: int = 4
    vcpus_per_node: int = 48
    memory_mib_per_node: int = 180000
    shared_memory_mib: int = 65536
    root_volume_gib: int = 500
    runnable_timeout_minutes: int = 30
    job_timeout_hours: int = 24
    max_azs: int = 2
    workstation: bool = False
    workstation_instance_type: str = "g6.12xlarge"
    hyperpod: bool = False
    hyperpod_submit_host_tag_key: str = "sim2real:role"
    hyperpod_submit_host_tag_value: str = "hyperpod-head"
    hyperpod_eks_cluster_name: str = ""
    hyperpod_eks_cluster_arn: str = ""
    hyperpod_eks_namespace: str = ""
    schedule_timezone: str = "UTC"
    approvers: tuple[str, ...] = ()
    approver_aws_identities: dict[str, list[str]] = field(default_factory=dict)
    airflow_version: str = "3.3.1"
    mwaa_environment_class: str = "mw1.small"
    mwaa_versions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_context(cls, node: Node, base_dir: str | os.PathLike | None = None) -> Settings:
        """Read ``sim2real:<field>`` context values over the defaults.

        :param node: the app's construct node (``app.node``).
        :param base_dir: folder ``sim2real:mwaa_versions_file`` is relative to (default: infra/).
        :raises ValueError: on a value out of range (no instance type, fewer than 1 node, ...).
        """
        get = lambda key, default: node.try_get_context(PREFIX + key) if node.try_get_context(PREFIX + key) is not None else default  # noqa: E731
        d = cls()
        versions = get("mwaa_versions", None)
        if isinstance(versions, str):
            versions = json.loads(versions)
        if versions is None:
            path = get("mwaa_versions_file", None)
            if path:
                full = Path(base_dir or Path(__file__).resolve().parents[1]) / path
                if full.is_file():
                    versions = json.loads(full.read_text())
        s = cls(
            prefix=str(get("prefix", d.prefix)),
            source_repository_url=str(get("source_repository_url", d.source_repository_url)),
            source_version=str(get("source_version", d.source_version)),
            instance_types=tuple(_list(get("instance_types", list(d.instance_types)))),
            max_vcpus=int(get("max_vcpus", d.max_vcpus)),
            num_nodes=int(get("num_nodes", d.num_nodes)),
            gpus_per_node=int(get("gpus_per_node", d.gpus_per_node)),
            vcpus_per_node=int(get("vcpus_per_node", d.vcpus_per_node)),
            memory_mib_per_node=int(get("memory_mib_per_node", d.memory_mib_per_node)),
            shared_memory_mib=int(get("shared_memory_mib", d.shared_memory_mib)),
            root_volume_gib=int(get("root_volume_gib", d.root_volume_gib)),
            runnable_timeout_minutes=int(get("runnable_timeout_minutes", d.runnable_timeout_minutes)),
            job_timeout_hours=int(get("job_timeout_hours", d.job_timeout_hours)),
            schedule_timezone=str(get("schedule_timezone", d.schedule_timezone)),
            max_azs=int(get("max_azs", d.max_azs)),
            workstation=_bool(get("workstation", d.workstation)),
            workstation_instance_type=str(get("workstation_instance_type", d.workstation_instance_type)),
            hyperpod=_bool(get("hyperpod", d.hyperpod)),
            hyperpod_submit_host_tag_key=str(get("hyperpod_submit_host_tag_key", d.hyperpod_submit_host_tag_key)),
            hyperpod_submit_host_tag_value=str(get("hyperpod_submit_host_tag_value",
                                                   d.hyperpod_submit_host_tag_value)),
            hyperpod_eks_cluster_name=str(get("hyperpod_eks_cluster_name", d.hyperpod_eks_cluster_name)).strip(),
            hyperpod_eks_cluster_arn=str(get("hyperpod_eks_cluster_arn", d.hyperpod_eks_cluster_arn)).strip(),
            hyperpod_eks_namespace=str(get("hyperpod_eks_namespace", d.hyperpod_eks_namespace)).strip(),
            approvers=tuple(_list(get("approvers", list(d.approvers)))),
            approver_aws_identities=_identities(get("approver_aws_identities", d.approver_aws_identities)),
            airflow_version=str(get("airflow_version", d.airflow_version)),
            mwaa_environment_class=str(get("mwaa_environment_class", d.mwaa_environment_class)),
            mwaa_versions=dict(versions or {}),
        )
        s.check()
        return s

    def check(self) -> None:
        """Refuse settings AWS would refuse at deploy time.

        :raises ValueError: naming the setting.
        """
        if not self.instance_types:
            raise ValueError("sim2real:instance_types must name at least one EC2 instance type")
        if self.num_nodes < 1 or self.gpus_per_node < 0 or self.vcpus_per_node < 1:
            raise ValueError("sim2real:num_nodes and vcpus_per_node must be >= 1, gpus_per_node >= 0")
        if not 10 <= self.runnable_timeout_minutes <= 1440:
            # JobStateTimeLimitAction.maxTimeSeconds is 600..86400.
            raise ValueError("sim2real:runnable_timeout_minutes must be 10..1440 (Batch maxTimeSeconds 600..86400)")
        if self.max_azs < 2:
            raise ValueError("sim2real:max_azs must be >= 2 (MWAA needs two private subnets in two AZs)")
        if self.hyperpod and not (self.hyperpod_submit_host_tag_key and self.hyperpod_submit_host_tag_value):
            raise ValueError("sim2real:hyperpod_submit_host_tag_key and _value must name the submit node's EC2 tag")
        from .hyperpod_eks import eks_settings_problems

        problems = eks_settings_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        from .evaluation import WORKSTATION_TAG_KEY, WORKSTATION_TAG_VALUE

        if (self.hyperpod_submit_host_tag_key, self.hyperpod_submit_host_tag_value) == (WORKSTATION_TAG_KEY,
                                                                                        WORKSTATION_TAG_VALUE):
            raise ValueError("sim2real:hyperpod_submit_host_tag_* must differ from the workstation's tag")
        from sim2real.orchestration.config import approval_problems

        problems = approval_problems({"approvers": list(self.approvers), "aws_identities": self.approver_aws_identities})
        if problems:
            raise ValueError("sim2real:approvers / sim2real:approver_aws_identities: " + "; ".join(problems))
        if self.max_vcpus < self.vcpus_per_node:
            raise ValueError("sim2real:max_vcpus is below one node's vCPUs: no job could ever be placed")
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(self.schedule_timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"sim2real:schedule_timezone must be an IANA time zone name such as UTC or "
                             f"Europe/Berlin, got {self.schedule_timezone!r}") from None

    @property
    def hyperpod_eks(self) -> bool:
        """Whether the ``hyperpod_eks`` backend's access (EKS access entry, IAM) is configured."""
        return bool(self.hyperpod_eks_cluster_name)

    @property
    def instance_type(self) -> str:
        """The compute environment's primary instance type (the config's ``batch.instance_type``)."""
        return self.instance_types[0]

    def name(self, suffix: str) -> str:
        """``<prefix>-<suffix>``: the physical name of a resource."""
        return f"{self.prefix}-{suffix}"
