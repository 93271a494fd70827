"""The wait driver: real asyncio, a fake describe sequence, a step function, one event."""

from __future__ import annotations

import asyncio

import pytest
from botocore.exceptions import ClientError

from sim2real.orchestration.waits.core import (
    EVENT_STATUSES,
    Action,
    Step,
    WaitState,
    api_error_step,
    drive,
    event_outcome,
    settle_now,
)


def _count_step(response, state):
    """success at "DONE", failure at "BAD" (with an action), retry otherwise; counts retries in memory."""
    error = api_error_step(response, "thing t", "Describe")
    if error is not None:
        return error
    seen = int(state.memory.get("seen", 0)) + 1
    if response["Status"] == "DONE":
        return Step("success", "thing t done", {"seen": seen, "attempt": state.attempt})
    if response["Status"] == "BAD":
        return Step("failure", "thing t bad", {"seen": seen}, action=Action("stop", {"id": "t"}),
                    action_failed_reason="thing t bad and NOT stopped")
    return Step("retry", f"thing t is {response['Status']}", {"seen": seen}, memory={"seen": seen})


class _Responses:
    def __init__(self, *items):
        self.items = list(items)
        self.states: list[WaitState] = []

    async def __call__(self, state):
        self.states.append(state)
        item = self.items.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def _run(coro):
    return asyncio.run(coro)


def test_driver_polls_until_success_sleeping_between_polls():
    sleeps: list[float] = []

    async def sleep(seconds):
        sleeps.append(seconds)

    responses = _Responses({"Status": "RUNNING"}, {"Status": "RUNNING"}, {"Status": "DONE"})
    event = _run(drive(_count_step, responses, WaitState(poll_interval_s=7.0), max_attempts=5, sleep=sleep,
                       clock=lambda: 100.0))
    assert event == {"status": "success", "message": "thing t done", "seen": 3, "attempt": 2}
    assert sleeps == [7.0, 7.0]  # none before the first poll
    assert [s.attempt for s in responses.states] == [0, 1, 2]
    assert responses.states[2].memory == {"seen": 2}


def test_driver_real_sleep():
    """The default sleep is asyncio.sleep: a 0 s interval runs on a real loop."""
    event = _run(drive(_count_step, _Responses({"Status": "X"}, {"Status": "DONE"}), WaitState(), max_attempts=3))
    assert event["status"] == "success"


def test_driver_times_out_after_max_attempts_with_last_reason():
    responses = _Responses(*[{"Status": "PENDING"}] * 3)
    event = _run(drive(_count_step, responses, WaitState(poll_interval_s=0), max_attempts=3))
    assert event["status"] == "timeout"
    assert "no end after 3 polls" in event["message"] and "thing t is PENDING" in event["message"]
    assert event["seen"] == 3
    assert not responses.items


def test_driver_ends_at_its_deadline_however_few_responses_came():
    """A source that paces itself (events) gives few responses: the deadline, not an attempt count, ends it."""
    clock = iter([1000.0, 1000.0, 1600.0, 4700.0])   # start, then the time of each response
    sleeps: list[float] = []

    async def sleep(seconds):  # the clock above is the time; the 30 s poll interval is not slept for real
        sleeps.append(seconds)

    responses = _Responses({"Status": "PENDING"}, {"Status": "PENDING"}, {"Status": "PENDING"})
    event = _run(drive(_count_step, responses, WaitState(poll_interval_s=30), max_attempts=None,
                       deadline=1000.0 + 3600, clock=lambda: next(clock), sleep=sleep))
    assert event["status"] == "timeout" and "no end within 3600 s (the wait's deadline)" in event["message"]
    assert event["seen"] == 3 and not responses.items
    assert sleeps == [30, 30]


def test_driver_deadline_does_not_hide_a_terminal_last_response():
    clock = iter([0.0, 50.0, 200.0])
    event = _run(drive(_count_step, _Responses({"Status": "PENDING"}, {"Status": "DONE"}), WaitState(),
                       max_attempts=None, deadline=100.0, clock=lambda: next(clock)))
    assert event["status"] == "success"


