"""The run's cost estimate, checked against ``max_budget_usd`` before any spend.

``prepare_run`` estimates what the run's GPU instances will cost at on-demand prices and refuses
to start when the estimate is above the form's ``max_budget_usd`` (0 = no limit). The estimate
is part of the plan and of ``runs/<run_key>/lineage.json`` (``cost_estimate``).

Formula (instance-hours × on-demand USD/hour):

- **training** = ``num_nodes`` × price(Batch instance type) × hours, where hours is
  ``train_time_budget_seconds`` / 3600 when a time budget is set, else ``training_timeout_hours``
  (the longest the stage may run). Time spent RUNNABLE is not billed (no instance runs).
- **fine-tune** (only when ``run_vla_finetune``) = price(``vla_instance_type``) ×
  (``VLA_OVERHEAD_HOURS`` + ``vla_max_steps`` × seconds-per-step × ``vla_global_batch_size`` / 32 / 3600),
  with seconds-per-step at a global batch of 32 from ``VLA_SECONDS_PER_STEP`` (a rough figure for the
  GR00T fine-tune per instance type; calibrate it from your own runs' step times).

Not counted: the evaluation workstation (usually running for people anyway), the pipeline's
CPU processing steps, S3 and data transfer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: On-demand USD per instance-hour (Linux). Source: AWS on-demand list price, us-east-1, May 2025
#: (EC2 pricing page for the Batch types; SageMaker AI pricing page, "Training" tab, for the ml.*
#: types). Prices change (AWS lowered P4/P5 prices in June 2025, which these do not reflect) and
#: differ by region: this is a table for users to update, with the types their
#: compute environment and fine-tune use. A type missing here makes the budget check refuse the run
#: (unless ``max_budget_usd`` is 0) rather than guess.
PRICE_SOURCE = "AWS on-demand list price, us-east-1, May 2025"
ON_DEMAND_USD_PER_HOUR: dict[str, float] = {
    # AWS Batch GPU nodes (EC2)
    "g5.12xlarge": 5.672,
    "g5.48xlarge": 16.288,
    "g6.12xlarge": 4.6016,
    "g6.48xlarge": 13.3504,
    "g6e.12xlarge": 10.49264,
    "g6e.48xlarge": 30.13118,
    "p4d.24xlarge": 32.7726,
    "p5.48xlarge": 98.32,
    # SageMaker training (GR00T fine-tune)
    "ml.g5.12xlarge": 7.09,
    "ml.g6e.12xlarge": 13.117,
    "ml.p4d.24xlarge": 37.688,
    "ml.p5.48xlarge": 113.07,
}

#: Seconds per fine-tune step at a global batch of 32 (rough, for the estimate only; calibrate).
VLA_SECONDS_PER_STEP: dict[str, float] = {
    "ml.g5.12xlarge": 3.2,
    "ml.g6e.12xlarge": 1.6,
    "ml.p4d.24xlarge": 0.8,
    "ml.p5.48xlarge": 0.4,
}
#: Fixed hours per fine-tune: instance start, image pull, dataset and base-model download, checkpoint upload.
VLA_OVERHEAD_HOURS = 0.25


class BudgetExceeded(ValueError):
    """The run's estimated cost is above ``max_budget_usd`` (or cannot be estimated under a budget)."""


