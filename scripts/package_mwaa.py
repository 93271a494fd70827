#!/usr/bin/env python3
"""Build, check and upload the Amazon MWAA bundle of the project (``make package`` / ``make deploy``).

Subcommands:

``build``   write ``dist/mwaa/``:
            ``dags/`` (copy of the DAG files), ``plugins.zip`` (``plugins/sim2real_plugin.py`` and the
            ``sim2real`` package at the zip root, without the local sandbox and demo), ``requirements.txt``
            (MWAA's standard ``--constraint`` line for the Airflow version + the runtime packages) and
            ``startup.sh``.
``check``   verify the bundle imports on a clean virtualenv built only from ``requirements.txt``:
            create a venv, install Airflow and ``requirements.txt``, unzip ``plugins.zip`` into a folder
            on ``PYTHONPATH`` and parse ``dags/`` with a ``DagBag`` — no import error allowed.
``upload``  put the bundle in the MWAA source bucket and write ``versions.json`` (the S3 object
            versions the CDK app pins in ``AWS::MWAA::Environment``).
``upload-greengrass``  put the Greengrass component artifacts (the project wheel and
            ``requirements-edge.txt``) where the recipes' artifact URIs point.

The constraints URL is MWAA's standard one: Apache Airflow's published constraints for the
environment's Airflow version and Python 3.12,
``https://raw.githubusercontent.com/apache/airflow/constraints-<airflow>/constraints-3.12.txt``.
MWAA adds that line itself when a requirements file has none; we write it so a local install resolves
the same versions MWAA will.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "include" / "sim2real"
#: Airflow version of the MWAA environment (``sim2real:airflow_version`` in infra/cdk.json).
AIRFLOW_VERSION = "3.3.1"
PYTHON_VERSION = "3.12"
#: Parts of the package MWAA does not need: the local AWS emulator (moto) and what drives it.
EXCLUDED = ("sandbox/", "demo.py", "bench.py", "ui.py", "faults.py")
#: The Airflow-side runtime packages (from the project's requirements.txt; tensorboard + matplotlib draw
#: the run report's training curve and evaluation outcome, sim2real.plots). Versions come from the
#: constraints file, which pins every one of them for the Airflow version (so MWAA resolves them
#: without conflicts against the packages its image already has).
RUNTIME = ("apache-airflow-providers-amazon[aiobotocore]", "boto3", "pendulum", "jsonschema", "s3fs",
           "tensorboard", "matplotlib")
BUNDLE_FILES = ("plugins.zip", "requirements.txt", "startup.sh")

STARTUP = """\
#!/bin/sh
# MWAA startup script: runs on every component (scheduler, worker, web server) before
# requirements.txt is installed and Airflow starts. Only sets environment defaults.
export SIM2REAL_POLL_SECONDS="${SIM2REAL_POLL_SECONDS:-30}"
# The environment config comes from the Airflow Variable sim2real_environment, which the SSM
# secrets backend reads from /sim2real/airflow/variables/sim2real_environment (infra/ writes it).
"""


def constraints_url(airflow_version: str = AIRFLOW_VERSION, python_version: str = PYTHON_VERSION) -> str:
    """MWAA's standard constraints URL: Apache Airflow's constraints for this Airflow/Python."""
    return (f"https://raw.githubusercontent.com/apache/airflow/constraints-{airflow_version}/"
            f"constraints-{python_version}.txt")


def requirements_text(airflow_version: str = AIRFLOW_VERSION) -> str:
    """The bundle's ``requirements.txt``."""
    lines = [
        "# MWAA requirements for the sim2real DAGs (Airflow %s, Python %s)." % (airflow_version, PYTHON_VERSION),
        "# The constraint line is MWAA's standard one; it pins every package below.",
        f'--constraint "{constraints_url(airflow_version)}"',
        *RUNTIME,
    ]
    return "\n".join(lines) + "\n"


