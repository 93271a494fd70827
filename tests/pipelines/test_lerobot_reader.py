"""Runs tests/pipelines/sdk/test_lerobot_v21_reader.py with LeRobot's own v2.1 reader (``lerobot==0.3.3``).

LeRobot 0.3.x pins torch<2.8, so it is in no venv of this repository: ``make lerobot-site`` installs it and the few
packages its ``LeRobotDataset`` imports that the dev venv lacks (requirements-lerobot.txt, ``--no-deps``) into
``.venv/lerobot`` (``LEROBOT_SITE`` elsewhere), and the reader test runs in a child process of the dev venv's Python
with that directory and ``tests/pipelines/lerobot_shim`` (a ``torchvision`` stand-in for camera frames) on
``PYTHONPATH``. Nothing is skipped: a missing site is built, a skipped or failing inner test fails this test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT as REPO

# integration (not in make test-unit): builds the site (pip, the package index)
pytestmark = pytest.mark.integration
SDK_TESTS = REPO / "tests" / "pipelines" / "sdk"
SHIM = REPO / "tests" / "pipelines" / "lerobot_shim"


def test_lerobots_own_v21_reader_reads_the_transformed_datasets():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST_"))}
    make = subprocess.run(["make", "-s", "lerobot-site"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert make.returncode == 0, make.stdout[-3000:] + make.stderr[-3000:]
    site = os.environ.get("LEROBOT_SITE") or str(REPO / ".venv" / "lerobot")
    env["PYTHONPATH"] = os.pathsep.join([str(SHIM), site, str(REPO / "include")])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", str(SDK_TESTS / "pytest.ini"), "--rootdir", str(SDK_TESTS),
         "--confcutdir", str(SDK_TESTS), str(SDK_TESTS / "test_lerobot_v21_reader.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    tail = run.stdout[-6000:] + run.stderr[-3000:]
    assert run.returncode == 0, tail
    assert re.search(r"\b2 passed", run.stdout), tail
    assert not re.search(r"\d+ (failed|error|skipped)", run.stdout), tail
