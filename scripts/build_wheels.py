"""Build one wheel per runtime: each image and the Greengrass components install only their package + the contract.

``sim2real`` is a namespace package (PEP 420: no ``sim2real/__init__.py``), so the distributions below
install side by side into one environment and each owns only its subpackage:

* ``sim2real-contract``: ``sim2real.contract`` and its JSON schemas; installed everywhere.
* ``sim2real-workloads``: ``sim2real.workloads`` (``sim2real-train``, ``sim2real-evaluate``); the training,
  evaluation and GR00T images.
* ``sim2real-orchestration``: ``sim2real.orchestration`` (with its waiter, pipeline and Slurm files); the Airflow
  image (``Dockerfile``).
* ``sim2real-edge``: ``sim2real.edge`` (``sim2real-policy-server``); the Greengrass components on the robots.

Every one but the contract depends on ``sim2real-contract`` of exactly the same version.
They declare no third-party dependency: the images install theirs from the pinned requirement files
(``requirements-workload.txt`` with the constraints, Isaac Sim's and GR00T's own stacks) and the robots from
``containers/greengrass/artifacts/requirements-edge.txt``; the Airflow image from ``requirements.txt``. On MWAA
the Airflow package and the contract ship in plugins.zip instead (``scripts/package_mwaa.py``); ``sim2real.dev``
ships nowhere.

Each wheel is built by setuptools' PEP 517 backend (``setuptools.build_meta.build_wheel``) from a staging
folder holding only that distribution's package and a generated ``pyproject.toml``; nothing is written
under ``include/``. The version is the project's (``[project] version`` of the repository's pyproject.toml).

Usage: ``python scripts/build_wheels.py [--out dist/wheels] [contract workloads orchestration edge]`` (default: all);
prints the path of each wheel.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
INCLUDE = REPO_ROOT / "include"
#: Python versions the runtime wheels install on: Isaac Sim 4.5 and GR00T N1.5 run Python 3.10; the Airflow side
#: (MWAA: Python 3.12) needs 3.11 or later, as the project does.
REQUIRES_PYTHON = ">=3.10"


@dataclass(frozen=True)
class Distribution:
    """One runtime's distribution: its name, the ``sim2real.*`` package it carries and what it declares."""

    name: str
    package: str
    description: str
    #: ``{package: [glob, ...]}`` data files (relative to the package folder).
    package_data: dict[str, list[str]] = field(default_factory=dict)
    #: ``{command: "module:function"}``.
    scripts: dict[str, str] = field(default_factory=dict)
    #: Depends on ``sim2real-contract`` of the same version.
    needs_contract: bool = True
    requires_python: str = REQUIRES_PYTHON


DISTRIBUTIONS: dict[str, Distribution] = {
    "contract": Distribution(
        "sim2real-contract", "sim2real.contract",
        "What every runtime of the Sim-to-Real loop agrees on (standard library only): run key, stats, "
        "modality layout, storage, JSON schemas",
        package_data={"sim2real.contract.schemas": ["*.schema.json"]}, needs_contract=False),
    "workloads": Distribution(
        "sim2real-workloads", "sim2real.workloads",
        "Sim-to-Real workloads: the PPO trainer, the evaluator, the ONNX export, the Isaac Lab publish step and "
        "the GR00T pipeline step scripts",
        scripts={"sim2real-train": "sim2real.workloads.train:main",
                 "sim2real-evaluate": "sim2real.workloads.evaluate:main"}),
    "orchestration": Distribution(
        "sim2real-orchestration", "sim2real.orchestration",
        "Sim-to-Real Airflow side: hooks, operators, triggers, sensors, links, waiters, stages, reporting, cost",
        package_data={"sim2real.orchestration": ["waiters/*.json", "pipelines/*.json", "slurm/*.sbatch"]},
        requires_python=">=3.11"),
    "edge": Distribution(
        "sim2real-edge", "sim2real.edge",
        "Sim-to-Real edge runtime: the policy server, its codec and security, the Greengrass setup and benchmark",
        scripts={"sim2real-policy-server": "sim2real.edge.policy_server:main"}),
}


