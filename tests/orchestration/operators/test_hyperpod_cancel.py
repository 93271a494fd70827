"""The Slurm job operator's ``scancel``: a command that ran but did not succeed is a failed cancel (unit)."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import AirflowException

import sim2real.orchestration.operators.hyperpod_slurm as hyperpod_operators
from sim2real.orchestration.operators.hyperpod_slurm import HyperPodSlurmJobOperator


class FakeSsm:
    """The short-command driver (``run_short_command``) answering ``result`` to every command."""

    def __init__(self, result: dict):
        self.result, self.sent = result, []

    def __call__(self, client, instance_id, commands, **kwargs):
        self.sent.append((instance_id, commands))
        return self.result


def _operator(result: dict, monkeypatch) -> tuple[HyperPodSlurmJobOperator, FakeSsm]:
    op = HyperPodSlurmJobOperator(task_id="train_policy", cluster_name="c", submit_host_tag_key="k",
                                  submit_host_tag_value="v", job_name="j", submit_commands=["true"],
                                  log_path="/fsx/j.out")
    ssm = FakeSsm(result)
    op.__dict__["hook"] = type("Hook", (), {"conn": None})()  # the operator's cached hook: no AWS client needed
    monkeypatch.setattr(hyperpod_operators, "run_short_command", ssm)
    op._instance_id = "i-0123456789abcdef0"
    return op, ssm


def test_a_scancel_that_ran_and_failed_stops_the_fresh_start_before_a_second_job(monkeypatch):
    """Before: only an exception from SSM counted as a failed cancel; a scancel that ran and exited 1 (slurmctld
    down) counted as sent, and the cleared task's new try submitted a second job beside the first."""
    op, ssm = _operator({"command_id": "c-1", "status": "Failed", "response_code": 1, "stdout": "",
                         "stderr": "scancel: error: Unable to contact slurm controller"}, monkeypatch)
    assert "scancel ended Failed, exit code 1: scancel: error: Unable to contact" in op._cancel("42")
    with pytest.raises(AirflowException, match="could not be cancelled .*no new job submitted"):
        op._supersede(["42"], {})
    assert [commands for _, commands in ssm.sent] == [["scancel 42"], ["scancel 42"]]


def test_a_scancel_that_succeeded_is_no_note(monkeypatch):
    op, _ = _operator({"command_id": "c-1", "status": "Success", "response_code": 0, "stdout": "", "stderr": ""},
                      monkeypatch)
    assert op._cancel("42") == ""
    op._supersede(["42"], {})  # no error: the new job may be submitted
