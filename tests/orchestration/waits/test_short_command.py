"""The short SSM command's wait (``waits.ssm``): its sync driver (the worker's
``run_short_command``) and its async driver (the Slurm trigger's ``run_short_command_async``) on the same
GetCommandInvocation answers, each decided by ``ssm_command_step`` (botocore's ``CommandExecuted`` waiter).

SSM is a botocore Stubber on a boto3 client and on an aiobotocore client (moto only ever reports Success).
"""

from __future__ import annotations

import asyncio
import itertools

import boto3
import pytest
from aiobotocore.session import get_session
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from sim2real.orchestration.hooks.workstation import shell_script_request
from sim2real.orchestration.triggers.hyperpod import HyperPodSlurmJobTrigger
from sim2real.orchestration.waits.ssm import run_short_command, run_short_command_async

REGION, IID, CMD = "us-east-1", "i-0123456789abcdef0", "11111111-2222-3333-4444-555555555555"
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def _invocation(status: str, code: int = -1, stdout: str = "", stderr: str = "") -> dict:
    return {"CommandId": CMD, "InstanceId": IID, "Status": status, "StatusDetails": status, "ResponseCode": code,
            "StandardOutputContent": stdout, "StandardErrorContent": stderr}


#: Pending -> InvocationDoesNotExist -> InProgress -> the end (as SSM may answer right after SendCommand).
def _answers(end: dict) -> list[dict | str]:
    return [_invocation("Pending"), "InvocationDoesNotExist", _invocation("InProgress"), end]


def _stub(stub: Stubber, commands: list[str], answers: list[dict | str], *, timeout: int = 60,
          cancel: bool = False) -> None:
    stub.add_response("send_command", {"Command": {"CommandId": CMD, "InstanceIds": [IID], "Status": "Pending"}},
                      shell_script_request(IID, commands, timeout, "test"))
    asked = {"CommandId": CMD, "InstanceId": IID}
    for answer in answers:
        if isinstance(answer, str):
            stub.add_client_error("get_command_invocation", answer, f"{answer} for {CMD}", expected_params=asked)
        else:
            stub.add_response("get_command_invocation", answer, asked)
    if cancel:
        stub.add_response("cancel_command", {}, {"CommandId": CMD, "InstanceIds": [IID]})


def _sync(answers: list[dict | str], **options) -> dict | BaseException:
    client = boto3.client("ssm", region_name=REGION, **KEYS)
    with Stubber(client) as stub:
        _stub(stub, ["sacct -j 42"], answers, cancel=options.pop("cancel", False))
        try:
            result = run_short_command(client, IID, ["sacct -j 42"], execution_timeout_seconds=60, poll_seconds=0,
                                       comment="test", **options)
        except (TimeoutError, ClientError) as error:
            result = error
        stub.assert_no_pending_responses()
    return result


def _async(answers: list[dict | str], **options) -> dict | BaseException:
    async def run():
        async with get_session().create_client("ssm", region_name=REGION, **KEYS) as client:
            with Stubber(client) as stub:
                _stub(stub, ["sacct -j 42"], answers, cancel=options.pop("cancel", False))
                try:
                    result = await run_short_command_async(client, IID, ["sacct -j 42"],
                                                           execution_timeout_seconds=60, poll_seconds=0,
                                                           comment="test", **options)
                except (TimeoutError, ClientError) as error:
                    result = error
                stub.assert_no_pending_responses()
        return result

    return asyncio.run(run())


def _same(sync, async_):
    """The two drivers' results, compared as values (an exception by its type and message)."""
    if isinstance(sync, BaseException):
        assert type(sync) is type(async_) and str(sync) == str(async_)
    else:
        assert sync == async_
    return sync


@pytest.mark.parametrize(("end", "code"), [("Success", 0), ("Failed", 1), ("TimedOut", -1), ("Cancelled", -1)])
def test_sync_and_async_drivers_give_the_same_result(end, code):
    answers = _answers(_invocation(end, code, stdout="42|RUNNING|0:0\n", stderr="" if end == "Success" else "boom"))
    result = _same(_sync(answers), _async(answers))
    assert result == {"command_id": CMD, "status": end, "response_code": code, "stdout": "42|RUNNING|0:0\n",
                      "stderr": "" if end == "Success" else "boom"}


