"""Retraining rounds: when the quality gate fails, the run starts the next round as a new run of the DAG.

A run is one **round**. Its plan section (:class:`RoundPlan`) says which round it is, the most rounds the
loop may take (``max_rounds``) and, from round 2 on, the run it continues (``parent_run_id``), the checkpoint
it resumes from (the best one so far, by the Wilson 95% lower bound of its success rate) and every earlier
round's result (``history``). When the gate fails and rounds are left, ``plan_next_round`` writes the next
round's run conf and ``next_round`` (Airflow's ``TriggerDagRunOperator``) creates that run; the DAG's
``max_active_runs=1`` makes it start once this one has ended. The round's own run then:

* copies the resumed checkpoint (``agent_<n>.pt`` and its ``.sha256`` sidecar, S3 ``CopyObject``) into its
  own ``checkpoints/`` prefix in ``prepare_run`` (:func:`seed_checkpoint`, sha256 verified), so the trainer's
  auto-resume (the newest complete checkpoint under ``OUTPUT_URI``) continues from it;
* trains up to ``round_iterations`` more PPO iterations (``MAX_ITERATIONS`` = resumed iteration +
  ``round_iterations``: the trainer counts iterations across resumes) within ``train_time_budget_seconds``;
  the job's environment names the copy and its iteration (:func:`resume_environment`), which the Isaac Lab
  launcher needs (the copy has no manifest to read the iteration from);
* is evaluated with fresh seeds: round ``k`` starts at ``eval_seed + (k - 1) × eval_episodes``, so no
  round reuses an earlier round's episodes.

The loop stops at the first round whose gate passes (that run releases) or after round ``max_rounds``
(that run fails at the gate). Every round's run ends in its own true state: a round below the bar fails at
its gate, whether or not a next round follows. ``max_rounds`` = 1 (the default) is a run without rounds.

With a sweep, round 1 is the sweep (its winner is the round's policy) and every later round **continues the
best**: it retrains the winner's params from the best checkpoint so far (the winner's, or a later round's when
better), without a sweep (:func:`next_round_conf`).
Why a new run and not a chain of task groups: docs/architecture.md, "Retraining rounds".
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim2real.contract import env_vars as ev
from sim2real.contract import task_ids as ids
from sim2real.contract.stats import wilson_interval
from sim2real.orchestration.candidates import SWEEP_KEYS, expand_sweep
from sim2real.orchestration.params import RETRAIN_FIELD, SECTION_TRAINING, _range
from sim2real.orchestration.stages._base import PlanContext, PlanSection
from sim2real.orchestration.stages.gate import QualityGatePlan, quality_gate

DOC = """\
**Next retraining round.** Calls no AWS API. Runs only when the quality gate failed: with rounds left
(`max_rounds`) it plans the next round (the checkpoint with the best 95% lower bound so far, fresh evaluation
seeds, every round's success rate so far; after a sweep, the winning candidate's params without the sweep, read
from `pick_best`) and `next_round` triggers it as a new run of this DAG (it starts
when this run has ended: `max_active_runs=1`); on the last round, or when the gate never judged a policy
(a failure before it), it is skipped with the reason. Waits for nothing. Hands on the next run's conf.
"""

GROUP_ID = None
TASK_IDS = (ids.PLAN_NEXT_ROUND, ids.NEXT_ROUND)

#: Most rounds a loop may take (the form's bound).
MAX_ROUNDS_LIMIT = 10
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHECKPOINT_NAME = re.compile(r"^agent_\d+\.pt$")


@dataclass(frozen=True)
class RoundPlan(PlanSection):
    """Which round this run is, and what it continues."""

    SECTION = "rounds"
    round: int  #: 1 for a fresh run
    max_rounds: int
    round_iterations: int  #: PPO iterations each further round adds to the resumed checkpoint's
    max_iterations: int  #: the trainer's MAX_ITERATIONS in this round (counted across resumes)
    eval_seed: int  #: this round's first evaluation seed (episode i: eval_seed + i)
    parent_run_id: str | None = None  #: the run of the round before (None in round 1)
    parent_run_key: str | None = None
    #: the checkpoint this round resumes from (the best so far): ``{"checkpoint_uri", "sha256", "iteration",
    #: "round"}``; None in round 1
    resume_from: dict[str, Any] | None = None
    #: where ``prepare_run`` copies it: ``<run_uri>checkpoints/agent_<n>.pt`` (None in round 1)
    resumed_checkpoint_uri: str | None = None
    #: the earlier rounds' results, oldest first (:func:`round_result`)
    history: list[dict[str, Any]] = field(default_factory=list)
    #: a later round of a sweep loop: round 1's sweep (``field``, ``base``, ``winner``, ``overrides``, ``run_id``,
    #: ``candidates``, ``failed``); None otherwise
    sweep: dict[str, Any] | None = None


def params() -> dict[str, Any]:
    """The retraining fields of the trigger form."""
    from airflow.sdk import Param

    return {
        "max_rounds": Param(
            1, type="integer", title="Retraining rounds (max)",
            description="When the quality gate fails, retrain and evaluate again, up to this many rounds in all; "
            "each further round is a new run of this DAG that resumes from the best checkpoint so far and is "
            "evaluated with fresh seeds. The loop stops at the first round that passes (and releases). "
            "With a sweep, round 1 is the sweep and each further round continues its best: it retrains the "
            "winning candidate's params from the best checkpoint so far (the sweep is not run again); the budget "
            "counts round 1's candidates and the later rounds' training. "
            "1 = no retraining: a gate failure ends the loop.",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=MAX_ROUNDS_LIMIT)),
        "round_iterations": Param(
            1000, type="integer", title="Iterations per further round",
            description="PPO iterations each further round trains beyond the checkpoint it resumes from, within "
            "the training time budget (which applies to every round).",
            section=SECTION_TRAINING, **_range(minimum=1, maximum=100_000)),
    }


def eval_seed_of(params: Mapping[str, Any]) -> int:
    """This round's first evaluation seed: ``eval_seed + (round - 1) × eval_episodes`` (fresh episodes)."""
    round_ = int((params.get(RETRAIN_FIELD) or {}).get("round") or 1)
    return int(params["eval_seed"]) + (round_ - 1) * int(params["eval_episodes"])


def max_iterations_of(params: Mapping[str, Any]) -> int:
    """The trainer's ``MAX_ITERATIONS`` this round: the form's in round 1, else the resumed checkpoint's
    iteration + ``round_iterations``."""
    link = params.get(RETRAIN_FIELD)
    if not link:
        return int(params["max_iterations"])
    return int(link["resume_from"]["iteration"]) + int(params["round_iterations"])


def resume_environment(ctx: PlanContext) -> dict[str, str]:
    """The training job's resume variables in a further round (:mod:`sim2real.contract.env_vars`): the copy
    ``prepare_run`` makes (``RESUMED_CHECKPOINT_URI``) and its iteration (``RESUMED_ITERATION``), so the Isaac
    Lab launcher trains ``MAX_ITERATIONS`` - that iteration (= ``round_iterations``) more, not ``MAX_ITERATIONS``:
    the copy comes without a manifest to read the iteration from. Empty in round 1."""
    link = ctx.params.get(RETRAIN_FIELD)
    if not link:
        return {}
    resume = link["resume_from"]
    return {ev.RESUMED_CHECKPOINT_URI: f"{ctx.checkpoint_uri}{resume['checkpoint_uri'].rsplit('/', 1)[-1]}",
            ev.RESUMED_ITERATION: str(int(resume["iteration"]))}


