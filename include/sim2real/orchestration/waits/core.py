"""The wait core: a step function decides one response, one async driver runs it.

A *step function* is ``step(response, state) -> Step``: pure (no AWS call, no clock, no sleep), it
reads one describe response of a resource (from polling, or later from an EventBridge event
delivered through SQS: any dict of the API's response shape) and the :class:`WaitState` the
previous steps left, and says what the wait does next: ``success``, ``failure``, ``retry`` or
``timeout``, why (:attr:`Step.reason`: which resource, which status, what to do), what the task
receives (:attr:`Step.payload`) and what must be stopped first (:attr:`Step.action`, e.g.
terminate the job, cancel the command).

:func:`drive` runs a step function: it gets the next response (a pluggable coroutine: the
trigger's describe call today), applies the step, performs its action, sleeps the poll interval,
enforces the attempt limit and returns ONE event payload whose ``status`` is one of
:data:`EVENT_STATUSES`. Operators' ``execute_complete`` read that status the same way
(:func:`event_outcome`); an operator that finds its resource already terminal calls the same step
function on its own describe response (:func:`settle_now`) and does not defer.

API errors reach the step functions in botocore's error-response shape
(``{"Error": {"Code", "Message"}, "ResponseMetadata": ...}``, as ``botocore.exceptions.ClientError.response``
and a waiter's ``last_response`` carry them); :func:`api_error_step` classifies them once: throttling
and 5xx codes (the provider's ``RETRIABLE_ERROR_CODES``) retry, any other code fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from botocore.exceptions import ClientError

#: The outcomes a step can have.
Outcome = Literal["success", "failure", "retry", "timeout"]
#: The ``status`` values of every wait event (the terminal outcomes). Operators read only these.
EVENT_STATUSES: tuple[str, ...] = ("success", "failure", "timeout")

#: Throttling and server-side error codes a poll retries (the Amazon provider's list, plus the
#: HTTP 5xx codes botocore reports as ``Error.Code``, and S3's ``SlowDown``).
try:  # provider >= 8: airflow.providers.amazon.aws.utils.waiter_with_logging
    from airflow.providers.amazon.aws.utils.waiter_with_logging import RETRIABLE_ERROR_CODES as _PROVIDER_CODES
except ImportError:  # pragma: no cover - the pinned provider has it
    _PROVIDER_CODES = ()
RETRIABLE_ERROR_CODES: frozenset[str] = frozenset(_PROVIDER_CODES) | {
    "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
    "TooManyRequestsException", "ServiceUnavailable", "InternalError", "InternalFailure",
    "InternalServerError", "InternalServerException", "SlowDown", "500", "502", "503", "504",
}


@dataclass(frozen=True)
class Action:
    """Something the wait must do before it ends (stop what was started).

    :param name: what to do, e.g. ``terminate_job``, ``cancel_command``, ``stop_build``, ``scancel``.
    :param params: its arguments (JSON-serializable), e.g. ``{"job_id": ..., "reason": ...}``.
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """What one response means for the wait.

    :param outcome: ``success`` / ``failure`` (terminal: the resource ended, or must be stopped,
        e.g. a budget was reached), ``retry`` (poll again), ``timeout`` (terminal: the wait gave up
        without an end; the driver also ends with it after the attempt limit).
    :param reason: for a person: which resource, which status, what to do.
    :param payload: JSON-serializable fields for the task (merged into the event).
    :param action: what the driver performs before the event (None: nothing).
    :param memory: the wait state's memory for the next step (None: unchanged).
    :param action_failed_reason: the reason to report instead when ``action`` fails (None: the
        driver adds the error to ``reason``).
    """

    outcome: Outcome
    reason: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    action: Action | None = None
    memory: Mapping[str, Any] | None = None
    action_failed_reason: str | None = None

    @property
    def terminal(self) -> bool:
        """True for ``success``, ``failure`` and ``timeout``."""
        return self.outcome != "retry"


