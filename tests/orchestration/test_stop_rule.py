"""A stop stops, and only a stop: the shared trigger base's on_kill and the operators' rule, without a live Airflow.

The cancellation is driven the way Airflow 3.3.1's triggerer drives it (``TriggerRunner.run_trigger``: the trigger's
task is cancelled with the "user action" message, its ``on_kill`` awaited under ``wait_for(on_kill_timeout)``, and
``cancel_triggers`` repeats the cancel on every loop until the task has ended); the live test
(``test_live_run_control.py``) shows the same against a real triggerer.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from types import SimpleNamespace

import pytest
from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

from sim2real.orchestration import stop_rule
from sim2real.orchestration.triggers.base import StepWaitTrigger, _user_action_message

TI = SimpleNamespace(dag_id="d", run_id="r", task_id="train", map_index=-1)


class SlowStopTrigger(StepWaitTrigger):
    """A wait whose stop takes ``stop_seconds`` (a connection built, a TerminateJob under load): several of the
    triggerer's repeated cancels (:func:`_as_the_triggerer_does`, every 0.1 s here) arrive while it runs."""

    aws_hook_class = BatchClientHook
    stop_seconds = 0.35

    def __init__(self) -> None:
        super().__init__(waiter_delay=1, waiter_max_attempts=1)
        self.stopped: list[str] = []

    async def run(self):  # waits until cancelled, like a long training wait
        await asyncio.sleep(3600)
        yield None  # pragma: no cover

    async def stop_resource(self) -> None:
        await asyncio.sleep(self.stop_seconds)
        self.stopped.append("TerminateJob")


async def _as_the_triggerer_does(trigger, repeat_every: float = 0.1, on_kill_timeout: float = 30.0) -> None:
    """``run_trigger`` plus ``cancel_triggers``: cancel by user action, await on_kill, and keep re-sending the cancel
    while the trigger's task has not ended."""
    message = _user_action_message()

    async def run_trigger():
        try:
            async for _ in trigger.run():
                pass
        except asyncio.CancelledError as err:
            if err.args and err.args[0] == message:
                try:
                    await asyncio.wait_for(trigger.on_kill(), timeout=on_kill_timeout)
                except (TimeoutError, asyncio.CancelledError):
                    pass
            raise

    task = asyncio.create_task(run_trigger())
    await asyncio.sleep(0.1)
    while not task.done():
        task.cancel(message)
        await asyncio.sleep(repeat_every)
    with pytest.raises(asyncio.CancelledError):
        await task
    # a stop the trigger's task no longer waits for still runs to its end: wait for every task left on the loop
    left = asyncio.all_tasks() - {asyncio.current_task()}
    if left:
        await asyncio.wait_for(asyncio.gather(*left, return_exceptions=True), timeout=30)


@pytest.mark.parametrize("state", ["failed", "success", "none", "scheduled", stop_rule.GONE])
def test_a_person_s_stop_stops_despite_the_repeated_cancel(monkeypatch, state):
    monkeypatch.setattr(stop_rule, "read_task_state", lambda ti: state)
    trigger = SlowStopTrigger()
    trigger.task_instance = TI
    asyncio.run(_as_the_triggerer_does(trigger))
    assert trigger.stopped == ["TerminateJob"]


def test_a_hand_over_to_another_triggerer_stops_nothing(monkeypatch):
    monkeypatch.setattr(stop_rule, "read_task_state", lambda ti: "deferred")
    trigger = SlowStopTrigger()
    trigger.task_instance = TI
    asyncio.run(_as_the_triggerer_does(trigger))
    assert trigger.stopped == []


def test_an_unreadable_state_stops_as_airflow_asked(monkeypatch):
    def broken(ti):
        raise ConnectionError("supervisor gone")

    monkeypatch.setattr(stop_rule, "read_task_state", broken)
    trigger = SlowStopTrigger()
    trigger.task_instance = TI
    asyncio.run(_as_the_triggerer_does(trigger))
    assert trigger.stopped == ["TerminateJob"]


