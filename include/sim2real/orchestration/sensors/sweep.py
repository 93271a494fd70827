"""A sweep's lanes: at most ``sweep_max_parallel`` candidates' training jobs at once.

Candidate ``i`` runs in lane ``i mod P`` and may submit its job once the lane's previous candidate ``i - P`` has
ended (its Batch job SUCCEEDED or FAILED, ``DescribeJobs``). ``P`` is a form field, known only when the run is
planned, so the limit cannot be an operator's ``max_active_tis_per_dagrun`` (fixed when the DAG is parsed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
from airflow.providers.amazon.aws.sensors.base_aws import AwsBaseSensor
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields

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
    :return: ``{"lane_after", "job_id", "status"}`` of the job waited for (all ``None`` for a lane's first).
    """

    aws_hook_class = BatchClientHook
    template_fields: Sequence[str] = aws_template_fields("lane_after", "submit_task_id")

    def __init__(self, *, lane_after: int | str | None, submit_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lane_after = lane_after
        self.submit_task_id = submit_task_id
        self._waited: dict[str, Any] = {"lane_after": None, "job_id": None, "status": None}

    def _previous(self) -> int | None:
        if self.lane_after in (None, "", "None"):
            return None
        return int(self.lane_after)

    def poke(self, context: Context) -> bool:
        previous = self._previous()
        if previous is None:
            return True
        job_id = context["ti"].xcom_pull(task_ids=self.submit_task_id, key="job_id", map_indexes=previous)
        if not job_id:
            self.log.info("lane busy: candidate %s has not submitted its job yet", previous)
            return False
        status = self.hook.get_job_description(job_id).get("status")
        self._waited = {"lane_after": previous, "job_id": job_id, "status": status}
        if status in ENDED_STATES:
            self.log.info("lane free: candidate %s's job %s is %s", previous, job_id, status)
            return True
        self.log.info("lane busy: candidate %s's job %s is %s", previous, job_id, status)
        return False

    def execute(self, context: Context) -> dict[str, Any]:
        super().execute(context)
        return self._waited
