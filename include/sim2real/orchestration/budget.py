"""The run's cost estimate, checked against ``max_budget_usd`` before any spend.

``prepare_run`` estimates what the run's GPU instances will cost at on-demand prices and refuses
to start when the estimate is above the form's ``max_budget_usd`` (0 = no limit). The estimate
is part of the plan and of ``runs/<run_key>/lineage.json`` (``cost_estimate``).

Formula (instance-hours × on-demand USD/hour):

- **training** (one item per training job: a sweep has one per candidate, each with its own time budget, and
  the sum of all of them counts against ``max_budget_usd``) = ``num_nodes`` × price(instance type) × hours — the Batch compute environment's
  ``batch.instance_type``, or for ``training_backend: hyperpod`` the GPU group's ``hyperpod.instance_type``
  (HyperPod bills the ml.* instance types; an empty type has no price) — where hours is
  ``train_time_budget_seconds`` / 3600 when a time budget is set, else ``training_timeout_hours``
  (the longest the stage may run). Time spent RUNNABLE is not billed (no instance runs). With retraining
  rounds (``max_rounds`` > 1) every round may train that long: hours × ``max_rounds`` (each round's run checks
  the same whole-loop figure, so a loop that fits at round 1 is never refused half-way). A sweep with rounds:
  round 1 is the sweep (one item per candidate, one round each) and rounds 2 … ``max_rounds`` retrain the winner,
  one item of hours × (``max_rounds`` - 1) sized for the longest candidate (the winner is not known before round
  1 ends); the later rounds' runs rebuild the same figure from round 1's sweep in their ``retrain_round`` link.
  Each training item says how many rounds it covers (``rounds``) and, for a candidate, which one (``candidate``).
- **fine-tune** (only when ``run_vla_finetune``) = price(``vla_instance_type``) ×
  (``VLA_OVERHEAD_HOURS`` + ``vla_max_steps`` × seconds-per-step × ``vla_global_batch_size`` / 32 / 3600),
  with seconds-per-step at a global batch of 32 from ``VLA_SECONDS_PER_STEP`` (a rough figure for the
  GR00T fine-tune per instance type; calibrate it from your own runs' step times).

Not counted: the evaluation workstation (usually running for people anyway), the pipeline's
CPU processing steps, S3 and data transfer.

While training runs, the Batch operator and its trigger stop the job (``TerminateJob``) when its
elapsed cost would exceed :func:`training_cost_limit` (``max_budget_usd`` minus the estimate of the
other stages) by the next status poll (:func:`budget_verdict`). After the run,
:func:`sim2real.orchestration.cost_actual.actual_run_cost` gives the actual figures in the estimate's shape, from
the Batch job's ``startedAt``/``stoppedAt`` and, when known, the fine-tune's billable time; with retraining rounds,
:func:`sim2real.orchestration.cost_actual.loop_cost` adds the earlier rounds' actual costs (from their lineage) to
give the loop's so far.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim2real.orchestration.candidates import candidate_id, candidate_params, expand_sweep

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
    :param env: the environment config (``batch.instance_type``; ``hyperpod.instance_type`` for the
        hyperpod backend).
    :param prices: price table override (default :data:`ON_DEMAND_USD_PER_HOUR`).
    :return: ``{"currency": "USD", "price_source", "total_usd" (None when a price is missing),
        "max_budget_usd", "max_rounds" (the training item covers that many rounds), "missing_prices": [...],
        "items": [{"stage", "instance_type", "instances", "hours", "usd_per_hour", "usd", "basis"}, ...]}``.
    """
    prices = ON_DEMAND_USD_PER_HOUR if prices is None else prices
    items: list[dict[str, Any]] = []
    if params.get("training_backend") == "hyperpod":
        train_type = (env.get("hyperpod") or {}).get("instance_type") or "hyperpod.instance_type (not set)"
    elif params.get("training_backend") == "hyperpod_eks":
        train_type = (env.get("hyperpod_eks") or {}).get("instance_type") or "hyperpod_eks.instance_type (not set)"
    else:
        train_type = env["batch"]["instance_type"]
    nodes = int(params.get("num_nodes", 1))
    rounds = int(params.get("max_rounds", 1) or 1)
    runs = _training_runs(params)
    if len(runs) == 1 and runs[0][0] is None:  # one policy: every round may train as long again
        hours, basis = _training_hours(params)
        if rounds > 1:
            hours, basis = hours * rounds, f"{basis} per round x max_rounds {rounds}"
        items.append({**_item("training", train_type, nodes, hours, prices, basis), "rounds": rounds})
    else:  # a sweep (in round 1, or rebuilt from the link in a later round): one item per candidate
        longest = (0.0, "")
        for cid, run_params in runs:
            hours, basis = _training_hours(run_params)
            longest = max(longest, (hours, basis))
            label = f"sweep candidate {cid}: " + (f"round 1 of {rounds}, " if rounds > 1 else "")
            items.append({**_item("training", train_type, nodes, hours, prices, label + basis), "rounds": 1,
                          "candidate": cid})
        if rounds > 1:  # rounds 2 .. max_rounds retrain the winner, who may be the longest candidate
            hours, basis = longest
            items.append({**_item("training", train_type, nodes, hours * (rounds - 1), prices,
                                  f"rounds 2-{rounds}: the sweep winner's training, sized for the longest candidate "
                                  f"({basis}) per round x {rounds - 1} rounds"), "rounds": rounds - 1})
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
        "max_rounds": rounds,
        "missing_prices": missing,
        "items": items,
    }


