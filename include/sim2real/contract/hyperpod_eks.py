"""Names the HyperPod EKS training backend and its emulated Kubernetes API server share: the job kind, Kueue's
API, the labels (AWS documentation, "SageMaker HyperPod task governance"), the team's namespace and queue, the job
name of a run, and the form of an EKS bearer token. Standard library only (the sandbox imports it before Airflow).
"""

from __future__ import annotations

import base64

#: The job kind (Kubeflow training operator v1: PyTorchJob).
JOB_GROUP, JOB_VERSION, JOB_PLURAL, JOB_KIND = "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"
#: Kueue's API (LocalQueue, ClusterQueue, Workload). Source: Kueue API reference, kueue.x-k8s.io/v1beta1.
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: The Workload's label naming its job's uid (Kueue: ``kueue.x-k8s.io/job-uid``).
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: This project's labels on every job: the run key (a label value: at most 63 characters, as the run key).
RUN_KEY_LABEL = "sim2real.io/run-key"
#: A sweep candidate's job: its candidate ``c<i>`` (a single-job run's job has no such label).
CANDIDATE_LABEL = "sim2real.io/candidate"
MANAGED_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "sim2real"
#: The Master container's port the training operator reads MASTER_PORT / PET_MASTER_PORT from (container "pytorch",
#: port "pytorchjob-port", 23456 when the job names none: PyTorchJobDefaultContainerName/PortName/Port in
#: kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/pytorch_types.go; its defaulter adds it).
CONTAINER_NAME, MASTER_PORT_NAME, MASTER_PORT = "pytorch", "pytorchjob-port", 23456
#: The GPU resource name (NVIDIA device plugin).
GPU_RESOURCE = "nvidia.com/gpu"
#: Seconds a presigned STS URL is valid in the token (the provider's STS_TOKEN_EXPIRES_IN).
TOKEN_EXPIRES_S = 60
#: Seconds a token is used before a new one is signed (EKS accepts one for 15 minutes; the provider's
#: TOKEN_EXPIRATION_MINUTES is 14).
TOKEN_REFRESH_S = 600


def team_namespace(team: str) -> str:
    """The team's namespace under task governance: ``hyperpod-ns-<team>``."""
    return f"hyperpod-ns-{team}"


def team_local_queue(team: str) -> str:
    """The team's Kueue LocalQueue under task governance: ``hyperpod-ns-<team>-localqueue``."""
    return f"hyperpod-ns-{team}-localqueue"


def priority_class_label(name: str) -> str:
    """The ``kueue.x-k8s.io/priority-class`` value of a task-governance priority: ``<name>-priority``."""
    return name if name.endswith("-priority") else f"{name}-priority"


def job_name(run_key: str, suffix: str = "") -> str:
    """The job's name: ``s2r-<run key>[-<suffix>]``, a DNS-1123 label of at most 63 characters, the same for every
    try of a run (a retry finds its job by it). The run key ends in a hash, kept when cut."""
    tail = f"-{suffix}" if suffix else ""
    room = 63 - len("s2r-") - len(tail)
    key = run_key if len(run_key) <= room else run_key[: room - 9].rstrip("-") + "-" + run_key[-8:]
    return f"s2r-{key}{tail}"


def eks_token_url(token: str) -> str | None:
    """The presigned STS URL inside an EKS token (``k8s-aws-v1.`` + its unpadded base64url), or None when ``token``
    does not have that form or its URL is no ``GetCallerIdentity`` signing the ``x-k8s-aws-id`` header."""
    if not token.startswith("k8s-aws-v1."):
        return None
    body = token[len("k8s-aws-v1."):]
    try:
        url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    except ValueError:
        return None
    return url if "Action=GetCallerIdentity" in url and "x-k8s-aws-id" in url else None