def test_a_state_read_that_hangs_stops_as_airflow_asked_after_its_limit(monkeypatch):
    """The supervisor channel can hang (a stuck in-process Execution API): the read gives up after its limit and
    the stop goes ahead, instead of waiting for ever with the job running."""
    import threading

    gate = threading.Event()
    monkeypatch.setattr(stop_rule, "read_task_state", lambda ti: gate.wait(30) and "deferred")
    monkeypatch.setattr(stop_rule, "TRIGGER_STATE_READ_TIMEOUT_S", 0.5)
    trigger = SimpleNamespace(task_instance=TI)

    async def decide():
        try:
            return await asyncio.wait_for(stop_rule.trigger_should_stop(trigger), 10)
        finally:
            gate.set()  # before asyncio.run ends: it waits for the executor's threads, the hung read's included

    decision = asyncio.run(decide())
    assert decision.stop is True and decision.state is None


def test_the_state_is_read_for_the_trigger_s_own_task_instance(monkeypatch):
    """``GetTaskStates`` answers ``{run_id: {task_id or task_id_<map_index>: state}}`` (Execution API
    ``/task-instances/states``); a task instance missing from it has been deleted with its run."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    asked = []

    def states(**kwargs):
        asked.append(kwargs)
        return {"r": {"train": "deferred", "train_3": "failed"}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(states))
    assert stop_rule.read_task_state(TI) == "deferred"
    assert stop_rule.read_task_state(SimpleNamespace(**{**vars(TI), "map_index": 3})) == "failed"
    assert stop_rule.read_task_state(SimpleNamespace(**{**vars(TI), "task_id": "other"})) == stop_rule.GONE
    assert asked[0] == {"dag_id": "d", "task_ids": ["train"], "run_ids": ["r"], "map_index": -1}


def test_the_worker_rule():
    """A task still running when SIGTERM arrives is a worker stopping (restart, scale-in): nothing is stopped,
    unless the try ran out of its execution_timeout; any other state is a person's action."""
    assert stop_rule.worker_decision("running").stop is False
    assert stop_rule.worker_decision("running", timed_out=True).stop is True
    for state in ("failed", "success", "restarting", "none", stop_rule.GONE, None):
        assert stop_rule.worker_decision(state).stop is True
    task = SimpleNamespace(execution_timeout=dt.timedelta(minutes=5))
    started = dt.datetime.now(dt.timezone.utc)
    assert stop_rule._timed_out(SimpleNamespace(start_date=started), task) is False
    assert stop_rule._timed_out(SimpleNamespace(start_date=started - dt.timedelta(minutes=6)), task) is True
    # on_kill called by hand (no running task): it stops, as before
    assert stop_rule.worker_should_stop(task).stop is True


def test_the_worker_read_never_hangs_the_kill(monkeypatch):
    """The SIGTERM handler may interrupt a send that holds the supervisor channel: the read gives up in time."""
    import threading

    gate = threading.Event()
    monkeypatch.setattr(stop_rule, "read_task_state", lambda ti: gate.wait(5) and "running")
    decision = stop_rule.worker_should_stop(SimpleNamespace(execution_timeout=None), TI, timeout_s=0.3)
    gate.set()
    assert decision.stop is True and decision.state is None


def test_the_cause_a_plain_on_kill_is_cancelled_by_the_repeated_cancel():
    """Why a task marked failed kept its job before: an ``on_kill`` that awaits AWS directly (as every trigger's did)
    is itself cancelled by the triggerer's next cancel of the same trigger, about a second later, and the
    ``TerminateJob`` never goes out."""

    class PlainOnKill(SlowStopTrigger):
        async def on_kill(self) -> None:
            await self.stop_resource()

    trigger = PlainOnKill()
    asyncio.run(_as_the_triggerer_does(trigger, repeat_every=SlowStopTrigger.stop_seconds / 3))
    assert trigger.stopped == []


@pytest.mark.parametrize("try_number, max_tries, retries, afresh", [
    (1, 0, 0, True),     # the first try, no retries
    (1, 2, 2, True),     # the first try
    (2, 2, 2, False),    # its retry
    (3, 4, 2, True),     # the first try after a clear of try 2 (clear sets max_tries = try_number + retries)
    (4, 4, 2, False),    # a retry after that clear
])
def test_starts_afresh_tells_a_clear_from_a_retry(try_number, max_tries, retries, afresh):
    ti = SimpleNamespace(try_number=try_number, max_tries=max_tries)
    assert stop_rule.starts_afresh(ti, retries) is afresh


def test_starts_afresh_without_try_counters_is_a_retry():
    assert stop_rule.starts_afresh(None, 2) is False
    assert stop_rule.starts_afresh(SimpleNamespace(try_number=None, max_tries=1), 0) is False


