"""Evaluation stage (group ``evaluate``): closed-loop evaluation of the checkpoint on the workstation
through SSM, the report read back and checked, the workstation stopped (if this run started it)."""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import Asset

from sim2real.contract import evaluator
from sim2real.contract import task_ids as ids
from sim2real.contract.stats import wilson_interval
from sim2real.orchestration import assets
from sim2real.orchestration.config import DEFAULT_EVAL_COMMAND
from sim2real.orchestration.dag_defaults import POLL
from sim2real.orchestration.params import SECTION_BUDGET, SECTION_EVAL, _range
from sim2real.orchestration.slurm import bash_commands
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs
from sim2real.orchestration.stages.checkpoint import CheckpointPlan
from sim2real.orchestration.stages.rounds import eval_seed_of

DOC = """\
**Closed-loop evaluation on the workstation.** Calls EC2 `DescribeInstances` (by tag) and `StartInstances`
if it is stopped; SSM `DescribeInstanceInformation`, `SendCommand` (`AWS-RunShellScript`, with the form's
execution timeout and output to S3), `GetCommandInvocation` (`CancelCommand` when killed). Waits (deferred)
for the command's Success on the workstation. Hands on `eval/report.json` (success rate, Wilson 95%
interval, seeds, checkpoint sha256), checked against this run's checkpoint. The teardown
`stop_workstation` calls EC2 `StopInstances` — only if this run started the instance.
"""

GROUP_ID = ids.EVALUATE_GROUP
#: A value of this run's plan's evaluation section, as a template (rendered when the task runs).
_PLAN_EVALUATION = "{{{{ ti.xcom_pull(task_ids='" + ids.PREPARE_RUN + "')['plan']['evaluation']['{key}'] }}}}"
TASK_IDS = (ids.EVAL_COMMAND, ids.RUN_EVALUATION, ids.READ_EVAL_REPORT, ids.STOP_WORKSTATION)
#: Updated by ``read_eval_report`` (success rate and interval on the event).
EVAL_REPORT_ASSET = Asset(name="sim2real_eval_report", uri="sim2real://rl/eval-report")


@dataclass(frozen=True)
class EvaluationPlan(PlanSection):
    """The evaluation command of a run: where it runs, how many episodes, where its report goes."""

    SECTION = "evaluation"
    workstation_tag_key: str
    workstation_tag_value: str
    report_uri: str  #: ``<run_uri>eval/report.json``
    episodes: int
    seed: int  #: episode i uses seed + i
    execution_timeout_seconds: int  #: SSM executionTimeout
    output_s3_bucket: str
    output_s3_key_prefix: str  #: the command's stdout/stderr: ``runs/<run_key>/eval/ssm``
    command_template: str  #: ``str.format`` template; fields in :func:`eval_commands`
    #: exported before the command: the evaluation's MLflow child run (``sim2real.contract.env_vars``; set by
    #: :func:`sim2real.orchestration.stages.run.apply_tracking`, empty when tracking is off)
    environment: dict[str, str] = field(default_factory=dict)


def params() -> dict[str, Any]:
    """The evaluation fields of the trigger form."""
    from airflow.sdk import Param

    return {
        "eval_episodes": Param(evaluator.DEFAULTS["episodes"], type="integer", title="Episodes",
                               description="Episodes of the evaluation (episode i: seed eval_seed + i). Warning: "
                               "below 20 the 95% interval is too wide for the quality gate to mean much; the run "
                               "note then says so. The value is used as given, never changed.",
                               section=SECTION_EVAL, **_range(minimum=1, maximum=10_000)),
        "eval_seed": Param(evaluator.DEFAULTS["seed"], type="integer", title="First episode seed",
                           description="Episode i uses seed eval_seed + i (retraining round k: eval_seed + (k - 1) x "
                           "eval_episodes + i, fresh episodes each round).", section=SECTION_EVAL,
                           **_range(minimum=0, maximum=2**31 - 1)),
        "eval_timeout_minutes": Param(30, type="integer",
                                      title="Evaluation command timeout (min)",
                                      description="SSM executionTimeout (the SSM default would be 1 h).",
                                      section=SECTION_BUDGET, **_range(minimum=1, maximum=110)),
    }


