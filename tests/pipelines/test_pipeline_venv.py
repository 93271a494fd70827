"""Runs tests/pipelines/sdk/ inside the pipeline toolchain venv (SageMaker SDK 3.x pinned, pyarrow).

The SDK cannot live in the Airflow runtime venv (its pins conflict), so ``make pipeline-venv``
builds ``.venv/pipeline`` from ``requirements-pipeline.txt`` once (about 1 GB, cached by a stamp
of the lock file) and the SDK-side tests run there: a fresh generation of the definition compared
byte for byte with the committed template and the golden copy, and the dataset transform on
parquet. Nothing is skipped: a missing venv is built, a failing inner test fails this test.
"""

from __future__ import annotations

import os
import re
import subprocess

from tests.paths import REPO_ROOT as REPO

import pytest

# integration (not in make test-unit): builds the pipeline venv (pip, the package index)
pytestmark = pytest.mark.integration
SDK_TESTS = REPO / "tests" / "pipelines" / "sdk"


def test_sdk_side_suite_passes_in_the_pipeline_venv():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST_"))}
    make = subprocess.run(["make", "-s", "pipeline-venv"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    assert make.returncode == 0, make.stdout[-3000:] + make.stderr[-3000:]
    python = REPO / ".venv" / "pipeline" / "bin" / "python"
    env["PYTHONPATH"] = str(REPO / "include")
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-c", str(SDK_TESTS / "pytest.ini"), "--rootdir", str(SDK_TESTS),
         "--confcutdir", str(SDK_TESTS), str(SDK_TESTS),
         # LeRobot's reader is not in this venv: test_lerobot_reader.py runs that file over its own site
         "--ignore", str(SDK_TESTS / "test_lerobot_v21_reader.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    tail = run.stdout[-6000:] + run.stderr[-3000:]
    assert run.returncode == 0, tail
    summary = re.search(r"(\d+) passed", run.stdout)
    assert summary and int(summary.group(1)) >= 11, tail
    assert not re.search(r"\d+ (failed|error|skipped)", run.stdout), tail
