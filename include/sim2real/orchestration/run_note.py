"""The DAG run's note: the run's results where the Airflow UI shows them (the run's "Note" panel).

``render_run_note`` turns the lineage document into Markdown of at most 1000 characters (Airflow's limit):
a warning line for each weak quality gate setting (:func:`sim2real.orchestration.params.gate_warnings`),
the success rate and its Wilson 95 % interval against the threshold, the gate verdict, the estimated against
the actual cost, a table of the stages (state, task time) and links (S3 run folder, lineage, the report's
pictures, embedded in the sandbox).

``set_run_note`` writes it on the run through Airflow's public REST API, the same call the UI's "Add a note"
and "Mark Dag Run as failed" dialogs make: ``PATCH /api/v2/dags/{dag_id}/dagRuns/{dag_run_id}`` with
``{"note": ...}`` and ``update_mask=note`` (Airflow 3.3 ``patch_dag_run`` → ``patch_dag_run_note``). Airflow 3's
Task Execution API, the only API a Task SDK task may use, has no call that changes a DAG run's note (its
``dag-runs`` routes read a run, trigger, clear or count runs; a note can only be given to a run it triggers), and
a task has no metadata database session. Where the REST API is reached:

* **Amazon MWAA**: through MWAA's ``InvokeRestApi`` (the Amazon provider's ``MwaaHook.invoke_rest_api``); the
  environment is the config's ``airflow.mwaa_environment_name``, else ``AIRFLOW_ENV_NAME``, which MWAA sets on
  its workers. The execution role needs ``airflow:InvokeRestApi`` on the environment's ``User`` Airflow role
  (``arn:aws:airflow:<region>:<account>:role/<environment>/User``);
* **``dag.test()``** (``make demo``, the end-to-end tests: the task runs in the process that holds the metadata
  database, with the Task Execution API served in that process): Airflow's own API application served in the
  same process (:func:`set_note_in_process`, as ``dag.test()`` serves the Execution API);
* **anywhere else** (``make ui``, a self-managed Airflow): the API server named by the Airflow connection
  ``airflow.api_connection_id`` of the environment config (default :data:`API_CONNECTION_ID`, type ``http``:
  host, port, schema; login and password when the auth manager wants them), through the HTTP provider's
  ``HttpHook`` with a JWT from the server's ``/auth/token`` (:class:`AirflowApiTokenAuth`).

Writing through the API keeps the one ``dag_run_note`` row the UI updates: the first write inserts it, every
later one (the report's, a person's "Mark Dag Run as failed" with its note) updates that row.

Setting the note never fails the report (``lineage.md`` beside ``lineage.json`` holds the same facts): a
failure is logged and returned.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from sim2real.contract import task_ids as ids
from sim2real.orchestration.lineage import field_dataset_text

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


def stage_rows(tasks: Mapping[str, Mapping[str, Any]], sweep: Mapping[str, Any] | None = None,
               candidates: list[Mapping[str, Any]] | None = None) -> list[tuple[str, str, float | None]]:
    """``(stage, state, task time s)`` per stage that has tasks in ``tasks`` (lineage ``tasks``).

    The state is the worst of its tasks' (failed before running before success before skipped); the time is
    the sum of its tasks' durations (``None`` when none is known); for a training task whose lineage entry has
    ``job_duration_s`` (the job's running time, :func:`sim2real.orchestration.lineage.with_job_time`) that time
    counts instead of the task's try, and the label ends with ", job's running time". A sweep that picked a winner (lineage
    ``sweep`` with a ``winner``) succeeded as a stage even when some candidates failed (``sweep_min_candidates``
    lets it pick among the survivors): its row is ``success (N of M candidates failed)``.
    """
    rows = []
    for label, prefix in STAGES:
        mine = [info for task_id, info in tasks.items() if task_id == prefix or task_id.startswith(prefix + ".")]
        if not mine:
            continue
        states = {str(info.get("state")) for info in mine}
        state = next((s for s in _STATE_ORDER if s in states), sorted(states)[0])
        if prefix == ids.SWEEP_GROUP and sweep and sweep.get("winner") is not None:
            failed = sum(1 for c in candidates or [] if c.get("reason"))
            state = f"success ({failed} of {len(candidates or [])} candidates failed)" if failed else "success"
        # A training task that reattached to its job lasted seconds; the job's own running time (lineage
        # ``job_duration_s``, from the job's start and stop) stands for it, and the row says so.
        durations = [info["job_duration_s"] if info.get("job_duration_s") is not None else info["duration_s"]
                     for info in mine
                     if info.get("job_duration_s") is not None or info.get("duration_s") is not None]
        if any(info.get("job_duration_s") is not None for info in mine):
            label = f"{label}, job's running time"
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
    parent = f"parent run `{rounds['parent_run_id']}`; " if rounds.get("parent_run_id") else ""
    return [f"**Round {rounds['round']} of {rounds['max_rounds']}** ({parent}success rate per round, 95% Wilson): "
            f"{rates}; {then}."]


def field_line(field: Mapping[str, Any] | None) -> list[str]:
    """``**Field (canary):** 0.625 [0.470, 0.758], 25/40 episodes on 2 robots vs simulation 0.970: gap -34.5 pp;
    promoted`` from the lineage ``field`` entry (:func:`sim2real.orchestration.lineage.field_entry`); nothing without
    a canary."""
    if not field:
        return []
    f, sim = field["field"], field.get("simulation")
    rate = "no episode" if f["success_rate"] is None else (
        f"{f['success_rate']:.3f} [{f['ci95'][0]:.3f}, {f['ci95'][1]:.3f}], {f['successes']}/{f['episodes']} episodes")
    robots = len(field.get("robots") or {}) + len(field.get("silent") or [])
    versus = f" vs simulation {sim['success_rate']:.3f}" if sim else ""
    gap = f": gap {field['gap_pp']:+.1f} pp" if field.get("gap_pp") is not None else ""
    verdict = {"promote": "promoted to the fleet", "roll_back": "NOT promoted, canary rolled back",
               "wait": "no verdict"}.get(field["decision"], field["decision"])
    if field.get("reviewed_by"):
        verdict += f" by {field['reviewed_by'].get('decided_by')} (canary review)"
    return [f"**Field (canary, {robots} robot{'s' if robots != 1 else ''}):** {rate}{versus}{gap}; {verdict} "
            f"(threshold {float(field['threshold']):.3f} on the lower bound)."]


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
    field_dataset = stages.get("field_dataset")
    if field_dataset:
        lines.append(f"**Field data in the fine-tune:** {field_dataset_text(field_dataset)}.")
    lines += field_line(lineage.get("field"))
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
    from the end (pictures first, then links but the first two, then the links; then the stage table's rows that
    succeeded or were skipped become one row, then that row goes too), and the note then says so; the warnings and
    the verdict always stay.

    :param warnings: one line each, shown first (e.g. :func:`sim2real.orchestration.params.gate_warnings`).
    :param links: title → URL (``None``: left out), most important first.
    :param images: title → URL of a picture the browser can load (the sandbox's S3), embedded.
    """
    head = [*headline(lineage, warnings), *tracking_lines(lineage)]
    rows = stage_rows(lineage.get("tasks") or {}, lineage.get("sweep"), lineage.get("candidates"))
    shown = [(title, url) for title, url in (links or {}).items() if url]
    pictures = [(title, url) for title, url in (images or {}).items() if url]

    def table(only_notable: bool) -> list[str]:
        kept = [r for r in rows if not only_notable or r[1] not in ("success", "skipped")]
        if not kept:
            return []
        # a skipped stage did no work: no time (Airflow records the fraction of a second its skip took)
        body = [f"| {label} | {state} | {'—' if dur is None or state == 'skipped' else f'{dur:.1f}'} |"
                for label, state, dur in kept]
        return ["", "| stage | state | time (s) |", "|---|---|---|", *body]

    def compact_table() -> list[str]:
        """The notable rows, and the stages that succeeded or were skipped in one row (a note that cannot hold
        every row still shows the run's shape)."""
        quiet = [r for r in rows if r[1] in ("success", "skipped")]
        notable = table(True)
        if not quiet:
            return notable
        done = sum(1 for r in quiet if r[1] == "success")
        skipped = len(quiet) - done
        if done:
            seconds = sum(dur for _, state, dur in quiet if state == "success" and dur is not None)
            label = f"{done} other stage{'s' if done != 1 else ''}" + (f" ({skipped} skipped)" if skipped else "")
            row = f"| {label} | success | {seconds:.1f} |"
        else:  # only skipped ones: no time, and not called a success
            row = f"| {skipped} other stage{'s' if skipped != 1 else ''} | skipped | — |"
        return (notable or ["", "| stage | state | time (s) |", "|---|---|---|"]) + [row]

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
                      assemble(compact_table(), shown[:2], [], True),
                      assemble(compact_table(), [], [], True),
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
    :raises NoteApiError: when the Airflow API answers with a status of 400 or more.
    """
    if hook is None:
        from airflow.providers.amazon.aws.hooks.mwaa import MwaaHook

        hook = MwaaHook()
    path, query, body = note_request(dag_id, run_id, note)
    response = hook.invoke_rest_api(env_name=env_name, path=path, method="PATCH", body=body,
                                    query_params=query, airflow_version=3)
    _check(int(response.get("RestApiStatusCode") or 0), response.get("RestApiResponse"),
           f"MWAA environment {env_name!r}: PATCH {path}")
    return response


#: Airflow connection (type ``http``) of the API server the note is written through outside MWAA and
#: ``dag.test()``; the environment config's ``airflow.api_connection_id`` names another.
API_CONNECTION_ID = "sim2real_airflow_api"

#: Seconds one HTTP call to the API server may take (token and PATCH each).
API_TIMEOUT_S = 30.0


def api_connection_id(env: Mapping[str, Any]) -> str:
    """The Airflow connection of the REST API: the config's ``airflow.api_connection_id``, else
    :data:`API_CONNECTION_ID`."""
    return (env.get("airflow") or {}).get("api_connection_id") or API_CONNECTION_ID


def note_request(dag_id: str, run_id: str, note: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """``(path under /api/v2, query, body)`` of the note write (``DAG_RUN_PATH``, ``update_mask=note``)."""
    return (DAG_RUN_PATH.format(dag_id=quote(dag_id, safe=""), run_id=quote(run_id, safe="")),
            {"update_mask": "note"}, {"note": note})


class NoteApiError(RuntimeError):
    """The Airflow REST API refused the note (its status and answer are in the message)."""


def _check(status: int, answer: Any, where: str) -> None:
    if status >= 400:
        raise NoteApiError(f"{where} answered {status}: {str(answer)[:500]}")


class AirflowApiTokenAuth:
    """``requests`` auth for Airflow 3's public API: a JWT from the server's ``/auth/token``, sent as
    ``Authorization: Bearer``. With a login, ``POST /auth/token`` ``{"username", "password"}`` (the Simple and
    FAB auth managers); without one, ``GET /auth/token``, which the Simple auth manager answers when
    ``[core] simple_auth_manager_all_admins`` is on (``make ui``). The token is fetched once per object, from
    the URL of the first request (everything before ``/api/v2/``). ``HttpHook(auth_type=AirflowApiTokenAuth)``
    builds it from the connection's login and password.

    :raises NoteApiError: from the request when the server refuses the token request.
    """

    def __init__(self, login: str | None = None, password: str | None = None, timeout: float = API_TIMEOUT_S):
        self.login, self.password, self.timeout = login, password, timeout
        self.token: str | None = None

    def fetch_token(self, base_url: str) -> str:
        import requests

        url = base_url.rstrip("/") + "/auth/token"
        if self.login:
            resp = requests.post(url, json={"username": self.login, "password": self.password or ""},
                                 timeout=self.timeout)
        else:
            resp = requests.get(url, timeout=self.timeout)
        _check(resp.status_code, resp.text, f"{'POST' if self.login else 'GET'} {url}")
        return str(resp.json()["access_token"])

    def __call__(self, request: Any) -> Any:
        if self.token is None:
            self.token = self.fetch_token(str(request.url).split("/api/v2/", 1)[0])
        request.headers["Authorization"] = f"Bearer {self.token}"
        return request


def set_note_through_connection(*, conn_id: str, dag_id: str, run_id: str, note: str,
                                timeout: float = API_TIMEOUT_S) -> dict[str, Any]:
    """``PATCH`` the run's note on the API server of Airflow connection ``conn_id`` (``HttpHook``, JWT from
    :class:`AirflowApiTokenAuth`); returns the API's answer (the DAG run).

    :raises airflow.exceptions.AirflowNotFoundException: when there is no such connection.
    :raises NoteApiError: when the server answers 400 or more (e.g. 401 without credentials it accepts).
    """
    from airflow.providers.http.hooks.http import HttpHook

    path, query, body = note_request(dag_id, run_id, note)
    hook = HttpHook(method="PATCH", http_conn_id=conn_id, auth_type=AirflowApiTokenAuth)
    resp = hook.run(f"api/v2{path}?update_mask={query['update_mask']}", json=body,
                    headers={"Accept": "application/json"},
                    extra_options={"check_response": False, "timeout": timeout})
    _check(resp.status_code, resp.text, f"connection {conn_id!r}: PATCH /api/v2{path}")
    return resp.json()


def in_process_test_run() -> bool:
    """Whether this task runs inside ``dag.test()`` (Airflow's ``InProcessTestSupervisor``: the Task SDK's
    supervisor comms are in-process, the metadata database is this process's)."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:  # pragma: no cover - Airflow < 3
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)


