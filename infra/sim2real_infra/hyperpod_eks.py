"""The MWAA execution role's access to a SageMaker HyperPod cluster orchestrated by Amazon EKS (``hyperpod_eks``).

Neither cluster is created here: a HyperPod cluster on EKS is usually shared by teams (task governance), so it is
named by CDK context (:class:`~sim2real_infra.settings.Settings` ``hyperpod_eks_*``); without that context nothing of
this module is added. With it, the MWAA stack gets:

- an EKS access entry (``AWS::EKS::AccessEntry``, type ``STANDARD``) that maps the execution role to one Kubernetes
  group, :func:`kubernetes_group`, and associates no EKS access policy, so Kubernetes RBAC alone decides what the role
  may do ("Kubernetes authorizes the principalArn of the access entry to access any cluster objects that you've
  specified in a Kubernetes Role or ClusterRole object that is also specified in a binding's roleRef": Amazon EKS
  API Reference, ``CreateAccessEntry`` ``kubernetesGroups``; EKS User Guide, "Create an access entry using Kubernetes
  groups with the AWS CLI"). The EKS cluster's authentication mode must be ``API`` or ``API_AND_CONFIG_MAP``.
- IAM: ``sagemaker:DescribeCluster`` on the HyperPod cluster's ARN (Airflow reads ``Orchestrator.Eks.ClusterArn``)
  and ``eks:DescribeCluster`` on the EKS cluster's ARN (endpoint and certificate authority). The bearer token is a
  presigned STS ``GetCallerIdentity`` URL, which needs no IAM permission, only the access entry.

The RBAC objects (a Role and RoleBinding in the team's namespace; a ClusterRole and ClusterRoleBinding reading
Kueue's cluster-scoped ClusterQueues) are the manifest template :data:`RBAC_TEMPLATE`, applied once with
``kubectl`` by the cluster's administrator, not by CloudFormation. CDK applies manifests to an imported cluster
(``aws_eks.Cluster.from_cluster_attributes`` + ``KubernetesManifest``) through a kubectl Lambda function that assumes
``kubectl_role_arn``, "An IAM role with cluster administrator and "system:masters" permissions" (aws-cdk-lib,
``aws_eks.ClusterAttributes``), and that must run in the cluster's VPC when the endpoint is private (without a
security group "the k8s endpoint is expected to be accessible publicly": ``KubectlProviderOptions``). This app
would then hold a cluster-admin role on a shared cluster to create four RBAC objects; the administrator who
already holds that access applies them instead (README, "The HyperPod EKS backend: access").
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

import aws_cdk as cdk
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

if TYPE_CHECKING:
    from .settings import Settings

#: The RBAC manifests, with ``${NAMESPACE}`` and ``${KUBERNETES_GROUP}`` to fill (``envsubst``; :func:`rbac_manifests`).
RBAC_TEMPLATE = Path(__file__).resolve().parents[1] / "eks" / "airflow-rbac.yaml"

#: The HyperPod cluster ARN (SageMaker API Reference, ``DescribeCluster`` ``ClusterArn`` pattern; the id is generated).
CLUSTER_ARN = re.compile(r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:cluster/[a-z0-9]{12}")
#: An EKS cluster name (Amazon EKS API Reference, ``CreateCluster`` ``name``).
EKS_CLUSTER_NAME = re.compile(r"[0-9A-Za-z][A-Za-z0-9\-_]{0,99}")
#: A Kubernetes namespace: an RFC 1123 DNS label (Kubernetes documentation, "Object Names and IDs").
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def kubernetes_group(prefix: str) -> str:
    """The Kubernetes group of the MWAA execution role on the EKS cluster: ``<prefix>-airflow``.

    The access entry names it in ``kubernetesGroups``; the RBAC bindings of :data:`RBAC_TEMPLATE` name it as their
    ``Group`` subject. Never ``system:``-prefixed (EKS refuses those in an access entry).
    """
    return f"{prefix}-airflow"


def eks_settings_problems(settings: Settings) -> list[str]:
    """What is wrong with the ``hyperpod_eks_*`` settings (empty: all three absent, or all three valid).

    :param settings: the app's settings.
    :return: one sentence per problem, naming the context key and the expected shape.
    """
    values = {"hyperpod_eks_cluster_name": settings.hyperpod_eks_cluster_name,
              "hyperpod_eks_cluster_arn": settings.hyperpod_eks_cluster_arn,
              "hyperpod_eks_namespace": settings.hyperpod_eks_namespace}
    if not any(values.values()):
        return []
    missing = [f"sim2real:{k}" for k, v in values.items() if not v]
    if missing:
        return [f"the hyperpod_eks backend needs sim2real:hyperpod_eks_cluster_name, _cluster_arn and _namespace "
                f"together; missing {', '.join(missing)}"]
    checks = [("hyperpod_eks_cluster_name", EKS_CLUSTER_NAME, "an EKS cluster name (letters, digits, - and _)"),
              ("hyperpod_eks_cluster_arn", CLUSTER_ARN,
               "a HyperPod cluster ARN, arn:aws:sagemaker:<region>:<account>:cluster/<12-character id>"),
              ("hyperpod_eks_namespace", NAMESPACE, "a Kubernetes namespace (DNS label), e.g. hyperpod-ns-<team>")]
    return [f"sim2real:{key} must be {shape}, got {values[key]!r}"
            for key, pattern, shape in checks if not pattern.fullmatch(values[key])]


def rbac_manifests(namespace: str, group: str) -> str:
    """:data:`RBAC_TEMPLATE` filled in, as ``envsubst`` fills it (the YAML ``kubectl apply -f -`` reads).

    :param namespace: the team's namespace (``hyperpod_eks_namespace``).
    :param group: the access entry's Kubernetes group (:func:`kubernetes_group`).
    :raises KeyError: the template names another variable.
    """
    return Template(RBAC_TEMPLATE.read_text()).substitute(NAMESPACE=namespace, KUBERNETES_GROUP=group)


def describe_statements(scope: Construct, settings: Settings) -> list[iam.PolicyStatement]:
    """The two ``Describe*`` grants of the MWAA role, each on its one cluster (nothing wildcarded).

    :param scope: a construct of the stack the ARNs are formatted in (region and account pseudo parameters).
    :param settings: settings with the ``hyperpod_eks_*`` keys set.
    """
    eks_arn = cdk.Stack.of(scope).format_arn(service="eks", resource="cluster",
                                             resource_name=settings.hyperpod_eks_cluster_name)
    return [
        iam.PolicyStatement(sid="HyperPodEksCluster", actions=["sagemaker:DescribeCluster"],
                            resources=[settings.hyperpod_eks_cluster_arn]),
        iam.PolicyStatement(sid="HyperPodEksEndpoint", actions=["eks:DescribeCluster"], resources=[eks_arn]),
    ]


def add_access_entry(scope: Construct, settings: Settings, role: iam.IRole) -> eks.CfnAccessEntry:
    """The EKS access entry of ``role`` on the ``hyperpod_eks_cluster_name`` cluster: its Kubernetes group only.

    :param scope: the construct to add it to (the MWAA stack).
    :param settings: settings with the ``hyperpod_eks_*`` keys set.
    :param role: the MWAA execution role.
    """
    return eks.CfnAccessEntry(scope, "HyperPodEksAccessEntry", cluster_name=settings.hyperpod_eks_cluster_name,
                              principal_arn=role.role_arn, type="STANDARD",
                              kubernetes_groups=[kubernetes_group(settings.prefix)])