def test_driver_retries_throttling_and_fails_other_client_errors():
    throttled = ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "Describe")
    denied = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "Describe")
    event = _run(drive(_count_step, _Responses(throttled, {"Status": "DONE"}), WaitState(), max_attempts=3))
    assert event["status"] == "success"
    event = _run(drive(_count_step, _Responses(throttled, denied), WaitState(), max_attempts=3))
    assert event["status"] == "failure" and "AccessDeniedException" in event["message"]
    assert event["error_code"] == "AccessDeniedException"


def test_throttled_polls_do_not_use_up_attempts():
    """Throttling / 5xx says nothing about the resource: 2 attempts survive 3 throttled answers in between."""
    throttled = ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "Describe")
    unavailable = ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "later"}}, "Describe")
    responses = _Responses({"Status": "RUNNING"}, throttled, unavailable, throttled, {"Status": "DONE"})
    event = _run(drive(_count_step, responses, WaitState(), max_attempts=2))
    assert event["status"] == "success" and not responses.items
    # without throttling, the same limit ends the wait
    event = _run(drive(_count_step, _Responses({"Status": "RUNNING"}, {"Status": "RUNNING"}), WaitState(), max_attempts=2))
    assert event["status"] == "timeout"


def test_driver_performs_the_action_and_reports_it():
    done: list[Action] = []

    async def perform(action):
        done.append(action)
        return "Stopped."

    event = _run(drive(_count_step, _Responses({"Status": "BAD"}), WaitState(), max_attempts=2, perform=perform))
    assert done == [Action("stop", {"id": "t"})]
    assert event["status"] == "failure" and event["message"] == "thing t bad Stopped."
    assert event["action"] == {"name": "stop", "params": {"id": "t"}, "done": True, "error": None}


def test_driver_reports_a_failed_action_and_still_ends():
    async def perform(action):
        raise RuntimeError("API down")

    event = _run(drive(_count_step, _Responses({"Status": "BAD"}), WaitState(), max_attempts=2, perform=perform))
    assert event["status"] == "failure"
    assert event["message"].startswith("thing t bad and NOT stopped") and "API down" in event["message"]
    assert event["action"]["done"] is False and "API down" in event["action"]["error"]


def test_driver_refuses_an_action_without_perform_and_bad_limits():
    with pytest.raises(ValueError, match="no perform"):
        _run(drive(_count_step, _Responses({"Status": "BAD"}), WaitState(), max_attempts=1))
    with pytest.raises(ValueError, match="max_attempts"):
        _run(drive(_count_step, _Responses(), WaitState(), max_attempts=0))


def test_driver_without_attempt_limit_runs_until_terminal():
    responses = _Responses(*[{"Status": "PENDING"}] * 25, {"Status": "DONE"})
    event = _run(drive(_count_step, responses, WaitState(), max_attempts=None))
    assert event["status"] == "success" and event["seen"] == 26


def test_step_function_takes_a_response_that_did_not_come_from_polling():
    """A delivered event (e.g. from EventBridge through SQS) is just another response."""
    step = settle_now(_count_step, {"Status": "DONE"}, {}, now=5.0)
    assert step is not None and step.outcome == "success"
    assert settle_now(_count_step, {"Status": "RUNNING"}, {}) is None


def test_event_outcome_reads_only_the_one_set_of_names():
    assert EVENT_STATUSES == ("success", "failure", "timeout")
    assert event_outcome({"status": "failure", "message": "m"}, "r") == ("failure", "m")
    for bad in (None, {}, {"status": "error"}, {"status": "failed"}, {"status": "rejected"}):
        with pytest.raises(ValueError, match="unexpected trigger event"):
            event_outcome(bad, "r")


def test_api_error_step_classifies_codes():
    assert api_error_step({"Status": "x"}, "r", "Op") is None
    assert api_error_step({"Error": {"Code": "RequestLimitExceeded"}}, "r", "Op").outcome == "retry"
    assert api_error_step({"Error": {"Code": "503"}}, "r", "Op").outcome == "retry"
    step = api_error_step({"Error": {"Code": "ValidationException", "Message": "bad id"}}, "job j", "Op")
    assert step.outcome == "failure" and "job j" in step.reason and "bad id" in step.reason
