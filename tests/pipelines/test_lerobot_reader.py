"""Runs tests/pipelines/sdk/test_lerobot_v21_reader.py with LeRobot's own v2.1 reader (``lerobot==0.3.3``).

LeRobot 0.3.x pins torch<2.8, so it is in no venv of this repository: ``make lerobot-site`` installs it and the few
packages its ``LeRobotDataset`` imports that the dev venv lacks (requirements-lerobot.txt, ``--no-deps``) into
``.venv/lerobot`` (``LEROBOT_SITE`` elsewhere), and the reader test runs in a child process of the dev venv's Python
with that directory and ``tests/pipelines/lerobot_shim`` (a ``torchvision`` stand-in for camera frames) on
``PYTHONPATH``. Nothing is skipped: a missing site is built, a skipped or failing inner test fails this test.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.paths import REPO_ROOT as REPO
from tests.pipelines.sdk_runner import SDK_TESTS, run_sdk_tests

# integration (not in make test-unit): builds the site (pip, the package index)
pytestmark = pytest.mark.integration
SHIM = REPO / "tests" / "pipelines" / "lerobot_shim"


def test_lerobots_own_v21_reader_reads_the_transformed_datasets():
    site = os.environ.get("LEROBOT_SITE") or str(REPO / ".venv" / "lerobot")
    passed = run_sdk_tests("lerobot-site", sys.executable, [str(SDK_TESTS / "test_lerobot_v21_reader.py")],
                           [str(SHIM), site])
    assert passed == 2  # a v3.0 and a v2.0 source, each transformed and read back