def _training_hours(params: Mapping[str, Any]) -> tuple[float, str]:
    """Hours one training job may run, and the basis: ``train_time_budget_seconds`` when set, else
    ``training_timeout_hours``."""
    budget_s = int(params.get("train_time_budget_seconds") or 0)
    if budget_s:
        return budget_s / 3600, f"train_time_budget_seconds {budget_s}"
    timeout_h = float(params.get("training_timeout_hours", 0))
    return timeout_h, f"training_timeout_hours {timeout_h:g} (no time budget)"


def _training_runs(params: Mapping[str, Any]) -> list[tuple[str | None, Mapping[str, Any]]]:
    """``(candidate id, params)`` of the loop's sweep candidates: this run's sweep, or in a later round of a sweep
    loop round 1's (``retrain_round.sweep``: its field over the base values of the swept keys); ``[(None,
    params)]`` without a sweep (:mod:`sim2real.orchestration.candidates`; the sweep is already checked by
    ``check_params``)."""
    earlier = (params.get("retrain_round") or {}).get("sweep") if isinstance(params.get("retrain_round"), Mapping) else None
    if earlier and not params.get("sweep"):
        base = {**params, **(earlier.get("base") or {})}
        overrides = expand_sweep(earlier.get("field"))
    else:
        base, overrides = params, expand_sweep(params.get("sweep"))
    if not overrides:
        return [(None, params)]
    return [(candidate_id(i), candidate_params(base, o)) for i, o in enumerate(overrides)]


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
            "sim2real.orchestration.budget.ON_DEMAND_USD_PER_HOUR (add it, or set max_budget_usd to 0 to run without a "
            f"budget). {describe(estimate)}")
    if estimate["total_usd"] > limit:
        raise BudgetExceeded(
            f"estimated cost ${estimate['total_usd']:.2f} is above max_budget_usd ${limit:.2f}: {describe(estimate)}. "
            "Lower num_nodes / the training time / max_rounds / vla_max_steps / the sweep's candidates, or raise "
            "max_budget_usd.")


# -- while training: the cost limit of the Batch job -------------------------------------------------
def _stage_item(estimate: Mapping[str, Any], stage: str) -> Mapping[str, Any] | None:
    return next((i for i in estimate.get("items") or [] if i.get("stage") == stage), None)