def project_version() -> str:
    """``[project] version`` of the repository's pyproject.toml (e.g. ``"0.1.0"``)."""
    text = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10 (the GR00T and Isaac Lab images' build stage): a plain match
        match = re.search(r'(?m)^\[project\][^\[]*?^version\s*=\s*"([^"]+)"', text)
        if not match:
            raise SystemExit("pyproject.toml has no [project] version") from None
        return match.group(1)
    return tomllib.loads(text)["project"]["version"]


def wheel_filename(dist: Distribution, version: str | None = None) -> str:
    """The wheel's file name (PEP 427, name normalised): ``sim2real_edge-0.1.0-py3-none-any.whl``."""
    return f"{re.sub(r'[-_.]+', '_', dist.name).lower()}-{version or project_version()}-py3-none-any.whl"


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def pyproject_toml(dist: Distribution, version: str) -> str:
    """The generated ``pyproject.toml`` of ``dist`` (setuptools, PEP 621 metadata)."""
    deps = [f"sim2real-contract=={version}"] if dist.needs_contract else []
    lines = [
        "[build-system]", 'requires = ["setuptools>=70.1"]', 'build-backend = "setuptools.build_meta"', "",
        "[project]", f"name = {_toml_str(dist.name)}", f"version = {_toml_str(version)}",
        f"description = {_toml_str(dist.description)}", f"requires-python = {_toml_str(dist.requires_python)}",
        f"dependencies = [{', '.join(_toml_str(d) for d in deps)}]", "",
    ]
    if dist.scripts:
        lines += ["[project.scripts]", *(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in dist.scripts.items()), ""]
    lines += ["[tool.setuptools.packages.find]", 'where = ["src"]',
              f"include = [{_toml_str(dist.package)}, {_toml_str(dist.package + '.*')}]", "namespaces = true", ""]
    if dist.package_data:
        lines += ["[tool.setuptools.package-data]",
                  *(f"{_toml_str(k)} = [{', '.join(_toml_str(g) for g in v)}]" for k, v in dist.package_data.items()),
                  ""]
    return "\n".join(lines)


def stage(dist: Distribution, version: str, where: Path) -> Path:
    """Write ``dist``'s build folder under ``where``: ``pyproject.toml`` + ``src/sim2real/<package>/``."""
    root = where / dist.name
    src = INCLUDE.joinpath(*dist.package.split("."))
    if not (src / "__init__.py").is_file():
        raise SystemExit(f"{dist.package} not found under {INCLUDE}")
    shutil.copytree(src, root / "src" / Path(*dist.package.split(".")),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (root / "pyproject.toml").write_text(pyproject_toml(dist, version), encoding="utf-8")
    return root


def build(names: list[str] | None = None, out: Path = REPO_ROOT / "dist" / "wheels") -> list[Path]:
    """Build the wheels of ``names`` (keys of :data:`DISTRIBUTIONS`; default all) into ``out``.

    :return: the wheel paths, in the order of ``names``.
    :raises SystemExit: an unknown name, or the build backend failed (its output is in the message).
    """
    names = list(names or DISTRIBUTIONS)
    unknown = [n for n in names if n not in DISTRIBUTIONS]
    if unknown:
        raise SystemExit(f"unknown distribution(s) {unknown}; known: {', '.join(DISTRIBUTIONS)}")
    version = project_version()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    built = []
    with tempfile.TemporaryDirectory(prefix="sim2real-wheels-") as tmp:
        for name in names:
            dist = DISTRIBUTIONS[name]
            target = out / wheel_filename(dist, version)
            target.unlink(missing_ok=True)
            root = stage(dist, version, Path(tmp))
            proc = subprocess.run(
                [sys.executable, "-c", "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))",
                 str(out)], cwd=root, capture_output=True, text=True)
            if proc.returncode != 0 or not target.is_file():
                raise SystemExit(f"building {dist.name} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
                                 f"{proc.stderr[-3000:]}")
            built.append(target)
    return built


def main(argv: list[str] | None = None) -> None:
    """Command line: ``build_wheels.py [--out DIR] [NAME ...]``; prints each wheel's path."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", choices=[[], *DISTRIBUTIONS], metavar="NAME",
                        help=f"distributions to build (default: all: {', '.join(DISTRIBUTIONS)})")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "dist" / "wheels")
    args = parser.parse_args(argv)
    for path in build(args.names or None, args.out):
        print(path)


if __name__ == "__main__":
    main()
