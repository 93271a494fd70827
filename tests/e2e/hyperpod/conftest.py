"""The HyperPod end-to-end runs, shared by this folder's test files: one process (:mod:`tests.e2e.hyperpod.runs`)
runs them all against one sandbox, once per test session. The folder's files go to one test process together
(``SHARED_SESSION_FOLDERS`` in ``tests/conftest.py``)."""

from __future__ import annotations

import re

import pytest

from tests.e2e.hyperpod.runs import MARK
from tests.fresh_process import run_script


@pytest.fixture(scope="session")
def hyperpod_runs(tmp_path_factory) -> dict[str, dict]:
    """``{run name: its summary}`` (:data:`tests.e2e.hyperpod.runs.RUNS`), each with ``log``: the last 8000
    characters of the script's log from that run's :data:`~tests.e2e.hyperpod.runs.MARK` line to the next.

    The script gets 1200 s, less than the files' pytest timeout (1500 s), so that a run that hangs ends with the
    script's log in the error rather than pytest's stack dump."""
    summary, log = run_script("tests.e2e.hyperpod.runs", tmp_path_factory.mktemp("hyperpod"), timeout=1200)
    parts = re.split(rf"{re.escape(MARK)}(\S+)\n", log)
    logs = dict(zip(parts[1::2], parts[2::2], strict=True))
    for name, run in summary.items():
        run["log"] = logs[name][-8000:]
    return summary