def training_usd_per_node_hour(estimate: Mapping[str, Any]) -> float | None:
    """On-demand USD per node-hour of the Batch instance type, as used by the estimate.

    :param estimate: :func:`estimate_run_cost`'s result (the plan's ``budget``).
    :return: the training item's ``usd_per_hour`` (USD per instance-hour), or None when the
        instance type has no price in the table.
    """
    item = _stage_item(estimate, "training")
    return None if item is None or item.get("usd_per_hour") is None else float(item["usd_per_hour"])


def candidate_cost_limits(estimate: Mapping[str, Any], candidates: int) -> list[float | None]:
    """USD each sweep candidate's training job may spend: :func:`training_cost_limit` (what all training may
    spend) shared in proportion to the candidates' training items of the estimate.

    :param candidates: the sweep's candidates (0: no sweep → ``[]``).
    :return: one limit per candidate, in candidate order; ``None`` each when there is no limit.
    """
    if candidates <= 0:
        return []
    allowance = _training_allowance(estimate)
    items = [i for i in estimate.get("items") or [] if i.get("stage") == "training"]
    mine = [i for i in items if i.get("candidate")] or items  # estimates without the key: every item a candidate
    if allowance is None or len(mine) != candidates or any(i.get("usd") is None for i in items):
        return [None] * candidates
    total = sum(float(i["usd"]) for i in items)
    if total <= 0:
        return [round(allowance / len(items), 2) for _ in mine]
    return [round(allowance * float(i["usd"]) / total, 2) for i in mine]


def training_cost_limit(estimate: Mapping[str, Any]) -> float | None:
    """USD the training job may spend: ``max_budget_usd`` minus the estimate of every other stage, shared
    equally by the ``max_rounds`` retraining rounds (each round's job gets its share). In a later round of a
    sweep loop: the share of the later rounds' training item (in proportion to the items' estimates), per round.

    :param estimate: :func:`estimate_run_cost`'s result (the plan's ``budget``).
    :return: the limit in USD (>= 0; 0 when the other stages alone use the whole budget), or None
        (no check) when ``max_budget_usd`` is 0 (no limit), the training instance type has no
        price, or another stage's estimate is unknown (``check_budget`` refuses such a run under a
        budget anyway).
    """
    allowance = _training_allowance(estimate)
    if allowance is None:
        return None
    items = [i for i in estimate.get("items") or [] if i.get("stage") == "training"]
    job = next((i for i in items if not i.get("candidate")), None)
    if job is None or len(items) == 1 or any(i.get("usd") is None for i in items):  # one policy: equal shares
        rounds = max(int(estimate.get("max_rounds") or 1), 1)
        return round(allowance / rounds, 2)
    # A sweep loop's later round: the later rounds' item's share of the allowance, per round.
    total = sum(float(i["usd"]) for i in items)
    share = allowance * float(job["usd"]) / total if total > 0 else allowance / len(items)
    return round(share / max(int(job.get("rounds") or 1), 1), 2)


def _training_allowance(estimate: Mapping[str, Any]) -> float | None:
    """USD all training of the loop may spend: ``max_budget_usd`` minus every other stage's estimate (>= 0); None
    when there is no limit, the training price is unknown or another stage's estimate is."""
    budget = float(estimate.get("max_budget_usd") or 0)
    if budget <= 0 or training_usd_per_node_hour(estimate) is None:
        return None
    others = [i for i in estimate.get("items") or [] if i.get("stage") != "training"]
    if any(i.get("usd") is None for i in others):
        return None
    return max(budget - sum(float(i["usd"]) for i in others), 0.0)


