"""Runs tests/pipelines/sdk/ inside the pipeline toolchain venv (SageMaker SDK 3.x pinned, pyarrow).

The SDK cannot live in the Airflow runtime venv (its pins conflict), so ``make pipeline-venv``
builds ``.venv/pipeline`` from ``requirements-pipeline.txt`` once (about 1 GB, cached by a stamp
of the lock file) and the SDK-side tests run there: a fresh generation of the definition compared
byte for byte with the committed template and the golden copy, and the dataset transform on
parquet. Nothing is skipped: a missing venv is built, a failing inner test fails this test.
"""

from __future__ import annotations

import pytest

from tests.paths import REPO_ROOT as REPO
from tests.pipelines.sdk_runner import SDK_TESTS, run_sdk_tests

# integration (not in make test-unit): builds the pipeline venv (pip, the package index)
pytestmark = pytest.mark.integration


def test_sdk_side_suite_passes_in_the_pipeline_venv():
    passed = run_sdk_tests("pipeline-venv", REPO / ".venv" / "pipeline" / "bin" / "python",
                           # LeRobot's reader is not in this venv: test_lerobot_reader.py runs that file on its site
                           [str(SDK_TESTS), "--ignore", str(SDK_TESTS / "test_lerobot_v21_reader.py")], [])
    assert passed >= 11