def _package_files() -> list[tuple[Path, str]]:
    """``(file, arcname)`` of the sim2real package for plugins.zip (no caches, no sandbox)."""
    out = []
    for path in sorted(PACKAGE.rglob("*")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        if any(rel == e or rel.startswith(e) for e in EXCLUDED):
            continue
        out.append((path, f"sim2real/{rel}"))
    return out


def build(out: Path, airflow_version: str = AIRFLOW_VERSION) -> Path:
    """Write the bundle into ``out`` (replacing it) and return ``out``."""
    if out.exists():
        shutil.rmtree(out)
    (out / "dags").mkdir(parents=True)
    for dag in sorted((REPO_ROOT / "dags").glob("*.py")):
        shutil.copy2(dag, out / "dags" / dag.name)
    ignore = REPO_ROOT / "dags" / ".airflowignore"
    if ignore.exists():
        shutil.copy2(ignore, out / "dags" / ".airflowignore")
    with zipfile.ZipFile(out / "plugins.zip", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for plugin in sorted((REPO_ROOT / "plugins").glob("*.py")):
            zf.write(plugin, plugin.name)
        for path, arcname in _package_files():
            zf.write(path, arcname)
    (out / "requirements.txt").write_text(requirements_text(airflow_version))
    (out / "startup.sh").write_text(STARTUP)
    os.chmod(out / "startup.sh", 0o755)
    return out


def _python() -> str:
    """MWAA's Python (3.12) when this machine has it, else the interpreter running this script."""
    for candidate in ("python3.12",):
        found = shutil.which(candidate)
        if found and subprocess.run([found, "-c", "import venv"], capture_output=True).returncode == 0:
            return found
    return sys.executable


def _reachable(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10):  # noqa: S310 - a fixed https URL
            return True
    except Exception:  # noqa: BLE001 - offline machine: fall back below
        return False


DAGBAG_CHECK = textwrap.dedent("""
    import sys
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1])
    for path, err in bag.import_errors.items():
        print(f"IMPORT ERROR {path}: {err}")
    print("DAGs:", sorted(bag.dag_ids))
    sys.exit(1 if bag.import_errors or not bag.dag_ids else 0)
""")


def check(out: Path, airflow_version: str = AIRFLOW_VERSION, workdir: Path | None = None,
          fallback_constraints: Path = REPO_ROOT / "constraints.txt") -> None:
    """Install the bundle in a clean venv and parse its DAGs (raises SystemExit on any failure).

    The venv gets ``apache-airflow==<version>`` (what MWAA's image provides) and ``requirements.txt``.
    If the constraints URL cannot be reached from this machine, the project's ``constraints.txt``
    (the versions the tests run against) is used in its place, and this is printed.
    """
    work = Path(workdir or tempfile.mkdtemp(prefix="sim2real-mwaa-check-")).resolve()
    out = Path(out).resolve()
    venv, plugins, home = work / "venv", work / "plugins", work / "airflow-home"
    shutil.rmtree(plugins, ignore_errors=True)
    for d in (plugins, home):
        d.mkdir(parents=True, exist_ok=True)
    vpy = str(venv / "bin" / "python")
    requirements = (out / "requirements.txt").read_text()
    url = constraints_url(airflow_version)
    if not _reachable(url):
        print(f"[package] {url} is not reachable from here: resolving with {fallback_constraints} instead")
        requirements = requirements.replace(f'--constraint "{url}"', f'--constraint "{fallback_constraints}"')
    local = work / "requirements.txt"
    wanted = requirements + f"apache-airflow=={airflow_version}\n"
    if Path(vpy).exists() and local.exists() and local.read_text() == wanted:
        # a venv built earlier from exactly these requirements (and nothing else) is reused
        print(f"[package] reusing the venv in {venv}, built from the same requirements")
    else:
        python = _python()
        print(f"[package] clean venv with {python} in {venv}")
        local.unlink(missing_ok=True)
        subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", "/dev/stdin"],
                       input=wanted, text=True, check=True)
        local.write_text(wanted)
    with zipfile.ZipFile(out / "plugins.zip") as zf:
        zf.extractall(plugins)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV"))}
    env.update({"PYTHONPATH": str(plugins), "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins), "AIRFLOW__CORE__DAGS_FOLDER": str(out / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
                "AWS_DEFAULT_REGION": "us-east-1"})
    result = subprocess.run([vpy, "-c", DAGBAG_CHECK, str(out / "dags")], env=env, text=True, capture_output=True)
    print(result.stdout.strip())
    if result.returncode:
        print(result.stderr[-4000:], file=sys.stderr)
        raise SystemExit("[package] the bundle does not import on a clean venv")
    # the plugin module itself must import too (MWAA loads it from plugins/)
    plugin = subprocess.run([vpy, "-c", "import sim2real_plugin, sim2real.operators.batch; print('plugin ok')"],
                            env=env, text=True, capture_output=True)
    print(plugin.stdout.strip())
    if plugin.returncode:
        print(plugin.stderr[-4000:], file=sys.stderr)
        raise SystemExit("[package] plugins.zip does not import on a clean venv")
    print("[package] ok: the bundle parses with no import errors on a clean venv")


def upload(out: Path, bucket: str, client=None) -> dict[str, str]:
    """Upload the bundle to ``bucket`` and write ``out/versions.json`` (``{file: S3 VersionId}``).

    ``dags/`` is synced under ``dags/``; the three versioned files at the bucket root.
    """
    import boto3

    s3 = client or boto3.client("s3")
    for dag in sorted((out / "dags").iterdir()):
        s3.upload_file(str(dag), bucket, f"dags/{dag.name}")
    versions = {}
    for name in BUNDLE_FILES:
        with open(out / name, "rb") as fh:
            versions[name] = s3.put_object(Bucket=bucket, Key=name, Body=fh)["VersionId"]
    (out / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
    return versions


def upload_greengrass(bucket: str, wheel_dir: Path, client=None) -> list[str]:
    """Upload the artifacts every recipe names (``sim2real-*.whl`` from ``wheel_dir``,
    ``requirements-edge.txt`` from ``containers/greengrass/artifacts``). Returns the S3 keys."""
    import boto3

    sys.path.insert(0, str(REPO_ROOT / "include"))
    from sim2real.edge.recipes import artifact_keys, load_recipes

    s3 = client or boto3.client("s3")
    sources = {p.name: p for p in wheel_dir.glob("*.whl")}
    sources.update({p.name: p for p in (REPO_ROOT / "containers" / "greengrass" / "artifacts").iterdir()})
    keys = []
    for recipe in load_recipes().values():
        for name, key in artifact_keys(recipe).items():
            if name not in sources:
                raise SystemExit(f"artifact {name} of {recipe['ComponentName']} not found (build the wheel first)")
            s3.upload_file(str(sources[name]), bucket, key)
            keys.append(key)
    return keys


def main(argv: list[str] | None = None) -> None:
    """Command line: ``package_mwaa.py {build,check,upload,upload-greengrass} [--out dist/mwaa] ...``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "check", "upload", "upload-greengrass"])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "dist" / "mwaa")
    parser.add_argument("--airflow-version", default=AIRFLOW_VERSION)
    parser.add_argument("--bucket", help="S3 bucket (upload: the MWAA source bucket; upload-greengrass: artifacts)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="check: folder of the clean venv (reused while requirements are unchanged)")
    parser.add_argument("--wheel-dir", type=Path, default=REPO_ROOT / "dist" / "wheel")
    args = parser.parse_args(argv)
    if args.command in ("upload", "upload-greengrass") and not args.bucket:
        parser.error("--bucket is required")
    if args.command == "build":
        print(f"[package] MWAA bundle in {build(args.out, args.airflow_version)}")
    elif args.command == "check":
        check(args.out, args.airflow_version, workdir=args.workdir)
    elif args.command == "upload":
        print(json.dumps(upload(args.out, args.bucket), indent=2))
    else:
        print("\n".join(upload_greengrass(args.bucket, args.wheel_dir)))


if __name__ == "__main__":
    main()