def cost_limit_explanation(limit_usd: float | None, usd_per_node_hour: float | None, num_nodes: int) -> str:
    """One log line saying what the training job's cost limit is, where it comes from and what happens at it.

    :param limit_usd: :func:`training_cost_limit` (None: not checked); :param usd_per_node_hour: the
        instance type's on-demand price; :param num_nodes: nodes of the job.
    """
    if limit_usd is None or usd_per_node_hour is None:
        return ("Training cost limit: none (max_budget_usd is 0, or a price is unknown): the job's cost is not "
                "checked while it runs.")
    hours = limit_usd / (usd_per_node_hour * max(num_nodes, 1)) if usd_per_node_hour > 0 else float("inf")
    return (f"Training cost limit ${limit_usd:.2f}: the form's max_budget_usd (\"Max budget (USD)\") minus the "
            f"cost estimate of the run's other stages. At every poll the job's cost so far ({num_nodes} node(s) x "
            f"${usd_per_node_hour:.4g} per node-hour x run time) is logged as \"elapsed cost $... of limit $...\"; "
            f"when the cost at the next poll would pass the limit (after about {hours:.2f} h of running), the "
            "job is terminated and this task fails without retry (checkpoints written so far stay in S3). "
            "To stop earlier and cleanly, set train_time_budget_seconds: the trainer then checkpoints and exits.")


def optional_usd(field: str, value: Any) -> float | None:
    """A templated USD argument as a float >= 0, or None when unset (``None``, ``""``, ``"None"``).

    :raises ValueError: naming ``field`` when ``value`` is not a number >= 0.
    """
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field} must be a number of USD >= 0 or None (no check), got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{field} must be a number of USD >= 0 or None (no check), got {value!r}")
    return number


def elapsed_cost_usd(started_at: float, now: float, instances: int, usd_per_hour: float) -> float:
    """Cost of ``instances`` instances running from ``started_at`` to ``now``.

    :param started_at: start, epoch seconds.
    :param now: end, epoch seconds (an end before the start counts as 0 s).
    :param instances: number of instances (Batch nodes), >= 1.
    :param usd_per_hour: on-demand USD per instance-hour, >= 0.
    :return: USD (not rounded).
    :raises ValueError: ``instances`` < 1 or a negative price.
    """
    if int(instances) < 1:
        raise ValueError(f"instances must be >= 1, got {instances!r}")
    if usd_per_hour < 0:
        raise ValueError(f"usd_per_hour must be >= 0, got {usd_per_hour!r}")
    return int(instances) * float(usd_per_hour) * max(float(now) - float(started_at), 0.0) / 3600.0


def job_cost_record(*, job_id: str | None, num_nodes: int | None, started_at: float | None,
                    stopped_at: float | None, run_seconds: float | None, usd_per_node_hour: float | None,
                    stopped_by_budget: bool = False, **extra: Any) -> dict[str, Any]:
    """What a training job (Batch or Slurm) ran and cost, for the task's result and its ``job_cost`` XCom.

    Cost = ``num_nodes`` x ``usd_per_node_hour`` x ``run_seconds`` (:func:`elapsed_cost_usd`), rounded to cents.

    :param extra: backend fields added as they are (e.g. ``cluster_name``).
    :return: ``{"job_id", "num_nodes", "started_at", "stopped_at" (epoch seconds, None when unknown),
        "run_seconds", "usd_per_node_hour", "cost_usd" (USD, None without a run time, a price or a node
        count), "stopped_by_budget", **extra}``.
    """
    cost = None
    if run_seconds is not None and usd_per_node_hour is not None and num_nodes:
        cost = round(elapsed_cost_usd(0.0, run_seconds, int(num_nodes), float(usd_per_node_hour)), 2)
    return {
        "job_id": job_id, "num_nodes": num_nodes, "started_at": started_at, "stopped_at": stopped_at,
        "run_seconds": None if run_seconds is None else round(run_seconds, 3),
        "usd_per_node_hour": usd_per_node_hour, "cost_usd": cost, "stopped_by_budget": stopped_by_budget,
        **extra,
    }


