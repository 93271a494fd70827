"""Per-runtime wheels (scripts/build_wheels.py): each holds only its package, and installs without the rest.

The wheels are built once for the module (setuptools' backend, no network); the install checks use a clean venv
(``--without-pip``, no system or dev site-packages) that the dev environment's pip installs into with
``--no-deps --no-index``, so nothing else of the project or any third-party package can be imported there.
"""

from __future__ import annotations

import email.parser
import importlib.util
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("build_wheels", REPO_ROOT / "scripts" / "build_wheels.py")
build_wheels = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("build_wheels", build_wheels)  # dataclasses look their module up while the class is made
_spec.loader.exec_module(build_wheels)

INCLUDE = REPO_ROOT / "include"
VERSION = build_wheels.project_version()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    return dict(zip(build_wheels.DISTRIBUTIONS, build_wheels.build(None, out), strict=True))


def _metadata(path: Path) -> email.message.Message:
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


@pytest.mark.parametrize("name", sorted(build_wheels.DISTRIBUTIONS))
def test_each_wheel_holds_exactly_its_package(wheels: dict[str, Path], name: str) -> None:
    dist = build_wheels.DISTRIBUTIONS[name]
    path = wheels[name]
    assert path.name == build_wheels.wheel_filename(dist) == f"{dist.name.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    files = zipfile.ZipFile(path).namelist()
    package_dir = dist.package.replace(".", "/") + "/"
    info_dir = f"{dist.name.replace('-', '_')}-{VERSION}.dist-info/"
    assert [f for f in files if not f.startswith((package_dir, info_dir))] == []  # no other sim2real package
    assert "sim2real/__init__.py" not in files  # sim2real stays a namespace package: wheels install side by side
    # every file of the package's source tree (modules and data: schemas, waiters, ...) is in the wheel
    source = {p.relative_to(INCLUDE).as_posix() for p in (INCLUDE / package_dir).rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert {f for f in files if f.startswith(package_dir)} == source
    meta = _metadata(path)
    assert meta["Name"] == dist.name and meta["Version"] == VERSION
    requires = meta.get_all("Requires-Dist") or []
    assert requires == ([] if name == "contract" else [f"sim2real-contract=={VERSION}"])


def test_wheels_declare_the_console_scripts() -> None:
    scripts = {k: v for d in build_wheels.DISTRIBUTIONS.values() for k, v in d.scripts.items()}
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert scripts == project["scripts"]  # the same commands as the development install


def _clean_venv(where: Path, *wheel_paths: Path) -> Path:
    venv.EnvBuilder(with_pip=False, system_site_packages=False, clear=True).create(where)
    python = where / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                           "--disable-pip-version-check", "-q", *map(str, wheel_paths)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return python


def _run(python: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=120)


def test_edge_and_contract_install_alone_and_import(wheels: dict[str, Path], tmp_path: Path) -> None:
    python = _clean_venv(tmp_path / "edge", wheels["contract"], wheels["edge"])
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "check"], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout  # sim2real-edge's exact sim2real-contract requirement is met
    # the edge modules that need no third-party package at import time (the policy server and the codec need
    # pyzmq / msgpack / numpy from requirements-edge.txt)
    proc = _run(python, "import sim2real.edge.security, sim2real.edge.api_token, sim2real.edge.recipes, "
                        "sim2real.edge.setup_component, sim2real.contract.storage, sim2real.contract.schemas as s\n"
                        "import sim2real.edge, sys; print(sim2real.edge.__file__); print(len(s.load('eval_report')))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(tmp_path / "edge"))  # the venv's copy, not the checkout's
    for other in ("sim2real.orchestration", "sim2real.workloads", "sim2real.dev", "numpy"):
        proc = _run(python, f"import {other}")
        assert f"No module named '{other.split('.')[0] if other == 'numpy' else other}'" in proc.stderr, other
    assert (python.parent / "sim2real-policy-server").is_file()


def test_workloads_and_contract_install_alone_and_import(wheels: dict[str, Path], tmp_path: Path) -> None:
    python = _clean_venv(tmp_path / "workloads", wheels["contract"], wheels["workloads"])
    proc = _run(python, "import sim2real.workloads.train, sim2real.workloads.evaluate, sim2real.workloads.publish, "
                        "sim2real.workloads.export, sim2real.workloads.groot.transform_dataset, "
                        "sim2real.workloads.groot.finetune_entry")
    assert proc.returncode == 0, proc.stderr
    for other in ("sim2real.orchestration", "sim2real.edge", "sim2real.dev"):
        assert f"No module named '{other}'" in _run(python, f"import {other}").stderr, other
    assert {"sim2real-train", "sim2real-evaluate"} <= {p.name for p in python.parent.iterdir()}


def test_unknown_distribution_is_refused() -> None:
    with pytest.raises(SystemExit, match=r"unknown distribution\(s\) \['airflow'\]; known: contract, workloads"):
        build_wheels.build(["airflow"])


#: Each image: the distributions it installs (its package + the contract).
IMAGES = {
    "Dockerfile": ("contract", "orchestration"),
    "containers/rl/Dockerfile": ("contract", "workloads"),
    "containers/isaaclab/Dockerfile": ("contract", "workloads"),
    "containers/groot/Dockerfile.gr00t": ("contract", "workloads"),
    "containers/groot/Dockerfile.processing": ("contract", "workloads"),
}


def _instructions(path: Path) -> list[str]:
    import re

    text = re.sub(r"\\\n", " ", path.read_text())
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


@pytest.mark.parametrize("dockerfile", sorted(IMAGES))
def test_each_image_installs_only_its_wheels(dockerfile: str) -> None:
    expected = IMAGES[dockerfile]
    lines = _instructions(REPO_ROOT / dockerfile)
    stages = [i for i, ln in enumerate(lines) if ln.upper().startswith("FROM ")]
    assert lines[stages[0]].endswith(" AS wheels"), "the first stage builds the wheels"
    builder = lines[stages[0]:stages[1]]
    copied = [ln.split()[1] for ln in builder if ln.startswith("COPY include/")]
    assert copied == [f"include/sim2real/{name}/" for name in expected]  # only those packages' sources
    assert any(f"scripts/build_wheels.py --out /wheels {' '.join(expected)}" in ln for ln in builder)
    rest = lines[stages[1]:]
    assert not [ln for ln in rest if ln.startswith("COPY") and ("include/" in ln or "pyproject.toml" in ln)]
    installs = [ln for ln in rest if ln.startswith("RUN") and "pip install" in ln and ".whl" in ln]
    assert len(installs) == 1 and "--no-deps" in installs[0]
    wheels = sorted(w.rsplit("/", 1)[1] for w in installs[0].split() if w.endswith(".whl"))
    assert wheels == sorted(f"sim2real_{name}-*.whl" for name in expected)
    assert any(ln.startswith("COPY --from=wheels") for ln in rest)
    # every COPY source of the build stage exists in the repository
    for ln in builder:
        if ln.startswith("COPY "):
            for src in [t for t in ln.split()[1:-1] if not t.startswith("--")]:
                assert (REPO_ROOT / src).exists(), src


def test_greengrass_recipes_install_the_edge_and_contract_wheels() -> None:
    from sim2real.edge.recipes import load_recipes

    names = [build_wheels.wheel_filename(build_wheels.DISTRIBUTIONS[n]) for n in ("contract", "edge")]
    for recipe in load_recipes().values():
        for manifest in recipe["Manifests"]:
            artifacts = [a["Uri"].rsplit("/", 1)[1] for a in manifest["Artifacts"]]
            assert artifacts == [*names, "requirements-edge.txt"], recipe["ComponentName"]
            install = manifest["Lifecycle"]["Install"]["Script"]
            assert " ".join(f"{{artifacts:path}}/{n}" for n in names) in install
            assert "sim2real-0.1.0" not in install
