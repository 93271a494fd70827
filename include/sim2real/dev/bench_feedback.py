"""``make bench`` rows for the feedback loop: how long ``make lint`` and ``make test-unit`` take on this machine.

Measured here, each in a subprocess of ``make`` in the repository:

* ``make lint`` from an empty lint venv (``LINT_VENV`` pointed at a fresh temporary folder: the venv build, then ruff,
  lint-imports and the reference check), then again with that venv built (lint alone);
* ``make test-unit``: the unit tests (``-m "not integration"``) in ``UNIT_WORKERS`` processes, with the number of
  tests that passed as pytest reports it;
* optional (``--only feedback --suite``): ``make test``, the whole suite, the same way.

The whole suite's row is otherwise :data:`RECORDED_SUITE`, a recorded measurement, and says so. Every figure is wall
time on this machine at its load at the time (the load average is in each row's result): compare runs on one
machine, not across machines.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]  # include/sim2real/dev/<module>.py -> repository root

#: The whole suite's last recorded measurement (not measured by ``make bench``; ``--suite`` measures it).
RECORDED_SUITE: dict[str, Any] = {
    "seconds": 943.0,
    "what": "make test (whole suite, fresh clone, after install)",
    "when": ("bash .ci/run on a fresh clone, 2 CPU (AMD EPYC), quiet, 2003 tests, 3 test processes, 2026-12-05; "
             "make bench BENCH_ARGS='--only feedback --suite' measures it"),
}


def _load() -> float:
    return os.getloadavg()[0]


def _make(*args: str, env: dict[str, str] | None = None, timeout: float = 3600) -> dict[str, Any]:
    """``make <args>`` in the repository: wall seconds, exit code, the load average before, the output's tail."""
    load = _load()
    started = time.monotonic()
    proc = subprocess.run(["make", "--no-print-directory", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    return {"seconds": time.monotonic() - started, "returncode": proc.returncode, "load_before": load,
            "tail": (proc.stdout + proc.stderr)[-3000:]}


def _passed(tail: str) -> int | None:
    match = re.search(r"(\d+) passed", tail)
    return int(match.group(1)) if match else None


def measure(suite: bool = False) -> dict[str, Any]:
    """Measure ``make lint`` (empty lint venv, then built) and ``make test-unit``; ``suite``: ``make test`` too.

    :return: ``{"lint_fresh", "lint_warm", "test_unit", "suite"}``, each ``{"seconds", "returncode", "load_before",
        "tail"}`` (``test_unit`` and a measured ``suite`` also ``"passed"``); ``suite`` is :data:`RECORDED_SUITE`
        (``"recorded": True``) unless measured.
    :raises RuntimeError: a target failed (its output's tail is in the message).
    """
    out: dict[str, Any] = {}
    folder = Path(tempfile.mkdtemp(prefix="sim2real-bench-lint-"))
    try:
        venv = f"LINT_VENV={folder / 'venv'}"
        out["lint_fresh"] = _make("lint", venv)
        out["lint_warm"] = _make("lint", venv)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out["test_unit"] = _make("test-unit")
    out["test_unit"]["passed"] = _passed(out["test_unit"]["tail"])
    if suite:
        out["suite"] = _make("test")
        out["suite"]["passed"] = _passed(out["suite"]["tail"])
    else:
        out["suite"] = {**RECORDED_SUITE, "recorded": True}
    for name, result in out.items():
        if result.get("returncode") not in (None, 0):
            raise RuntimeError(f"make target of {name} failed (exit {result['returncode']}):\n{result['tail']}")
    return out


def rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The table rows of :func:`measure`'s result."""
    def cell(r: dict[str, Any]) -> str:
        return f"{r['seconds']:.0f} s (load average {r['load_before']:.1f} before)"

    unit = result["test_unit"]
    table = [
        ("make lint, from an empty .venv-lint (venv build + ruff + lint-imports + reference check)",
         cell(result["lint_fresh"])),
        ("make lint, venv built", cell(result["lint_warm"])),
        (f"make test-unit ({unit.get('passed')} unit tests passed)", cell(unit)),
    ]
    suite = result["suite"]
    if suite.get("recorded"):
        value = (f"{suite['seconds']:.0f} s" if suite.get("seconds") else "-") + f" (recorded, not measured: {suite['when']})"
        table.append((f"{suite['what']}", value))
    else:
        table.append((f"make test, whole suite ({suite.get('passed')} passed)", cell(suite)))
    return table
