"""The real CDK CLI and cfn-lint over what the app synthesizes.

``make synth`` and ``make deploy`` run the app through the CDK CLI pinned in ``infra/package.json``: only the
CLI reads ``cdk.json``'s context (settings and feature flags), so a change there must reach the templates.
cfn-lint (the CloudFormation linter) checks every template of the default and the full app: no error and no
warning (each one that stays would be explained in the README).
"""

from __future__ import annotations

import json
import os
import sys
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, Synth

# integration (not in make test-unit): the CDK CLI (node, npm ci) synthesizes the app
pytestmark = pytest.mark.integration

INFRA = REPO_ROOT / "infra"
CDK = INFRA / "node_modules" / ".bin" / "cdk"
VENV_PYTHON = Path(sys.executable)


def cdk_cli() -> Path:
    """The pinned CDK CLI (``npm ci`` in infra/ when it is not installed yet; skipped without npm outside CI)."""
    if not CDK.exists():
        npm = shutil.which("npm")
        if npm is None:
            if os.environ.get("CI"):
                pytest.fail("npm is not on PATH: the CDK CLI (infra/package.json) cannot be installed")
            pytest.skip("npm is not on PATH: install Node.js 20+ to run the CDK CLI")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=INFRA, check=True, capture_output=True)
    return CDK


def _synth_copy(tmp_path: Path, context: dict, *cli_args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Synthesize a copy of infra/ whose cdk.json has ``context`` over its own, through the CLI (``cli_args`` added).

    :return: the CLI's process and its output folder.
    """
    cli = cdk_cli()
    app_dir = tmp_path / "infra"
    app_dir.mkdir()
    shutil.copy(INFRA / "app.py", app_dir / "app.py")
    shutil.copytree(INFRA / "sim2real_infra", app_dir / "sim2real_infra", ignore=shutil.ignore_patterns("__pycache__"))
    cdk_json = json.loads((INFRA / "cdk.json").read_text())
    cdk_json["context"].update(context)
    cdk_json["app"] = f"{VENV_PYTHON} app.py"
    (app_dir / "cdk.json").write_text(json.dumps(cdk_json))
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_DISABLE_VERSION_CHECK": "1"}
    out = tmp_path / "cdk.out"
    proc = subprocess.run([str(cli), "synth", "--no-notices", "--no-version-reporting", "-q", "--output", str(out),
                           *cli_args], cwd=app_dir, env=env, capture_output=True, text=True, timeout=300)
    return proc, out


def test_cdk_json_context_reaches_the_templates(tmp_path: Path) -> None:
    """A copy of infra/ whose cdk.json says 3 nodes and names a versions file synthesizes exactly that."""
    versions = {"plugins.zip": "pz-7", "requirements.txt": "rq-7", "startup.sh": "st-7"}
    (tmp_path / "versions.json").write_text(json.dumps(versions))
    proc, out = _synth_copy(tmp_path, {"sim2real:num_nodes": 3, "sim2real:mwaa_versions_file": "../versions.json"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    batch = json.loads((out / "Sim2realBatch.template.json").read_text())
    (job_definition,) = [r for r in batch["Resources"].values() if r["Type"] == "AWS::Batch::JobDefinition"]
    assert job_definition["Properties"]["NodeProperties"]["NumNodes"] == 3
    mwaa = json.loads((out / "Sim2realMwaa.template.json").read_text())
    (environment,) = [r for r in mwaa["Resources"].values() if r["Type"] == "AWS::MWAA::Environment"]
    props = environment["Properties"]
    assert (props["PluginsS3ObjectVersion"], props["RequirementsS3ObjectVersion"],
            props["StartupScriptS3ObjectVersion"]) == ("pz-7", "rq-7", "st-7")
    storage = json.loads((out / "Sim2realStorage.template.json").read_text())
    assert not [r for r in storage["Resources"].values() if "AccessControl" in r.get("Properties", {})]


def test_hyperpod_eks_context_on_the_command_line_adds_the_access_entry(tmp_path: Path) -> None:
    """``cdk synth -c sim2real:hyperpod_eks_*=...`` (README, "The HyperPod EKS backend: access"): the MWAA stack gets
    the access entry and the two Describe grants; the other stacks are the default app's."""
    arn = "arn:aws:sagemaker:us-east-1:123456789012:cluster/a1b2c3d4e5f6"
    proc, out = _synth_copy(tmp_path, {}, "-c", "sim2real:hyperpod_eks_cluster_name=shared-eks",
                            "-c", f"sim2real:hyperpod_eks_cluster_arn={arn}",
                            "-c", "sim2real:hyperpod_eks_namespace=hyperpod-ns-robotics")
    assert proc.returncode == 0, proc.stderr[-3000:]
    mwaa = json.loads((out / "Sim2realMwaa.template.json").read_text())
    (entry,) = [r["Properties"] for r in mwaa["Resources"].values() if r["Type"] == "AWS::EKS::AccessEntry"]
    assert (entry["ClusterName"], entry["Type"], entry["KubernetesGroups"]) == ("shared-eks", "STANDARD",
                                                                                ["sim2real-airflow"])
    text = json.dumps(mwaa)
    assert '"sagemaker:DescribeCluster"' in text and arn in text and '"eks:DescribeCluster"' in text
    assert not [p for p in out.glob("*.template.json") if p.name != "Sim2realMwaa.template.json"
                and "AWS::EKS::" in p.read_text()]


def test_app_refuses_to_run_outside_the_cli() -> None:
    """Run directly, the app would ignore cdk.json: it says how to run it instead."""
    env = {k: v for k, v in os.environ.items() if k != "CDK_OUTDIR"}
    proc = subprocess.run([str(VENV_PYTHON), "app.py"], cwd=INFRA, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "make synth" in proc.stderr


@pytest.mark.parametrize("which", ["synth", "synth_full"])
def test_cfn_lint_has_no_finding(which: str, request: pytest.FixtureRequest) -> None:
    """cfn-lint over every synthesized template: no error, no warning, no informational finding."""
    synth: Synth = request.getfixturevalue(which)
    templates = sorted(str(p) for p in synth.outdir.glob("*.template.json"))
    assert len(templates) == len(synth.templates)
    cfn_lint = Path(VENV_PYTHON).parent / "cfn-lint"
    proc = subprocess.run([str(cfn_lint), "--format", "parseable", *templates], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr
