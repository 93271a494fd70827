"""sim2real.orchestration.field.canary_verdict: promote, roll back or wait, on the field summary of the canary's
model version (every branch, with its exact message)."""

from __future__ import annotations

import pytest

from tests.orchestration.test_field import SHA, episode

from sim2real.orchestration.field import canary_verdict, field_summary

THINGS = ["arm-1", "arm-2"]
RULE = {"min_episodes": 4, "min_success_rate": 0.5, "window_minutes": 60}


def summary(*outcomes: tuple[str, bool]):
    """The summary entry of SHA for episodes ``(thing, success)``, None when there is none."""
    docs = [episode(thing, i, success=ok) for i, (thing, ok) in enumerate(outcomes, start=1)]
    return field_summary(docs).get(SHA)


@pytest.mark.parametrize(("outcomes", "decision", "message"), [
    ([("arm-1", True)] * 10 + [("arm-2", True)] * 10, "promote",
     "promote: field success rate 1.000 (95 % Wilson interval [0.839, 1.000]) over 20 episode(s), threshold 0.500: "
     "the interval's lower bound is at or above the threshold, and each of the 2 canary robot(s) reported"),
    ([("arm-1", False)] * 9 + [("arm-1", True), ("arm-2", False)], "roll_back",
     "roll back: field success rate 0.091 (95 % Wilson interval [0.016, 0.377]) over 11 episode(s), threshold 0.500: "
     "the whole interval is below the threshold with 11 >= 4 episodes"),
], ids=["every robot, lower bound above: promote", "whole interval below: roll back before the window ends"])
def test_the_field_decides_before_the_window_ends_when_the_interval_is_clear(outcomes, decision, message):
    verdict = canary_verdict(summary(*outcomes), THINGS, window_ended=False, **RULE)
    assert (verdict.decision, verdict.message, verdict.silent) == (decision, message, ())


def test_an_interval_that_holds_the_threshold_waits_then_the_window_decides():
    """1 of 4 (interval [0.046, 0.699]): not shown worse than 0.5, not shown as good: wait; at the window's end,
    not promoted. A first cut rolled back at once whenever the lower bound was below the threshold: at 20 episodes
    and 0.8 only 20 of 20 passed (a release succeeding 95 % of the time was rolled back two times out of three)."""
    outcomes = (("arm-1", False), ("arm-1", False), ("arm-2", False), ("arm-1", True))
    verdict = canary_verdict(summary(*outcomes), THINGS, window_ended=False, **RULE)
    assert verdict.decision == "wait"
    assert verdict.message == (
        "wait: the interval still holds the threshold: more episodes narrow it (field success rate 0.250 (95 % "
        "Wilson interval [0.046, 0.699]) over 4 episode(s), threshold 0.500)")
    ended = canary_verdict(summary(*outcomes), THINGS, window_ended=True, **RULE)
    assert ended.decision == "roll_back"
    assert ended.message.startswith("not promoted: the interval's lower bound is still below the threshold after 60 min")
    # 19 of 20 at 0.8 (lower bound 0.764): no longer rolled back while the window is open
    good = summary(*[("arm-1", True)] * 10, *[("arm-2", True)] * 9, ("arm-2", False))
    assert canary_verdict(good, THINGS, window_ended=False, **{**RULE, "min_episodes": 20,
                                                               "min_success_rate": 0.8}).decision == "wait"


def test_too_few_episodes_wait_while_the_window_is_open():
    verdict = canary_verdict(summary(("arm-1", True)), THINGS, window_ended=False, **RULE)
    assert verdict.decision == "wait"
    assert verdict.message == (
        "wait: 1 of 4 episodes; no episode yet from arm-2 (field success rate 1.000 (95 % Wilson interval "
        "[0.207, 1.000]) over 1 episode(s), threshold 0.500)")


def test_enough_episodes_but_a_silent_robot_wait_while_the_window_is_open():
    verdict = canary_verdict(summary(*[("arm-1", True)] * 10), THINGS, window_ended=False, **RULE)
    assert verdict.decision == "wait"
    assert verdict.message.startswith("wait: no episode yet from arm-2 (field success rate 1.000")


def test_the_window_over_with_too_few_episodes_rolls_back():
    verdict = canary_verdict(summary(("arm-1", True), ("arm-2", True)), THINGS, window_ended=True, **RULE)
    assert verdict.decision == "roll_back"
    assert verdict.message == (
        "not promoted: only 2 episode(s) in 60 min, 4 needed (field success rate 1.000 (95 % Wilson interval "
        "[0.342, 1.000]) over 2 episode(s), threshold 0.500)")


def test_the_window_over_with_no_episode_at_all_names_every_robot():
    verdict = canary_verdict(None, THINGS, window_ended=True, **RULE)
    assert verdict.decision == "roll_back"
    assert verdict.message == (
        "not promoted: only 0 episode(s) in 60 min, 4 needed; robot arm-1 reported no episode in 60 min; robot arm-2 "
        "reported no episode in 60 min (no field episode (95 % Wilson interval [0.000, 1.000]), threshold 0.500)")
    assert verdict.silent == ("arm-1", "arm-2")


def test_a_robot_silent_for_the_whole_window_is_not_promoted():
    verdict = canary_verdict(summary(*[("arm-1", True)] * 10), THINGS, window_ended=True, **RULE)
    assert verdict.decision == "roll_back"
    assert verdict.message == (
        "not promoted: robot arm-2 reported no episode in 60 min (field success rate 1.000 (95 % Wilson interval "
        "[0.722, 1.000]) over 10 episode(s), threshold 0.500)")


@pytest.mark.parametrize(("things", "rule", "error"), [
    ([], RULE, "has no robot"),
    (THINGS, {**RULE, "min_episodes": 0}, "min_episodes must be >= 1, got 0"),
    (THINGS, {**RULE, "min_success_rate": 1.5}, r"min_success_rate must be a fraction in \[0, 1\], got 1.5"),
])
def test_bad_arguments_are_refused(things, rule, error):
    with pytest.raises(ValueError, match=error):
        canary_verdict(None, things, window_ended=False, **rule)
