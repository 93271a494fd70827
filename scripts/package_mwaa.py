#!/usr/bin/env python3
"""Build, check and upload the Amazon MWAA bundle of the project (``make package`` / ``make deploy``).

Subcommands:

``build``   write ``dist/mwaa/``:
            ``dags/`` (copy of the DAG files), ``plugins.zip`` (``plugins/sim2real_plugin.py`` and the
            ``sim2real`` package at the zip root, without the local sandbox and demo), ``requirements.txt``
            (MWAA's standard ``--constraint`` line for the Airflow version + the runtime packages) and
            ``startup.sh``.
``check``   install the bundle as MWAA does and load it: a clean Python 3.12 venv (where this machine has one)
            gets Airflow and ``requirements.txt`` resolved against the MWAA constraints (``constraints/``:
            the image's packages, Airflow's constraints for the rest), must leave the image's packages as
            shipped, pass ``pip check``, import every module of ``plugins.zip`` (no abstract trigger) and
            parse ``dags/`` with a ``DagBag`` with no import error.
``upload``  put the bundle in the MWAA source bucket and write ``versions.json`` (the S3 object
            versions the CDK app pins in ``AWS::MWAA::Environment``).
``upload-greengrass``  put the Greengrass component artifacts (the project wheel and
            ``requirements-edge.txt``) where the recipes' artifact URIs point.

The constraints URL is MWAA's standard one: Apache Airflow's published constraints for the
environment's Airflow version and Python 3.12,
``https://raw.githubusercontent.com/apache/airflow/constraints-<airflow>/constraints-3.12.txt``.
MWAA adds that line itself when a requirements file has none. The check resolves against
``constraints/mwaa-<airflow>*.txt`` instead, the same pins derived from the MWAA image (its bill of materials
and its copy of those constraints): no network, and never the project's own dev pins.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
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
#: The packages plugins.zip carries (an allow-list): the Airflow side and the contract it shares with the
#: images and robots. The workloads (training images, workstation), edge (Greengrass) and dev (sandbox, demo,
#: bench) packages never reach MWAA; ``sim2real`` itself is a namespace package (no ``__init__.py``).
INCLUDED = ("orchestration", "contract")
#: The Airflow-side runtime packages: the project's requirements.txt, less ``apache-airflow==`` (MWAA's image
#: provides Airflow). Its pins (s3fs, tensorboard, matplotlib) go into the bundle as written; the rest is
#: resolved by the constraint line against Airflow's constraints, as MWAA does.
REQUIREMENTS = REPO_ROOT / "requirements.txt"
#: The MWAA image's packages (scripts/mwaa_constraints.py image) and Airflow's constraints for the packages
#: the image does not have (scripts/mwaa_constraints.py airflow): what MWAA resolves requirements.txt against.
CONSTRAINTS_DIR = REPO_ROOT / "constraints"
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


def runtime_requirements(path: Path = REQUIREMENTS) -> list[str]:
    """Requirement lines of the project's ``requirements.txt`` MWAA must install (no comments, no Airflow)."""
    lines = [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()]
    return [ln for ln in lines if ln and not ln.startswith(("apache-airflow==", "-"))]


def requirements_text(airflow_version: str = AIRFLOW_VERSION) -> str:
    """The bundle's ``requirements.txt``: MWAA's standard constraint line, then the runtime requirements."""
    lines = [
        "# MWAA requirements for the sim2real DAGs (Airflow %s, Python %s)." % (airflow_version, PYTHON_VERSION),
        "# The first line is MWAA's standard constraint line for this Airflow version.",
        f'--constraint "{constraints_url(airflow_version)}"',
        *runtime_requirements(),
    ]
    return "\n".join(lines) + "\n"


def _package_files() -> list[tuple[Path, str]]:
    """``(file, arcname)`` of the packages in :data:`INCLUDED` for plugins.zip (no caches)."""
    out = []
    for package in INCLUDED:
        for path in sorted((PACKAGE / package).rglob("*")):
            rel = path.relative_to(PACKAGE).as_posix()
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
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
        files = _package_files()
        # Directory entries too: zipimport finds the ``sim2real`` namespace package (no __init__.py) only
        # through its directory entry, so the zip stays importable as it is, not only once unzipped.
        folders = sorted({arc[: i + 1] for _, arc in files for i, char in enumerate(arc) if char == "/"})
        for folder in folders:
            zf.writestr(zipfile.ZipInfo(folder), "")
        for path, arcname in files:
            zf.write(path, arcname)
    (out / "requirements.txt").write_text(requirements_text(airflow_version))
    (out / "startup.sh").write_text(STARTUP)
    os.chmod(out / "startup.sh", 0o755)
    return out


