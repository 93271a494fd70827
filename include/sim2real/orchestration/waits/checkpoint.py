"""Step function of the checkpoint manifest wait.

A response is ``{"manifest_exists": bool}`` (S3 HeadObject / a file check of the manifest), plus
``"jobs"`` (``DescribeJobs.jobs`` of the training job) when the manifest is not there yet and a
job is watched; or a botocore error response. Source: AWS Batch API Reference, DescribeJobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.waits.core import Step, WaitState, api_error_step


def checkpoint_manifest_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one check of ``params["manifest_uri"]`` (and of ``params["batch_job_id"]``).

    :return: ``success`` when the manifest exists; ``failure`` when the job is FAILED first, or on a
        non-retriable error; ``retry`` otherwise (throttling included). Payload: ``manifest_uri``.
    """
    uri, job_id = state.params["manifest_uri"], state.params.get("batch_job_id")
    payload = {"manifest_uri": uri}
    error = api_error_step(response, f"checkpoint manifest {uri}", "checking")
    if error is not None:
        return Step(error.outcome, error.reason, {**payload, **error.payload})
    if response.get("manifest_exists"):
        return Step("success", f"checkpoint manifest {uri} exists", payload)
    jobs = response.get("jobs") or []
    if jobs and jobs[0].get("status") == "FAILED":
        return Step("failure", f"AWS Batch job {job_id} is FAILED ({jobs[0].get('statusReason')}) before {uri} was "
                               "written", payload)
    return Step("retry", f"checkpoint manifest {uri} not there yet", payload)
