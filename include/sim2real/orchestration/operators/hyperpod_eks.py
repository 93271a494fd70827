"""SageMaker HyperPod on Amazon EKS: the team queue's capacity before spend, and the training job (a Kubeflow
``PyTorchJob`` under Kueue task governance; why this kind: :mod:`sim2real.orchestration.hooks.hyperpod_eks`).

Sources: Kubernetes API (custom resources: create / get / list / delete), Kubeflow training operator v1
(``PyTorchJob``), Kueue API reference v1beta1 (LocalQueue, ClusterQueue, Workload), AWS documentation "SageMaker
HyperPod task governance".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from sim2real.orchestration.budget import optional_usd
from sim2real.orchestration.hooks import hyperpod_eks as eks
from sim2real.orchestration.stop_rule import operator_should_stop
from sim2real.orchestration.triggers.base import defer_wait
from sim2real.orchestration.triggers.hyperpod_eks import HyperPodEksJobTrigger
from sim2real.orchestration.waits.core import event_outcome, settle_now
from sim2real.orchestration.waits.hyperpod_eks import eks_job_step, job_response

if TYPE_CHECKING:
    from airflow.sdk import Context

#: XCom key pushed before the wait: ``{"cluster_name", "namespace", "job_name", "job_uid"}``.
XCOM_EKS_JOB = "eks_job"


class HyperPodEksCapacityOperator(AwsBaseOperator[eks.HyperPodEksHook]):
    """Refuse the run before any spend when the team's Kueue queue cannot hold the job
    (:func:`~sim2real.orchestration.hooks.hyperpod_eks.capacity_problems`: the WorkloadPriorityClass
    ``<priority_class>-priority`` exists, the LocalQueue exists, its ClusterQueue exists, is not stopped and has a
    nominal ``nvidia.com/gpu`` quota of at least ``num_nodes x gpus_per_node``).

    :return: ``{"ok": True, "cluster_name", "namespace", "queue", "gpus"}``.
    :raises AirflowFailException: listing every problem, each with the object and what to change (not retried).
    """

    aws_hook_class = eks.HyperPodEksHook
    template_fields: Sequence[str] = aws_template_fields("cluster_name", "team", "num_nodes", "gpus_per_node",
                                                         "priority_class")

    def __init__(self, *, cluster_name: str, team: str, num_nodes: int | str, gpus_per_node: int | str,
                 priority_class: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cluster_name, self.team, self.priority_class = cluster_name, team, priority_class
        self.num_nodes, self.gpus_per_node = num_nodes, gpus_per_node

    def execute(self, context: Context) -> dict[str, Any]:
        namespace, queue = eks.team_namespace(self.team), eks.team_local_queue(self.team)
        gpus = int(self.num_nodes) * int(self.gpus_per_node)
        problems = eks.capacity_problems(self.hook.api_client(self.cluster_name), namespace=namespace, queue=queue,
                                         gpus=gpus, priority_class=self.priority_class)
        if problems:
            raise AirflowFailException(f"HyperPod EKS cluster {self.cluster_name}: the team queue cannot run this "
                                       "job; refused before any spend:\n- " + "\n- ".join(problems))
        self.log.info("Team queue %s/%s can hold %d GPU(s) on %s", namespace, queue, gpus, self.cluster_name)
        return {"ok": True, "cluster_name": self.cluster_name, "namespace": namespace, "queue": queue, "gpus": gpus}


class HyperPodEksJobOperator(AwsBaseOperator[eks.HyperPodEksHook]):
    """Create the run's ``PyTorchJob`` in the team's namespace and wait (deferred) until it Succeeded.

    A retry reattaches: the job's name comes from the run key (:func:`~sim2real.orchestration.hooks.hyperpod_eks.job_name`,
    the same for every try of a series), so a try finds the job an earlier try created and waits for it (or takes its
    result when it Succeeded, or its failure when it Failed) instead of creating a second one. A task a person cleared
    starts a new series: its job is named ``...-s<first try>``, and the run's earlier job, if still active, is deleted.
    Preemption by Kueue is waited through; the cost check counts only the time the job held GPUs
    (:mod:`~sim2real.orchestration.waits.hyperpod_eks`). ``on_kill`` (in the worker) and the trigger's ``on_kill``
    (deferred) delete the job.

    :param cluster_name: the HyperPod cluster (EKS-orchestrated).
    :param team: the task-governance team (namespace ``hyperpod-ns-<team>``, queue ``hyperpod-ns-<team>-localqueue``).
    :param priority_class: the task-governance priority (label ``kueue.x-k8s.io/priority-class: <name>-priority``).
    :param run_key: the run key (the job's label, and its name).
    :param candidate: a sweep candidate's ``c<i>`` (templated): its own job ``s2r-<run key>-c<i>`` with the label
        ``sim2real.io/candidate``; a cleared task supersedes only that candidate's jobs. Empty: the run's one job.
    :param image: the training image URI (the build's digest).
    :param num_nodes: / :param gpus_per_node: one pod per node, each with that many GPUs.
    :param environment: the trainer's environment. :param command: the container's command.
    :param cost_limit_usd: / :param usd_per_node_hour: the cost check (None: none).
    :param poll_interval: seconds between reads. :param max_attempts: reads before a ``timeout``.
    :return: ``{"backend": "hyperpod_eks", "job_id" (the job's name),
        "cluster_name", "namespace", "job_name", "job_uid", "state", "preemptions",
        "gpu_seconds", "num_nodes", "usd_per_node_hour", "cost_usd", "reattached"}``.
    :raises AirflowFailException: the job Failed (message: cluster, namespace, job, condition, log tail), was stopped
        at its cost limit, or had no end within ``max_attempts`` reads (it is deleted).
    :raises AirflowException: (retried) the job vanished or the API could not be read.
    """

    deferrable = True
    aws_hook_class = eks.HyperPodEksHook
    template_fields: Sequence[str] = aws_template_fields(
        "cluster_name", "team", "priority_class", "run_key", "image", "num_nodes", "gpus_per_node", "environment",
        "command", "service_account", "cost_limit_usd", "usd_per_node_hour", "candidate")

    def __init__(self, *, cluster_name: str, team: str, priority_class: str, run_key: str, image: str,
                 num_nodes: int | str, gpus_per_node: int | str, environment: dict[str, str], command: list[str],
                 cost_limit_usd: float | str | None = None, usd_per_node_hour: float | str | None = None,
                 service_account: str = "", poll_interval: int = 30, max_attempts: int = 1440,
                 candidate: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.candidate = candidate
        self.cluster_name, self.team, self.priority_class, self.run_key = cluster_name, team, priority_class, run_key
        self.image, self.num_nodes, self.gpus_per_node = image, num_nodes, gpus_per_node
        self.environment, self.command, self.service_account = environment, command, service_account
        self.cost_limit_usd, self.usd_per_node_hour = cost_limit_usd, usd_per_node_hour
        self.poll_interval, self.max_attempts = poll_interval, max_attempts
        self._job: dict[str, Any] | None = None

    @property
    def namespace(self) -> str:
        return eks.team_namespace(self.team)

    def _params(self, name: str, uid: str | None) -> dict[str, Any]:
        return {"cluster_name": self.cluster_name, "namespace": self.namespace, "job_name": name, "job_uid": uid,
                "num_nodes": int(self.num_nodes), "usd_per_node_hour": optional_usd("usd_per_node_hour",
                                                                                    self.usd_per_node_hour),
                "cost_limit_usd": optional_usd("cost_limit_usd", self.cost_limit_usd)}

    def _series(self, ti: Any) -> int:
        """The first try number of this try's series (1 until a person clears the task; then the cleared try's:
        Airflow sets ``max_tries = try_number + retries`` on a clear, see
        :func:`sim2real.orchestration.stop_rule.starts_afresh`). A bare test context counts as series 1."""
        try_number, max_tries = getattr(ti, "try_number", None), getattr(ti, "max_tries", None)
        if not (isinstance(try_number, int) and isinstance(max_tries, int)):
            return 1
        return max(1, max_tries - int(self.retries or 0) + 1)

    def _supersede(self, api: Any, name: str) -> None:
        """Delete the run's jobs of earlier series that have not ended (a cleared task trains afresh); a sweep
        candidate's task only its own candidate's (the other candidates' jobs carry another candidate label)."""
        from sim2real.orchestration.waits.hyperpod_eks import job_state

        for old in eks.list_jobs(api, f"{eks.RUN_KEY_LABEL}={self.run_key}", self.namespace):
            old_name = old["metadata"]["name"]
            if (old["metadata"].get("labels") or {}).get(eks.CANDIDATE_LABEL, "") != (self.candidate or ""):
                continue
            if old_name != name and job_state(old, None)[0] not in ("Succeeded", "Failed"):
                self.log.warning("PyTorchJob %s/%s of an earlier try is still active; this try starts afresh (the "
                                 "task was cleared): deleting it", self.namespace, old_name)
                eks.delete_job(api, self.namespace, old_name)

    def execute(self, context: Context) -> dict[str, Any]:
        api = self.hook.api_client(self.cluster_name)
        series = self._series(context.get("ti"))
        # Every try of a series finds the same job by name; a cleared task (a new series) starts a new one.
        name = eks.job_name(self.run_key, "-".join(
            part for part in (self.candidate, "" if series == 1 else f"s{series}") if part))
        job = eks.read_job(api, self.namespace, name)
        reattached = job is not None
        if job is None:
            self._supersede(api, name)
            manifest = eks.job_manifest(
                name=name, namespace=self.namespace, team=self.team, priority_class=self.priority_class,
                run_key=self.run_key, image=self.image, num_nodes=int(self.num_nodes),
                gpus_per_node=int(self.gpus_per_node), environment=self.environment, command=self.command,
                service_account=self.service_account, candidate=self.candidate or "")
            job = eks.create_job(api, manifest)
            self.log.info("Created PyTorchJob %s/%s on %s (queue %s, priority %s)", self.namespace, name,
                          self.cluster_name, eks.team_local_queue(self.team), eks.priority_class_label(self.priority_class))
        else:
            self.log.info("Reattached to PyTorchJob %s/%s on %s (created by an earlier try)", self.namespace, name,
                          self.cluster_name)
        uid = job.get("metadata", {}).get("uid")
        self._job = {"cluster_name": self.cluster_name, "namespace": self.namespace, "job_name": name, "job_uid": uid}
        context["ti"].xcom_push(key=XCOM_EKS_JOB, value=self._job)
        params = self._params(name, uid)
        if reattached:  # an earlier try's job that already ended is settled here
            workload = eks.workload_of(api, self.namespace, uid) if uid else None
            step = settle_now(eks_job_step, job_response(job, workload), params)
            if step is not None and step.action is None:
                return self.execute_complete(context, {**step.payload, "status": step.outcome, "message": step.reason,
                                                       "reattached": True})
        defer_wait(self, HyperPodEksJobTrigger, method_name="execute_complete", waiter_delay=self.poll_interval,
                   waiter_max_attempts=self.max_attempts, kwargs={"reattached": reattached}, **params)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None,
                         reattached: bool = False) -> dict[str, Any]:
        """Resume after the trigger: the job's result, or the failure naming cluster, namespace, job, condition and
        the end of the master pod's log."""
        status, message = event_outcome(event, f"PyTorchJob on {self.cluster_name}")
        self._job = {k: event.get(k) for k in ("cluster_name", "namespace", "job_name", "job_uid")}
        result = {"backend": "hyperpod_eks", "job_id": self._job["job_name"], **self._job, "state": event.get("state"),
                  "preemptions": event.get("preemptions", 0), "gpu_seconds": event.get("gpu_seconds"),
                  "num_nodes": int(self.num_nodes), "usd_per_node_hour": optional_usd("usd_per_node_hour",
                                                                                      self.usd_per_node_hour),
                  "cost_usd": event.get("cost_usd"), "reattached": bool(event.get("reattached", reattached))}
        if status == "success":
            self.log.info("%s", message)
            return result
        context["ti"].xcom_push(key="job_cost", value={k: result[k] for k in (
            "job_id", "cluster_name", "namespace", "job_name", "gpu_seconds", "num_nodes", "usd_per_node_hour",
            "cost_usd")})
        if event.get("reason") == "cost_limit":
            raise AirflowFailException(message)
        tail = self._log_tail()
        text = (f"{message}\ncluster {self.cluster_name}, namespace {self._job['namespace']}, job {self._job['job_name']}, "
                f"condition {event.get('state')}: {event.get('why') or '-'}"
                + (f"\n--- end of the master pod's log ---\n{tail[-2000:]}" if tail else ""))
        if status == "timeout":
            raise AirflowFailException(f"{text}\nno end within the wait: the job was deleted{self._delete()}")
        if event.get("state") == "Failed":
            raise AirflowFailException(text)  # the job's own verdict (its pods were already restarted OnFailure)
        raise AirflowException(text)  # gone, or the API unreadable: a retry reattaches or creates it again

    def _log_tail(self) -> str:
        try:
            return eks.log_tail(self.hook.api_client(self.cluster_name), self._job["namespace"], self._job["job_name"])
        except Exception as error:  # noqa: BLE001 - the failure matters more than its log
            self.log.warning("Could not read the job's log: %s", error)
            return ""

    def _delete(self) -> str:
        """Delete this task's job; "" when done, else a note."""
        if not self._job:
            return ""
        try:
            eks.delete_job(self.hook.api_client(self.cluster_name), self._job["namespace"], self._job["job_name"])
        except Exception as error:  # noqa: BLE001 - reported in the message
            return f" (delete FAILED: {error}; delete it by hand)"
        return ""

    def on_kill(self) -> None:
        """Delete the job this task created (or reattached to)."""
        if self._job and operator_should_stop(self, f"PyTorchJob {self._job['namespace']}/{self._job['job_name']}"):
            note = self._delete()
            if note:
                self.log.warning("%s", note.strip())