def find_python(version: str = PYTHON_VERSION) -> str | None:
    """A working ``python<version>`` (MWAA's Python): on PATH, else under pyenv's versions; None if absent."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += sorted(str(p) for p in pyenv_root.glob(f"versions/{version}*/bin/python{version}"))
    for found in candidates:
        if not found:
            continue
        probe = subprocess.run([found, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return found
    return None


def constraint_files(python_version: str, airflow_version: str = AIRFLOW_VERSION) -> list[Path]:
    """The MWAA constraints to resolve with: the image's packages, and on Python 3.12 Airflow's constraints
    for the rest (some of those pins have no build for another Python).

    :raises SystemExit: a constraints file for this Airflow version is missing (regenerate it with
        scripts/mwaa_constraints.py from the image's bill of materials).
    """
    files = [CONSTRAINTS_DIR / f"mwaa-{airflow_version}.txt"]
    if python_version == PYTHON_VERSION:
        files.append(CONSTRAINTS_DIR / f"mwaa-{airflow_version}-airflow.txt")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"[package] missing MWAA constraints {missing}: generate them with scripts/mwaa_constraints.py")
    return files


def pinned(path: Path) -> dict[str, str]:
    """``name==version`` pins of a constraints file, names PEP 503-normalised."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)==([^\s;#]+)", line.strip())
        if match:
            pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return pins


def conflict_lines(pip_output: str) -> list[str]:
    """The lines of a failed pip install that name the packages at fault."""
    keep = ("ERROR", "conflict", "Cannot install", "requires", "depends on", "The user requested",
            "No matching distribution", "Could not find a version")
    return [ln.strip() for ln in pip_output.splitlines() if any(k in ln for k in keep)]


DAGBAG_CHECK = textwrap.dedent("""
    import sys
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1])
    for path, err in bag.import_errors.items():
        print(f"IMPORT ERROR {path}: {err}")
    print("DAGs:", sorted(bag.dag_ids))
    sys.exit(1 if bag.import_errors or not bag.dag_ids else 0)
""")

#: Every module of the zipped package imports, and every trigger class can be instantiated (an abstract
#: method left by the installed provider, e.g. ``AwsBaseWaiterTrigger.hook`` in 9.34.0, fails here).
IMPORT_CHECK = textwrap.dedent("""
    import importlib, inspect, pkgutil, sys
    import sim2real, sim2real_plugin
    from airflow.triggers.base import BaseTrigger
    errors, triggers = [], 0
    for info in pkgutil.walk_packages(sim2real.__path__, "sim2real."):
        try:
            module = importlib.import_module(info.name)
        except Exception as err:
            errors.append(f"{info.name}: {type(err).__name__}: {err}")
            continue
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseTrigger) and obj.__module__ == info.name:
                triggers += 1
                if inspect.isabstract(obj):
                    errors.append(f"{info.name}.{name}: abstract methods {sorted(obj.__abstractmethods__)}")
    for line in errors:
        print("IMPORT ERROR", line)
    print(f"modules ok, {triggers} trigger classes instantiable" if not errors else f"{len(errors)} errors")
    sys.exit(1 if errors or not triggers else 0)
""")


