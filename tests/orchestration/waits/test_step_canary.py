"""canary_episodes_step: a listing of the canary robots' episode objects (ListObjectsV2, the objects uploaded in the window) -> Step."""

from __future__ import annotations

from dataclasses import replace

from sim2real.orchestration.waits.canary import canary_episodes_step
from sim2real.orchestration.waits.core import WaitState

PARAMS = {"bucket": "b", "prefix": "fleet/", "thing_names": ["arm-2", "arm-1"], "min_episodes": 3,
          "window_end": 1000.0, "keys_read": 0}
OPEN, OVER = WaitState(params=PARAMS, now=999.0), WaitState(params=PARAMS, now=1000.0)


def test_enough_objects_from_every_robot_end_the_wait():
    step = canary_episodes_step({"listed": {"arm-1": 2, "arm-2": 1}}, OPEN)
    assert step.outcome == "success"
    assert step.payload == {"listed": {"arm-1": 2, "arm-2": 1}, "window_over": False}
    assert step.reason == ("3 episode object(s) under s3://b/fleet/field/episodes/, 3 needed in all, at least one from every canary robot "
                           "(arm-1: 2, arm-2: 1): reading them")


def test_too_few_or_a_robot_without_objects_polls_again():
    step = canary_episodes_step({"listed": {"arm-1": 5}}, OPEN)
    assert step.outcome == "retry"
    assert step.reason == ("canary field episodes: 5 object(s) of 3 under s3://b/fleet/field/episodes/ (arm-1: 5, "
                           "arm-2: 0); no object yet from arm-2")
    assert canary_episodes_step({"listed": {"arm-1": 1, "arm-2": 1}}, OPEN).outcome == "retry"


def test_after_a_read_that_found_too_few_only_a_new_object_ends_the_wait():
    state = replace(OPEN, params={**PARAMS, "keys_read": 4})
    assert canary_episodes_step({"listed": {"arm-1": 2, "arm-2": 2}}, state).outcome == "retry"
    assert canary_episodes_step({"listed": {"arm-1": 3, "arm-2": 2}}, state).outcome == "success"


def test_the_window_over_ends_the_wait_with_what_is_there():
    step = canary_episodes_step({"listed": {}}, OVER)
    assert step.outcome == "success" and step.payload == {"listed": {"arm-1": 0, "arm-2": 0}, "window_over": True}
    assert step.reason == ("the canary window is over: 0 episode object(s) under s3://b/fleet/field/episodes/ "
                           "(arm-1: 0, arm-2: 0)")


def test_errors():
    assert canary_episodes_step({"Error": {"Code": "SlowDown"}}, OPEN).outcome == "retry"
    step = canary_episodes_step({"Error": {"Code": "AccessDenied", "Message": "no"}}, OPEN)
    assert step.outcome == "failure" and "ListObjectsV2" in step.reason and "AccessDenied" in step.reason
