"""The fault replay's plan, without running it: which scenarios share a DAG run, and how the runs are dealt to the
replay's processes."""

from __future__ import annotations

import pytest

from sim2real.dev import fault_scenarios
from sim2real.dev.fault_checks import succeeds
from tests.dev.faults.test_fault_replay import shards


def test_shards_cover_every_scenario_once_and_keep_shared_runs_together():
    dealt = [n for names in shards() for n in names]
    assert sorted(dealt) == sorted(fault_scenarios.SCENARIO_NAMES)
    assert len(shards()) == 3
    for run in fault_scenarios.runs_of():
        assert sum(set(run) <= set(names) for names in shards()) == 1, run


def test_a_shared_run_is_one_run_of_both_scenarios_and_a_lone_pick_runs_alone():
    runs = fault_scenarios.runs_of()
    assert ["worker_lost_after_submit", "build_over_at_once"] in runs
    events = ["event_dropped", "event_duplicated", "event_for_another_run", "event_queue_unavailable"]
    assert events in runs      # the four wait-event faults: one run, led by the one that patches the config
    assert len(runs) == len(fault_scenarios.SCENARIO_NAMES) - 1 - 3
    assert fault_scenarios.runs_of(["build_over_at_once"]) == [["build_over_at_once"]]
    assert fault_scenarios.runs_of(["build_over_at_once", "worker_lost_after_submit", "quota_below_need"]) == [
        ["worker_lost_after_submit", "build_over_at_once"], ["quota_below_need"]]


def _scenario(name: str, **kw) -> fault_scenarios.Scenario:
    return fault_scenarios.Scenario(name, "fault", "-", "expected", succeeds, **kw)


@pytest.mark.parametrize(("follower", "needle"), [
    (_scenario("b", shares_run="a", faults={"batch_fail_node": True}), "batch_fail_node"),
    (_scenario("b", shares_run="a", conf={"deploy_to_edge": True}), "deploy_to_edge"),
    (_scenario("b", shares_run="a", decision="Rejected"), "decisions differ"),
    (_scenario("b", shares_run="a", env_patch={"artifacts_bucket": "x"}), "env patches"),
    (_scenario("b", shares_run="nobody"), "is not an earlier scenario"),
])
def test_a_shared_run_that_would_hide_a_fault_is_refused(follower, needle):
    lead = _scenario("a", faults={"batch_fail_node": True}, conf={"deploy_to_edge": False})
    with pytest.raises(ValueError, match=needle):
        fault_scenarios._check_shared_runs([lead, follower])


def test_every_declared_shared_run_is_valid():
    fault_scenarios._check_shared_runs(fault_scenarios.SCENARIOS)
    assert [s.name for s in fault_scenarios.SCENARIOS if s.shares_run] == [
        "build_over_at_once", "event_duplicated", "event_for_another_run", "event_queue_unavailable"]
