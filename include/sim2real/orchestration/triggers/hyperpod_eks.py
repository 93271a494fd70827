"""Trigger of a training job on a HyperPod EKS cluster (a Kubeflow ``PyTorchJob`` under Kueue).

Each poll reads the job and its Kueue Workload through the official Kubernetes client (in a thread: the client is
synchronous), the step function :func:`~sim2real.orchestration.waits.hyperpod_eks.eks_job_step` decides.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sim2real.orchestration.hooks import hyperpod_eks as eks
from sim2real.orchestration.triggers.base import REQUIRED, StepWaitTrigger
from sim2real.orchestration.waits.core import Action, WaitState
from sim2real.orchestration.waits.hyperpod_eks import api_error_response, eks_job_step, job_response

class HyperPodEksJobTrigger(StepWaitTrigger):
    """Poll a ``PyTorchJob`` and its Workload until it Succeeded or Failed; preemptions are waited through.

    :param cluster_name: the HyperPod cluster (its EKS cluster is found through SageMaker ``DescribeCluster``).
    :param namespace: / :param job_name: / :param job_uid: the job.
    :param num_nodes: / :param usd_per_node_hour: / :param cost_limit_usd: the cost check (None: none), on the
        GPU-held time only.

    ``on_kill`` (a person stopped the deferred task) deletes the job (:meth:`stop_resource`); a hand-over to another
    triggerer stops nothing (:meth:`StepWaitTrigger.on_kill`).

    One event: ``{"status", "message", "cluster_name", "namespace", "job_name", "job_uid", "state", "why",
    "preemptions", "gpu_seconds", "cost_usd"}`` (and ``reason: cost_limit`` for a job stopped at its limit).
    """

    aws_hook_class = eks.HyperPodEksHook
    fields = {"cluster_name": REQUIRED, "namespace": REQUIRED, "job_name": REQUIRED, "job_uid": None,
              "num_nodes": None, "usd_per_node_hour": None, "cost_limit_usd": None}
    default_waiter_delay, default_waiter_max_attempts = 30, 1440
    step_function = staticmethod(eks_job_step)
    _api: Any = None

    def _client(self) -> Any:
        """The Kubernetes client (built once; it signs a new EKS token itself when its token gets old)."""
        if self._api is None:
            self._api = self.hook().api_client(self.cluster_name)
        return self._api

    def _read(self) -> dict[str, Any]:
        try:
            api = self._client()
            job = eks.read_job(api, self.namespace, self.job_name)
            uid = (job or {}).get("metadata", {}).get("uid") or self.job_uid
            workload = eks.workload_of(api, self.namespace, uid) if job is not None and uid else None
        except Exception as error:  # noqa: BLE001 - classified by api_error_response (retry: throttling, 5xx, no answer)
            self._api = None
            return api_error_response(error)
        return job_response(job, workload)

    async def describe(self, client: Any, state: WaitState) -> dict[str, Any]:
        """The job and its Workload (``client``, the SageMaker client of the base class, is not used)."""
        return await asyncio.to_thread(self._read)

    async def perform(self, client: Any, action: Action) -> str:
        """``delete_job``: delete the job and its pods."""
        if action.name != "delete_job":
            raise ValueError(f"unknown action {action.name}")
        await asyncio.to_thread(self._delete)
        return ""

    def _delete(self) -> bool:
        """Delete the job (in a thread: building the client calls SageMaker and EKS)."""
        return eks.delete_job(self._client(), self.namespace, self.job_name)

    async def stop_resource(self) -> None:
        """Delete the job: a person stopped the deferred task (base ``on_kill``)."""
        self.log.info("Deleting PyTorchJob %s/%s on %s", self.namespace, self.job_name, self.cluster_name)
        await asyncio.to_thread(self._delete)
