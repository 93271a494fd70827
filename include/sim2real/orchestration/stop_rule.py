"""When killing a task stops what it started on AWS: only when the task really ended, never on a hand-over.

Airflow 3.3.1 calls a task's stop hooks in more cases than a person's stop:

* **Triggerer** (``airflow.jobs.triggerer_job_runner``): ``TriggerRunner.cancel_triggers`` cancels every trigger it
  drains from its cancel queue with the "user action" message, and ``run_trigger`` then awaits the trigger's
  ``on_kill``. A trigger lands in that queue whenever it is no longer assigned to this triggerer
  (``TriggerRunnerSupervisor.update_triggers``: running here, not requested any more) — after a person marked the
  task failed/success, cleared it or deleted its run, but also when another triggerer took it over (this
  triggerer's heartbeat was older than ``[triggerer] triggerer_health_check_threshold``: a restart while the old
  process still ran, a stalled process, a second triggerer). The task instance tells the two apart: a person's
  action moved it out of ``deferred`` before the trigger was cancelled; a hand-over leaves it ``deferred`` (the
  same trigger row, now run by another triggerer).
* **Worker** (``airflow.sdk.execution_time``): the task process gets SIGTERM, and its handler calls the operator's
  ``on_kill``, when the API server answers the heartbeat 404/409 (a person changed the task instance's state,
  cleared it or deleted the run) and also when the worker's supervisor itself gets SIGTERM (a worker restart or
  scale-in forwards it). After a person's action the task instance is no longer ``running``; on a worker restart
  it still is (its next try reattaches to the resource by name). ``execution_timeout`` calls ``on_kill`` too, with
  the task instance ``running`` and its time used up.

A person's **clear** also starts the task afresh: the cleared try's wait is cancelled (above) and a new try runs.
Operators that reattach to this run's resource on a retry (a worker lost after the submit) must not reattach on
such a try, or a clear would silently continue the old job whenever the new try looked before the old trigger's
stop landed (on a busy triggerer it often does): :func:`starts_afresh` tells a retry from a fresh start, and the
operator stops what an earlier try left running.

The rule (:func:`trigger_should_stop`, :func:`worker_should_stop`), read through the Task Execution API
(``GetTaskStates``, what the triggerer and the task supervisor answer for their triggers and tasks):

=============================  ===========================  ================================
task instance state            trigger's ``on_kill``        operator's ``on_kill`` (worker)
=============================  ===========================  ================================
``deferred``                   keep (hand-over; see claim)  stop
``running``                    stop                         keep, unless past its timeout
any other / no such row        stop                         stop
could not be read              stop (logged)                stop (logged)
=============================  ===========================  ================================

``deferred`` alone does not prove a hand-over: after a person's clear, the task's next try can run and defer again
(a new trigger, a new job) before the old trigger's cancel is even sent, on a busy triggerer within seconds. So
every trigger claims its wait when it starts: XCom :data:`WAIT_CLAIM_XCOM` of its task instance holds the try
number it waits for (:func:`claim_wait`; a new try's start clears the task's XComs, and its own trigger writes its
own). ``deferred`` with the claim of this trigger's try is a hand-over; a claim of another try, or none, means the
task moved on, and the trigger stops what it waited on.

"Keep" leaves the resource running for whoever waits on it next: the other triggerer's copy of the trigger, or
the task's next try (which reattaches). If nobody does, the orphan sweeper (:mod:`sim2real.orchestration.sweeper`)
stops it once the run is over. When the state cannot be read, Airflow's request is followed (stop), as before.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: XCom key of a waiting trigger's claim, ``{"try_number": n}``: the try of the task instance it waits for.
WAIT_CLAIM_XCOM = "sim2real_wait"

#: The state the rule answers for a task instance that has no row (its run deleted).
GONE = "gone"
#: Seconds a worker waits for the state (its supervisor escalates SIGTERM to SIGKILL after 5 s).
WORKER_READ_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Decision:
    """Whether to stop, and why (for the log). ``state``: the task instance's state as read, :data:`GONE`, or
    ``None`` when it could not be read."""

    stop: bool
    why: str
    state: str | None = None


def _ti_fields(ti: Any) -> tuple[str, str, str, int] | None:
    try:
        index = getattr(ti, "map_index", -1)
        return ti.dag_id, ti.run_id, ti.task_id, -1 if index is None else int(index)
    except AttributeError:
        return None


def _required_ti_fields(ti: Any) -> tuple[str, str, str, int]:
    fields = _ti_fields(ti)
    if fields is None:
        raise ValueError(f"not a task instance: {ti!r}")
    return fields


def read_task_state(ti: Any) -> str:
    """The task instance's current state through the Task Execution API (``RuntimeTaskInstance.get_task_states``,
    ``GET /execution/task-instances/states``); :data:`GONE` when it has no row (the run was deleted); ``"none"``
    for a cleared task instance (no state).

    :param ti: anything with ``dag_id``, ``run_id``, ``task_id`` and ``map_index`` (the trigger's ``task_instance``,
        the task's ``ti``).
    :raises Exception: whatever the supervisor channel raises (no supervisor: outside a task or triggerer).
    """
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    dag_id, run_id, task_id, map_index = _required_ti_fields(ti)
    states: Mapping[str, Any] = RuntimeTaskInstance.get_task_states(
        dag_id=dag_id, task_ids=[task_id], run_ids=[run_id], map_index=map_index) or {}
    key = task_id if map_index < 0 else f"{task_id}_{map_index}"
    row = states.get(run_id) or {}
    if key not in row:
        return GONE
    state = row[key]
    state = getattr(state, "value", state)
    return "none" if state is None else str(state)


def claim_wait(ti: Any) -> None:
    """Record that a trigger now waits for try ``ti.try_number`` of ``ti`` (XCom :data:`WAIT_CLAIM_XCOM`, written
    through the Task Execution API like any XCom; the triggerer serves ``SetXCom``).

    :raises Exception: whatever the supervisor channel raises (no supervisor: outside a task or triggerer).
    """
    from airflow.sdk.execution_time.xcom import XCom

    dag_id, run_id, task_id, map_index = _required_ti_fields(ti)
    XCom.set(WAIT_CLAIM_XCOM, {"try_number": int(ti.try_number)}, dag_id=dag_id, task_id=task_id, run_id=run_id,
             map_index=map_index)


def read_wait_claim(ti: Any) -> int | None:
    """The try number the task instance's current wait claims (:func:`claim_wait`); None when there is no claim
    (a new try started: its start cleared the task's XComs, and its trigger has not claimed yet).

    :raises Exception: whatever the supervisor channel raises.
    """
    from airflow.sdk.execution_time.xcom import XCom

    dag_id, run_id, task_id, map_index = _required_ti_fields(ti)
    value = XCom.get_one(key=WAIT_CLAIM_XCOM, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index)
    try:
        return int(value["try_number"])
    except (TypeError, KeyError, ValueError):
        return None


def trigger_decision(state: str | None, *, own_try: int | None = None, claimed_try: int | None = None
                     ) -> Decision:
    """The triggerer's rule for a cancelled trigger whose task instance is in ``state`` (None: not read).

    :param own_try: the try this trigger waits for (None: not known, no claim check).
    :param claimed_try: the try the task instance's current wait claims (:func:`read_wait_claim`; None: no claim).
    """
    if state is None:
        return Decision(True, "its task instance's state could not be read: stopping, as Airflow asked", None)
    if state == "deferred" and own_try is not None and claimed_try != own_try:
        return Decision(True, f"its task instance is deferred again, by try {claimed_try or 'a later try'} (this "
                              f"wait was try {own_try}'s): the task was cleared and started afresh", state)
    if state == "deferred":
        return Decision(False, "its task instance is still deferred: the trigger was handed over to another "
                               "triggerer (or this one restarted), not stopped by a person; the job is left "
                               "running for the trigger that now waits on it", state)
    if state == GONE:
        return Decision(True, "its DAG run was deleted", state)
    return Decision(True, f"its task instance is {state} (a person marked, cleared or ended it)", state)


def worker_decision(state: str | None, *, timed_out: bool = False) -> Decision:
    """The worker's rule for a killed task whose task instance is in ``state`` (None: not read); ``timed_out``:
    the try has used up its ``execution_timeout``."""
    if state is None:
        return Decision(True, "its task instance's state could not be read: stopping, as Airflow asked", None)
    if state == "running" and not timed_out:
        return Decision(False, "its task instance is still running: the worker is stopping (restart or scale-in), "
                               "not a person; the task's next try reattaches, and the orphan sweeper stops it if "
                               "the run ends first", state)
    if state == "running":
        return Decision(True, "the task ran past its execution_timeout", state)
    if state == GONE:
        return Decision(True, "its DAG run was deleted", state)
    return Decision(True, f"its task instance is {state} (a person marked, cleared or ended it)", state)


#: Longest wait (s) for the task instance's state in the triggerer; then the stop goes ahead as Airflow asked. The
#: first read in a triggerer process starts Airflow's in-process Execution API: 30-50 s measured on a loaded
#: 2-core machine, 0.1-0.2 s after that.
TRIGGER_STATE_READ_TIMEOUT_S = 120


async def trigger_should_stop(trigger: Any) -> Decision:
    """:func:`trigger_decision` for ``trigger.task_instance``, read in a thread (the supervisor channel's sync
    call, as the provider's hooks read connections). A trigger without a task instance (``on_kill`` called by
    hand, outside a triggerer) stops."""
    import asyncio

    from asgiref.sync import sync_to_async

    ti = getattr(trigger, "task_instance", None)
    if ti is None or _ti_fields(ti) is None:
        return Decision(True, "no task instance (on_kill called outside a triggerer)", None)
    try:
        state = await asyncio.wait_for(sync_to_async(read_task_state, thread_sensitive=False)(ti),
                                       TRIGGER_STATE_READ_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 - not knowing falls back to Airflow's request
        log.warning("could not read the state of %s: %s: %s", ti, type(err).__name__, err)
        state = None
    own_try = _try_number(ti)
    if state != "deferred" or own_try is None or not getattr(trigger, "wait_claimed", True):
        return trigger_decision(state)  # a trigger that could not record its claim cannot look for it either
    try:
        claimed = await asyncio.wait_for(sync_to_async(read_wait_claim, thread_sensitive=False)(ti),
                                         TRIGGER_STATE_READ_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 - without the claim, deferred reads as the hand-over it usually is
        log.warning("could not read the wait claim of %s: %s: %s", ti, type(err).__name__, err)
        return trigger_decision(state)
    return trigger_decision(state, own_try=own_try, claimed_try=claimed)


def _try_number(ti: Any) -> int | None:
    try:
        return int(ti.try_number)
    except (AttributeError, TypeError, ValueError):
        return None


def starts_afresh(ti: Any, retries: Any) -> bool:
    """Whether the try ``ti`` runs starts its task afresh (its first try, or the first try after a person cleared
    it) rather than retrying an earlier try of the same series.

    Airflow counts tries per series: a new task instance has ``max_tries = retries``, and ``clear_task_instances``
    sets ``max_tries = try_number + retries`` before the next try, so the first try of a series has
    ``try_number == max_tries - retries + 1`` (the Task SDK's ``RuntimeTaskInstance.get_first_reschedule_date``
    uses the same number). A retry has a larger ``try_number``.

    :param ti: the running task instance (``context["ti"]``); anything without integer ``try_number`` and
        ``max_tries`` (a test's bare context) counts as a retry, the behaviour before this rule.
    :param retries: the task's ``retries`` (None: 0).
    """
    try:
        try_number, max_tries = int(ti.try_number), int(ti.max_tries)
        series_start = max_tries - int(retries or 0) + 1
    except (AttributeError, TypeError, ValueError):
        return False
    return try_number <= series_start


def _timed_out(ti: Any, task: Any) -> bool:
    timeout = getattr(task, "execution_timeout", None)
    start = getattr(ti, "start_date", None)
    if not timeout or start is None:
        return False
    now = dt.datetime.now(dt.timezone.utc)
    start = start if start.tzinfo else start.replace(tzinfo=dt.timezone.utc)
    return now - start >= timeout


def worker_should_stop(task: Any, ti: Any = None, *, timeout_s: float = WORKER_READ_TIMEOUT_S) -> Decision:
    """:func:`worker_decision` for the task instance running ``task`` (default: the current context's ``ti``).

    Read in a helper thread bounded by ``timeout_s``: ``on_kill`` runs in the SIGTERM handler of the task process,
    whose main thread may hold the supervisor channel's lock (a send in progress); the read then times out and the
    task stops, as Airflow asked, instead of deadlocking. Outside a running task (no context): stop."""
    if ti is None:
        try:
            from airflow.sdk import get_current_context

            ti = get_current_context()["ti"]
        except Exception:  # noqa: BLE001 - no context: on_kill called by hand
            return Decision(True, "no task instance (on_kill called outside a running task)", None)
    result: dict[str, Any] = {}

    def read() -> None:
        try:
            result["state"] = read_task_state(ti)
        except Exception as err:  # noqa: BLE001
            result["error"] = f"{type(err).__name__}: {err}"

    reader = threading.Thread(target=read, name="sim2real-stop-rule", daemon=True)
    reader.start()
    reader.join(timeout_s)
    if "state" not in result:
        log.warning("could not read the state of %s: %s", ti, result.get("error", f"no answer in {timeout_s:.0f} s"))
        return worker_decision(None)
    return worker_decision(result["state"], timed_out=_timed_out(ti, task))


def operator_should_stop(operator: Any, what: str) -> bool:
    """For an operator's ``on_kill``: :func:`worker_should_stop` for it, logged on its logger; ``what`` names the
    resource (e.g. ``"AWS Batch job 123"``)."""
    decision = worker_should_stop(operator)
    if decision.stop:
        operator.log.info("Task killed (%s): stopping %s", decision.why, what)
    else:
        operator.log.warning("Task process stopping, but NOT stopping %s: %s", what, decision.why)
    return decision.stop
