"""No operator, sensor, trigger or stage of the Airflow package sleeps: a wait belongs in the triggerer (a deferral
and a step function), where it holds no worker slot, and a blocking sleep in a trigger would stall every wait of
its triggerer. Hooks may still pause between a few quick calls (the SSM agent check); a short SSM command waited
for in the worker holds it a minute at most."""

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



def _short_command_bounds(path: Path) -> list[tuple[int, int | None]]:
    """``(line, seconds)`` of each ``run_short_command(...)`` call: its ``execution_timeout_seconds`` plus
    ``grace_seconds`` (module constants or numbers; the driver's default grace is 60 s); None when not readable."""
    tree = ast.parse(path.read_text(), filename=str(path))
    constants: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets[0]
            names = targets.elts if isinstance(targets, ast.Tuple) else [targets]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for name, value in zip(names, values, strict=False):
                if isinstance(name, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, int):
                    constants[name.id] = value.value

    def seconds(expr: ast.expr | None, default: int | None) -> int | None:
        if expr is None:
            return default
        if isinstance(expr, ast.Constant) and isinstance(expr.value, (int, float)):
            return int(expr.value)
        return constants.get(expr.id) if isinstance(expr, ast.Name) else None

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_short_command":
            kw = {k.arg: k.value for k in node.keywords}
            parts = [seconds(kw.get("execution_timeout_seconds"), 300), seconds(kw.get("grace_seconds"), 60)]
            found.append((node.lineno, None if None in parts else sum(parts)))
    return found


def test_a_short_command_in_an_operator_holds_the_worker_a_minute_at_most():
    """The operators' in-worker SSM commands (sbatch, a status query, a log's tail, scancel) are bounded by their
    executionTimeout plus the wait's grace; a stalled agent may hold a worker slot a minute, not six."""
    calls = {f"{m.name}:{line}": bound for m in sorted((PACKAGE / "operators").rglob("*.py"))
             for line, bound in _short_command_bounds(m)}
    assert calls, "no run_short_command call found in the operators"
    assert {where: bound for where, bound in calls.items() if bound is None or bound > 60} == {}


def test_the_bound_check_reads_a_call_past_a_minute(tmp_path):
    module = tmp_path / "submits.py"
    module.write_text("LIMIT = 45\n\ndef submit(c):\n    run_short_command(c, 'i', ['sbatch x'], execution_timeout_seconds=300)\n"
                      "    run_short_command(c, 'i', ['squeue'], execution_timeout_seconds=LIMIT, grace_seconds=15)\n")
    assert _short_command_bounds(module) == [(4, 360), (5, 60)]
