"""Least privilege and cdk-nag: every IAM statement names resources; the nag report is clean."""

from __future__ import annotations

from typing import Any

import pytest

from sim2real_infra.mwaa import MWAA_UNSCOPED, UNSCOPED_ACTIONS
from sim2real_infra.nag import IAM4_REASONS, IAM5_REASONS, OTHER_REASONS

from .conftest import Synth, render, resources

#: Every action that may appear on ``"Resource": "*"``, with why AWS requires it there.
ALLOWED_ON_STAR: dict[str, str] = {
    **UNSCOPED_ACTIONS,
    **MWAA_UNSCOPED,
    "ecr:GetAuthorizationToken": "registry login is account-wide (image pull/push grants)",
    "cloudwatch:PutMetricData": "no resource type; limited by a cloudwatch:namespace condition",
}


def _list(v: Any) -> list:
    return v if isinstance(v, list) else [v]


def _statements(synth: Synth):
    for stack_name, template in synth.templates.items():
        for rtype in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for lid, res in resources(template, rtype).items():
                for st in res["Properties"]["PolicyDocument"]["Statement"]:
                    yield f"{stack_name}/{lid}", st


@pytest.mark.parametrize("which", ["synth", "synth_full"])
def test_star_resource_only_for_actions_without_resource_level_permissions(which: str, request) -> None:
    synth: Synth = request.getfixturevalue(which)
    offenders = []
    for where, st in _statements(synth):
        if st["Effect"] != "Allow":
            continue
        assert "*" not in _list(st["Action"]), f"{where}: Action '*'"
        assert not any(a.endswith(":*") for a in _list(st["Action"])), f"{where}: service-wide action {st['Action']}"
        if "*" in _list(st.get("Resource", [])):
            offenders += [f"{where}: {a}" for a in _list(st["Action"]) if a not in ALLOWED_ON_STAR]
            if "cloudwatch:PutMetricData" in _list(st["Action"]):
                assert "cloudwatch:namespace" in str(st.get("Condition")), f"{where}: PutMetricData without namespace"
    assert not offenders, "actions on Resource '*' that AWS lets us scope:\n" + "\n".join(offenders)


def test_mwaa_role_names_the_resources_of_the_other_stacks(synth: Synth) -> None:
    template = synth.templates[synth.stacks.mwaa.stack_name]
    text = str([p["Properties"]["PolicyDocument"] for t in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
                for p in resources(template, t).values()])
    for fragment in (":job-definition/sim2real-train", "ssm:", "pipeline/sim2real-groot-finetune",
                     "model-package/sim2real-groot-models/*", "thinggroup/sim2real-robots",
                     "thinggroup/sim2real-robots-canary",  # the canary group (deploy_to_canary, its rollback)
                     "sim2real-artifacts-", "/runs/*", "/field/episodes/*", "airflow-sim2real-*", "parameter/sim2real/environment",
                     "/field/data/*", "/field/datasets/*",  # the field dataset publisher
                     "document/AWS-RunShellScript", "document/sim2real-evaluate", "servicequotas"):
        assert fragment in text, fragment
    # start/stop/SendCommand on instances only with the workstation tag condition
    for _, st in _statements(synth):
        if set(_list(st["Action"])) & {"ec2:StartInstances", "ec2:StopInstances"}:
            assert st["Condition"] == {"StringEquals": {"aws:ResourceTag/sim2real:role": "workstation"}}
        if "ssm:SendCommand" in _list(st["Action"]) and any("instance/" in str(r) for r in _list(st["Resource"])):
            assert st["Condition"] == {"StringEquals": {"ssm:resourceTag/sim2real:role": "workstation"}}
        if "iam:PassRole" in _list(st["Action"]):
            assert "*" not in _list(st["Resource"]) and "iam:PassedToService" in str(st.get("Condition"))


