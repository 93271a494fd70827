"""The emulated Slurm's job arrays (``sbatch --array`` with a ``%`` limit, ``squeue -r``, ``sacct -j <id>[_<i>]``,
``scontrol show job <id>_<i>``, ``scancel <id>[_<i>]``), run as the head node runs them: the commands as
subprocesses sharing a state folder. No HyperPod cluster is named, so jobs do not wait for nodes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# integration (not in make test-unit): one sandbox per module (tests/dev/sandbox/conftest.py)
pytestmark = pytest.mark.integration


@pytest.fixture
def slurm(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIM2REAL_SLURM")}
    env["SIM2REAL_SLURM_STATE"] = str(state)

    def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sim2real.dev.sandbox.responders.slurm", *argv], env=env,
                              capture_output=True, text=True, check=check, cwd=tmp_path)

    yield run
    for line in run("squeue", "-h", "-o", "%i", check=False).stdout.split():
        run("scancel", line, check=False)


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\n#SBATCH --job-name=arr\n#SBATCH --nodes=1\n"
                    f"#SBATCH --output={tmp_path}/log-%A_%a-%j.out\n" + body)
    return str(path)


def _wait(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert predicate()


def test_an_array_runs_its_tasks_in_index_order_at_most_limit_at_once(slurm, tmp_path):
    script = _script(tmp_path, 'echo "task=$SLURM_ARRAY_TASK_ID array=$SLURM_ARRAY_JOB_ID count=$SLURM_ARRAY_TASK_COUNT '
                               'job=$SLURM_JOB_ID"\nsleep 1\n[ "$SLURM_ARRAY_TASK_ID" != 2 ]\n')
    array = slurm("sbatch", "--parsable", "--array=0-2%1", script).stdout.strip()
    assert array.isdigit()

    def queue() -> list[str]:
        return slurm("squeue", "-h", "-r", "-n", "arr", "-o", "%i %T %F %K").stdout.splitlines()

    _wait(lambda: f"{array}_0 RUNNING {array} 0" in queue())
    assert queue() == [f"{array}_0 RUNNING {array} 0", f"{array}_1 PENDING {array} 1", f"{array}_2 PENDING {array} 2"]
    line = slurm("scontrol", "show", "job", "-o", f"{array}_2").stdout
    assert f"ArrayJobId={array} ArrayTaskId=2" in line and "JobState=PENDING" in line and "JobArrayTaskLimit" in line
    assert slurm("sacct", "-j", f"{array}_2", "-X", "-n", "-P", "-o", "JobID,State").stdout == f"{array}_2|PENDING\n"
    _wait(lambda: not queue(), timeout=90)
    out = slurm("sacct", "-j", array, "-X", "-n", "-P", "-o", "JobID,JobIDRaw,State,ExitCode,Start,End").stdout
    rows = [line.split("|") for line in out.splitlines()]
    assert [r[0] for r in rows] == [f"{array}_0", f"{array}_1", f"{array}_2"]
    assert rows[0][1] == array and len({r[1] for r in rows}) == 3  # each task has its own job id
    assert [(r[2], r[3]) for r in rows] == [("COMPLETED", "0:0"), ("COMPLETED", "0:0"), ("FAILED", "1:0")]
    assert rows[0][5] <= rows[1][4] and rows[1][5] <= rows[2][4]  # %1: one after the other
    for index, row in enumerate(rows):  # --output's %A, %a and %j; the task's own variables
        log = (tmp_path / f"log-{array}_{index}-{row[1]}.out").read_text()
        assert f"task={index} array={array} count=3 job={row[1]}" in log
    # sacct --name lists every task (what the submit lines' reattach check reads)
    named = slurm("sacct", "-X", "-n", "-P", "--name", "arr", "-S", "now-7days", "-o", "JobID,State").stdout
    assert named.splitlines() == [f"{array}_0|COMPLETED", f"{array}_1|COMPLETED", f"{array}_2|FAILED"]


def test_scancel_of_a_task_stops_that_task_and_of_the_array_every_task(slurm, tmp_path):
    array = slurm("sbatch", "--parsable", "--array=0-2", _script(tmp_path, "sleep 60\n")).stdout.strip()

    def states() -> dict[str, str]:
        out = slurm("sacct", "-j", array, "-X", "-n", "-P", "-o", "JobID,State").stdout
        return dict(line.split("|") for line in out.splitlines())

    _wait(lambda: set(states().values()) == {"RUNNING"})
    slurm("scancel", f"{array}_1")
    assert states() == {f"{array}_0": "RUNNING", f"{array}_1": "CANCELLED by 0", f"{array}_2": "RUNNING"}
    slurm("scancel", array)
    assert set(states().values()) == {"CANCELLED by 0"}
    assert slurm("scancel", "999999", check=False).returncode == 1


@pytest.mark.parametrize("spec", ["0-x", "3-1", "0-2%0", ""])
def test_a_bad_array_spec_is_refused(slurm, tmp_path, spec):
    result = slurm("sbatch", "--parsable", f"--array={spec}", _script(tmp_path, "true\n"), check=False)
    if spec == "":  # an empty --array is no array: a plain job
        assert result.returncode == 0 and result.stdout.strip().isdigit()
        return
    assert result.returncode == 1 and "Invalid job array specification" in result.stderr


def test_an_index_list_runs_only_those_tasks_as_a_sweeps_resubmission_does(slurm, tmp_path):
    script = _script(tmp_path, 'echo "task=$SLURM_ARRAY_TASK_ID count=$SLURM_ARRAY_TASK_COUNT"\n')
    array = slurm("sbatch", "--parsable", "--array=1,3%1", script).stdout.strip()

    def rows() -> list[list[str]]:
        out = slurm("sacct", "-j", array, "-X", "-n", "-P", "-o", "JobID,State").stdout
        return [line.split("|") for line in out.splitlines()]

    _wait(lambda: [r[1] for r in rows()] == ["COMPLETED", "COMPLETED"])
    assert [r[0] for r in rows()] == [f"{array}_1", f"{array}_3"]  # indexes 0 and 2 are no tasks of it
    for index in (1, 3):
        assert f"task={index} count=2" in next(tmp_path.glob(f"log-{array}_{index}-*.out")).read_text()
