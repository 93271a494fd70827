"""``.ci/run``, CI's entry point, with ``make`` and ``df`` replaced by recorders on ``PATH``.

What it must do: ``make test`` first; then the forward-compatibility line (``make test-latest``) only where CI's
time and the disk leave room for it, saying so when they do not; before the line, remove what ``make test`` built
that the line never uses (the line's own venv is the largest thing CI writes). A CI run once failed with
``No space left on device`` while pip built ``.venv-latest`` after ``make test`` had passed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

FAKE_MAKE = """#!/bin/sh
echo "$*" >> "$CALLS"
case "$1" in test-latest) exit "${LATEST_RC:-0}";; esac
exit 0
"""
# df -Pm's layout: a header, then one line per path asked for; column 4 is what is available, in MB
FAKE_DF = """#!/bin/sh
echo "Filesystem 1048576-blocks Used Available Capacity Mounted on"
for path in "$@"; do case "$path" in -*) ;; *) echo "/dev/fake 100000 1 ${FREE_MB} 1% /";; esac; done
"""


def _ci_run(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    repo = tmp_path / "clone"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(REPO_ROOT / ".ci" / "run", repo / ".ci" / "run")
    for leftover in (".venv/pipeline/bin", "dist/mwaa-check/venv", ".venv/mlflow/bin"):
        (repo / leftover).mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("make", FAKE_MAKE), ("df", FAKE_DF)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    proc = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                               "CALLS": str(calls), "TMPDIR": str(tmp_path), **env})
    return proc, calls.read_text().splitlines()


def test_with_room_the_line_runs_after_what_it_never_uses_is_gone(tmp_path):
    proc, calls = _ci_run(tmp_path, FREE_MB="50000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c.split()[0] for c in calls] == ["test", "test-latest"], calls
    assert "passed on the newest" in proc.stdout
    repo = tmp_path / "clone"
    assert not (repo / ".venv" / "pipeline").exists() and not (repo / "dist" / "mwaa-check").exists()
    assert (repo / ".venv" / "mlflow").exists()  # the line's DAG tests track runs in the sandbox's MLflow


@pytest.mark.parametrize("free_mb", ["287", "3999"])
def test_without_disk_for_its_venv_the_line_is_skipped_and_says_why(tmp_path, free_mb):
    proc, calls = _ci_run(tmp_path, FREE_MB=free_mb)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls == ["test"], calls
    assert f"test-latest: SKIPPED, {free_mb} MB free on disk" in proc.stdout, proc.stdout


def test_the_lines_need_can_be_set(tmp_path):
    proc, calls = _ci_run(tmp_path, FREE_MB="2000", SIM2REAL_LATEST_NEED_MB="1000")
    assert proc.returncode == 0 and [c.split()[0] for c in calls] == ["test", "test-latest"], (calls, proc.stdout)


def test_a_failing_line_fails_ci_and_says_what_broke(tmp_path):
    proc, calls = _ci_run(tmp_path, FREE_MB="50000", LATEST_RC="2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "test-latest FAILED (exit 2)" in proc.stderr


def test_left_out_on_request(tmp_path):
    proc, calls = _ci_run(tmp_path, FREE_MB="50000", SIM2REAL_CI_LATEST="0")
    assert proc.returncode == 0 and calls == ["test"], (calls, proc.stdout)
    assert (tmp_path / "clone" / ".venv" / "pipeline").exists()  # nothing removed when the line is not run
