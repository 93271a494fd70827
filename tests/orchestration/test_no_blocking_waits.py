"""No operator, sensor, trigger or stage of the Airflow package sleeps: a wait belongs in the triggerer (a deferral
and a step function), where it holds no worker slot, and a blocking sleep in a trigger would stall every wait of
its triggerer. Hooks may still pause between a few quick calls (the SSM agent check, short Slurm commands)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sim2real.orchestration as orchestration

PACKAGE = Path(orchestration.__file__).parent
NO_SLEEP = ("operators", "sensors", "triggers", "stages")


def _sleeps(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """``time.sleep(...)`` calls and ``from time import sleep`` imports in one module (``asyncio.sleep`` is fine)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sleep"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "time"):
            found.append(f"{path.relative_to(root)}:{node.lineno} time.sleep")
        if isinstance(node, ast.ImportFrom) and node.module == "time" and any(a.name == "sleep" for a in node.names):
            found.append(f"{path.relative_to(root)}:{node.lineno} from time import sleep")
    return found


@pytest.mark.parametrize("folder", NO_SLEEP)
def test_no_blocking_sleep(folder):
    modules = sorted((PACKAGE / folder).rglob("*.py"))
    assert modules, f"no modules under {PACKAGE / folder}"
    found = [hit for module in modules for hit in _sleeps(module)]
    assert not found, f"blocking sleeps (defer to a trigger instead): {found}"


def test_the_check_finds_a_sleep(tmp_path):
    module = tmp_path / "waits_badly.py"
    module.write_text("import time\n\ndef execute():\n    while True:\n        time.sleep(30)\n")
    module.write_text(module.read_text() + "from time import sleep\n")
    assert sorted(_sleeps(module, tmp_path)) == ["waits_badly.py:5 time.sleep", "waits_badly.py:6 from time import sleep"]

