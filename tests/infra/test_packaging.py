"""The MWAA bundle's structure (fast: no clean venv; `make package` runs that check) and the
top-level Dockerfile's structure (no Docker engine here)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("package_mwaa", REPO_ROOT / "scripts" / "package_mwaa.py")
package_mwaa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(package_mwaa)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return package_mwaa.build(tmp_path_factory.mktemp("mwaa") / "mwaa")


def test_bundle_layout(bundle: Path) -> None:
    assert sorted(p.name for p in bundle.iterdir()) == ["dags", "plugins.zip", "requirements.txt", "startup.sh"]
    assert {p.name for p in (bundle / "dags").iterdir()} >= {"sim_to_real.py"}
    names = zipfile.ZipFile(bundle / "plugins.zip").namelist()
    assert "sim2real_plugin.py" in names  # plugins/ content at the zip root
    assert "sim2real/__init__.py" not in names  # sim2real is a namespace package
    for module in ("sim2real/contract/__init__.py", "sim2real/orchestration/config.py", "sim2real/orchestration/operators/batch.py",
                   "sim2real/orchestration/links/batch.py", "sim2real/orchestration/triggers/batch.py"):
        assert module in names, module
    assert any(n.startswith("sim2real/orchestration/waiters/") and n.endswith(".json") for n in names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # An allow-list: the Airflow side and the contract only; sim2real itself is a namespace package.
    packages = {n.split("/")[1] for n in names if n.startswith("sim2real/") and n.count("/") >= 2}
    assert packages == {"orchestration", "contract"}
    assert "sim2real/__init__.py" not in names


def test_requirements_have_mwaa_constraint_line_for_the_environment_version(bundle: Path) -> None:
    lines = [ln for ln in (bundle / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    cdk_json = json.loads((REPO_ROOT / "infra" / "cdk.json").read_text())["context"]
    version = cdk_json["sim2real:airflow_version"]
    assert version == package_mwaa.AIRFLOW_VERSION
    assert lines[0] == (f'--constraint "https://raw.githubusercontent.com/apache/airflow/constraints-{version}/'
                        'constraints-3.12.txt"')
    assert "apache-airflow-providers-amazon[aiobotocore]" in lines and "s3fs==2026.7.0" in lines
    # write_lineage draws the run report's figures (sim2real.orchestration.plots) on the workers.
    assert "tensorboard==2.21.0" in lines and "matplotlib==3.11.2" in lines
    assert not any(ln.startswith("apache-airflow==") for ln in lines)  # MWAA's image provides Airflow


def test_startup_script_is_valid_sh(bundle: Path) -> None:
    script = bundle / "startup.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["sh", "-n", str(script)], check=True)


def test_package_imports_from_the_zip(bundle: Path) -> None:
    """The zipped package (no sandbox) imports on its own: sim2real comes from plugins.zip."""
    code = ("import sim2real.contract, sim2real.orchestration.config, sim2real.orchestration.params, sim2real_plugin; "
            "print(sim2real.orchestration.__file__); print(sim2real.contract.__file__)")
    env = {**os.environ, "PYTHONPATH": str(bundle / "plugins.zip")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert all("plugins.zip" in line for line in out.stdout.splitlines()), out.stdout


def test_package_imports_from_the_unpacked_zip(bundle: Path, tmp_path: Path) -> None:
    """The zipped package (no sandbox) imports on its own: sim2real comes from plugins.zip.

    MWAA unpacks plugins.zip into the plugins folder, which is on ``sys.path``; the checkout's ``include/`` (the
    development install) is taken off the path so that only the zip's copy can be found.
    """
    plugins = tmp_path / "plugins"
    zipfile.ZipFile(bundle / "plugins.zip").extractall(plugins)
    code = (f"import sys; sys.path[:] = [p for p in sys.path if p != {str(REPO_ROOT / 'include')!r}]; "
            "import sim2real.orchestration.config, sim2real.orchestration.params, sim2real.contract.run_key, "
            "sim2real_plugin; print(sim2real.orchestration.config.__file__); print(sim2real.contract.run_key.__file__)")
    env = {**os.environ, "PYTHONPATH": str(plugins)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [Path(f).is_relative_to(plugins) for f in out.stdout.split()] == [True, True]


def test_upload_records_object_versions(bundle: Path) -> None:
    moto = pytest.importorskip("moto")
    import boto3

    with moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="sim2real-mwaa-123456789012")
        s3.put_bucket_versioning(Bucket="sim2real-mwaa-123456789012", VersioningConfiguration={"Status": "Enabled"})
        versions = package_mwaa.upload(bundle, "sim2real-mwaa-123456789012", client=s3)
        assert set(versions) == {"plugins.zip", "requirements.txt", "startup.sh"}
        assert json.loads((bundle / "versions.json").read_text()) == versions
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="sim2real-mwaa-123456789012")["Contents"]}
        assert {"dags/sim_to_real.py", "plugins.zip", "requirements.txt", "startup.sh"} <= keys
        # the CDK settings pick the versions up from the file
        from sim2real_infra.settings import Settings
        import aws_cdk as cdk

        app = cdk.App(context={"sim2real:mwaa_versions_file": str(bundle / "versions.json")})
        assert Settings.from_context(app.node).mwaa_versions == versions


def _instructions(path: Path) -> list[str]:
    text = re.sub(r"\\\n", " ", path.read_text())
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_dockerfile_structure() -> None:
    lines = _instructions(REPO_ROOT / "Dockerfile")
    # a wheel stage (the Airflow package + the contract; tests/infra/test_wheels.py), then the Airflow image
    froms = [ln for ln in lines if ln.upper().startswith("FROM ")]
    assert froms[-1] == "FROM apache/airflow:3.3.1-python3.12" and len(froms) == 2
    lines = lines[lines.index(froms[-1]):]
    runs = [ln for ln in lines if ln.upper().startswith("RUN ")]
    assert any("-r /opt/sim2real/requirements.txt" in r and 'apache-airflow==${AIRFLOW_VERSION}' in r
               and "-c /opt/sim2real/constraints/mwaa-3.3.1.txt" in r for r in runs)
    assert any("pip install" in r and "--no-deps /opt/sim2real/wheels/sim2real_contract-" in r
               and "/opt/sim2real/wheels/sim2real_orchestration-" in r for r in runs)
    copies = " ".join(ln for ln in lines if ln.upper().startswith("COPY "))
    for src in ("requirements.txt", "constraints/", "--from=wheels", "dags/", "plugins/"):
        assert src in copies, src
    # the last step is the build check: the DAGs parse, with no import error
    assert "airflow dags list" in runs[-1] and "sim_to_real" in runs[-1] and "list-import-errors" in runs[-1]
    assert "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=True" in " ".join(lines)
    # every COPY source exists in the repository
    for ln in lines:
        if ln.upper().startswith("COPY ") and "--from=" not in ln:
            for src in [t for t in ln.split()[1:-1] if not t.startswith("--")]:
                assert (REPO_ROOT / src).exists(), src