def plan(ctx: PlanContext) -> EvaluationPlan:
    ev = ctx.env["evaluation"]
    return EvaluationPlan(
        workstation_tag_key=ev["workstation_tag_key"],
        workstation_tag_value=ev["workstation_tag_value"],
        report_uri=f"{ctx.run_uri}eval/report.json",
        episodes=int(ctx.params["eval_episodes"]),
        seed=eval_seed_of(ctx.params),  # round k: eval_seed + (k - 1) x eval_episodes (fresh seeds)
        execution_timeout_seconds=int(ctx.params["eval_timeout_minutes"]) * 60,
        output_s3_bucket=ctx.bucket,
        output_s3_key_prefix=f"{ctx.run_prefix}eval/ssm",
        command_template=ev.get("command_template") or DEFAULT_EVAL_COMMAND,
    )


def eval_commands(plan: Mapping[str, Any], manifest: Mapping[str, Any], *, manifest_uri: str | None = None,
                  report_uri: str | None = None, seed: int | None = None,
                  environment: Mapping[str, str] | None = None) -> list[str]:
    """The shell commands the workstation runs for this run's evaluation (``AWS-RunShellScript``).

    :param plan: ``plan_run``'s output.
    :param manifest: the validated checkpoint manifest (``checkpoint_uri``, ``task``).
    :param manifest_uri: / :param report_uri: / :param seed: / :param environment: a sweep candidate's own
        (:mod:`sim2real.orchestration.stages.sweep`); default: the run's (``checkpoint.manifest_uri``, the
        ``evaluation`` section's ``report_uri``, ``seed`` and ``environment``).
    :return: the section's ``environment`` as ``export NAME=value`` lines (sorted by name), then the evaluation
        command, every value shell-quoted, run with ``bash -euo pipefail``
        (:func:`sim2real.orchestration.slurm.bash_commands`: AWS-RunShellScript uses ``sh``).
    """
    ev = EvaluationPlan.from_plan(plan)
    ckpt = CheckpointPlan.from_plan(plan)
    fields = {
        evaluator.VERSION_FIELD: evaluator.CONTRACT_VERSION,
        "manifest_uri": manifest_uri or ckpt.manifest_uri,
        "checkpoint_uri": manifest["checkpoint_uri"],
        "report_uri": report_uri or ev.report_uri,
        "episodes": ev.episodes,
        "seed": ev.seed if seed is None else int(seed),
        "task": manifest.get("task") or ckpt.task,
    }
    quoted = {k: shlex.quote(str(v)) for k, v in fields.items()}
    env = ev.environment if environment is None else environment
    exports = [f"export {k}={shlex.quote(str(v))}" for k, v in sorted(env.items())]
    return bash_commands([*exports, ev.command_template.format(**quoted)])


def check_report(report: Mapping[str, Any], *, expected_sha256: str, expected_episodes: int) -> None:
    """Refuse an evaluation report that does not match its schema (``eval_report``, :mod:`sim2real.contract.schemas`:
    an evaluator of another release may write another shape), does not belong to this checkpoint or is inconsistent.

    :raises ValueError: naming the field that is wrong.
    """
    from sim2real.contract import schemas

    problems = schemas.errors("eval_report", report)
    if problems:
        raise ValueError("eval report does not match the eval_report schema: " + "; ".join(problems[:5]))
    if report.get("checkpoint_sha256") != expected_sha256:
        raise ValueError(f"eval report is for checkpoint sha256 {report.get('checkpoint_sha256')!r}, "
                         f"expected {expected_sha256!r}")
    n = report.get("episodes")
    if n != expected_episodes:
        raise ValueError(f"eval report has {n} episodes, the run asked for {expected_episodes}")
    k = report.get("successes")
    if not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"eval report has an invalid success count {k!r}")
    rate = report.get("success_rate")
    if rate is None or abs(rate - k / n) > 1e-9:
        raise ValueError(f"eval report success_rate {rate!r} != successes/episodes {k}/{n}")
    lo, hi = wilson_interval(k, n)
    ci = report.get("ci95") or [None, None]
    if not all(isinstance(v, (int, float)) for v in ci) or abs(ci[0] - lo) > 1e-6 or abs(ci[1] - hi) > 1e-6:
        raise ValueError(f"eval report ci95 {ci!r} is not the Wilson 95% interval [{lo:.6f}, {hi:.6f}] of {k}/{n}")