def test_mwaa_role_may_command_the_hyperpod_submit_node_only_with_hyperpod(synth: Synth, synth_full: Synth) -> None:
    """Training on HyperPod (sbatch/sacct/scancel) and the orphan sweeper (squeue/scancel) run AWS-RunShellScript
    on the submit node found by its tag: SendCommand on instances with that tag, and only when HyperPod is on."""
    def command_conditions(which: Synth) -> list:
        template = which.templates[which.stacks.mwaa.stack_name]
        return [st.get("Condition") for rtype in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
                for res in resources(template, rtype).values() for st in res["Properties"]["PolicyDocument"]["Statement"]
                if "ssm:SendCommand" in _list(st["Action"]) and any("instance/" in str(r) for r in _list(st["Resource"]))]

    head = {"StringEquals": {"ssm:resourceTag/sim2real:role": "hyperpod-head"}}
    workstation = {"StringEquals": {"ssm:resourceTag/sim2real:role": "workstation"}}
    assert command_conditions(synth) == [workstation]
    assert sorted(map(str, command_conditions(synth_full))) == sorted(map(str, [workstation, head]))
    # the environment config names the same node
    config = synth_full.stacks.config["hyperpod"]
    assert (config["submit_host_tag_key"], config["submit_host_tag_value"]) == ("sim2real:role", "hyperpod-head")