def estimate_run_cost(params: Mapping[str, Any], env: Mapping[str, Any],
                      prices: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Estimate the run's GPU cost (formula in the module docstring).

    :param params: the run's resolved params.
    :param env: the environment config (``batch.instance_type``).
    :param prices: price table override (default :data:`ON_DEMAND_USD_PER_HOUR`).
    :return: ``{"currency": "USD", "price_source", "total_usd" (None when a price is missing),
        "max_budget_usd", "missing_prices": [...], "items": [{"stage", "instance_type", "instances",
        "hours", "usd_per_hour", "usd", "basis"}, ...]}``.
    """
    prices = ON_DEMAND_USD_PER_HOUR if prices is None else prices
    items: list[dict[str, Any]] = []
    batch_type = env["batch"]["instance_type"]
    nodes = int(params.get("num_nodes", 1))
    budget_s = int(params.get("train_time_budget_seconds") or 0)
    timeout_h = float(params.get("training_timeout_hours", 0))
    if budget_s:
        train_hours, basis = budget_s / 3600, f"train_time_budget_seconds {budget_s}"
    else:
        train_hours, basis = timeout_h, f"training_timeout_hours {timeout_h:g} (no time budget)"
    items.append(_item("training", batch_type, nodes, train_hours, prices, basis))
    if params.get("run_vla_finetune"):
        vla_type = params["vla_instance_type"]
        steps = int(params.get("vla_max_steps", 0))
        batch = int(params.get("vla_global_batch_size", 32))
        per_step = VLA_SECONDS_PER_STEP.get(vla_type)
        if per_step is None:
            hours = None
            vla_basis = f"no seconds-per-step figure for {vla_type}"
        else:
            hours = VLA_OVERHEAD_HOURS + steps * per_step * (batch / 32) / 3600
            vla_basis = (f"{VLA_OVERHEAD_HOURS:g} h + {steps} steps x {per_step:g} s/step x "
                         f"batch {batch}/32")
        items.append(_item("vla_finetune", vla_type, 1, hours, prices, vla_basis))
    missing = sorted({i["instance_type"] for i in items if i["usd"] is None})
    total = None if missing else round(sum(i["usd"] for i in items), 2)
    return {
        "currency": "USD",
        "price_source": PRICE_SOURCE,
        "total_usd": total,
        "max_budget_usd": float(params.get("max_budget_usd", 0) or 0),
        "missing_prices": missing,
        "items": items,
    }


def _item(stage: str, instance_type: str, instances: int, hours: float | None,
          prices: Mapping[str, float], basis: str) -> dict[str, Any]:
    price = prices.get(instance_type)
    usd = None if price is None or hours is None else round(instances * hours * price, 2)
    return {"stage": stage, "instance_type": instance_type, "instances": instances,
            "hours": None if hours is None else round(hours, 4), "usd_per_hour": price, "usd": usd,
            "basis": basis}


def describe(estimate: Mapping[str, Any]) -> str:
    """One line per item and the total, for logs and error messages."""
    lines = []
    for i in estimate["items"]:
        price = "no price" if i["usd_per_hour"] is None else f"${i['usd_per_hour']:.4g}/h"
        hours = "?" if i["hours"] is None else f"{i['hours']:.3g} h"
        usd = "?" if i["usd"] is None else f"${i['usd']:.2f}"
        lines.append(f"{i['stage']}: {i['instances']} x {i['instance_type']} x {hours} at {price} = {usd} "
                     f"({i['basis']})")
    total = "unknown" if estimate["total_usd"] is None else f"${estimate['total_usd']:.2f}"
    lines.append(f"total {total} ({estimate['price_source']})")
    return "; ".join(lines)


def check_budget(estimate: Mapping[str, Any]) -> None:
    """Refuse a run whose estimate is above ``max_budget_usd`` (0 = no limit), or cannot be estimated.

    :raises BudgetExceeded: with the numbers.
    """
    limit = float(estimate.get("max_budget_usd") or 0)
    if limit <= 0:
        return
    if estimate["total_usd"] is None:
        raise BudgetExceeded(
            f"cannot check max_budget_usd {limit:.2f}: no price for {', '.join(estimate['missing_prices'])} in "
            "sim2real.budget.ON_DEMAND_USD_PER_HOUR (add it, or set max_budget_usd to 0 to run without a "
            f"budget). {describe(estimate)}")
    if estimate["total_usd"] > limit:
        raise BudgetExceeded(
            f"estimated cost ${estimate['total_usd']:.2f} is above max_budget_usd ${limit:.2f}: {describe(estimate)}. "
            "Lower num_nodes / the training time / vla_max_steps, or raise max_budget_usd.")