@dataclass(frozen=True)
class WaitState:
    """What a step function may know besides the response.

    :param params: the wait's fixed parameters (the trigger's serialized fields: ids, limits).
    :param memory: what earlier steps remembered (e.g. when the job was first seen RUNNABLE).
    :param now: epoch seconds of the response (the driver's clock, or an event's time).
    :param attempt: responses seen before this one.
    :param poll_interval_s: seconds until the next response when this step retries.
    :param describe_s: seconds the describe call took (0 for a delivered event).
    """

    params: Mapping[str, Any] = field(default_factory=dict)
    memory: Mapping[str, Any] = field(default_factory=dict)
    now: float = 0.0
    attempt: int = 0
    poll_interval_s: float = 0.0
    describe_s: float = 0.0

    def after(self, step: Step) -> WaitState:
        """The state the next step sees."""
        memory = self.memory if step.memory is None else step.memory
        return replace(self, memory=dict(memory), attempt=self.attempt + 1)


#: ``step(response, state) -> Step``.
StepFunction = Callable[[Mapping[str, Any], WaitState], Step]
#: ``await next_response(state) -> response``: the trigger's describe call (or a queue of events).
NextResponse = Callable[[WaitState], Awaitable[Mapping[str, Any]]]
#: ``await perform(action) -> detail``: "" or a sentence added to the reason; raises when it failed.
Perform = Callable[[Action], Awaitable[str]]


def error_code(response: Mapping[str, Any]) -> str | None:
    """The ``Error.Code`` of a botocore error response, or None for a normal response."""
    error = response.get("Error") if isinstance(response, Mapping) else None
    return str(error.get("Code")) if isinstance(error, Mapping) and error.get("Code") is not None else None


def api_error_step(response: Mapping[str, Any], resource: str, operation: str) -> Step | None:
    """The step for an error response, or None when ``response`` is not one.

    Throttling / 5xx (:data:`RETRIABLE_ERROR_CODES`) -> ``retry``; any other code -> ``failure``
    naming the resource, the operation and the code.
    """
    code = error_code(response)
    if code is None:
        return None
    message = (response.get("Error") or {}).get("Message") or ""
    if code in RETRIABLE_ERROR_CODES:
        return Step("retry", f"{operation} for {resource} answered {code} (retriable): polling again")
    return Step("failure", f"{operation} for {resource} failed: {code}: {message}. Check the resource id, "
                           "the region and the IAM permissions of the Airflow connection.",
                {"error_code": code})


def event_payload(step: Step, detail: str = "") -> dict[str, Any]:
    """The TriggerEvent payload of a terminal step: ``{"status", "message", **payload}``."""
    if not step.terminal:
        raise ValueError(f"a {step.outcome!r} step has no event")
    message = f"{step.reason} {detail}".strip() if detail else step.reason
    return {**dict(step.payload), "status": step.outcome, "message": message}


