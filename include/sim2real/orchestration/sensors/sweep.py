"""A sweep's lanes: at most ``sweep_max_parallel`` candidates' training jobs at once.

Candidate ``i`` runs in lane ``i mod P`` and may submit its job once the lane's previous candidate ``i - P`` has
ended (its Batch job SUCCEEDED or FAILED, ``DescribeJobs``). ``P`` is a form field, known only when the run is
planned, so the limit cannot be an operator's ``max_active_tis_per_dagrun`` (fixed when the DAG is parsed).

A failed candidate frees its lane as an ended one does when the sweep may lose candidates (``max_failed`` =
candidates - ``sweep_min_candidates``: ``pick_best`` then picks among the survivors). When more candidates can no
longer succeed than that, the sweep cannot reach its minimum, and the lane fails at once instead of starting a job
the run cannot use or waiting out its timeout while the run holds its ``max_active_runs`` slot. A candidate can no
longer succeed when its submit or training task instance, or one of its later tasks (``later_task_ids``: the
checkpoint wait, the evaluation), is ``failed`` or ``upstream_failed`` (after its retries,
or marked so by a person; read through the Task Execution API, ``RuntimeTaskInstance.get_task_states``, no
database access), or when its Batch job ended ``FAILED``. ``max_failed`` 0 (every candidate needed): any such
candidate fails the lane.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
from airflow.providers.amazon.aws.sensors.base_aws import AwsBaseSensor
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.sdk.exceptions import AirflowFailException

from sim2real.orchestration.run_state import FAILED_STATES

if TYPE_CHECKING:
    from airflow.sdk import Context

#: AWS Batch job states after which a job holds no compute (AWS Batch User Guide, "Job states").
ENDED_STATES = ("SUCCEEDED", "FAILED")


class SweepLaneSensor(AwsBaseSensor[BatchClientHook]):
    """Wait until the lane's previous candidate's Batch job has ended (run it in ``mode="reschedule"``: a waiting
    candidate holds no worker slot).

    :param lane_after: map index of the candidate whose job must have ended first; ``None``: none (the lane's
        first candidate) (templated).
    :param submit_task_id: the mapped task whose XCom ``job_id`` is that candidate's job.
    :param train_task_id: the mapped task that waits for that job (its state is checked with the submit task's).
    :param max_failed: candidates that may fail while the sweep still picks among the survivors (templated; 0:
        every candidate is needed).
    :param later_task_ids: the candidate's mapped tasks after its training (checkpoint wait, evaluation): one of
        them failed makes the candidate lost as well.
    :return: ``{"lane_after", "job_id", "status"}`` of the job waited for (all ``None`` for a lane's first).
    :raises AirflowFailException: more than ``max_failed`` candidates' submit or training tasks are ``failed`` /
        ``upstream_failed`` (the lane's previous one named first), or, with ``max_failed`` 0, the previous
        candidate's job ended ``FAILED`` (the sweep cannot reach its minimum: this candidate does not start).
    """

    aws_hook_class = BatchClientHook
    template_fields: Sequence[str] = aws_template_fields("lane_after", "submit_task_id", "train_task_id",
                                                         "max_failed", "later_task_ids")

    def __init__(self, *, lane_after: int | str | None, submit_task_id: str, train_task_id: str,
                 max_failed: int | str = 0, later_task_ids: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lane_after = lane_after
        self.submit_task_id = submit_task_id
        self.train_task_id = train_task_id
        self.max_failed = max_failed
        self.later_task_ids = list(later_task_ids)
        self._waited: dict[str, Any] = {"lane_after": None, "job_id": None, "status": None}

    def _previous(self) -> int | None:
        if self.lane_after in (None, "", "None"):
            return None
        return int(self.lane_after)

    def _check_candidates_can_succeed(self, ti: Any, previous: int) -> dict[int, str]:
        """Fail when a candidate's submit, training or later task instance is failed / upstream_failed: the lane's
        previous one (its job would never end, or never free the lane for a run that can still succeed), or any
        other (the sweep cannot succeed any more: no new job is started for it).

        ``get_task_states`` answers ``{run_id: {"<task_id>_<map_index>": state}}`` for mapped task instances
        (Airflow 3 Task Execution API, ``GET /task-instances/states``).

        :return: map index → the failed task of each candidate that can no longer succeed (at most ``max_failed``).
        """
        task_ids = [self.submit_task_id, self.train_task_id, *self.later_task_ids]
        answer = ti.get_task_states(dag_id=ti.dag_id, task_ids=task_ids, run_ids=[ti.run_id]) or {}
        failed: dict[int, str] = {}
        for key, state in sorted((answer.get(ti.run_id) or {}).items()):
            task_id, _, index = key.rpartition("_")
            state = getattr(state, "value", state)
            if task_id in task_ids and index.isdigit() and state in FAILED_STATES:
                failed.setdefault(int(index), f"{task_id}[{index}] is {state}")
        if len(failed) <= self._max_failed():
            if previous in failed:
                self.log.info("lane free: candidate %s can no longer succeed (%s); the sweep may lose %s "
                              "candidate(s) and picks among the survivors", previous, failed[previous],
                              self._max_failed())
            return failed
        which = previous if previous in failed else min(failed)
        role = "the lane's previous candidate" if which == previous else "another candidate of the sweep"
        others = [failed[i] for i in sorted(failed) if i != which]
        raise AirflowFailException(
            f"{role} c{which} can no longer succeed ({failed[which]}"
            + (f"; also {', '.join(others)}" if others else "")
            + f"): {len(failed)} candidate(s) can no longer succeed, more than the {self._max_failed()} the sweep "
            f"may lose (sweep_min_candidates), so this one does not start (run {ti.run_id}). Fix the cause in "
            f"that task's log, then clear the failed candidates' tasks and this one's, or trigger a new run")

    def _max_failed(self) -> int:
        if self.max_failed in (None, "", "None"):
            return 0
        return max(int(self.max_failed), 0)

    def poke(self, context: Context) -> bool:
        previous = self._previous()
        if previous is None:
            return True
        ti = context["ti"]
        if previous in self._check_candidates_can_succeed(ti, previous):
            return True  # the sweep may lose it: its lane is free (its job, if any, ended or is being stopped)
        job_id = ti.xcom_pull(task_ids=self.submit_task_id, key="job_id", map_indexes=previous)
        if not job_id:
            self.log.info("lane busy: candidate %s has not submitted its job yet", previous)
            return False
        description = self.hook.get_job_description(job_id)
        status = description.get("status")
        self._waited = {"lane_after": previous, "job_id": job_id, "status": status}
        if status == "FAILED" and not self._max_failed():
            raise AirflowFailException(
                f"candidate c{previous}'s Batch job {job_id} (lane before this one) ended FAILED "
                f"({description.get('statusReason') or 'no status reason'}): a sweep needs every candidate, so "
                f"this one does not start. Read the job's log ({self.train_task_id}[{previous}]), fix the cause, "
                "then clear both candidates' tasks or trigger a new run")
        if status in ENDED_STATES:
            self.log.info("lane free: candidate %s's job %s is %s", previous, job_id, status)
            return True
        self.log.info("lane busy: candidate %s's job %s is %s", previous, job_id, status)
        return False

    def execute(self, context: Context) -> dict[str, Any]:
        super().execute(context)
        return self._waited
