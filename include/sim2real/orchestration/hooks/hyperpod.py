"""SageMaker HyperPod hook: scale one instance group without dropping the others.

``UpdateCluster`` replaces the cluster's instance groups with the list it is given, so every
group must be sent, each with its spec rebuilt from DescribeCluster. Sources: Amazon SageMaker
API Reference — DescribeCluster (``ClusterStatus``, ``InstanceGroups[]`` =
ClusterInstanceGroupDetails), UpdateCluster (``InstanceGroups[]`` =
ClusterInstanceGroupSpecification), ListClusterNodes (``InstanceStatus.Status``).
"""

from __future__ import annotations

from typing import Any

from sim2real.orchestration.hooks.sagemaker_pipeline import SageMakerExtHook
from sim2real.orchestration.hooks.waiter_rounds import classify_response

#: Describe-output field → spec field, where the names differ.
_RENAMED = {"TargetCount": "InstanceCount", "MinCount": "MinInstanceCount"}


def _project(value: Any, shape) -> Any:
    """Keep only what ``shape`` (a botocore input shape) accepts; ``Desired<X>`` fills ``<X>``."""
    if shape.type_name == "structure" and isinstance(value, dict):
        out = {}
        for name, member in shape.members.items():
            if name in value:
                v = value[name]
            elif f"Desired{name}" in value:
                v = value[f"Desired{name}"]
            else:
                continue
            projected = _project(v, member)
            if projected is not None:
                out[name] = projected
        return out
    if shape.type_name == "list" and isinstance(value, list):
        return [_project(v, shape.member) for v in value]
    if shape.type_name == "map" and isinstance(value, dict):
        return {k: _project(v, shape.value) for k, v in value.items()}
    return value


def instance_group_specs(
    client, describe: dict[str, Any], instance_group_name: str, target_count: int
) -> tuple[list[dict[str, Any]], int]:
    """UpdateCluster ``InstanceGroups`` for every group of ``describe``, one count changed.

    Each group's ClusterInstanceGroupDetails is projected onto ClusterInstanceGroupSpecification
    using the botocore service model of ``client`` (so every accepted field is copied and nothing
    the API would reject is sent); ``InstanceCount`` = the group's ``TargetCount`` (or
    ``CurrentCount``), ``MinInstanceCount`` = ``MinCount``.

    :return: ``(specs, previous_target_count_of_the_group)``.
    :raises ValueError: ``instance_group_name`` is not a group of the cluster (lists the groups).
    """
    shape = client.meta.service_model.shape_for("ClusterInstanceGroupSpecification")
    groups = describe.get("InstanceGroups", [])
    names = [g.get("InstanceGroupName") for g in groups]
    if instance_group_name not in names:
        raise ValueError(
            f"HyperPod cluster {describe.get('ClusterName')} has no instance group {instance_group_name!r}; "
            f"its groups are: {', '.join(map(str, names)) or 'none'}."
        )
    specs, previous = [], 0
    for group in groups:
        source = dict(group)
        for old, new in _RENAMED.items():
            if old in source and new not in source:
                source[new] = source[old]
        if "InstanceCount" not in source:
            source["InstanceCount"] = source.get("CurrentCount", 0)
        spec = _project(source, shape)
        if group["InstanceGroupName"] == instance_group_name:
            previous = spec["InstanceCount"]
            spec["InstanceCount"] = target_count
        specs.append(spec)
    return specs, previous


def scale_state(
    waiter_path, describe: dict[str, Any], nodes: list[dict[str, Any]] | None, group: str, target: int
) -> tuple[str, str]:
    """Decide one poll of a scale operation.

    :return: ``(outcome, text)``: ``success`` when the cluster is InService (waiter
        ``cluster_in_service``), the group's CurrentCount == target and ``target`` of its nodes
        are Running; ``failure`` when the waiter says so (Failed, RollingBack, Deleting);
        ``retry`` otherwise. ``nodes`` may be ``None`` when not listed this poll.
    """
    status = describe.get("ClusterStatus")
    outcome = classify_response(str(waiter_path), "cluster_in_service", describe)
    details = next((g for g in describe.get("InstanceGroups", []) if g.get("InstanceGroupName") == group), {})
    current = details.get("CurrentCount")
    if outcome == "failure":
        return "failure", f"cluster is {status}: {describe.get('FailureMessage') or 'no FailureMessage'}"
    running = None if nodes is None else sum(1 for n in nodes if (n.get("InstanceStatus") or {}).get("Status") == "Running")
    text = (f"cluster {status}, group {group} CurrentCount={current} TargetCount={details.get('TargetCount')}, "
            f"running nodes={running}, target={target}")
    if outcome == "success" and current == target and running == target:
        return "success", text
    return "retry", text


class HyperPodHook(SageMakerExtHook):
    """SageMaker HyperPod calls (thin SageMaker hook with waiters from ``sagemaker_ext.json``)."""

    def list_group_nodes(self, cluster_name: str, group: str) -> list[dict[str, Any]]:
        """ListClusterNodes of one instance group (botocore's paginator; :func:`group_nodes`)."""
        pages = self.conn.get_paginator("list_cluster_nodes").paginate(**list_nodes_request(cluster_name, group))
        return [node for page in pages for node in group_nodes(page, group)]


def list_nodes_request(cluster_name: str, group: str) -> dict[str, Any]:
    """The ListClusterNodes request for ``group``'s nodes (``InstanceGroupNameContains`` matches by substring)."""
    return {"ClusterName": cluster_name, "InstanceGroupNameContains": group}


def group_nodes(page: dict[str, Any], group: str) -> list[dict[str, Any]]:
    """The ``ClusterNodeSummaries`` of one ListClusterNodes page that belong to ``group`` exactly (the request's
    filter is a substring match: ``gpu`` also lists ``gpu-spare``)."""
    return [n for n in page.get("ClusterNodeSummaries", []) if n.get("InstanceGroupName") == group]