def test_cancelling_ends_the_wait_as_botocores_waiter_does():
    """Before, the worker's loop and the trigger's loop each kept polling a Cancelling invocation (their own tables
    left it out); botocore's ``CommandExecuted`` waiter counts it as a failure."""
    answers = [_invocation("InProgress"), _invocation("Cancelling")]
    assert _same(_sync(answers), _async(answers))["status"] == "Cancelling"


def test_no_end_by_the_deadline_cancels_and_names_the_command_instance_and_status():
    ticks = itertools.count()  # 100 s per clock() reading: past execution timeout + grace at the first poll

    def clock() -> float:
        return 100.0 * next(ticks)

    answers = [_invocation("Pending")]
    error = _same(_sync(answers, clock=clock, grace_seconds=10, cancel=True),
                  _async(answers, clock=clock, grace_seconds=10, cancel=True))
    assert isinstance(error, TimeoutError)
    assert str(error) == f"SSM command {CMD} on {IID} is still Pending 70 s after it was sent; it was cancelled."


def test_an_error_that_is_not_retried_is_raised():
    answers = [_invocation("Pending"), "AccessDeniedException"]
    error = _same(_sync(answers), _async(answers))
    assert isinstance(error, ClientError) and error.response["Error"]["Code"] == "AccessDeniedException"


def test_throttling_is_polled_again():
    answers = [_invocation("Pending"), "ThrottlingException", _invocation("Success", 0, stdout="ok")]
    assert _same(_sync(answers), _async(answers))["stdout"] == "ok"


def _trigger() -> HyperPodSlurmJobTrigger:
    return HyperPodSlurmJobTrigger(cluster_name="c", instance_id=IID, job_id="42", waiter_delay=30,
                                   waiter_max_attempts=3)


def test_the_slurm_trigger_reads_the_status_query_as_getcommandinvocation(monkeypatch):
    import sim2real.orchestration.triggers.hyperpod as triggers

    sent = []

    async def fake(client, instance_id, commands, **options):
        sent.append((instance_id, commands, options))
        if commands == ["late"]:
            raise TimeoutError("SSM command c on i is still Pending 300 s after it was sent; it was cancelled.")
        return {"command_id": "c", "status": "Success", "response_code": 0, "stdout": "42|RUNNING|0:0", "stderr": ""}

    monkeypatch.setattr(triggers, "run_short_command_async", fake)
    answer = asyncio.run(_trigger()._run_script(None, ["sacct"]))
    assert answer == {"Status": "Success", "StandardOutputContent": "42|RUNNING|0:0", "StandardErrorContent": ""}
    # 120 s executionTimeout, 300 s in all (as the trigger's own loop waited before)
    assert sent[0][2]["execution_timeout_seconds"] + sent[0][2]["grace_seconds"] == 300
    late = asyncio.run(_trigger()._run_script(None, ["late"]))
    assert late["Status"] == "TimedOut" and "still Pending 300 s" in late["StandardErrorContent"]


def test_the_sync_driver_still_runs_when_a_kill_interrupts_an_earlier_wait():
    """Airflow calls ``on_kill`` from the task's SIGTERM handler, on the thread whose private event loop is
    waiting for an earlier short command (a status query). Before: ``asyncio.run`` refused to start inside the
    running loop, the ``scancel`` was never sent and the job ran on; now it runs on a thread of its own."""
    client = boto3.client("ssm", region_name=REGION, **KEYS)

    async def interrupted_wait():  # the handler's call, made while this thread's loop runs
        return run_short_command(client, IID, ["scancel 42"], execution_timeout_seconds=60, poll_seconds=0,
                                 comment="test")

    with Stubber(client) as stub:
        _stub(stub, ["scancel 42"], [_invocation("Success", 0)])
        result = asyncio.run(interrupted_wait())
        stub.assert_no_pending_responses()
    assert result["status"] == "Success" and result["command_id"] == CMD