def add_tasks(plan: Any, *, manifest: Any, trained: Any) -> tuple[Any, Any]:
    """Add the ``evaluate`` group after the checkpoint (``trained``: ``checkpoint.training_job``'s output, whose
    ``manifest_uri`` names the checkpoint's manifest); return ``(read_eval_report, stop_workstation)``."""
    from airflow.sdk import TaskGroup, task
    from airflow.sdk.exceptions import AirflowFailException

    from sim2real.orchestration.operators.ssm import WorkstationCommandOperator, WorkstationStopOperator

    ev = refs(plan, EvaluationPlan)
    with TaskGroup(GROUP_ID, tooltip="closed-loop evaluation on the workstation via SSM", doc_md=DOC):

        @task(task_id=ids.local(ids.EVAL_COMMAND), execution_timeout=dt.timedelta(minutes=1))
        def eval_command(plan: dict, manifest: dict, trained: dict) -> list:
            # a sweep: the winning candidate's manifest (checkpoint.training_job names it)
            return eval_commands(plan, manifest, manifest_uri=trained.get("manifest_uri"))

        commands = eval_command(plan["plan"], manifest.output, trained)
        evaluation = WorkstationCommandOperator(
            task_id=ids.local(ids.RUN_EVALUATION),
            workstation_tag_key=ev.workstation_tag_key,
            workstation_tag_value=ev.workstation_tag_value,
            commands=commands,
            execution_timeout_seconds=ev.execution_timeout_seconds,
            output_s3_bucket=ev.output_s3_bucket,
            output_s3_key_prefix=ev.output_s3_key_prefix,
            waiter_delay=POLL,
            execution_timeout=dt.timedelta(hours=2),
            doc_md=DOC,
        )

        @task(task_id=ids.local(ids.READ_EVAL_REPORT), multiple_outputs=True, outlets=[EVAL_REPORT_ASSET],
              execution_timeout=dt.timedelta(minutes=5))
        def read_eval_report(plan: dict, manifest: dict, evaluation: dict, outlet_events=None) -> dict:
            """Read eval/report.json from S3 and check it belongs to this checkpoint."""
            import json

            from airflow.providers.amazon.aws.hooks.s3 import S3Hook

            section = EvaluationPlan.from_plan(plan)
            report = json.loads(S3Hook().read_key(key=section.report_uri))
            try:
                check_report(report, expected_sha256=manifest["sha256"], expected_episodes=section.episodes)
            except ValueError as err:
                raise AirflowFailException(f"{section.report_uri}: {err}") from err
            report["report_uri"] = section.report_uri
            assets.set_eval_report_extra(outlet_events, EVAL_REPORT_ASSET, report, plan["run_key"])
            return report

        report = read_eval_report(plan["plan"], manifest.output, evaluation.output)
        stop_workstation = WorkstationStopOperator(
            task_id=ids.local(ids.STOP_WORKSTATION),
            command_task_id=ids.RUN_EVALUATION,
            # A sweep's candidates may have started it while this run's own evaluation never ran. Templates, not
            # XComArgs: an XComArg of prepare_run (the lineage's setup) would make this all_done task follow it.
            workstation_tag_key=_PLAN_EVALUATION.format(key="workstation_tag_key"),
            workstation_tag_value=_PLAN_EVALUATION.format(key="workstation_tag_value"),
            trigger_rule="all_done",
            execution_timeout=dt.timedelta(minutes=15),
        )
        # Runs whatever happened to the evaluation (all_done): a workstation this run started is stopped
        # even when the command failed or timed out. (Not an Airflow teardown: a teardown whose setup
        # failed would be skipped.)
        [evaluation, report] >> stop_workstation
    return report, stop_workstation