def rule_errors(params: Mapping[str, Any]) -> list[str]:
    """The cross-field rules of the rounds (:func:`sim2real.orchestration.stages.run.check_params` lists them).

    :return: one sentence per broken rule: a ``retrain_round`` link that is not one a previous round writes
        (round number out of range, history not rounds 1 … round-1, a resume checkpoint that is not an S3
        ``agent_<n>.pt`` with a 64-hex sha256, a ``sweep`` entry that is not round 1's, a sweep in a later
        round), seeds of the last round or of a sweep's candidates past 2**31 - 1.
    """
    errors: list[str] = []
    max_rounds = int(params.get("max_rounds", 1))
    eval_seed, episodes = int(params.get("eval_seed", 0)), int(params.get("eval_episodes", 0))
    last_seed = eval_seed + max_rounds * episodes - 1
    if last_seed > 2**31 - 1:
        errors.append(f"eval_seed + max_rounds x eval_episodes - 1 = {last_seed} is above 2**31 - 1 (the last "
                      "round's seeds): lower eval_seed, eval_episodes or max_rounds")
    # A sweep evaluates its candidates on the episodes after every round's gate episodes (stages/sweep.py:
    # selection_eval_seed = eval_seed + max_rounds x eval_episodes), so its last seed is
    # eval_seed + (max_rounds + 1) x eval_episodes - 1.
    sweep_last_seed = eval_seed + (max_rounds + 1) * episodes - 1
    if params.get("sweep") and sweep_last_seed > 2**31 - 1:
        errors.append(f"eval_seed + (max_rounds + 1) x eval_episodes - 1 = {sweep_last_seed} is above 2**31 - 1 (the "
                      "seeds the sweep's candidates are evaluated on, after every round's gate episodes): lower "
                      "eval_seed, eval_episodes or max_rounds")
    link = params.get(RETRAIN_FIELD)
    if not link:  # absent, null or an empty object: a new run (round 1)
        return errors
    where = f"{RETRAIN_FIELD} (set by the previous round's run; leave it out of a new run's conf)"
    if not isinstance(link, Mapping):
        errors.append(f"{where} must be an object (the link a previous round writes), got {link!r}")
        return errors
    round_ = link.get("round")
    if not isinstance(round_, int) or isinstance(round_, bool) or not 2 <= round_ <= max_rounds:
        errors.append(f"{where}: round must be an integer from 2 to max_rounds ({max_rounds}), got {round_!r}")
        return errors
    for key in ("parent_run_id", "parent_run_key"):
        if not isinstance(link.get(key), str) or not link.get(key):
            errors.append(f"{where}: {key} must name the previous round's run, got {link.get(key)!r}")
    history = link.get("history")
    if not isinstance(history, list) or [h.get("round") if isinstance(h, Mapping) else None
                                         for h in history] != list(range(1, round_)):
        errors.append(f"{where}: history must hold rounds 1 to {round_ - 1}, oldest first")
    resume = link.get("resume_from")
    if not isinstance(resume, Mapping):
        errors.append(f"{where}: resume_from must be an object with checkpoint_uri, sha256 and iteration")
        return errors
    uri = str(resume.get("checkpoint_uri") or "")
    if not uri.startswith("s3://") or not _CHECKPOINT_NAME.match(uri.rsplit("/", 1)[-1]):
        errors.append(f"{where}: resume_from.checkpoint_uri must be an s3://…/agent_<n>.pt checkpoint, got {uri!r}")
    if not _SHA256.match(str(resume.get("sha256") or "")):
        errors.append(f"{where}: resume_from.sha256 must be 64 lowercase hex digits, got {resume.get('sha256')!r}")
    iteration = resume.get("iteration")
    if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
        errors.append(f"{where}: resume_from.iteration must be a non-negative integer, got {iteration!r}")
    swept = link.get("sweep")
    if swept is not None:
        try:
            count = len(expand_sweep(swept.get("field"))) if isinstance(swept, Mapping) else 0
        except ValueError:
            count = 0
        if not count or not isinstance(swept.get("base"), Mapping) or not isinstance(swept.get("winner"), str):
            errors.append(f"{where}: sweep must be round 1's sweep (field, base, winner, overrides), got {swept!r}")
        if params.get("sweep"):
            errors.append(f"{where}: a round after a sweep retrains its winner only: clear sweep")
    return errors


def plan(ctx: PlanContext) -> RoundPlan:
    p = ctx.params
    link = p.get(RETRAIN_FIELD) or {}
    resume = dict(link["resume_from"]) if link else None
    return RoundPlan(
        round=int(link.get("round") or 1), max_rounds=int(p["max_rounds"]),
        round_iterations=int(p["round_iterations"]), max_iterations=max_iterations_of(p), eval_seed=eval_seed_of(p),
        parent_run_id=link.get("parent_run_id"), parent_run_key=link.get("parent_run_key"), resume_from=resume,
        resumed_checkpoint_uri=resume_environment(ctx).get(ev.RESUMED_CHECKPOINT_URI),
        history=[dict(h) for h in link.get("history") or []],
        sweep=dict(link["sweep"]) if link.get("sweep") else None,
    )


