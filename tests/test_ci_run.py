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
# df -Pm's layout: a header, then one line per path asked for; column 4 is what is available, in MB: FREE_MB for
# the checkout (FREED_MB more once .venv/pipeline is gone), TMP_FREE_MB (default: the same disk) for $TMPDIR; DF_FAILS=1:
# an error and exit 1, as for a path that does not exist
FAKE_DF = """#!/bin/sh
[ "${DF_FAILS:-0}" = 1 ] && { echo "df: no such file or directory" >&2; exit 1; }
echo "Filesystem 1048576-blocks Used Available Capacity Mounted on"
free=$FREE_MB; [ -e .venv/pipeline ] || free=$((FREE_MB + ${FREED_MB:-0}))
for path in "$@"; do
  case "$path" in
    -*) ;;
    "$TMPDIR") echo "/dev/tmp 100000 1 ${TMP_FREE_MB:-$free} 1% /tmp";;
    *) echo "/dev/fake 100000 1 $free 1% /";;
  esac
done
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
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("SIM2REAL_")},
                               "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CALLS": str(calls),
                               "TMPDIR": str(tmp_path), **env})
    return proc, calls.read_text().splitlines()


def test_with_room_the_line_runs_and_nothing_is_removed(tmp_path):
    proc, calls = _ci_run(tmp_path, FREE_MB="50000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c.split()[0] for c in calls] == ["test", "test-latest"], calls
    assert "passed on the newest" in proc.stdout
    repo = tmp_path / "clone"
    assert (repo / ".venv" / "pipeline").exists() and (repo / "dist" / "mwaa-check").exists()


def test_short_of_disk_what_the_line_never_uses_goes_first_then_it_runs(tmp_path):
    proc, calls = _ci_run(tmp_path, FREE_MB="3000", FREED_MB="1650")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c.split()[0] for c in calls] == ["test", "test-latest"], calls
    assert "3000 MB free on disk, removing .venv/pipeline and dist/mwaa-check" in proc.stdout, proc.stdout
    repo = tmp_path / "clone"
    assert not (repo / ".venv" / "pipeline").exists() and not (repo / "dist" / "mwaa-check").exists()
    assert (repo / ".venv" / "mlflow").exists()  # the line's DAG tests track runs in the sandbox's MLflow


def test_the_temporary_folders_disk_counts_too(tmp_path):
    proc, calls = _ci_run(tmp_path, FREE_MB="50000", TMP_FREE_MB="1200")
    assert calls == ["test"] and "test-latest: SKIPPED, 1200 MB free on disk" in proc.stdout, (calls, proc.stdout)


def test_when_df_cannot_tell_the_line_runs(tmp_path):
    proc, calls = _ci_run(tmp_path, FREE_MB="50000", DF_FAILS="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c.split()[0] for c in calls] == ["test", "test-latest"], calls
    assert "free disk space unknown" in proc.stdout


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
