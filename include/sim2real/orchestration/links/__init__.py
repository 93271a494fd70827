"""Extra links of the DAG's tasks (console pages, the MLflow run, the report's pictures).

Airflow 3's task runner asks every extra link of a task for its URL when the task ends (``finalize``) and stores
it for the UI; a link reads the XCom its task persisted, and the Task SDK logs ``[error] XCom not found`` for
one that was never persisted (an untracked run's MLflow run, a picture that was not drawn). :func:`record_push`
and :func:`nothing_persisted` let a link skip that lookup when its own running task instance persisted nothing.
"""

from __future__ import annotations

from typing import Any

#: ``(task instance id, XCom key)`` of each link XCom this process's running task pushed (:func:`record_push`).
_PUSHED: set[tuple[str, str]] = set()


def record_push(ti: Any, key: str) -> None:
    """Note that the running task instance ``ti`` persisted the link XCom ``key`` (call after ``xcom_push``)."""
    _PUSHED.add((str(getattr(ti, "id", "")), key))


def nothing_persisted(ti_key: Any, key: str) -> bool:
    """Whether there is certainly no link XCom ``key`` to look up: ``ti_key`` is the task instance running in this
    process (Airflow 3's ``finalize`` passes it), it pushed no ``key`` (:func:`record_push`), and it did not resume
    from a deferral (Airflow keeps the XComs of the try before the deferral; a new try starts with none).
    ``False`` whenever that is not certain (another caller, another process): the link then looks it up."""
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    except ImportError:  # pragma: no cover - Airflow < 3
        return False
    if not isinstance(ti_key, RuntimeTaskInstance):
        return False
    context = getattr(ti_key, "_ti_context_from_server", None)
    if context is None or getattr(context, "next_method", None):
        return False
    return (str(ti_key.id), key) not in _PUSHED
