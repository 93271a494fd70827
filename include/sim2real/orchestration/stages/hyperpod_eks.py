"""Training on SageMaker HyperPod orchestrated by Amazon EKS (group ``hyperpod_eks``): the team queue's capacity,
then the run's Kubeflow ``PyTorchJob`` in the team's Kueue queue (task governance).

The environment config's optional ``hyperpod_eks`` section (:data:`DEFAULTS`): ``cluster_name`` (the HyperPod
cluster), ``team`` (namespace ``hyperpod-ns-<team>``), ``priority_class``, ``gpus_per_node``, ``instance_type`` (for
the cost estimate), ``command`` (the container's command: the image's launcher), ``service_account``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.orchestration.budget import training_cost_limit, training_usd_per_node_hour
from sim2real.orchestration.candidates import expand_sweep
from sim2real.orchestration.dag_defaults import POLL
from sim2real.orchestration.hooks.hyperpod_eks import job_name, team_local_queue, team_namespace
from sim2real.orchestration.params import SECTION_TRAINING
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs
from sim2real.orchestration.stages.train import training_environment

BACKEND = "hyperpod_eks"
GROUP_ID = ids.HYPERPOD_EKS_GROUP
TASK_IDS = (ids.HYPERPOD_EKS_CHECK_CAPACITY, ids.HYPERPOD_EKS_SUBMISSION, ids.HYPERPOD_EKS_TRAIN_POLICY)
#: Optional ``hyperpod_eks`` keys of the environment config and their defaults.
DEFAULTS: dict[str, Any] = {"cluster_name": "", "team": "", "priority_class": "training", "gpus_per_node": 1,
                            "instance_type": "", "command": ["bash", "/usr/local/bin/distributed_run.bash"],
                            "service_account": ""}

DOC = """\
**Train the policy (SageMaker HyperPod on Amazon EKS, task governance).** `check_capacity` calls SageMaker and EKS
`DescribeCluster` (the cluster's API server) and reads the WorkloadPriorityClass `<priority>-priority`, the team's
Kueue LocalQueue `hyperpod-ns-<team>-localqueue` and its ClusterQueue: it fails before any spend when the priority
class or the queue is missing, the queue stopped, or its nominal
`nvidia.com/gpu` quota is below `num_nodes` x GPUs per node. `train_policy` creates the run's Kubeflow `PyTorchJob`
(named after the run key: a retry reattaches to it) in namespace `hyperpod-ns-<team>` with the labels
`kueue.x-k8s.io/queue-name` and `kueue.x-k8s.io/priority-class`, then waits (deferred) until it Succeeded. A job that
Kueue preempts (suspended, queued again) is waited through, not failed; the cost check counts only the time the job
held GPUs. Failed: the message names the cluster, namespace, job, condition and the end of the master pod's log. The
job is deleted when the task is killed or stopped at its cost limit. Hands on the job's name, uid, preemptions and
GPU-held seconds. A sweep: `check_capacity` sizes the quota for `min(sweep_max_parallel, candidates)` jobs,
`submission` skips `train_policy`, and each candidate's `sweep.train_on_eks` runs its own PyTorchJob.
"""

CANDIDATE_DOC = """\
**Train one sweep candidate (its own PyTorchJob on HyperPod EKS).** As `hyperpod_eks.train_policy`, for candidate
`c<i>`: creates the Kubeflow `PyTorchJob` `s2r-<run key>-c<i>` (labels: the team's Kueue queue, the run's priority
class, the run key and `sim2real.io/candidate: c<i>`) in namespace `hyperpod-ns-<team>` and waits (deferred) until
it Succeeded. Kueue admits the candidates' jobs as the team's quota allows (the others wait queued); a preemption is
waited through. A retry reattaches to the candidate's job by name; a kill deletes it. Hands on the job's name, uid,
preemptions and GPU-held seconds.
"""

SUBMISSION_DOC = """\
**One PyTorchJob or a sweep.** Calls no API and waits for nothing: follows `train_policy` in a run without a sweep;
in a sweep run it follows nothing (each candidate's `sweep.train_on_eks` creates its own job).
"""


@dataclass(frozen=True)
class HyperPodEksPlan(PlanSection):
    """The HyperPod EKS training job of a run (planned for every run: names only, no calls)."""

    SECTION = "hyperpod_eks"
    cluster_name: str
    team: str
    namespace: str
    queue: str
    priority_class: str
    job_name: str
    num_nodes: int
    gpus_per_node: int
    environment: dict[str, str]
    command: list[str] = field(default_factory=list)
    service_account: str = ""
    cost_limit_usd: float | None = None
    usd_per_node_hour: float | None = None
    sweep: bool = False  #: a sweep run: one job per candidate (``sweep.train_on_eks``), no ``train_policy``
    #: nodes the capacity check sizes the quota for: ``num_nodes``; a sweep: min(sweep_max_parallel, candidates)
    #: × ``num_nodes`` (the jobs that run at once, as the Batch sweep's check)
    capacity_nodes: int = 1


def settings(env: Mapping[str, Any]) -> dict[str, Any]:
    """The environment config's ``hyperpod_eks`` section with :data:`DEFAULTS` filled in."""
    section = env.get("hyperpod_eks") or {}
    return {**DEFAULTS, **{k: v for k, v in section.items() if v not in (None, "")}}


def params() -> dict[str, Any]:
    """The HyperPod EKS fields of the trigger form."""
    from airflow.sdk import Param

    name = {"type": ["null", "string"], "maxLength": 63, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
            "section": SECTION_TRAINING}
    return {
        "hyperpod_eks_cluster_name": Param(None, **{**name, "pattern": r"^([a-zA-Z0-9](-*[a-zA-Z0-9]){0,62})?$"},
                                           title="HyperPod EKS cluster", description="Used when the backend is "
                                           "hyperpod_eks: empty or the environment config's hyperpod_eks.cluster_name "
                                           "(another cluster is refused: not in this deployment's access)."),
        "hyperpod_eks_team": Param(None, **name, title="HyperPod EKS team",
                                   description="Task-governance team whose queue runs the job (namespace "
                                   "hyperpod-ns-<team>): empty or the environment config's hyperpod_eks.team "
                                   "(another team is refused: not in this deployment's RBAC)."),
        "hyperpod_eks_priority_class": Param(None, **name, title="HyperPod EKS priority",
                                             description="Task-governance priority class (label "
                                             "kueue.x-k8s.io/priority-class <name>-priority; empty: the config's, "
                                             "default training). Lower priorities can be preempted: the run waits."),
    }


def rule_errors(params: Mapping[str, Any], env: Mapping[str, Any]) -> list[str]:
    """The cross-field rules of ``training_backend: hyperpod_eks`` (each with the fix)."""
    if params.get("training_backend") != BACKEND:
        return []
    hp, errors = settings(env), []
    # The configured cluster and team are the ones the orphan sweep lists and infra/ grants (the EKS access entry
    # and the namespace's RBAC): a job elsewhere would never be swept, so the form may only repeat them.
    for field_, key, what in (("hyperpod_eks_cluster_name", "cluster_name", "a cluster"),
                              ("hyperpod_eks_team", "team", "a task-governance team")):
        typed, configured = params.get(field_), hp[key]
        if not configured:
            errors.append(f"training_backend 'hyperpod_eks' needs {what}: set hyperpod_eks.{key} in the environment "
                          f"config{f' (the form names {typed!r})' if typed else ''}; the orphan sweep and infra's "
                          "access entry and RBAC are set up from it")
        elif typed and typed != configured:
            errors.append(f"{field_} {typed!r} is not the configured hyperpod_eks.{key} {configured!r}: this "
                          "deployment's access entry, RBAC and orphan sweep cover that one only; leave the field "
                          "empty or change the environment config")
    return errors


def plan(ctx: PlanContext) -> HyperPodEksPlan:
    hp, p = settings(ctx.env), ctx.params
    team = p.get("hyperpod_eks_team") or hp["team"]
    eks_run = p.get("training_backend") == BACKEND
    candidates = len(expand_sweep(p.get("sweep")))
    at_once = min(int(p.get("sweep_max_parallel") or 1), candidates) if candidates else 1
    return HyperPodEksPlan(
        cluster_name=p.get("hyperpod_eks_cluster_name") or hp["cluster_name"], team=team,
        namespace=team_namespace(team), queue=team_local_queue(team),
        priority_class=p.get("hyperpod_eks_priority_class") or hp["priority_class"], job_name=job_name(ctx.run_key),
        num_nodes=int(p["num_nodes"]), gpus_per_node=int(hp["gpus_per_node"]), environment=training_environment(ctx),
        command=list(hp["command"]), service_account=str(hp["service_account"]),
        cost_limit_usd=training_cost_limit(ctx.budget) if eks_run else None,
        usd_per_node_hour=training_usd_per_node_hour(ctx.budget) if eks_run else None,
        capacity_nodes=at_once * int(p["num_nodes"]), sweep=bool(candidates),
    )


def _job_arguments(plan: Any, hp: Any, image: Any) -> dict[str, Any]:
    """The job operator's arguments shared by the run's one job and a sweep candidate's."""
    return dict(cluster_name=hp.cluster_name, team=hp.team, priority_class=hp.priority_class, run_key=plan["run_key"],
                image=image.output["image_uri"], num_nodes=hp.num_nodes, gpus_per_node=hp.gpus_per_node,
                command=hp.command, service_account=hp.service_account, usd_per_node_hour=hp.usd_per_node_hour,
                poll_interval=POLL, retries=2, execution_timeout=dt.timedelta(hours=12))


def add_tasks(plan: Any, *, image: Any, backend: Any) -> tuple[Any, Any]:
    """Add the ``hyperpod_eks`` group after the ``training_backend`` branch; return its training task and its
    capacity check (a sweep's candidates, in group ``sweep``, follow it: :func:`add_candidate_training`)."""
    from airflow.sdk import TaskGroup, task

    from sim2real.orchestration.operators.hyperpod_eks import HyperPodEksCapacityOperator, HyperPodEksJobOperator

    hp = refs(plan, HyperPodEksPlan)
    with TaskGroup(GROUP_ID, tooltip="SageMaker HyperPod on EKS: team queue capacity, PyTorchJob under Kueue",
                   doc_md=DOC):
        capacity = HyperPodEksCapacityOperator(
            task_id=ids.local(ids.HYPERPOD_EKS_CHECK_CAPACITY), cluster_name=hp.cluster_name, team=hp.team,
            num_nodes=hp.capacity_nodes, gpus_per_node=hp.gpus_per_node, priority_class=hp.priority_class, retries=1,
            execution_timeout=dt.timedelta(minutes=5), doc_md=DOC)

        @task.branch(task_id=ids.local(ids.HYPERPOD_EKS_SUBMISSION), retries=0,
                     execution_timeout=dt.timedelta(minutes=1), doc_md=SUBMISSION_DOC)
        def submission(plan: dict) -> str | None:
            """``hyperpod_eks.train_policy``, or nothing in a sweep run (its candidates run their own jobs)."""
            return None if HyperPodEksPlan.from_plan(plan).sweep else ids.HYPERPOD_EKS_TRAIN_POLICY

        route = submission(plan["plan"])
        training = HyperPodEksJobOperator(
            task_id=ids.local(ids.HYPERPOD_EKS_TRAIN_POLICY), environment=hp.environment,
            cost_limit_usd=hp.cost_limit_usd, doc_md=DOC, **_job_arguments(plan, hp, image))
        backend >> capacity >> route >> training
    return training, capacity


def add_candidate_training(plan: Any, *, image: Any, candidate: Any, environment: Any, cost_limit_usd: Any) -> Any:
    """Inside the mapped ``sweep`` group: the candidate's own PyTorchJob (``sweep.train_on_eks``).

    :param candidate: / :param environment: / :param cost_limit_usd: the candidate's mapped arguments (``c<i>``,
        the trainer's environment with the candidate's prefixes, its share of the training budget).
    :return: the operator (its result is the candidate's training result, as ``sweep.train_policy``'s on Batch).
    """
    from sim2real.orchestration.operators.hyperpod_eks import HyperPodEksJobOperator

    hp = refs(plan, HyperPodEksPlan)
    return HyperPodEksJobOperator(
        task_id=ids.local(ids.SWEEP_TRAIN_ON_EKS), candidate=candidate, environment=environment,
        cost_limit_usd=cost_limit_usd, doc_md=CANDIDATE_DOC, **_job_arguments(plan, hp, image))
