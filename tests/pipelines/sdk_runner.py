"""Runs tests of ``tests/pipelines/sdk/`` in a child Python after a Makefile target built what they need."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.paths import REPO_ROOT as REPO

SDK_TESTS = REPO / "tests" / "pipelines" / "sdk"


def run_sdk_tests(make_target: str, python: str | Path, args: list[str], pythonpath: list[str]) -> int:
    """``make -s <make_target>``, then ``python -m pytest`` with the sdk folder's ``pytest.ini`` on ``args``.

    :param pythonpath: entries before ``include/`` on the child's ``PYTHONPATH``.
    :return: how many tests passed; asserts that make and pytest succeeded and that nothing failed, errored or was
        skipped (the output's tail in the message).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST_"))}
    make = subprocess.run(["make", "-s", make_target], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert make.returncode == 0, make.stdout[-3000:] + make.stderr[-3000:]
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, str(REPO / "include")])
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-c", str(SDK_TESTS / "pytest.ini"), "--rootdir", str(SDK_TESTS),
         "--confcutdir", str(SDK_TESTS), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    tail = run.stdout[-6000:] + run.stderr[-3000:]
    assert run.returncode == 0, tail
    assert not re.search(r"\d+ (failed|error|skipped)", run.stdout), tail
    summary = re.search(r"(\d+) passed", run.stdout)
    assert summary, tail
    return int(summary.group(1))
