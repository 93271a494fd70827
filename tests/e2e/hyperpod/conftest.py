"""The HyperPod end-to-end runs, shared by this folder's test files: one process (:mod:`tests.e2e.hyperpod.runs`)
runs them all against one sandbox, once per test session. The folder's files go to one test process together
(``SHARED_SESSION_FOLDERS`` in ``tests/conftest.py``)."""

from __future__ import annotations

import pytest

from tests.fresh_process import run_script


@pytest.fixture(scope="session")
def hyperpod_runs(tmp_path_factory) -> dict[str, dict]:
    """``{run name: its summary}`` (:data:`tests.e2e.hyperpod.runs.RUNS`)."""
    summary, log = run_script("tests.e2e.hyperpod.runs", tmp_path_factory.mktemp("hyperpod"), timeout=1500)
    for run in summary.values():
        run["log"] = log[-8000:]
    return summary
