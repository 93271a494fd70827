"""The progress line's ETA: iterations left at the mean iteration time, capped by the training time budget."""

from __future__ import annotations

import pytest

from sim2real.contract.progress import eta_seconds, format_progress, parse_progress


def test_without_a_budget_the_eta_counts_the_iterations_left():
    assert eta_seconds(elapsed_s=10.0, iterations_done=10, max_iterations=40) == pytest.approx(30.0)
    assert eta_seconds(elapsed_s=10.0, iterations_done=10, max_iterations=40, time_budget_s=0) == pytest.approx(30.0)


def test_the_time_budget_caps_the_eta():
    # 1 s per iteration, 30 left, but only 5 more fit the 15 s budget (the trainer stops then)
    assert eta_seconds(elapsed_s=10.0, iterations_done=10, max_iterations=40, time_budget_s=15.0) == pytest.approx(5.0)
    # 2.5 s left of the budget at 1 s per iteration: 2 iterations still start
    assert eta_seconds(elapsed_s=10.0, iterations_done=10, max_iterations=40, time_budget_s=12.5) == pytest.approx(2.0)
    # the iterations end before the budget: the budget does not lengthen the ETA
    assert eta_seconds(elapsed_s=10.0, iterations_done=10, max_iterations=12, time_budget_s=1000) == pytest.approx(2.0)


def test_past_the_budget_or_before_any_iteration_the_eta_is_zero():
    assert eta_seconds(elapsed_s=20.0, iterations_done=10, max_iterations=40, time_budget_s=15.0) == 0.0
    assert eta_seconds(elapsed_s=0.0, iterations_done=0, max_iterations=40, time_budget_s=15.0) == 0.0


def test_the_line_round_trips():
    line = format_progress(iteration=10, max_iterations=40, timesteps=10240, mean_reward=-3.5, elapsed_s=10.0,
                           eta_s=eta_seconds(elapsed_s=10.0, iterations_done=10, max_iterations=40, time_budget_s=15))
    assert parse_progress(line).eta_s == 5.0
