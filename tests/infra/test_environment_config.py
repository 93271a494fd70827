"""The environment config in SSM: what sim2real.orchestration.config requires, the same shape as the sandbox's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import aws_cdk as cdk
from sim2real.orchestration.config import ENV_SSM_PARAMETER, REQUIRED, validate_environment
from sim2real_infra.settings import Settings

from .conftest import Synth, render, resources

# integration (not in make test-unit): a provisioned sandbox
pytestmark = pytest.mark.integration


def _parameters(synth: Synth) -> dict[str, Any]:
    template = synth.templates[synth.stacks.environment.stack_name]
    return {p["Properties"]["Name"]: json.loads(render(p["Properties"]["Value"]))
            for p in resources(template, "AWS::SSM::Parameter").values()}


def shape(doc: Any, path: str = "") -> set[str]:
    """Dotted key paths of a JSON document (values' types for leaves), maps compared by keys.

    ``greengrass.components`` is a name -> version map: its keys are data, so only its type counts.
    """
    if isinstance(doc, dict) and path != "greengrass.components":
        out = set()
        for k, v in doc.items():
            out |= shape(v, f"{path}.{k}" if path else k)
        return out
    return {f"{path}:{type(doc).__name__}"}


@pytest.fixture(scope="module")
def sandbox_config() -> Iterator[dict[str, Any]]:
    """The sandbox's provision() output (moto in this process; stopped after this module)."""
    from sim2real.dev.sandbox import Sandbox

    with Sandbox(step_seconds=0.05) as sb:
        yield sb.provision(hyperpod=False)


def test_parameter_has_every_required_key_and_validates(synth: Synth) -> None:
    params = _parameters(synth)
    config = params[ENV_SSM_PARAMETER]
    assert validate_environment(config) == config
    for section, keys in REQUIRED.items():
        scope = config[section] if section else config
        assert all(scope[k] not in (None, "") for k in keys), section
    assert config["artifacts_bucket"] == "sim2real-artifacts-123456789012"
    assert config["batch"] == {"job_queue": "sim2real-gpu", "job_definition": "sim2real-train",
                               "compute_environment": "sim2real-gpu-ce", "instance_type": "g6.12xlarge",
                               "log_group": "/aws/batch/job"}
    assert config["sagemaker"]["pipeline_role_arn"] == "arn:aws:iam::123456789012:role/sim2real-pipeline"
    assert config["notifications"]["sns_topic_arn"] == "arn:aws:sns:us-east-1:123456789012:sim2real-notifications"
    assert config["greengrass"]["components"] == {
        "com.sim2real.PolicySetup": "1.0.0", "com.sim2real.PolicyInference": "1.0.0",
        "com.sim2real.PolicyBenchmark": "1.0.0"} | config["greengrass"]["components"]
    assert config["sandbox"] is False
    assert config["approval"] == {"approvers": [], "aws_identities": {}, "self_approval": False}  # four-eyes
    # the Airflow Variable served by MWAA's SSM secrets backend carries the same document
    assert params["/sim2real/airflow/variables/sim2real_environment"] == config


def test_same_shape_as_the_sandbox(synth: Synth, sandbox_config: dict[str, Any]) -> None:
    config = _parameters(synth)[ENV_SSM_PARAMETER]
    assert shape(config) == shape(sandbox_config)
    assert set(config["greengrass"]["components"]) == set(sandbox_config["greengrass"]["components"])
    # names the sandbox uses are the names infra/ creates
    for section in ("image_build", "batch", "evaluation", "quota"):
        assert config[section] == sandbox_config[section], section
    for key in ("pipeline_name", "model_package_group", "hf_token_secret_path"):
        assert config["sagemaker"][key] == sandbox_config["sagemaker"][key]
    assert config["greengrass"]["thing_group_name"] == sandbox_config["greengrass"]["thing_group_name"]


def test_hyperpod_section_when_enabled(synth_full: Synth) -> None:
    config = _parameters(synth_full)[ENV_SSM_PARAMETER]
    assert config["hyperpod"] == {"cluster_name": "sim2real-hyperpod", "gpu_instance_group": "gpu",
                                  "instance_type": "ml.g6.12xlarge", "head_instance_group": "head",
                                  "submit_host_tag_key": "sim2real:role", "submit_host_tag_value": "hyperpod-head"}
    validate_environment(config)


def test_settings_from_context_and_refusals() -> None:
    app = cdk.App(context={"sim2real:instance_types": "g6e.12xlarge,g6.12xlarge", "sim2real:num_nodes": "4",
                           "sim2real:workstation": "true", "sim2real:mwaa_versions": '{"plugins.zip": "v9"}'})
    s = Settings.from_context(app.node)
    assert s.instance_types == ("g6e.12xlarge", "g6.12xlarge") and s.instance_type == "g6e.12xlarge"
    assert (s.num_nodes, s.workstation, s.hyperpod, s.mwaa_versions) == (4, True, False, {"plugins.zip": "v9"})
    tagged = Settings.from_context(cdk.App(context={"sim2real:hyperpod": "true",
                                                    "sim2real:hyperpod_submit_host_tag_value": "login"}).node)
    assert (tagged.hyperpod_submit_host_tag_key, tagged.hyperpod_submit_host_tag_value) == ("sim2real:role", "login")
    for bad in ({"sim2real:runnable_timeout_minutes": 5}, {"sim2real:instance_types": []},
                {"sim2real:max_vcpus": 8}, {"sim2real:max_azs": 1},
                {"sim2real:hyperpod": "true", "sim2real:hyperpod_submit_host_tag_value": "workstation"},
                {"sim2real:hyperpod": "true", "sim2real:hyperpod_submit_host_tag_key": ""}):
        with pytest.raises(ValueError):
            Settings.from_context(cdk.App(context=bad).node)


def test_approvers_from_context_reach_the_environment_config() -> None:
    from sim2real_infra.app import environment_config

    s = Settings.from_context(cdk.App(context={
        "sim2real:approvers": "bob,carol",
        "sim2real:approver_aws_identities": '{"alice": ["arn:aws:sts::123456789012:assumed-role/ml/alice"]}'}).node)
    assert s.approvers == ("bob", "carol")

    class Named:  # the stacks' physical names the section does not depend on
        def __getattr__(self, name: str) -> Any:
            return {"components": {"c": "1.0.0"}}.get(name, "x")

    config = environment_config(s, {k: Named() for k in ("batch", "sagemaker", "greengrass")})
    assert config["approval"] == {"approvers": ["bob", "carol"], "self_approval": False,
                                  "aws_identities": {"alice": ["arn:aws:sts::123456789012:assumed-role/ml/alice"]}}
    with pytest.raises(ValueError, match="sim2real:approvers"):
        Settings.from_context(cdk.App(context={"sim2real:approvers": '["bob", " carol"]'}).node)