#: The note writer's user in the in-process API (the note's ``user_id``).
IN_PROCESS_USER = "sim2real"


def set_note_in_process(*, dag_id: str, run_id: str, note: str) -> dict[str, Any]:
    """``dag.test()`` only: ``PATCH`` the note on Airflow's public API route served in this process (Airflow's own
    ``patch_dag_run`` route and its dependencies, :func:`in_process_api`, behind ``httpx``'s WSGI transport, as
    Airflow's ``InProcessExecutionAPI`` serves the Execution API to ``dag.test()``, and like it with the caller's
    identity given in-process: the admin user :data:`IN_PROCESS_USER` of the Simple auth manager, Airflow's
    default). The application is built once per process.

    :raises NoteApiError: when the API answers 400 or more.
    :raises NotImplementedError: when the configured auth manager is not the Simple auth manager.
    """
    import httpx

    path, query, body = note_request(dag_id, run_id, note)
    with httpx.Client(transport=in_process_api(), base_url="http://in-process") as client:
        resp = client.patch(f"/api/v2{path}", params=query, json=body, timeout=API_TIMEOUT_S)
    _check(resp.status_code, resp.text, f"in-process API: PATCH /api/v2{path}")
    return resp.json()


#: Airflow's module of the public API's DAG-run routes (``PATCH /api/v2/dags/{dag_id}/dagRuns/{dag_run_id}``).
DAG_RUN_ROUTES = "airflow.api_fastapi.core_api.routes.public.dag_run"


