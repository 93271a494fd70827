"""The configuration the DAGs deploy is the configuration the Greengrass recipes read.

The recipes are the shipped files (``containers/greengrass/recipes``); the merge is the one both DAGs build
(:func:`sim2real.orchestration.stages.deployment_components`, also behind the release DAG's
``release_components``), normalised by the deploy operator and sent through botocore's Stubber, which validates
the CreateDeployment request against the real ``greengrassv2`` service model.
"""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from sim2real.edge.recipes import VARIABLE, load_recipes
from sim2real.orchestration.operators.greengrass import normalize_components
from sim2real.orchestration.release import release_components
from sim2real.orchestration.stages import deployment_components

#: Keys a recipe's lifecycle reads that are empty by default and may stay so: the api token sources (the server
#: runs tokenless on loopback) and the exporter (not needed when the policy ships as ONNX).
OPTIONAL_EMPTY = {"ApiTokenSecretId", "ApiTokenSsmParameter", "Exporter"}
SHA = "ab" * 32
ONNX_SHA = "cd" * 32
APPROVAL = {"model_package_arn": "arn:aws:sagemaker:us-east-1:123456789012:model-package/g/3",
            "model_data_url": "s3://b/runs/k/vla/model/model.tar.gz"}
CHECKPOINT = {"checkpoint_uri": "s3://b/runs/k/checkpoints/agent_000100.pt", "sha256": SHA}


@pytest.fixture(scope="module")
def recipes():
    return load_recipes()


def lifecycle_reads(recipe: dict) -> set[str]:
    """``{configuration:/Key}`` of the recipe's own configuration referenced by any lifecycle script."""
    keys = set()
    for manifest in recipe["Manifests"]:
        for step in manifest.get("Lifecycle", {}).values():
            script = step["Script"] if isinstance(step, dict) else step
            keys |= {m["key"].lstrip("/") for m in VARIABLE.finditer(script)
                     if m["ns"] == "configuration" and not m["comp"]}
    return keys


def must_come_from_deployment(recipe: dict) -> set[str]:
    defaults = recipe["ComponentConfiguration"]["DefaultConfiguration"]
    return {k for k in lifecycle_reads(recipe) if defaults.get(k) == "" and k not in OPTIONAL_EMPTY}


def plan(recipes):
    return {"run_key": "run-1", "deploy": {"components": {name: r["ComponentVersion"] for name, r in recipes.items()}}}


def sent_components(components: dict) -> dict:
    """The ``components`` of the CreateDeployment request the operator sends, validated by botocore."""
    client = boto3.client("greengrassv2", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    components = normalize_components(components)
    with Stubber(client) as stub:
        stub.add_response("create_deployment", {"deploymentId": "d-1"},
                          {"targetArn": "arn:aws:iot:us-east-1:123456789012:thinggroup/robots",
                           "deploymentName": "sim2real-run-1", "components": components})
        client.create_deployment(targetArn="arn:aws:iot:us-east-1:123456789012:thinggroup/robots",
                                 deploymentName="sim2real-run-1", components=components)
        stub.assert_no_pending_responses()
    return components


@pytest.mark.parametrize("manifest, uri, sha, exporter", [
    (CHECKPOINT, CHECKPOINT["checkpoint_uri"], SHA, "sim2real.workloads.export:export_onnx"),
    ({**CHECKPOINT, "onnx_uri": "s3://b/runs/k/checkpoints/policy.onnx", "onnx_sha256": ONNX_SHA},
     "s3://b/runs/k/checkpoints/policy.onnx", ONNX_SHA, ""),
], ids=["checkpoint", "onnx"])
@pytest.mark.parametrize("dag", ["sim_to_real", "sim_to_real_release"])
def test_every_key_the_recipes_need_is_deployed(recipes, manifest, uri, sha, exporter, dag):
    build = deployment_components if dag == "sim_to_real" else release_components
    components = sent_components(build(plan(recipes), APPROVAL, manifest))
    assert set(components) == set(recipes)
    for name, recipe in recipes.items():
        merge = json.loads(components[name]["configurationUpdate"]["merge"])
        needed = must_come_from_deployment(recipe)
        if name == "com.sim2real.PolicySetup":  # what the check is about: the model and its hash
            assert {"ModelS3Uri", "ModelSha256"} <= needed
        missing = {k for k in needed if not merge.get(k)}
        assert not missing, f"{name} reads {sorted(missing)} from its configuration, the deployment sends none"
        unread = set(merge) - set(recipe["ComponentConfiguration"]["DefaultConfiguration"])
        assert not unread, f"the deployment sends {sorted(unread)}, which {name}'s recipe does not declare"
        assert merge["ModelS3Uri"] == uri and merge["ModelSha256"] == sha
        assert merge["ModelPackageArn"] == APPROVAL["model_package_arn"]
        assert merge.get("Exporter") == (exporter if name == "com.sim2real.PolicySetup" else None)


@pytest.mark.parametrize("manifest", [None, {"checkpoint_uri": "s3://b/c.pt"}, {"sha256": SHA}])
def test_a_policy_without_uri_and_sha256_is_refused(recipes, manifest):
    with pytest.raises(ValueError, match="ModelSha256|sha256"):
        deployment_components(plan(recipes), APPROVAL, manifest)
