"""Scheduled (nightly) runs take their params from the environment config's run_defaults; manual runs
keep the trigger form's values."""

from __future__ import annotations

import pytest

from sim2real.orchestration.params import ParamRuleError
from sim2real.orchestration.stages.run import apply_run_defaults, plan_run

from tests.orchestration.test_config import GOOD
from .test_stages import PARAMS

PRODUCTION = {"task": "Isaac-Velocity-Rough-H1-v0", "num_nodes": 2, "max_iterations": 3000,
              "train_time_budget_seconds": 0, "eval_episodes": 200, "min_success_rate": 0.6, "max_budget_usd": 5000.0}
ENV = {**GOOD, "run_defaults": PRODUCTION}


@pytest.mark.parametrize("run_type", ["scheduled", "asset_triggered"])
def test_a_run_nobody_filled_in_uses_run_defaults(run_type):
    # the nightly run, and a run a new field dataset version started: nobody chose the form's values for them
    plan = plan_run(dag_id="sim_to_real", run_id=f"{run_type}__2026-12-01T02:00:00+00:00", params=PARAMS, env=ENV,
                    run_type=run_type)
    assert plan["batch"]["num_nodes"] == 2
    assert plan["batch"]["environment"]["TASK"] == "Isaac-Velocity-Rough-H1-v0"
    assert plan["batch"]["environment"]["MAX_ITERATIONS"] == "3000"
    assert "TIME_BUDGET_SECONDS" not in plan["batch"]["environment"]
    assert plan["evaluation"]["episodes"] == 200
    assert plan["quality_gate"]["min_success_rate"] == 0.6
    assert plan["params"]["num_nodes"] == 2 and plan["run_defaults_applied"] == PRODUCTION
    assert plan["budget"]["max_budget_usd"] == 5000.0  # the estimate uses the production values too


@pytest.mark.parametrize("run_type", ["manual", "backfill", None])
def test_other_runs_keep_the_forms_values(run_type):
    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params=PARAMS, env=ENV, run_type=run_type)
    assert plan["batch"]["num_nodes"] == 1 and plan["batch"]["environment"]["TASK"] == "Reacher-v5"
    assert plan["run_defaults_applied"] == {} and plan["params"] == PARAMS


def test_run_type_enum_is_understood():
    from airflow.utils.types import DagRunType

    params, applied = apply_run_defaults(PARAMS, ENV, run_type=DagRunType.SCHEDULED)
    assert params["num_nodes"] == 2 and applied == PRODUCTION


def test_no_run_defaults_keeps_the_form_defaults():
    params, applied = apply_run_defaults(PARAMS, GOOD, run_type="scheduled")
    assert params == PARAMS and applied == {}


def test_bad_run_defaults_are_refused_with_every_reason():
    env = {**GOOD, "run_defaults": {"num_nodes": 0, "nightly": True, "task": "CartPole-v1", "eval_epsiodes": 9}}
    with pytest.raises(ParamRuleError) as err:
        apply_run_defaults(PARAMS, env, run_type="scheduled")
    msg = str(err.value)
    assert "run_defaults.num_nodes = 0 is refused" in msg
    assert "run_defaults key 'nightly' is not a field of the trigger form (the fields are: " in msg
    assert "run_defaults key 'eval_epsiodes' is not a field of the trigger form (did you mean 'eval_episodes'" in msg
    assert "run_defaults.task = 'CartPole-v1' is refused" in msg


def test_cross_field_rules_apply_to_the_merged_params():
    env = {**GOOD, "run_defaults": {"num_nodes": 4}}  # 4 nodes on the form's CPU MuJoCo task
    with pytest.raises(ParamRuleError, match="num_nodes > 1 is a GPU"):
        plan_run(dag_id="d", run_id="scheduled__1", params=PARAMS, env=env, run_type="scheduled")