async def drive(
    step_function: StepFunction,
    next_response: NextResponse,
    state: WaitState,
    *,
    max_attempts: int | None,
    perform: Perform | None = None,
    log: Any = None,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    clock: Callable[[], float] = time.time,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Run ``step_function`` over responses until a terminal step, ``max_attempts`` responses or ``deadline``.

    Per attempt: sleep ``state.poll_interval_s`` (not before the first), ``await next_response(state)``
    (a ``ClientError`` becomes its error response, which the step classifies), apply the step with
    ``now`` = ``clock()``. A terminal step's action is performed (``perform``); when it raises, the
    event still goes out and says the action failed and must be done by hand.

    :return: the event payload: ``{"status": "success" | "failure" | "timeout", "message", **payload}``,
        plus ``"action": {"name", "params", "done", "error"}`` when the step had an action. After
        ``max_attempts`` responses without a terminal step: ``timeout`` with the last step's reason
        and payload. Throttling / 5xx error responses (:data:`RETRIABLE_ERROR_CODES`) are retried without
        counting as an attempt.
        ``max_attempts`` None: no attempt limit (the deferral's ``timeout`` bounds the wait).
        ``deadline``: ``clock()`` time (epoch seconds) after which a non-terminal step ends the wait with
        ``timeout``; for a source that paces itself (events: far fewer responses than polls, so an attempt count
        would not bound the time). The source should answer by then (``EventDrivenResponses(max_wait=...)``).
    :raises ValueError: when ``max_attempts`` < 1.
    """
    if max_attempts is not None and max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    step: Step | None = None
    counted, first = 0, True
    started = clock()
    while max_attempts is None or counted < max_attempts:
        if not first:
            await sleep(state.poll_interval_s)
        first = False
        asked = time.monotonic()
        try:
            response = await next_response(state)
        except ClientError as error:
            response = error.response
        state = replace(state, now=clock(), describe_s=time.monotonic() - asked)
        step = step_function(response, state)
        if step.terminal:
            return await _finish(step, perform, log)
        if log is not None:
            log.info("%s", step.reason)
        state = state.after(step)
        # A throttled / 5xx answer says nothing about the resource: it does not use up an attempt (the
        # deferral's timeout still bounds the wait).
        if error_code(response) not in RETRIABLE_ERROR_CODES:
            counted += 1
        if deadline is not None and state.now >= deadline:
            return event_payload(Step(
                "timeout", f"no end within {deadline - started:.0f} s (the wait's deadline); last: {step.reason}",
                step.payload))
    last = step.reason if step is not None else ""
    return event_payload(Step(
        "timeout",
        f"no end after {max_attempts} polls {state.poll_interval_s:.0f} s apart; last: {last}",
        step.payload if step is not None else {},
    ))


async def _finish(step: Step, perform: Perform | None, log: Any) -> dict[str, Any]:
    if step.action is None:
        return event_payload(step)
    if perform is None:
        raise ValueError(f"step asks for {step.action.name} but the driver has no perform")
    detail, error = "", None
    try:
        detail = await perform(step.action) or ""
    except Exception as exc:  # noqa: BLE001 - the event must still say what happened
        error = f"{type(exc).__name__}: {exc}"
        detail = f"({step.action.name} failed: {error})"
        if step.action_failed_reason:
            step = replace(step, reason=step.action_failed_reason)
        else:
            detail = f"{step.action.name} FAILED ({error}): do it by hand."
        if log is not None:
            log.error("%s %s failed: %s", step.action.name, dict(step.action.params), error)
    payload = event_payload(step, detail)
    payload["action"] = {"name": step.action.name, "params": dict(step.action.params), "done": error is None,
                         "error": error}
    return payload


def settle_now(step_function: StepFunction, response: Mapping[str, Any], params: Mapping[str, Any],
               *, now: float | None = None) -> Step | None:
    """The terminal step of a resource already over (an operator decides not to defer), else None.

    Runs ``step_function`` once on ``response`` with a fresh state; a ``retry`` step (still
    running) gives None, so the caller defers. Actions are not performed here: a step that asks
    for one is returned for the caller to act on.
    """
    step = step_function(response, WaitState(params=dict(params), now=time.time() if now is None else now))
    return step if step.terminal else None


def event_outcome(event: Mapping[str, Any] | None, resource: str) -> tuple[str, str]:
    """``(status, message)`` of a wait event; refuses an event outside :data:`EVENT_STATUSES`.

    :raises ValueError: when the event is None or has another status (a trigger from an older
        release, or a bug): the task fails with the event in the message.
    """
    if not event or event.get("status") not in EVENT_STATUSES:
        raise ValueError(f"waiting for {resource}: unexpected trigger event {event!r}; expected a status in "
                         f"{EVENT_STATUSES}")
    return str(event["status"]), str(event.get("message") or "")
