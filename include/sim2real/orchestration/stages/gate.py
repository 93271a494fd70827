"""Quality gate (task ``quality_gate``): the evaluated policy is released only above the bar."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration.lineage import VERDICT_KEY
from sim2real.orchestration.params import SECTION_EVAL, _range
from sim2real.orchestration.stages._base import PlanContext, PlanSection

DOC = """\
**Quality gate.** Calls no AWS API: compares the evaluated success rate (or its 95% lower bound) with
`min_success_rate`. Waits for nothing. Hands on the verdict when it passes (the release goes on); when it
fails, the run stops here with the reason (a verdict, not an infrastructure failure) and a "gate failed"
SNS notification carries it.
"""

GROUP_ID = None
TASK_IDS = (ids.QUALITY_GATE,)


class QualityGateFailed(Exception):
    """The evaluated policy is below the release bar (a verdict, not an infrastructure failure)."""


@dataclass(frozen=True)
class QualityGatePlan(PlanSection):
    """The release bar of a run."""

    SECTION = "quality_gate"
    min_success_rate: float
    on_lower_bound: bool  #: compare the Wilson 95% lower bound instead of the point estimate


def params() -> dict[str, Any]:
    """The gate's fields of the trigger form."""
    from airflow.sdk import Param

    return {
        "min_success_rate": Param(
            0.8, type="number", title="Quality gate: minimum success rate",
            description="The release stops unless the evaluated success rate (by default its 95% interval's "
            "lower bound) reaches this value. Reference for the default task (Reacher-v5, success = fingertip "
            "within 0.05 m of the target at the last step): a uniform random policy scores about 0.05-0.10; 60 s "
            "of training with 32 environments on 2 cores 0.98-1.00 (lower bound 0.93-0.96 over 100 episodes). "
            "Set it per task: Pusher-v5 reaches about 0.2 in 300 s. Warning: 0 lets every policy pass (no gate); "
            "the run note then says so. The value is used as given, never changed.",
            section=SECTION_EVAL, **_range(minimum=0, maximum=1)),
        "gate_on_lower_bound": Param(
            True, type="boolean", title="Gate on the 95% interval's lower bound",
            description="Stricter: compare the Wilson lower bound instead of the point estimate.",
            section=SECTION_EVAL,
        ),
    }


def plan(ctx: PlanContext) -> QualityGatePlan:
    return QualityGatePlan(min_success_rate=float(ctx.params["min_success_rate"]),
                           on_lower_bound=bool(ctx.params["gate_on_lower_bound"]))


def quality_gate(report: Mapping[str, Any], *, min_success_rate: float, on_lower_bound: bool) -> dict[str, Any]:
    """Decide whether the evaluated policy may be released.

    :return: ``{"passed": bool, "metric": "success_rate"|"ci95_lower", "value", "threshold", "reason"}``.
    """
    metric = "ci95_lower" if on_lower_bound else "success_rate"
    value = float(report["ci95"][0] if on_lower_bound else report["success_rate"])
    passed = value >= min_success_rate
    reason = (f"{metric} {value:.3f} {'>=' if passed else '<'} threshold {min_success_rate:.3f} "
              f"({report['successes']}/{report['episodes']} episodes succeeded, "
              f"95% CI [{report['ci95'][0]:.3f}, {report['ci95'][1]:.3f}])")
    return {"passed": passed, "metric": metric, "value": value, "threshold": min_success_rate, "reason": reason}


def add_tasks(plan: Any, *, report: Any) -> Any:
    """Add ``quality_gate`` after the evaluation report; return it."""
    from airflow.sdk import task
    from airflow.sdk.exceptions import AirflowFailException

    from sim2real.orchestration import notifications as notify

    @task(task_id=ids.QUALITY_GATE, multiple_outputs=True, retries=0, execution_timeout=dt.timedelta(minutes=1),
          doc_md=DOC, on_failure_callback=notify.gate_failed())
    def gate(report: dict, plan: dict, ti=None) -> dict:
        """Pass → the release goes on. Fail → the run stops here with the reason (not an infra failure)."""
        return decide(report, plan, ti, fail=AirflowFailException)

    return gate(report, plan["plan"])


def decide(report: Mapping[str, Any], plan: Mapping[str, Any], ti: Any, *, fail: type[Exception]) -> dict[str, Any]:
    """The gate task's body: the verdict (:func:`quality_gate` with the plan's bar), pushed to XCom
    :data:`sim2real.orchestration.lineage.VERDICT_KEY` so that the report and the run note show a failed gate's value and reason too.

    :return: the verdict when it passed.
    :raises fail: ``QUALITY GATE FAILED: <reason>`` when it did not.
    """
    bar = QualityGatePlan.from_plan(plan)
    verdict = quality_gate(report, min_success_rate=bar.min_success_rate, on_lower_bound=bar.on_lower_bound)
    if ti is not None:
        ti.xcom_push(key=VERDICT_KEY, value=verdict)
    if not verdict["passed"]:
        raise fail("QUALITY GATE FAILED: " + verdict["reason"])
    return verdict
