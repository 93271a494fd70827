"""Budget: the run's cost is estimated from the price table and a run above max_budget_usd is refused
in prepare_run, before any spend, with the numbers."""

from __future__ import annotations

import pytest

from sim2real.budget import (ON_DEMAND_USD_PER_HOUR, PRICE_SOURCE, VLA_OVERHEAD_HOURS, VLA_SECONDS_PER_STEP,
                             BudgetExceeded, check_budget, estimate_run_cost)
from sim2real.params import VLA_INSTANCE_GPUS
from sim2real.stages import plan_run

from .test_config import GOOD
from .test_stages import PARAMS


def test_every_offered_instance_type_has_a_price():
    assert GOOD["batch"]["instance_type"] in ON_DEMAND_USD_PER_HOUR
    for vla_type in VLA_INSTANCE_GPUS:
        assert vla_type in ON_DEMAND_USD_PER_HOUR and vla_type in VLA_SECONDS_PER_STEP
    assert PRICE_SOURCE.startswith("AWS on-demand list price, us-east-1, ")


def test_training_uses_the_time_budget_and_the_fine_tune_the_step_estimate():
    params = {**PARAMS, "num_nodes": 4, "train_time_budget_seconds": 7200, "vla_max_steps": 9000,
              "vla_global_batch_size": 64}
    est = estimate_run_cost(params, GOOD)
    train, vla = est["items"]
    price = ON_DEMAND_USD_PER_HOUR["g6.12xlarge"]
    assert train["hours"] == 2.0 and train["instances"] == 4
    assert train["usd"] == pytest.approx(round(4 * 2.0 * price, 2))
    hours = VLA_OVERHEAD_HOURS + 9000 * VLA_SECONDS_PER_STEP["ml.p4d.24xlarge"] * 2 / 3600
    assert vla["hours"] == pytest.approx(hours, abs=1e-4)
    assert vla["usd"] == pytest.approx(round(hours * ON_DEMAND_USD_PER_HOUR["ml.p4d.24xlarge"], 2))
    assert est["total_usd"] == pytest.approx(train["usd"] + vla["usd"])


def test_no_time_budget_counts_the_whole_training_timeout():
    est = estimate_run_cost({**PARAMS, "train_time_budget_seconds": 0, "training_timeout_hours": 12.0,
                             "run_vla_finetune": False, "deploy_to_edge": False}, GOOD)
    [train] = est["items"]
    assert train["hours"] == 12.0 and "training_timeout_hours" in train["basis"]


def test_a_run_above_the_budget_is_refused_in_prepare_run_with_the_numbers():
    params = {**PARAMS, "task": "Isaac-Velocity-Rough-H1-v0", "num_nodes": 8, "train_time_budget_seconds": 0,
              "training_timeout_hours": 24.0, "max_budget_usd": 500.0}
    with pytest.raises(BudgetExceeded) as err:
        plan_run(dag_id="sim_to_real", run_id="manual__1", params=params, env=GOOD)
    msg = str(err.value)
    total = estimate_run_cost(params, GOOD)["total_usd"]
    assert f"estimated cost ${total:.2f} is above max_budget_usd $500.00" in msg
    assert "8 x g6.12xlarge x 24 h" in msg and PRICE_SOURCE in msg


def test_the_estimate_is_in_the_plan():
    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params=PARAMS, env=GOOD)
    assert plan["budget"]["total_usd"] <= plan["budget"]["max_budget_usd"]
    assert [i["stage"] for i in plan["budget"]["items"]] == ["training", "vla_finetune"]


def test_zero_budget_means_no_limit_and_unknown_prices_refuse_under_a_budget():
    env = {**GOOD, "batch": {**GOOD["batch"], "instance_type": "x9.huge"}}
    est = estimate_run_cost({**PARAMS, "max_budget_usd": 0}, env)
    assert est["total_usd"] is None and est["missing_prices"] == ["x9.huge"]
    check_budget(est)  # no limit: runs, the estimate says what is unknown
    with pytest.raises(BudgetExceeded, match="no price for x9.huge"):
        check_budget(estimate_run_cost(PARAMS, env))


def test_the_estimate_goes_into_the_lineage_and_matches_its_schema():
    from sim2real.lineage import build_lineage, chain_rows, lineage_errors

    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params=PARAMS, env=GOOD)
    doc = build_lineage(run_key=plan["run_key"], dag_id="sim_to_real", run_id="manual__1", params=PARAMS, plan=plan)
    assert doc["cost_estimate"] == plan["budget"]
    assert lineage_errors(doc) == []
    row = dict(chain_rows(doc))["estimated cost"]
    assert row.startswith(f"${plan['budget']['total_usd']:.2f} of max $500.00 (AWS on-demand list price")