@pytest.mark.parametrize("which", ["synth", "synth_full"])
def test_cdk_nag_aws_solutions_has_no_unacknowledged_finding(which: str, request) -> None:
    synth: Synth = request.getfixturevalue(which)  # synth() raised ValidationFailed otherwise
    (nag,) = [r for r in synth.report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []
    for v in nag.get("suppressedViolations", []):
        assert len(v["reason"]) > 40, v["ruleName"]


def test_every_suppression_has_a_written_reason() -> None:
    reasons = [r for _, r in IAM5_REASONS] + list(IAM4_REASONS.values()) + [r for _, _, r in OTHER_REASONS]
    assert reasons and all(len(r) > 40 for r in reasons)


def test_the_resource_preflight_may_make_every_call_it_makes(synth: Synth) -> None:
    """check_resources (sim2real.orchestration.operators.preflight) reads these; each is granted to the MWAA role."""
    granted = {a for _, st in _statements(synth) if st["Effect"] == "Allow" for a in _list(st["Action"])}
    needed = {"s3:ListBucket", "s3:PutObject", "codebuild:BatchGetProjects", "codebuild:ListBuildsForProject",
              "ecr:DescribeRepositories", "batch:DescribeJobQueues",
              "batch:DescribeComputeEnvironments", "batch:DescribeJobDefinitions", "ec2:DescribeInstanceTypes",
              "iam:GetRole", "sagemaker:DescribeModelPackageGroup", "iot:DescribeThingGroup",
              "greengrass:ListCoreDevices"}
    assert needed <= granted, sorted(needed - granted)


def test_the_approval_step_may_update_only_the_groups_model_packages(synth: Synth) -> None:
    """vla.wait_for_approval writes an Airflow answer with UpdateModelPackage: granted on the group's versions only."""
    update = [st for _, st in _statements(synth) if "sagemaker:UpdateModelPackage" in _list(st["Action"])]
    assert len(update) == 1 and _list(update[0]["Action"]) == ["sagemaker:UpdateModelPackage"], update
    resources = _list(update[0]["Resource"])  # Fn::Join of the ARN's parts: the last part names the resource
    tails = [r["Fn::Join"][1][-1] if isinstance(r, dict) else r for r in resources]
    assert tails and all(":model-package/" in t and t.endswith("/*") for t in tails), resources


def test_mwaa_role_may_set_run_notes_as_the_user_airflow_role_only(synth: Synth) -> None:
    rest = [st for _, st in _statements(synth) if "airflow:InvokeRestApi" in _list(st["Action"])]
    assert len(rest) == 1 and _list(rest[0]["Action"]) == ["airflow:InvokeRestApi"], rest
    assert ":role/" in str(rest[0]["Resource"]) and "/User" in str(rest[0]["Resource"]), rest


def test_mwaa_role_may_tag_deployments_with_the_canary_verdict_only(synth: Synth) -> None:
    """The canary's field verdict is recorded on its Greengrass deployment (TagResource; CreateDeployment ``tags``):
    granted on deployments only, for that one tag key."""
    from sim2real.orchestration.hooks.greengrass import FIELD_VERDICT_TAG

    tag = [st for _, st in _statements(synth) if "greengrass:TagResource" in _list(st["Action"])]
    assert len(tag) == 1 and _list(tag[0]["Action"]) == ["greengrass:TagResource"], tag
    tails = [r["Fn::Join"][1][-1] if isinstance(r, dict) else r for r in _list(tag[0]["Resource"])]
    assert tails and all(t.endswith(":deployments:*") for t in tails), tag[0]["Resource"]
    assert tag[0]["Condition"] == {"ForAllValues:StringEquals": {"aws:TagKeys": [FIELD_VERDICT_TAG]}}


def _object_keys(statement: dict) -> list[str]:
    """The key patterns of a statement's object ARNs (``arn:...:s3:::<bucket>/<key pattern>``), rendered."""
    return [render(r).split(":s3:::", 1)[1].split("/", 1)[1] for r in _list(statement["Resource"])]


def _role_statements(synth: Synth, stack: Any) -> list[dict]:
    return [st for where, st in _statements(synth) if where.startswith(f"{stack.stack_name}/")]


#: A request with neither ``If-None-Match`` nor ``If-Match`` (S3 User Guide, "Enforce conditional writes on Amazon S3
#: buckets": condition keys ``s3:if-none-match`` and ``s3:if-match``; the keys of one ``Null`` block are ANDed).
UNCONDITIONAL_WRITE = {"Null": {"s3:if-none-match": "true", "s3:if-match": "true"}}


def test_robots_write_field_objects_only_under_their_own_thing_name_and_only_conditionally(synth: Synth) -> None:
    """A robot's token exchange role writes ``field/episodes/<its thing>/`` and ``field/data/<its thing>/`` only
    (the IoT credentials provider's ``credentials-iot:ThingName`` policy variable), and only with ``IfNoneMatch``
    (create) or ``IfMatch`` (the uploader's same-bytes check): another robot's episodes cannot be overwritten."""
    statements = _role_statements(synth, synth.stacks.greengrass)
    puts = [st for st in statements if "s3:PutObject" in _list(st["Action"])]
    allow = [st for st in puts if st["Effect"] == "Allow"]
    deny = [st for st in puts if st["Effect"] == "Deny"]
    own = ["field/episodes/${credentials-iot:ThingName}/*", "field/data/${credentials-iot:ThingName}/*"]
    assert len(allow) == 1 and _list(allow[0]["Action"]) == ["s3:PutObject"], allow
    assert _object_keys(allow[0]) == own and "Condition" not in allow[0], allow[0]
    assert len(deny) == 1 and _list(deny[0]["Action"]) == ["s3:PutObject"], deny
    assert _object_keys(deny[0]) == own and deny[0]["Condition"] == UNCONDITIONAL_WRITE, deny[0]
    # nothing else of the role names a field object
    assert [st for st in statements if "field/" in str(st.get("Resource"))] == allow + deny


def test_airflow_writes_field_dataset_manifests_only_as_conditional_creates(synth: Synth) -> None:
    """The field dataset publisher writes a manifest once (``IfNoneMatch="*"``): a PutObject under
    ``field/datasets/`` without ``If-None-Match`` is denied; the other write prefixes are as before."""
    statements = _role_statements(synth, synth.stacks.mwaa)
    deny = [st for st in statements if st["Effect"] == "Deny" and "s3:PutObject" in _list(st["Action"])]
    assert len(deny) == 1 and _list(deny[0]["Action"]) == ["s3:PutObject"], deny
    assert _object_keys(deny[0]) == ["field/datasets/*"], deny[0]
    assert deny[0]["Condition"] == {"Null": {"s3:if-none-match": "true"}}, deny[0]
    (write,) = [st for st in statements if st.get("Sid") == "ArtifactsWrite"]
    assert _object_keys(write) == ["runs/*", "images/*", "field/datasets/*"] and "Condition" not in write, write


def test_the_preflight_may_describe_only_the_groot_secrets_and_list_the_base_models(synth: Synth) -> None:
    """check_resources checks a GR00T N1.7 run's token secret (DescribeSecret: on <prefix>-groot/* only, the
    secrets the pipeline role may read) and every fine-tune's base model prefix (ListObjectsV2 under
    models/groot-base/: N1.6's is that prefix itself)."""
    mwaa = f"{synth.stacks.mwaa.stack_name}/"
    describe = [(where, st) for where, st in _statements(synth)
                if "secretsmanager:DescribeSecret" in _list(st["Action"])]
    assert len(describe) == 1 and _list(describe[0][1]["Action"]) == ["secretsmanager:DescribeSecret"], describe
    assert describe[0][0].startswith(mwaa) and ":secret:sim2real-groot/*" in str(describe[0][1]["Resource"]), describe
    lists = [st for where, st in _statements(synth) if where.startswith(mwaa) and "s3:ListBucket" in _list(st["Action"])]
    assert any("models/groot-base/*" in str(st.get("Condition")) for st in lists), lists