def dag_run_routes() -> Any:
    """Airflow's module of the DAG-run routes (:data:`DAG_RUN_ROUTES`), without the rest of the public API.

    Importing it by name first runs its package's ``__init__``, which imports and registers every route of the
    public API (about 3 s of CPU in a ``dag.test()`` process, where the Execution API has already loaded what the
    DAG-run routes need). The module is therefore executed from its own file, under a private name, unless the
    process has already imported it (then that module). It has no relative imports and no state outside its
    routers, so the routes and their dependencies (authorization, audit log, session, DAG bag) are Airflow's own.

    :raises ImportError: when the installed Airflow has no such file.
    """
    import importlib.util
    import sys
    from pathlib import Path

    if DAG_RUN_ROUTES in sys.modules:
        return sys.modules[DAG_RUN_ROUTES]
    from airflow.api_fastapi.core_api import routes

    path = Path(routes.__path__[0]) / "public" / "dag_run.py"
    spec = importlib.util.spec_from_file_location(f"{__name__}._airflow_dag_run_routes", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ImportError(f"no {DAG_RUN_ROUTES} at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def in_process_api() -> Any:
    """The ``httpx`` transport of Airflow's public DAG-run API in this process (built once; under a second).

    The application is what ``airflow.api_fastapi.app.create_app("core")`` builds for these routes, and only
    that: the DAG bag and the auth manager on the app's state, the DAG-run router under ``/api/v2`` behind the
    authenticated router's ``get_user`` dependency (``routes.public.public_router``), Airflow's error handlers.
    The whole core application (every route, the UI, plugins, middlewares) cost 4.5 s of CPU in every
    ``dag.test()`` process.

    :raises NotImplementedError: when the configured auth manager is not the Simple auth manager.
    """
    import httpx
    from a2wsgi import ASGIMiddleware
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.common.dagbag import create_dag_bag
    from airflow.api_fastapi.common.exceptions import init_error_handlers
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import Depends, FastAPI

    manager = init_auth_manager()
    if not isinstance(manager, SimpleAuthManager):
        raise NotImplementedError(f"dag.test() with the {type(manager).__name__}: the in-process note is written "
                                  f"as a Simple auth manager user only")
    app = FastAPI()
    app.state.dag_bag = create_dag_bag()
    app.state.auth_manager = manager
    app.include_router(dag_run_routes().dag_run_router, prefix="/api/v2", dependencies=[Depends(get_user)])
    init_error_handlers(app)
    app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username=IN_PROCESS_USER, role="admin")
    return httpx.WSGITransport(app=ASGIMiddleware(app))


def set_run_note(*, dag_id: str, run_id: str, note: str, env: Mapping[str, Any], mwaa_hook: Any = None,
                 in_process: bool | None = None) -> dict[str, Any]:
    """Set the run's note through the REST API (module docstring: how, where). Never raises.

    :param in_process: whether the task runs in ``dag.test()`` (default: :func:`in_process_test_run`).
    :return: ``{"set": bool, "via": "mwaa:<environment>" | "in-process API (dag.test)" |
        "connection:<conn id>", "error": str | None}``.
    """
    env_name = mwaa_environment_name(env)
    in_process = in_process_test_run() if in_process is None else in_process
    conn_id = api_connection_id(env)
    via = f"mwaa:{env_name}" if env_name else ("in-process API (dag.test)" if in_process else f"connection:{conn_id}")
    try:
        if env_name:
            set_note_through_mwaa(env_name=env_name, dag_id=dag_id, run_id=run_id, note=note, hook=mwaa_hook)
        elif in_process:
            set_note_in_process(dag_id=dag_id, run_id=run_id, note=note)
        else:
            set_note_through_connection(conn_id=conn_id, dag_id=dag_id, run_id=run_id, note=note)
    except Exception as err:  # noqa: BLE001 - the note is a view of lineage.md; it never fails the report
        hint = (f" (outside MWAA the note needs the Airflow connection {conn_id!r} to the API server)"
                if via.startswith("connection:") and "isn't defined" in str(err) else "")
        log.warning("run note not set (%s): %s: %s%s; lineage.md holds the same summary", via, type(err).__name__,
                    err, hint)
        return {"set": False, "via": via, "error": f"{type(err).__name__}: {err}{hint}"}
    log.info("run note set (%s, %d characters)", via, len(note))
    return {"set": True, "via": via, "error": None}
