"""The DAG run's note: the run's results where the Airflow UI shows them (the run's "Note" panel).

``render_run_note`` turns the lineage document into Markdown of at most 1000 characters (Airflow's limit):
a warning line for each weak quality gate setting (:func:`sim2real.orchestration.stages.gate.gate_warnings`),
the success rate and its Wilson 95 % interval against the threshold, the gate verdict, the estimated against
the actual cost, a table of the stages (state, task time) and links (S3 run folder, lineage, the report's
pictures, embedded in the sandbox).

``set_run_note`` writes it on the run. Airflow 3's Task Execution API, the only API a Task SDK task may
use, has no call that changes a DAG run's note (its ``dag-runs`` routes read a run, trigger, clear or
count runs), and a task has no metadata database session. The note is therefore set through Airflow's
public REST API, ``PATCH /api/v2/dags/{dag_id}/dagRuns/{dag_run_id}`` with ``{"note": ...}`` and
``update_mask=note``:

* on Amazon MWAA through MWAA's ``InvokeRestApi`` (the Amazon provider's ``MwaaHook.invoke_rest_api``);
  the environment is the config's ``airflow.mwaa_environment_name``, else ``AIRFLOW_ENV_NAME``, which MWAA
  sets on its workers. The execution role needs ``airflow:InvokeRestApi`` on the environment's ``User``
  Airflow role (``arn:aws:airflow:<region>:<account>:role/<environment>/User``);
* in the local sandbox (``"sandbox": true``) the DAG runs in one process with ``dag.test()``, no API
  server: the note is written on the run's row of the metadata database that process holds.

Setting the note never fails the report (``lineage.md`` beside ``lineage.json`` holds the same facts): a
failure is logged and returned.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from sim2real.contract import task_ids as ids

log = logging.getLogger(__name__)

#: Airflow REST API v2 path of one DAG run (Airflow 3 REST API reference, "Patch Dag Run").
DAG_RUN_PATH = "/dags/{dag_id}/dagRuns/{run_id}"

#: Stage rows of the note, in run order: (label, task-id prefix). A task id belongs to the first row
#: whose prefix it equals or starts with ``prefix + "."``.
STAGES: tuple[tuple[str, str], ...] = (
    ("prepare run", ids.PREPARE_RUN), ("resource preflight", ids.CHECK_RESOURCES),
    ("training backend", ids.TRAINING_BACKEND), ("image build", ids.BUILD_GROUP),
    ("capacity check", ids.PREFLIGHT_GROUP), ("training (Batch)", ids.TRAIN_GROUP),
    ("training (HyperPod)", ids.HYPERPOD_GROUP), ("training (sweep)", ids.SWEEP_GROUP),
    ("checkpoint", ids.CHECKPOINT_GROUP),
    ("evaluation", ids.EVALUATE_GROUP), ("quality gate", ids.QUALITY_GATE), ("GR00T fine-tune", ids.VLA_GROUP),
    ("deployment", ids.DEPLOY_GROUP), ("lineage", ids.WRITE_LINEAGE), ("run outcome", ids.RUN_OUTCOME),
)

#: A stage's state from its tasks' states: the first of these present wins.
_STATE_ORDER = ("failed", "upstream_failed", "up_for_retry", "running", "deferred", "queued", "scheduled",
                "success", "skipped")


def stage_rows(tasks: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, float | None]]:
    """``(stage, state, task time s)`` per stage that has tasks in ``tasks`` (lineage ``tasks``).

    The state is the worst of its tasks' (failed before running before success before skipped); the time is
    the sum of its tasks' durations (``None`` when none is known).
    """
    rows = []
    for label, prefix in STAGES:
        mine = [info for task_id, info in tasks.items() if task_id == prefix or task_id.startswith(prefix + ".")]
        if not mine:
            continue
        states = {str(info.get("state")) for info in mine}
        state = next((s for s in _STATE_ORDER if s in states), sorted(states)[0])
        durations = [info["duration_s"] for info in mine if info.get("duration_s") is not None]
        rows.append((label, state, sum(durations) if durations else None))
    return rows


def _money(value: Any) -> str:
    return "unknown" if value is None else f"${float(value):.2f}"


#: Longest note Airflow keeps: ``dag_run_note.content`` is ``String(1000)`` and the REST API's
#: ``DAGRunPatchBody.note`` has ``max_length=1000`` (Airflow 3.3 ``airflow.models.dagrun.DagRunNote``).
NOTE_MAX_CHARS = 1000

#: Closing line of a note that had to leave parts out to fit :data:`NOTE_MAX_CHARS`.
SHORTENED = "_(shortened to fit the note; lineage.md has everything)_"


def _round_line(rounds: Mapping[str, Any] | None) -> list[str]:
    """``**Round 2 of 3** …: 0.050 [0.009, 0.236] → 0.900 [0.699, 0.972]; …`` (nothing without rounds)."""
    if not rounds or int(rounds.get("max_rounds") or 1) <= 1:
        return []
    rates = " → ".join(f"{r['success_rate']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]"
                       for r in rounds.get("rounds") or []) or "none evaluated"
    then = {"passed": "passed: the loop ends here", "retraining": f"retraining: round {rounds['round'] + 1} is run "
            f"`{rounds.get('next_run_id')}`", "gate_failed": "last round below the bar: the loop ends with the gate "
            "failed", "not_evaluated": "not evaluated: the loop ends here"}.get(rounds.get("outcome"), "")
    return [f"**Round {rounds['round']} of {rounds['max_rounds']}** (success rate per round, 95% Wilson): {rates}; "
            f"{then}."]


def _sweep_line(lineage: Mapping[str, Any]) -> list[str]:
    """``**Sweep:** 1 of 3 candidates failed (c1: ...); the best of the 2 that succeeded went on`` (nothing when
    none failed)."""
    failed = [c for c in lineage.get("candidates") or [] if c.get("reason")]
    if not lineage.get("sweep") or not failed:
        return []
    total = len(lineage.get("candidates") or [])
    why = "; ".join(f"{c.get('candidate')}: {c.get('reason')}" for c in failed)
    return [f"**Sweep:** {len(failed)} of {total} candidates failed ({why}); the best of the {total - len(failed)} "
            f"that succeeded went on (sweep_min_candidates {lineage['sweep'].get('min_candidates')})."]


def headline(lineage: Mapping[str, Any], warnings: list[str] | tuple[str, ...]) -> list[str]:
    chain = lineage.get("chain") or {}
    stages = lineage.get("stages") or {}
    gate = stages.get("quality_gate") or {}
    evaluation = stages.get("evaluation") or {}
    lines = [f"> **Warning:** {w}" for w in warnings] + ([""] if warnings else [])
    rate, ci = chain.get("success_rate"), chain.get("success_rate_ci95")
    threshold = gate.get("threshold", (lineage.get("params") or {}).get("min_success_rate"))
    if rate is None:
        lines.append("**Success rate:** not measured (no evaluation report).")
    else:
        ci_text = f", 95% Wilson [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        episodes = evaluation.get("episodes")
        lines.append(f"**Success rate:** {rate:.3f}{ci_text}" + (f", {episodes} episodes" if episodes is not None else "")
                     + (f"; threshold {float(threshold):.3f}" if threshold is not None else ""))
    if gate:
        sign = ">=" if gate.get("passed") else "<"
        lines.append(f"**Quality gate {'passed' if gate.get('passed') else 'FAILED'}:** {gate.get('metric')} "
                     f"{float(gate.get('value', 0.0)):.3f} {sign} {float(gate.get('threshold', 0.0)):.3f}")
    else:
        lines.append("**Quality gate:** not reached.")
    lines += _round_line(lineage.get("rounds"))
    lines += _sweep_line(lineage)
    estimate, actual = lineage.get("cost_estimate") or {}, lineage.get("cost_actual") or {}
    cost = f"**GPU cost:** estimated {_money(estimate.get('total_usd'))}"
    if estimate.get("max_budget_usd"):
        cost += f" (max {_money(estimate['max_budget_usd'])})"
    if actual:
        cost += f", actual {'at least ' if actual.get('unknown') else ''}{_money(actual.get('total_usd'))}"
        verdict = {True: "within budget", False: "OVER BUDGET"}.get(actual.get("within_budget"))
        cost += f", {verdict}" if verdict else ""
    else:
        cost += ", actual unknown"
    loop = (actual or {}).get("loop")
    if loop:  # a later retraining round: what the loop has cost so far, beside the whole loop's estimate
        rounds = sorted(r["round"] for r in loop.get("rounds") or [])
        cost += (f"; loop so far (rounds {rounds[0]}-{rounds[-1]}) {'at least ' if loop.get('unknown_rounds') else ''}"
                 f"{_money(loop.get('total_usd'))} of the loop's estimate {_money(estimate.get('total_usd'))}")
        if loop.get("unknown_rounds"):
            cost += f" (round {', '.join(str(r) for r in loop['unknown_rounds'])} unknown)"
    return lines + [cost]


# --- experiment tracking: what a workload could not record in MLflow (lineage mlflow.not_recorded) ---
def tracking_lines(lineage: Mapping[str, Any]) -> list[str]:
    """``["", "Tracking (rl_training): 3 metric batches (15 values) not recorded (server unreachable since …)"]``
    per stage whose workload could not send everything to MLflow; ``[]`` when everything was recorded."""
    gaps = (lineage.get("mlflow") or {}).get("not_recorded") or {}
    lines = [f"Tracking ({stage}): {entry['text']}" for stage, entry in gaps.items() if entry.get("text")]
    return ["", *lines] if lines else []


def render_run_note(lineage: Mapping[str, Any], *, warnings: list[str] | tuple[str, ...] = (),
                    links: Mapping[str, str | None] | None = None,
                    images: Mapping[str, str | None] | None = None, limit: int = NOTE_MAX_CHARS) -> str:
    """The run note (Markdown, at most ``limit`` characters) from a lineage document
    (:func:`sim2real.orchestration.lineage.build_lineage`).

    In order: the warnings, the success rate with its interval and the threshold, the gate verdict, estimated
    vs actual cost, the stage table, the links, the embedded pictures. What does not fit ``limit`` is left out
    from the end (pictures first, then links but the first two, then the links, then the stage table's rows
    that succeeded or were skipped), and the note then says so; the warnings and the verdict always stay.

    :param warnings: one line each, shown first (e.g. :func:`sim2real.orchestration.stages.gate.gate_warnings`).
    :param links: title → URL (``None``: left out), most important first.
    :param images: title → URL of a picture the browser can load (the sandbox's S3), embedded.
    """
    head = [*headline(lineage, warnings), *tracking_lines(lineage)]
    rows = stage_rows(lineage.get("tasks") or {})
    shown = [(title, url) for title, url in (links or {}).items() if url]
    pictures = [(title, url) for title, url in (images or {}).items() if url]

    def table(only_notable: bool) -> list[str]:
        kept = [r for r in rows if not only_notable or r[1] not in ("success", "skipped")]
        if not kept:
            return []
        body = [f"| {label} | {state} | {'—' if dur is None else f'{dur:.1f}'} |" for label, state, dur in kept]
        return ["", "| stage | state | time (s) |", "|---|---|---|", *body]

    def assemble(tab: list[str], lnk: list[tuple[str, str]], pic: list[tuple[str, str]], short: bool) -> str:
        out = list(head) + tab
        if lnk:
            out += ["", " · ".join(f"[{title}]({url})" for title, url in lnk)]
        for title, url in pic:
            out += ["", f"![{title}]({url})"]
        if short:
            out += ["", SHORTENED]
        return "\n".join(out) + "\n"

    for candidate in (assemble(table(False), shown, pictures, False),
                      assemble(table(False), shown, [], True),
                      assemble(table(False), shown[:2], [], True),
                      assemble(table(False), [], [], True),
                      assemble(table(True), shown[:2], [], True),
                      assemble(table(True), [], [], True)):
        if len(candidate) <= limit:
            return candidate
    text = assemble([], [], [], False)
    return text if len(text) <= limit else text[: limit - len(SHORTENED) - 2] + "\n" + SHORTENED + "\n"


def mwaa_environment_name(env: Mapping[str, Any]) -> str | None:
    """The MWAA environment this Airflow is: the config's ``airflow.mwaa_environment_name``, else the
    ``AIRFLOW_ENV_NAME`` variable MWAA sets on its workers; ``None`` outside MWAA."""
    return (env.get("airflow") or {}).get("mwaa_environment_name") or os.environ.get("AIRFLOW_ENV_NAME") or None


def set_note_through_mwaa(*, env_name: str, dag_id: str, run_id: str, note: str, hook: Any = None) -> dict[str, Any]:
    """``PATCH`` the run's note through MWAA ``InvokeRestApi``; returns the API's response (``RestApiStatusCode``,
    ``RestApiResponse``).

    :raises botocore.exceptions.ClientError: e.g. ``AccessDeniedException`` without ``airflow:InvokeRestApi``.
    :raises RuntimeError: when the Airflow API answers with a status of 400 or more.
    """
    if hook is None:
        from airflow.providers.amazon.aws.hooks.mwaa import MwaaHook

        hook = MwaaHook()
    path = DAG_RUN_PATH.format(dag_id=quote(dag_id, safe=""), run_id=quote(run_id, safe=""))
    response = hook.invoke_rest_api(env_name=env_name, path=path, method="PATCH", body={"note": note},
                                    query_params={"update_mask": "note"}, airflow_version=3)
    status = int(response.get("RestApiStatusCode") or 0)
    if status >= 400:
        raise RuntimeError(f"MWAA environment {env_name!r}: PATCH {path} answered {status}: "
                           f"{response.get('RestApiResponse')}")
    return response


def set_note_in_metadata_db(*, dag_id: str, run_id: str, note: str) -> None:
    """Sandbox only (``dag.test()`` in one process): write the note on the run's metadata database row.

    :raises LookupError: when the run is not in the database.
    """
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if dag_run is None:
            raise LookupError(f"DAG run {dag_id}/{run_id} is not in the metadata database")
        dag_run.note = note


def set_run_note(*, dag_id: str, run_id: str, note: str, env: Mapping[str, Any], mwaa_hook: Any = None) -> dict[str, Any]:
    """Set the run's note (module docstring: how, where). Never raises.

    :return: ``{"set": bool, "via": "mwaa:<environment>" | "metadata-db (sandbox)" | None, "error": str | None}``.
    """
    env_name = mwaa_environment_name(env)
    via = f"mwaa:{env_name}" if env_name else ("metadata-db (sandbox)" if env.get("sandbox") else None)
    try:
        if env_name:
            set_note_through_mwaa(env_name=env_name, dag_id=dag_id, run_id=run_id, note=note, hook=mwaa_hook)
        elif env.get("sandbox"):
            set_note_in_metadata_db(dag_id=dag_id, run_id=run_id, note=note)
        else:
            raise RuntimeError("not on MWAA (no airflow.mwaa_environment_name in the environment config, no "
                               "AIRFLOW_ENV_NAME) and not the sandbox: no API to set the run note through")
    except Exception as err:  # noqa: BLE001 - the note is a view of lineage.md; it never fails the report
        log.warning("run note not set (%s): %s: %s; lineage.md holds the same summary", via, type(err).__name__, err)
        return {"set": False, "via": via, "error": f"{type(err).__name__}: {err}"}
    log.info("run note set (%s, %d characters)", via, len(note))
    return {"set": True, "via": via, "error": None}
