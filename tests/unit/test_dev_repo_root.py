"""The dev tools (demo, fault replay, bench, UI) find the repository's DAG folder from their own location."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["sim2real.dev.demo", "sim2real.dev.faults", "sim2real.dev.bench", "sim2real.dev.ui"])
def test_dev_tool_repo_root_is_the_checkout(module):
    root = importlib.import_module(module).REPO_ROOT
    assert root == REPO_ROOT and (root / "dags" / "sim_to_real.py").is_file(), root


@pytest.mark.parametrize("module", ["sim2real.orchestration.lineage", "sim2real.orchestration.release"])
def test_schema_paths_point_at_the_contract_schemas(module):
    path = importlib.import_module(module).SCHEMA_PATH
    assert path.is_file() and path.parent.parts[-2:] == ("contract", "schemas"), path
