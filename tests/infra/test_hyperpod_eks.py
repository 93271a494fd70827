"""The ``hyperpod_eks`` backend's access: the MWAA role's EKS access entry, its two Describe grants, the RBAC manifests.

Without the ``sim2real:hyperpod_eks_*`` context the app has none of it (``synth``); the full app has it (``synth_full``,
context :data:`~tests.infra.conftest.HYPERPOD_EKS`). cfn-lint and cdk-nag run over both in test_cdk_cli.py and
test_security.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

import aws_cdk as cdk
from sim2real_infra.hyperpod_eks import RBAC_TEMPLATE, kubernetes_group, rbac_manifests
from sim2real_infra.settings import Settings

from .conftest import HYPERPOD_EKS, Synth, render, resources


def _list(v: Any) -> list:
    return v if isinstance(v, list) else [v]


def _statements(synth: Synth) -> list[dict]:
    """Every IAM statement of the MWAA stack."""
    template = synth.templates[synth.stacks.mwaa.stack_name]
    return [st for rtype in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
            for res in resources(template, rtype).values() for st in res["Properties"]["PolicyDocument"]["Statement"]]


def test_without_the_context_the_app_has_no_eks_access(synth: Synth) -> None:
    assert not synth.stacks.settings.hyperpod_eks
    for template in synth.templates.values():
        assert not [r for r in template["Resources"].values() if r["Type"].startswith("AWS::EKS::")]
    actions = {a for st in _statements(synth) for a in _list(st["Action"])}
    assert not {a for a in actions if a.startswith("eks:")}
    assert not [st for st in _statements(synth) if st.get("Sid", "").startswith("HyperPodEks")]


def test_access_entry_maps_the_execution_role_to_its_kubernetes_group_only(synth_full: Synth) -> None:
    """STANDARD, the group ``sim2real-airflow`` and no EKS access policy: RBAC alone decides (no cluster admin)."""
    template = synth_full.templates[synth_full.stacks.mwaa.stack_name]
    (entry,) = resources(template, "AWS::EKS::AccessEntry").values()
    role_id = synth_full.stacks.mwaa.get_logical_id(synth_full.stacks.mwaa.role.node.default_child)
    props = entry["Properties"]
    assert props["ClusterName"] == HYPERPOD_EKS["hyperpod_eks_cluster_name"]
    assert props["PrincipalArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert (props["Type"], props["KubernetesGroups"]) == ("STANDARD", ["sim2real-airflow"])
    assert "AccessPolicies" not in props and "Username" not in props
    # no other stack adds EKS resources
    others = [n for n, t in synth_full.templates.items() if n != synth_full.stacks.mwaa.stack_name
              and [r for r in t["Resources"].values() if r["Type"].startswith("AWS::EKS::")]]
    assert not others


def test_describe_grants_name_exactly_the_two_clusters(synth_full: Synth) -> None:
    """``sagemaker:DescribeCluster`` on the HyperPod cluster's ARN, ``eks:DescribeCluster`` on the EKS cluster's."""
    statements = _statements(synth_full)
    grants = {st["Sid"]: (st["Effect"], _list(st["Action"]), [render(r) for r in _list(st["Resource"])])
              for st in statements if st.get("Sid", "").startswith("HyperPodEks")}
    assert grants == {
        "HyperPodEksCluster": ("Allow", ["sagemaker:DescribeCluster"], [HYPERPOD_EKS["hyperpod_eks_cluster_arn"]]),
        "HyperPodEksEndpoint": ("Allow", ["eks:DescribeCluster"],
                                ["arn:aws:eks:us-east-1:123456789012:cluster/hyperpod-eks-shared"]),
    }
    # nothing else of the role is an EKS action (the token is a presigned STS GetCallerIdentity: no IAM action)
    eks_actions = [(st.get("Sid"), a) for st in statements for a in _list(st["Action"]) if a.startswith("eks:")]
    assert eks_actions == [("HyperPodEksEndpoint", "eks:DescribeCluster")]


def _manifests() -> list[dict]:
    return list(yaml.safe_load_all(rbac_manifests("hyperpod-ns-robotics", kubernetes_group("sim2real"))))


def test_rbac_manifests_bind_the_access_entrys_group(synth_full: Synth) -> None:
    template = synth_full.templates[synth_full.stacks.mwaa.stack_name]
    (entry,) = resources(template, "AWS::EKS::AccessEntry").values()
    (group,) = entry["Properties"]["KubernetesGroups"]
    docs = {d["kind"]: d for d in _manifests()}
    assert sorted(docs) == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    for kind in ("Role", "RoleBinding"):
        assert docs[kind]["metadata"]["namespace"] == "hyperpod-ns-robotics", kind
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        assert "namespace" not in docs[kind]["metadata"], kind
    for binding, role in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        assert docs[binding]["subjects"] == [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}]
        assert docs[binding]["roleRef"] == {"kind": role, "name": docs[role]["metadata"]["name"],
                                            "apiGroup": "rbac.authorization.k8s.io"}


def _grants(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_rbac_grants_exactly_what_the_backend_calls() -> None:
    """The job kind the backend submits, Kubeflow PyTorchJob (create/get/list/delete; no HyperPodPyTorchJob), Kueue
    reads, pod logs in the namespace; ClusterQueues read only."""
    docs = {d["kind"]: d for d in _manifests()}
    job = {"create", "get", "list", "delete"}
    assert _grants(docs["Role"]["rules"]) == (
        {("kubeflow.org", "pytorchjobs", v) for v in job}
        | {("kueue.x-k8s.io", "localqueues", "get"), ("kueue.x-k8s.io", "workloads", "list")}
        | {("", "pods", "list"), ("", "pods/log", "get")})
    assert _grants(docs["ClusterRole"]["rules"]) == {("kueue.x-k8s.io", "clusterqueues", "get"),
                                                     ("kueue.x-k8s.io", "workloadpriorityclasses", "get")}
    text = json.dumps(docs)
    assert "*" not in text and "secrets" not in text and "system:" not in text


_PATH = re.compile(r"^/apis?/(?:(?P<group>[^/]+)/)?v[^/]+(?:/namespaces/[^/]+)?/(?P<resource>[^/]+)"
                   r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")


def _rbac(verb: str, path: str) -> tuple[str, str, str, str]:
    """``(scope, apiGroup, resource, RBAC verb)`` of one request (Kubernetes documentation, "Authorization":
    a GET of one object is ``get``, of a collection ``list``)."""
    m = _PATH.match(path)
    assert m, path
    group = "" if path.startswith("/api/") else m.group("group")
    resource = m.group("resource") + (f"/{m.group('sub')}" if m.group("sub") else "")
    rbac_verb = {"POST": "create", "DELETE": "delete"}.get(verb) or ("get" if m.group("name") else "list")
    return ("Role" if "/namespaces/" in path else "ClusterRole", group, resource, rbac_verb)


def _hook_requests() -> set[tuple[str, str, str, str]]:
    """Every Kubernetes call of the backend's hook, made as the operators, trigger and sweeper make them against the
    emulated API server, as RBAC terms. Fails when the hook has a call this does not make."""
    import inspect
    import time

    from kubernetes import config as kube_config
    from sim2real.dev.sandbox.kubernetes_api import KubernetesApiServer
    from sim2real.orchestration.hooks import hyperpod_eks as eks

    ns = eks.team_namespace("robotics")
    with KubernetesApiServer(step_seconds=0.05) as server:
        server.add_team("robotics", gpu_quota=1)
        server.add_priority_class("training-priority")
        api = kube_config.new_client_from_config_dict(server.kubeconfig())
        assert eks.capacity_problems(api, namespace=ns, queue=eks.team_local_queue("robotics"), gpus=1,
                                     priority_class="training") == []
        job = eks.create_job(api, eks.job_manifest(
            name="j", namespace=ns, team="robotics", priority_class="training", run_key="k", image="i", num_nodes=1,
            gpus_per_node=1, environment={}, command=["bash", "-c", "echo hi"]))
        assert eks.read_job(api, ns, "j") and eks.list_jobs(api, f"{eks.RUN_KEY_LABEL}=k", ns)
        assert eks.workload_of(api, ns, job["metadata"]["uid"])
        deadline = time.monotonic() + 20
        while not eks.log_tail(api, ns, "j"):
            assert time.monotonic() < deadline, "the job's pod never logged"
            time.sleep(0.05)
        assert eks.delete_job(api, ns, "j")
        calls = list(server.calls)
    made = {"capacity_problems", "create_job", "read_job", "list_jobs", "workload_of", "log_tail", "delete_job"}
    callers = {name for name, f in inspect.getmembers(eks, inspect.isfunction)
               if f.__module__ == eks.__name__ and not name.startswith("_")
               and next(iter(inspect.signature(f).parameters), None) == "api"}
    assert callers == made, f"hook functions calling the API that this test does not make: {callers - made}"
    return {_rbac(verb, path) for verb, path in calls}


def test_rbac_grants_exactly_the_calls_the_hook_makes() -> None:
    """A call the hook makes without a grant, or a grant no call uses, fails here."""
    docs = {d["kind"]: d for d in _manifests()}
    granted = {(kind, *grant) for kind in ("Role", "ClusterRole") for grant in _grants(docs[kind]["rules"])}
    assert _hook_requests() == granted


def test_rbac_template_has_only_the_two_variables() -> None:
    """``envsubst`` and :func:`rbac_manifests` fill the same two variables; nothing else is left to fill."""
    rendered = rbac_manifests("ns", "grp")
    assert "$" not in rendered
    assert set(re.findall(r"\$\{(\w+)\}", RBAC_TEMPLATE.read_text())) == {"NAMESPACE", "KUBERNETES_GROUP"}


def _from_context(**context: str) -> Settings:
    return Settings.from_context(cdk.App(context={f"sim2real:{k}": v for k, v in context.items()}).node)


def test_settings_from_context_and_refusals() -> None:
    s = _from_context(**HYPERPOD_EKS)
    assert s.hyperpod_eks and (s.hyperpod_eks_cluster_name, s.hyperpod_eks_namespace) == (
        "hyperpod-eks-shared", "hyperpod-ns-robotics")
    assert not _from_context().hyperpod_eks
    with pytest.raises(ValueError, match="missing sim2real:hyperpod_eks_namespace"):
        _from_context(**{**HYPERPOD_EKS, "hyperpod_eks_namespace": ""})
    bad = {"hyperpod_eks_cluster_arn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/*",  # a wildcard
           "hyperpod_eks_namespace": "Team_A",
           "hyperpod_eks_cluster_name": "-eks"}
    for key, value in bad.items():
        with pytest.raises(ValueError, match=f"sim2real:{key} must be"):
            _from_context(**{**HYPERPOD_EKS, key: value})
