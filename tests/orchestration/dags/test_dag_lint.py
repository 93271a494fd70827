"""ruff's Airflow rules (AIR, preview: e.g. AIR202, a ``@task`` relying on ``multiple_outputs`` inference from
``-> dict``) over the DAG files, the package and the plugin: no finding (``make lint`` runs the same check)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.paths import REPO_ROOT as REPO
RUFF = Path(sys.executable).parent / "ruff"


def test_ruff_airflow_rules_find_nothing() -> None:
    proc = subprocess.run([str(RUFF), "check", "--select", "AIR", "--preview", "--output-format", "concise",
                           "dags", "include", "plugins"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