def round_result(plan: Mapping[str, Any], run_id: str, report: Mapping[str, Any], manifest: Mapping[str, Any],
                 verdict: Mapping[str, Any]) -> dict[str, Any]:
    """One round's entry in the history: its run, checkpoint, evaluation seeds and success rate with interval.

    :param report: the round's checked evaluation report (``read_eval_report``).
    :param manifest: the round's verified checkpoint manifest (``wait_for_checkpoint``).
    :param verdict: :func:`sim2real.orchestration.stages.gate.quality_gate`'s result for it.
    """
    section = RoundPlan.from_plan(plan)
    successes, episodes = int(report["successes"]), int(report["episodes"])
    return {
        "round": section.round, "run_id": run_id, "run_key": plan["run_key"],
        "success_rate": float(report["success_rate"]), "ci95": [float(v) for v in report["ci95"]],
        "successes": successes, "episodes": episodes, "first_seed": section.eval_seed,
        "checkpoint_uri": manifest["checkpoint_uri"], "checkpoint_sha256": manifest["sha256"],
        "iteration": manifest.get("iteration"), "passed": bool(verdict["passed"]),
    }


def best_round(history: list[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The round whose policy is the best so far: the highest Wilson 95% lower bound of its success rate
    (the later round on a tie: it trained longer).

    :raises ValueError: ``history`` is empty.
    """
    if not history:
        raise ValueError("no round has been evaluated")
    return max(history, key=lambda h: (wilson_interval(int(h["successes"]), int(h["episodes"]))[0], h["round"]))


def next_round_conf(plan: Mapping[str, Any], this_round: Mapping[str, Any], *, run_id: str,
                    sweep: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The next round's run conf, or ``None`` when this round passed or was the last.

    A round after a sweep **continues the best**: it retrains the winning candidate's params (its overrides over
    the run's params, the ``sweep`` field cleared) from the best checkpoint so far; it does not run the sweep
    again. Round 1's sweep (the field, the base values of the swept keys, the winner) travels in the link, so that
    every round's budget estimate is the same whole-loop figure (:func:`sim2real.orchestration.budget.estimate_run_cost`).

    :param plan: this run's plan (``params`` are handed on as they were used, with the round link).
    :param this_round: :func:`round_result` of this run.
    :param sweep: this run's ``pick_best`` result when it ran a sweep (round 1 of a sweep loop), else ``None``.
    :return: ``{**params, "retrain_round": {"round", "parent_run_id", "parent_run_key", "resume_from",
        "history", "sweep" (only after a sweep)}}`` where ``resume_from`` is :func:`best_round` of the history
        with this round.
    """
    section = RoundPlan.from_plan(plan)
    if this_round["passed"] or section.round >= section.max_rounds:
        return None
    history = [*section.history, dict(this_round)]
    best = best_round(history)
    link: dict[str, Any] = {
        "round": section.round + 1, "parent_run_id": run_id, "parent_run_key": plan["run_key"],
        "resume_from": {"checkpoint_uri": best["checkpoint_uri"], "sha256": best["checkpoint_sha256"],
                        "iteration": int(best["iteration"] or 0), "round": best["round"]},
        "history": history,
    }
    params = dict(plan["params"])
    earlier = (params.get(RETRAIN_FIELD) or {}).get("sweep")
    if earlier:  # a later round of a sweep loop: round 1's sweep stays in the link
        link["sweep"] = dict(earlier)
    elif sweep and params.get("sweep"):
        winner = next(c for c in sweep["candidates"] if c["index"] == sweep["winner"])
        link["sweep"] = {"field": params["sweep"], "base": {k: params.get(k) for k in SWEEP_KEYS},
                         "winner": winner["candidate"], "overrides": dict(winner["overrides"]),
                         "run_id": run_id, "candidates": len(sweep["candidates"]),
                         "failed": len(sweep.get("failed") or [])}
        params = {**params, **winner["overrides"], "sweep": None}
    return {**params, RETRAIN_FIELD: link}


def lineage_entry(plan: Mapping[str, Any], *, run_id: str, evaluation: Mapping[str, Any] | None,
                  checkpoint: Mapping[str, Any] | None, next_run_id: str | None) -> dict[str, Any] | None:
    """The lineage's ``rounds`` entry: this run's round, what it resumed from, the success rate of every round so
    far (the earlier rounds' and, when evaluated, this one's) and the next round's run, if one was started.

    :param evaluation: this run's evaluation report (None: not evaluated); ``checkpoint``: its manifest.
    :param next_run_id: the run ``next_round`` triggered (XCom ``trigger_run_id``), or None.
    :return: ``{"round", "max_rounds", "parent_run_id", "parent_run_key", "resumed_from", "rounds": [...],
        "next_run_id", "outcome", "sweep"}`` (``sweep``: round 1's sweep in a later round of a sweep loop: its run,
        winner and overrides, candidates and how many failed; else None); ``outcome`` is ``passed``,
        ``retraining`` (a next round was started),
        ``gate_failed`` (the last round, or none could be started) or ``not_evaluated``; ``None`` for a plan
        without a ``rounds`` section.
    """
    if RoundPlan.SECTION not in plan:
        return None
    section = RoundPlan.from_plan(plan)
    results = [dict(h) for h in section.history]
    outcome = "not_evaluated"
    if evaluation and checkpoint:
        bar = QualityGatePlan.from_plan(plan)
        verdict = quality_gate(evaluation, min_success_rate=bar.min_success_rate, on_lower_bound=bar.on_lower_bound)
        results.append(round_result(plan, run_id, evaluation, checkpoint, verdict))
        outcome = "passed" if verdict["passed"] else ("retraining" if next_run_id else "gate_failed")
    return {"round": section.round, "max_rounds": section.max_rounds, "parent_run_id": section.parent_run_id,
            "parent_run_key": section.parent_run_key, "resumed_from": section.resume_from, "rounds": results,
            "next_run_id": next_run_id, "outcome": outcome,
            "sweep": ({k: section.sweep.get(k) for k in ("run_id", "winner", "overrides", "candidates", "failed")}
                      if section.sweep else None)}


def seed_checkpoint(plan: Mapping[str, Any], *, s3_hook: Any = None, conn_id: str | None = "aws_default") -> dict | None:
    """Copy the checkpoint a round resumes from into this run's ``checkpoints/`` (S3 ``CopyObject`` of
    ``agent_<n>.pt`` and its ``.sha256`` sidecar) and verify its sha256, so that the trainer's auto-resume
    continues from it. Round 1: nothing to do.

    :return: ``{"source", "copied_to", "sha256", "iteration"}``, or ``None`` in round 1.
    :raises ValueError: the source's bytes or sidecar do not hash to the sha256 the previous round recorded
        (naming both), or the source is missing (the previous run's folder was removed: start a new run).
    """
    section = RoundPlan.from_plan(plan)
    if section.resume_from is None:
        return None
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    import hashlib

    from sim2real.contract.storage import split_s3

    hook = s3_hook or S3Hook(aws_conn_id=conn_id)
    source, expected = section.resume_from["checkpoint_uri"], section.resume_from["sha256"]
    dest = section.resumed_checkpoint_uri
    for src, dst in ((source, dest), (f"{source}.sha256", f"{dest}.sha256")):
        (sb, sk), (db, dk) = split_s3(src), split_s3(dst)
        if not hook.check_for_key(sk, bucket_name=sb):
            raise ValueError(f"round {section.round} resumes from {src}, which no longer exists (the run "
                             f"{section.parent_run_id} wrote it): start a new run instead")
        hook.copy_object(source_bucket_key=sk, dest_bucket_key=dk, source_bucket_name=sb, dest_bucket_name=db)
    db, dk = split_s3(f"{dest}.sha256")
    sidecar = (hook.read_key(dk, bucket_name=db).split() or [""])[0]
    digest = hashlib.sha256()
    body = hook.get_key(split_s3(dest)[1], bucket_name=db).get()["Body"]  # S3 GetObject, streamed
    for chunk in iter(lambda: body.read(8 * 1024 * 1024), b""):
        digest.update(chunk)
    actual = digest.hexdigest()
    if actual != expected or sidecar != expected:
        raise ValueError(f"round {section.round}: the checkpoint {source} hashes to {actual} (sidecar {sidecar!r}), "
                         f"the previous round recorded {expected}: it changed since; start a new run")
    return {"source": source, "copied_to": dest, "sha256": actual, "iteration": section.resume_from["iteration"]}


def add_tasks(plan: Any, *, gate: Any, report: Any, manifest: Any) -> Any:  # noqa: ARG001 - plan: the stages' signature
    """Add ``plan_next_round`` (after the gate, only when it failed) and ``next_round`` (the next round's run);
    return ``next_round``.

    :param report: the evaluation report task the gate judged; ``manifest``: the checkpoint it is of (their
        results are pulled by task id: an evaluation that failed leaves no XCom, and the task is then skipped).
    """
    from airflow.sdk import task
    from airflow.sdk.exceptions import AirflowSkipException

    report_task_id, manifest_task_id = report.operator.task_id, manifest.task_id

    @task(task_id=ids.PLAN_NEXT_ROUND, trigger_rule="all_failed", retries=0, multiple_outputs=False,
          execution_timeout=dt.timedelta(minutes=1), doc_md=DOC)
    def plan_next_round(dag_run=None, ti=None) -> dict:
        """The next round's run conf; skipped when there is none (last round, or no evaluated policy)."""
        # The plan is pulled, not passed: a task right after prepare_run (the lineage's setup) would count it
        # among its upstream tasks, and all_failed would never fire.
        plan = (ti.xcom_pull(task_ids=ids.PREPARE_RUN) or {})["plan"]
        section = RoundPlan.from_plan(plan)
        if section.round >= section.max_rounds:
            raise AirflowSkipException(f"round {section.round} of {section.max_rounds} was the last: the loop "
                                       "ends with the gate failed")
        evaluated, checkpoint = ti.xcom_pull(task_ids=report_task_id), ti.xcom_pull(task_ids=manifest_task_id)
        if not evaluated or not checkpoint:
            raise AirflowSkipException("no evaluated policy (the run failed before the gate): no retraining")
        bar = QualityGatePlan.from_plan(plan)
        verdict = quality_gate(evaluated, min_success_rate=bar.min_success_rate, on_lower_bound=bar.on_lower_bound)
        swept = ti.xcom_pull(task_ids=ids.SWEEP_PICK_BEST) if (plan.get("sweep") or {}).get("enabled") else None
        conf = next_round_conf(plan, round_result(plan, dag_run.run_id, evaluated, checkpoint, verdict),
                               run_id=dag_run.run_id, sweep=swept)
        if conf is None:  # the gate failed for another reason than the verdict
            raise AirflowSkipException(f"the policy passes the bar ({verdict['reason']}): no retraining")
        link = conf[RETRAIN_FIELD]
        ti.xcom_push(key=ROUND_NOTE_KEY, value=round_note(link, max_rounds=section.max_rounds))
        print(f"[sim2real] round {section.round} of {section.max_rounds} below the bar ({verdict['reason']}); "
              f"round {link['round']} resumes from {link['resume_from']['checkpoint_uri']} "
              f"(round {link['resume_from']['round']}, the best so far)"
              + (f" with the sweep winner {link['sweep']['winner']}'s params {link['sweep']['overrides']}"
                 if link.get("sweep") else ""), flush=True)
        return conf

    conf = plan_next_round()
    gate >> conf
    next_round = _next_round_operator()(
        task_id=ids.NEXT_ROUND,
        trigger_dag_id="{{ dag.dag_id }}",
        conf=conf,
        note=f"{{{{ ti.xcom_pull(task_ids='{ids.PLAN_NEXT_ROUND}', key='{ROUND_NOTE_KEY}') }}}}",
        wait_for_completion=False,  # the next round starts once this run has ended (max_active_runs=1)
        retries=0,
        execution_timeout=dt.timedelta(minutes=2),
        doc_md=DOC,
    )
    conf >> next_round
    return next_round


#: XCom key of the next round's first run note (:func:`round_note`), pushed by ``plan_next_round``.
ROUND_NOTE_KEY = "run_note"


def round_note(link: Mapping[str, Any], *, max_rounds: int) -> str:
    """The note the next round's run is created with (Markdown), until its report writes the results:
    ``**Retraining round 2 of 3**, parent run `<run id>`: resumes from round 1's checkpoint (iteration 40).``"""
    resume = link.get("resume_from") or {}
    text = (f"**Retraining round {link['round']} of {max_rounds}**, parent run `{link['parent_run_id']}`: resumes "
            f"from round {resume.get('round')}'s checkpoint (iteration {resume.get('iteration')})")
    if link.get("sweep"):
        text += f" with the sweep winner {link['sweep'].get('winner')}'s params"
    return text + ". The results replace this note when the run ends.\n"


@functools.cache
def _next_round_operator() -> type:
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

    class NextRoundOperator(TriggerDagRunOperator):
        """Airflow's ``TriggerDagRunOperator`` with ``note`` templated (the provider templates ``conf`` but not
        ``note``): the next round's run is created with :func:`round_note`, so its page says which round it is
        and which run it continues from the moment it exists (and its note row exists before anyone marks it)."""

        template_fields = (*TriggerDagRunOperator.template_fields, "note")

    NextRoundOperator.__module__ = __name__
    return NextRoundOperator


def __getattr__(name: str) -> Any:  # the class is built on first use (the provider is imported then, not before)
    if name == "NextRoundOperator":
        return _next_round_operator()
    raise AttributeError(name)
