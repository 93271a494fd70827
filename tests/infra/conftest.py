"""Synthesize the CDK app once per session (offline, with the cdk-nag AwsSolutions checks).

Skipped when aws-cdk-lib is not installed (``requirements-infra.txt``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
from tests.paths import REPO_ROOT
sys.path.insert(0, str(REPO_ROOT / "infra"))

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Template  # noqa: E402

from sim2real_infra.app import Sim2RealStacks, build_app  # noqa: E402
from sim2real_infra.settings import Settings  # noqa: E402

#: What CloudFormation substitutes for the pseudo parameters when the tests render a value.
PSEUDO = {"AWS::AccountId": "123456789012", "AWS::Region": "us-east-1", "AWS::Partition": "aws",
          "AWS::URLSuffix": "amazonaws.com"}
MWAA_VERSIONS = {"plugins.zip": "pv-1", "requirements.txt": "rv-1", "startup.sh": "sv-1"}
#: The ``hyperpod_eks`` context of the full app: an existing HyperPod cluster on EKS and the team's namespace.
HYPERPOD_EKS = {"hyperpod_eks_cluster_name": "hyperpod-eks-shared",
                "hyperpod_eks_cluster_arn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/a1b2c3d4e5f6",
                "hyperpod_eks_namespace": "hyperpod-ns-robotics"}
#: cdk.json's context: the tests give the app its feature flags (keys without the ``sim2real:`` prefix) as the
#: CDK CLI does; the settings come from explicit ``Settings`` here (test_cdk_cli.py runs the CLI itself).
CDK_JSON_CONTEXT = json.loads((REPO_ROOT / "infra" / "cdk.json").read_text())["context"]
FEATURE_FLAGS = {k: v for k, v in CDK_JSON_CONTEXT.items() if not k.startswith("sim2real:")}


@dataclass
class Synth:
    """One synthesized app: its stacks, templates by stack, the nag report, time and memory."""

    stacks: Sim2RealStacks
    templates: dict[str, dict[str, Any]]
    report: dict[str, Any]
    seconds: float
    max_rss_mb: float
    outdir: Path

    def template(self, stack: cdk.Stack) -> Template:
        """``aws_cdk.assertions.Template`` of ``stack`` (from the already synthesized assembly)."""
        return Template.from_json(self.templates[stack.stack_name])


def synthesize(tmp: Path, settings: Settings) -> Synth:
    """Build and synthesize the app into ``tmp`` (raises ``ValidationFailed`` on a nag finding)."""
    start = time.perf_counter()
    app = cdk.App(outdir=str(tmp), context=dict(FEATURE_FLAGS))
    stacks = build_app(app, settings)
    assembly = app.synth()
    seconds = time.perf_counter() - start
    templates = {s.stack_name: assembly.get_stack_by_name(s.stack_name).template for s in stacks.all()}
    report_path = tmp / "validation-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {"pluginReports": []}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return Synth(stacks, templates, report, seconds, rss, tmp)


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The default app (workstation and HyperPod off), MWAA bundle versions pinned."""
    result = synthesize(tmp_path_factory.mktemp("cdk-default"), Settings(mwaa_versions=dict(MWAA_VERSIONS)))
    print(f"\n[infra] synth of {len(result.templates)} stacks: {result.seconds:.1f}s, "
          f"peak RSS of this process {result.max_rss_mb:.0f} MB", file=sys.stderr)
    return result


@pytest.fixture(scope="session")
def synth_full(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The app with the optional workstation and HyperPod stacks on, and the HyperPod EKS access."""
    return synthesize(tmp_path_factory.mktemp("cdk-full"), Settings(workstation=True, hyperpod=True, **HYPERPOD_EKS,
                                                                   mwaa_versions=dict(MWAA_VERSIONS)))


def render(value: Any) -> Any:
    """Resolve intrinsics in a template value the way CloudFormation would for a test account.

    Pseudo parameters become :data:`PSEUDO`; ``Fn::Join`` joins; anything else (a reference to a
    resource) becomes ``"<ref:...>"`` so a JSON document can still be parsed.
    """
    if isinstance(value, dict) and len(value) == 1:
        (fn, arg), = value.items()
        if fn == "Ref":
            return PSEUDO.get(arg, f"<ref:{arg}>")
        if fn == "Fn::Join":
            return arg[0].join(str(render(p)) for p in arg[1])
        if fn.startswith("Fn::"):
            return f"<{fn}>"
    if isinstance(value, dict):
        return {k: render(v) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v) for v in value]
    return value


def resources(template: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    """``{logical id: resource}`` of one type in a template JSON."""
    return {k: v for k, v in template.get("Resources", {}).items() if v["Type"] == rtype}