def batch_job_run_seconds(job: Mapping[str, Any], now: float) -> float | None:
    """Seconds the Batch job's containers have run (instance-seconds per node), from ``DescribeJobs``.

    Sums the finished earlier attempts (``attempts[].startedAt``/``stoppedAt``, epoch ms, those started
    before the job's ``startedAt``) and the current or last one: ``stoppedAt`` (or ``now`` while it runs)
    minus ``startedAt``. Time before ``startedAt`` (RUNNABLE, STARTING: instance boot and image pull)
    is not counted, so this is a slight underestimate of the instances' billed time.

    :param job: a ``DescribeJobs`` ``jobs[]`` entry (times in epoch milliseconds).
    :param now: epoch seconds, used while the job has no ``stoppedAt``.
    :return: seconds, or None when the job never started (no ``startedAt`` in it or its attempts).
    """
    started = job.get("startedAt")
    total = 0.0
    seen = False
    for attempt in job.get("attempts") or []:
        a_start, a_stop = attempt.get("startedAt"), attempt.get("stoppedAt")
        if a_start and a_stop and (not started or a_start < started):
            total += max(a_stop - a_start, 0) / 1000.0
            seen = True
    if started:
        stopped = job.get("stoppedAt")
        end = stopped / 1000.0 if stopped else float(now)
        total += max(end - started / 1000.0, 0.0)
        seen = True
    return total if seen else None


@dataclass(frozen=True)
class BudgetVerdict:
    """The training job's cost at one status poll, against its limit (all money in USD).

    :ivar elapsed_s: seconds the job has run.
    :ivar instances: Batch nodes.
    :ivar usd_per_hour: on-demand USD per node-hour.
    :ivar cost_usd: cost so far.
    :ivar next_poll_cost_usd: cost at the next poll (``elapsed_s + poll_interval_s``).
    :ivar limit_usd: the limit.
    :ivar poll_interval_s: seconds between polls.
    :ivar over_budget: ``next_poll_cost_usd > limit_usd``: stop the job now, before it crosses the limit.
    """

    elapsed_s: float
    instances: int
    usd_per_hour: float
    cost_usd: float
    next_poll_cost_usd: float
    limit_usd: float
    poll_interval_s: float
    over_budget: bool

    def describe(self) -> str:
        """E.g. ``elapsed cost $1.23 of limit $5.00 (2 nodes x $4.60/h x 0.134 h)``."""
        return (f"elapsed cost ${self.cost_usd:.2f} of limit ${self.limit_usd:.2f} ({self.instances} node(s) x "
                f"${self.usd_per_hour:.4g}/h x {self.elapsed_s / 3600:.3g} h)")


def budget_verdict(*, elapsed_s: float, instances: int, usd_per_hour: float | None, limit_usd: float | None,
                   poll_interval_s: float) -> BudgetVerdict | None:
    """Decide whether the running job must be stopped to stay within ``limit_usd``.

    "Would exceed" is judged at the next poll: the job is stopped when its cost after another
    ``poll_interval_s`` seconds is above the limit, so it is stopped before it crosses the limit
    rather than one poll after. A limit already spent at the first poll stops it at once.

    :param elapsed_s: seconds the job has run (:func:`batch_job_run_seconds`).
    :param instances: Batch nodes (>= 1).
    :param usd_per_hour: on-demand USD per node-hour; None = unknown price (no check).
    :param limit_usd: USD the job may spend (:func:`training_cost_limit`); None = no limit (no check).
    :param poll_interval_s: seconds until the next status poll (>= 0).
    :return: the verdict, or None when there is nothing to check (no limit or no price).
    """
    if limit_usd is None or usd_per_hour is None:
        return None
    poll = max(float(poll_interval_s), 0.0)
    cost = elapsed_cost_usd(0.0, elapsed_s, instances, usd_per_hour)
    next_cost = elapsed_cost_usd(0.0, elapsed_s + poll, instances, usd_per_hour)
    return BudgetVerdict(elapsed_s=float(elapsed_s), instances=int(instances), usd_per_hour=float(usd_per_hour),
                         cost_usd=cost, next_poll_cost_usd=next_cost, limit_usd=float(limit_usd),
                         poll_interval_s=poll, over_budget=next_cost > float(limit_usd))