def check(out: Path, airflow_version: str = AIRFLOW_VERSION, workdir: Path | None = None,
          python: str | None = None) -> None:
    """Install the bundle the way MWAA does and load it (raises SystemExit with the reason on any failure).

    A clean venv (Python 3.12 where this machine has it, else this interpreter, and it says so) gets
    ``apache-airflow==<version>`` and the bundle's ``requirements.txt`` with its constraint line replaced by the
    MWAA constraints files (the image's packages and Airflow's constraints for the rest; never the
    project's dev pins). It then fails when:

    * pip cannot resolve them (the conflicting packages are printed);
    * a package the MWAA image ships would end at another version (MWAA keeps its own);
    * ``pip check`` finds a broken requirement;
    * a module of plugins.zip does not import, a trigger class is abstract, or a DAG has an import error.
    """
    work = Path(workdir or tempfile.mkdtemp(prefix="sim2real-mwaa-check-")).resolve()
    out = Path(out).resolve()
    venv, plugins, home = work / "venv", work / "plugins", work / "airflow-home"
    shutil.rmtree(plugins, ignore_errors=True)
    for d in (plugins, home):
        d.mkdir(parents=True, exist_ok=True)
    vpy = str(venv / "bin" / "python")
    python = python or find_python()
    if python is None:
        python = sys.executable
        print(f"[package] WARNING: no Python {PYTHON_VERSION} on this machine (MWAA runs {PYTHON_VERSION}): "
              f"checking with {python} (Python {sys.version_info[0]}.{sys.version_info[1]}) and the image's "
              "constraints only")
    version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    files = constraint_files(version, airflow_version)
    url = constraints_url(airflow_version)
    requirements = (out / "requirements.txt").read_text()
    if f'--constraint "{url}"' not in requirements:
        raise SystemExit(f"[package] {out / 'requirements.txt'} lacks MWAA's constraint line for {airflow_version}")
    requirements = requirements.replace(f'--constraint "{url}"', "\n".join(f'--constraint "{f}"' for f in files))
    local = work / "requirements.txt"
    wanted = (f"# python {python} ({version}); constraints " + " ".join(str(f) for f in files) + "\n"
              + "\n".join(f"# {f.name} sha256 {hashlib.sha256(f.read_bytes()).hexdigest()}" for f in files) + "\n"
              + requirements + f"apache-airflow=={airflow_version}\n")
    if Path(vpy).exists() and local.exists() and local.read_text() == wanted:
        # a venv built earlier from exactly these requirements and constraints is reused
        print(f"[package] reusing the venv in {venv}, built from the same requirements and constraints")
    else:
        print(f"[package] clean venv with {python} (Python {version}) in {venv}; constraints: "
              + ", ".join(f.name for f in files))
        local.unlink(missing_ok=True)
        subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
        install = subprocess.run([vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r",
                                  "/dev/stdin"], input=wanted, text=True, capture_output=True)
        if install.returncode:
            print("\n".join(conflict_lines(install.stdout + install.stderr)) or install.stderr[-4000:],
                  file=sys.stderr)
            raise SystemExit("[package] requirements.txt does not resolve against the MWAA constraints "
                             "(packages named above)")
        local.write_text(wanted)
    freeze = subprocess.run([vpy, "-m", "pip", "freeze", "--disable-pip-version-check"], capture_output=True,
                            text=True, check=True).stdout
    installed = {re.sub(r"[-_.]+", "-", n).lower(): v for n, _, v in
                 (ln.partition("==") for ln in freeze.splitlines()) if v}
    image = pinned(files[0])
    moved = sorted(f"{n} {image[n]} -> {installed[n]}" for n in installed if n in image and installed[n] != image[n])
    if moved:
        raise SystemExit(f"[package] requirements.txt would change packages the MWAA image ships: {moved}")
    broken = subprocess.run([vpy, "-m", "pip", "check", "--disable-pip-version-check"], capture_output=True, text=True)
    if broken.returncode:
        raise SystemExit(f"[package] pip check: {broken.stdout.strip()}")
    print(f"[package] resolved: apache-airflow-providers-amazon {installed.get('apache-airflow-providers-amazon')}, "
          f"boto3 {installed.get('boto3')}, aiobotocore {installed.get('aiobotocore')}")
    with zipfile.ZipFile(out / "plugins.zip") as zf:
        zf.extractall(plugins)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV"))}
    env.update({"PYTHONPATH": str(plugins), "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins), "AIRFLOW__CORE__DAGS_FOLDER": str(out / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
                "AWS_DEFAULT_REGION": "us-east-1"})
    for what, code in (("plugins.zip", IMPORT_CHECK), ("dags/", DAGBAG_CHECK)):
        result = subprocess.run([vpy, "-c", code, str(out / "dags")], env=env, text=True, capture_output=True)
        print(result.stdout.strip())
        if result.returncode:
            print(result.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"[package] {what} does not load on the MWAA set: see the errors above")
    print(f"[package] ok: the bundle installs on the MWAA {airflow_version} set (Python {version}) and loads "
          "with no import error")


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
    """Upload the artifacts every recipe names (the ``sim2real_edge`` and ``sim2real_contract`` wheels from
    ``wheel_dir``, built by ``scripts/build_wheels.py``;
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
                raise SystemExit(f"artifact {name} of {recipe['ComponentName']} not found (build the wheels first: make wheels)")
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
    parser.add_argument("--wheel-dir", type=Path, default=REPO_ROOT / "dist" / "wheels")
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
