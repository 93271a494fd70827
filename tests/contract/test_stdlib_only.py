"""sim2real.contract imports nothing but the standard library and itself at import time.

Every module of the package is imported in a fresh interpreter started with ``-I -S``: no site-packages on
``sys.path`` (so a third-party import fails instead of passing unnoticed), only ``include/``. The modules that
end up in ``sys.modules`` must be standard-library modules (``sys.stdlib_module_names``) or
``sim2real.contract.*``. The import-linter contracts (``make lint``) check the same statically, including
imports inside functions; this test checks what really happens at import time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO_ROOT

INCLUDE = REPO_ROOT / "include"

PROBE = r"""
import importlib, json, pkgutil, sys
sys.path.insert(0, sys.argv[1])
package = sys.argv[2]
before = set(sys.modules)
error = None
try:
    root = importlib.import_module(package)
    names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
    for name in names:
        importlib.import_module(name)
    if package == "sim2real.contract":
        from sim2real.contract import schemas
        loaded_schemas = {n: schemas.load(n)["$schema"] for n in schemas.NAMES}
    else:
        loaded_schemas = {}
except Exception as exc:
    names, loaded_schemas, error = [], {}, f"{type(exc).__name__}: {exc}"
new = sorted(set(sys.modules) - before)
foreign = [m for m in new if m.split(".")[0] not in sys.stdlib_module_names
           and not (m == package or m.startswith(package + ".") or m == package.split(".")[0])]
print(json.dumps({"modules": names, "foreign": foreign, "error": error, "schemas": loaded_schemas}))
"""


def probe(package: str, path: Path = INCLUDE) -> dict:
    """Import ``package`` and all its modules from ``path`` in ``python -I -S``; what got loaded."""
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, str(path), package], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_contract_imports_only_the_standard_library():
    result = probe("sim2real.contract")
    assert result["error"] is None
    assert {"sim2real.contract.run_key", "sim2real.contract.stats", "sim2real.contract.modality",
            "sim2real.contract.storage", "sim2real.contract.schemas"} <= set(result["modules"])
    assert result["foreign"] == []
    # the schemas load from the package data without any third-party package
    assert set(result["schemas"]) == {"checkpoint_manifest", "eval_report", "field_dataset", "field_episode", "lineage",
                                      "release"}
    assert set(result["schemas"].values()) == {"https://json-schema.org/draft/2020-12/schema"}


def test_the_probe_sees_a_third_party_import(tmp_path):
    """The check can fail: a package that imports a third-party module at import time is caught."""
    pkg = tmp_path / "probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import json\n")
    (pkg / "uses_yaml.py").write_text("import yaml\n")
    result = probe("probe_pkg", tmp_path)
    assert result["error"] == "ModuleNotFoundError: No module named 'yaml'"

    # and one that imports another sim2real package is reported as foreign
    ns = tmp_path / "ns" / "sim2real"
    (ns / "contract").mkdir(parents=True)
    (ns / "contract" / "__init__.py").write_text("import sim2real.other\n")
    (ns / "other").mkdir()
    (ns / "other" / "__init__.py").write_text("")
    assert probe("sim2real.contract", tmp_path / "ns")["foreign"] == ["sim2real.other"]