TI_TRY_1 = SimpleNamespace(**{**vars(TI), "try_number": 1})


@pytest.mark.parametrize("claimed, stops", [
    (1, False),     # a hand-over: the task instance still waits for this trigger's try
    (2, True),      # cleared, and its next try deferred again before this cancel (before: read as a hand-over)
    (None, True),   # cleared, its next try started (its XComs cleared) and has not claimed a wait yet
])
def test_deferred_again_after_a_clear_is_told_from_a_hand_over_by_the_wait_claim(monkeypatch, claimed, stops):
    monkeypatch.setattr(stop_rule, "read_task_state", lambda ti: "deferred")
    monkeypatch.setattr(stop_rule, "read_wait_claim", lambda ti: claimed)
    trigger = SlowStopTrigger()
    trigger.task_instance = TI_TRY_1
    trigger.wait_claimed = True
    asyncio.run(_as_the_triggerer_does(trigger))
    assert trigger.stopped == (["TerminateJob"] if stops else [])


def test_a_trigger_that_could_not_claim_its_wait_leaves_a_deferred_task_s_job_alone(monkeypatch):
    """Before: a failed claim write made the next real hand-over (a triggerer restart) read "no claim" and
    terminate the job."""
    def refused(ti):
        raise ConnectionError("supervisor busy")

    monkeypatch.setattr(stop_rule, "claim_wait", refused)
    monkeypatch.setattr(stop_rule, "read_task_state", lambda ti: "deferred")
    monkeypatch.setattr(stop_rule, "read_wait_claim", lambda ti: None)
    trigger = SlowStopTrigger()
    trigger.task_instance = TI_TRY_1
    asyncio.run(trigger._claim_wait())
    assert trigger.wait_claimed is False
    asyncio.run(_as_the_triggerer_does(trigger))
    assert trigger.stopped == []


def test_an_unreadable_wait_claim_leaves_a_deferred_task_s_job_alone(monkeypatch):
    def broken(ti):
        raise ConnectionError("supervisor gone")

    monkeypatch.setattr(stop_rule, "read_task_state", lambda ti: "deferred")
    monkeypatch.setattr(stop_rule, "read_wait_claim", broken)
    decision = asyncio.run(stop_rule.trigger_should_stop(SimpleNamespace(task_instance=TI_TRY_1)))
    assert decision.stop is False and decision.state == "deferred"


def test_the_wait_claim_is_the_try_number_in_the_task_instance_s_xcom(monkeypatch):
    """Written and read through the Task SDK's XCom (``SetXCom`` / ``GetXCom``, served by the triggerer)."""
    from airflow.sdk.execution_time.xcom import XCom

    store: dict = {}
    monkeypatch.setattr(XCom, "set", classmethod(lambda cls, key, value, **where: store.__setitem__(
        (key, tuple(sorted(where.items()))), value)))
    monkeypatch.setattr(XCom, "get_one", classmethod(lambda cls, *, key, **where: store.get(
        (key, tuple(sorted(where.items()))))))
    assert stop_rule.read_wait_claim(TI_TRY_1) is None
    stop_rule.claim_wait(TI_TRY_1)
    assert store == {(stop_rule.WAIT_CLAIM_XCOM, (("dag_id", "d"), ("map_index", -1), ("run_id", "r"),
                                                  ("task_id", "train"))): {"try_number": 1}}
    assert stop_rule.read_wait_claim(TI_TRY_1) == 1


def test_a_wait_claims_its_try_when_it_starts(monkeypatch):
    claims = []
    monkeypatch.setattr(stop_rule, "claim_wait", lambda ti: claims.append(ti.try_number))

    class Done(StepWaitTrigger):
        step_function = staticmethod(lambda response, state: None)

        def __init__(self) -> None:
            super().__init__(waiter_delay=1, waiter_max_attempts=1)

        def hook(self):
            raise RuntimeError("claimed, then the wait itself starts")

    trigger = Done()
    trigger.task_instance = TI_TRY_1

    async def first_event_then_the_claim():
        with pytest.raises(RuntimeError, match="claimed, then"):
            async for _ in trigger.run():
                pass
        await trigger._claim  # the claim runs beside the wait, not before it

    asyncio.run(first_event_then_the_claim())
    assert claims == [1] and trigger.wait_claimed is True
