"""SageMaker HyperPod orchestrated by Amazon EKS: the training job through the cluster's Kubernetes API.

**Job kind: Kubeflow ``PyTorchJob`` (``kubeflow.org/v1``), not the HyperPod training operator's
``HyperPodPyTorchJob`` (``sagemaker.amazonaws.com/v1``).** Sources (AWS documentation):

* "Using the HyperPod training operator" (sagemaker-eks-operator): ``HyperPodPyTorchJob`` is run by the HyperPod
  elastic agent, "an extension of PyTorch's ElasticAgent", which must be installed in the training image (its
  ``hyperpodrun`` launcher replaces ``torchrun``); the operator is an add-on a cluster may not have, and AWS says
  Kueue is optional for it.
* "Running jobs using the SageMaker HyperPod CLI" (sagemaker-hyperpod-eks-run-jobs-hyperpod-cli) and "Orchestrating
  SageMaker HyperPod clusters with Amazon EKS" (sagemaker-hyperpod-eks): job auto-resume with HyperPod's node
  resiliency is documented for the Kubeflow ``PyTorchJob`` (restart policy ``OnFailure``, in a namespace prefixed
  ``hyperpod``), and the task-governance examples submit ``PyTorchJob``s with the Kueue labels below.
* Kueue's built-in integration ``kubeflow.org/pytorchjob`` suspends and resumes the job through
  ``spec.runPolicy.suspend`` (Kueue documentation, "Run a Kubeflow PyTorchJob"): that is how task governance
  preempts, and how this backend sees it.

Our image already runs ``torchrun`` (``containers/rl/distributed_run.bash``, the Batch and Slurm launcher), so the
``PyTorchJob`` needs no image change and works on any HyperPod EKS cluster with task governance.

**Task governance** (AWS documentation, "SageMaker HyperPod task governance", its "Tasks" and "Example HyperPod
task governance AWS CLI commands" pages): a team's namespace is ``hyperpod-ns-<team>``, its Kueue LocalQueue
``hyperpod-ns-<team>-localqueue``, and a job names both in its labels ``kueue.x-k8s.io/queue-name`` and
``kueue.x-k8s.io/priority-class: <name>-priority`` (a WorkloadPriorityClass the admin created).

**Authentication**: a bearer token ``k8s-aws-v1.<base64url of a presigned STS GetCallerIdentity URL>`` signed with
the ``x-k8s-aws-id: <EKS cluster name>`` header, as the Amazon provider's ``EksHook`` makes it
(``airflow.providers.amazon.aws.utils.eks_get_token.fetch_access_token_for_cluster``; valid 15 minutes), here
signed with the Airflow connection's session. The endpoint and CA come from EKS ``DescribeCluster``; the
EKS cluster from SageMaker ``DescribeCluster`` (``Orchestrator.Eks.ClusterArn``). The Kubernetes client is
configured in memory: no kubeconfig is written.
"""

from __future__ import annotations

import base64
import re
import tempfile
from collections.abc import Mapping
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

from sim2real.contract.hyperpod_eks import (  # noqa: F401 - re-exported for the backend's modules
    CONTAINER_NAME,
    GPU_RESOURCE,
    CANDIDATE_LABEL,
    JOB_GROUP,
    JOB_KIND,
    JOB_PLURAL,
    JOB_UID_LABEL,
    JOB_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    MANAGED_BY,
    MANAGED_LABEL,
    MASTER_PORT,
    MASTER_PORT_NAME,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    RUN_KEY_LABEL,
    TOKEN_EXPIRES_S,
    TOKEN_REFRESH_S,
    job_name,
    priority_class_label,
    team_local_queue,
    team_namespace,
)

def job_manifest(*, name: str, namespace: str, team: str, priority_class: str, run_key: str, image: str,
                 num_nodes: int, gpus_per_node: int, environment: Mapping[str, str], command: list[str],
                 service_account: str = "", candidate: str = "") -> dict[str, Any]:
    """The ``PyTorchJob`` of one training run (``candidate``: a sweep candidate's ``c<i>``, its label
    :data:`CANDIDATE_LABEL`; empty: the run's one job) (Kubeflow training operator v1 API: ``pytorchReplicaSpecs``
    with a ``Master`` and ``num_nodes - 1`` ``Worker`` replicas, each requesting ``gpus_per_node`` GPUs).

    The operator gives every replica ``PET_NNODES`` (replicas), ``PET_NODE_RANK`` = ``RANK`` (Master 0, Worker i →
    i + 1), ``MASTER_ADDR`` = ``PET_MASTER_ADDR`` (``<name>-master-0``, the Master's Service), ``MASTER_PORT`` =
    ``PET_MASTER_PORT`` (the container port ``pytorchjob-port``, set here), ``PET_NPROC_PER_NODE`` (``nprocPerNode``,
    set here to ``gpus_per_node``) and ``WORLD_SIZE`` = replicas x nprocPerNode (kubeflow/training-operator v1.9.0,
    pkg/controller.v1/pytorch/envvar.go and master.go); ``containers/rl/distributed_run.bash`` maps them onto
    torchrun's per-node flags.

    Created suspended (``runPolicy.suspend: true``): Kueue unsuspends it when it admits the Workload, and suspends
    it again when it evicts it (Kueue documentation, "Run a Kubeflow PyTorchJob").
    """
    env = [{"name": k, "value": str(v)} for k, v in sorted(environment.items())]
    env += [{"name": "SIM2REAL_NUM_NODES", "value": str(num_nodes)}]
    resources = {"limits": {GPU_RESOURCE: gpus_per_node}, "requests": {GPU_RESOURCE: gpus_per_node}} \
        if gpus_per_node else {}

    def replica(count: int) -> dict[str, Any]:
        pod: dict[str, Any] = {"containers": [{"name": CONTAINER_NAME, "image": image, "command": list(command),
                                               "env": env, "resources": resources,
                                               "ports": [{"name": MASTER_PORT_NAME, "containerPort": MASTER_PORT}]}]}
        if service_account:
            pod["serviceAccountName"] = service_account
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": {RUN_KEY_LABEL: run_key}}, "spec": pod}}

    specs = {"Master": replica(1)}
    if num_nodes > 1:
        specs["Worker"] = replica(num_nodes - 1)
    job_spec: dict[str, Any] = {"runPolicy": {"suspend": True, "backoffLimit": 3, "cleanPodPolicy": "None"},
                                "pytorchReplicaSpecs": specs}
    if gpus_per_node:
        job_spec["nprocPerNode"] = str(gpus_per_node)  # a string in the v1 API ("auto" / "gpu" / an integer)
    return {
        "apiVersion": f"{JOB_GROUP}/{JOB_VERSION}", "kind": JOB_KIND,
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {QUEUE_LABEL: team_local_queue(team), PRIORITY_LABEL: priority_class_label(priority_class),
                                RUN_KEY_LABEL: run_key, MANAGED_LABEL: MANAGED_BY,
                                **({CANDIDATE_LABEL: candidate} if candidate else {})}},
        "spec": job_spec,
    }


def eks_token(session: Any, eks_cluster_name: str) -> str:
    """An EKS bearer token for ``eks_cluster_name`` signed with ``session``'s credentials (boto3 Session): a presigned
    STS ``GetCallerIdentity`` URL with the ``x-k8s-aws-id`` header, ``k8s-aws-v1.`` + its unpadded base64url, as
    the Amazon provider's ``fetch_access_token_for_cluster`` makes it (the regional STS endpoint).

    :raises ValueError: the session has no credentials.
    """
    from botocore.signers import RequestSigner

    credentials = session.get_credentials()
    if credentials is None:
        raise ValueError("no AWS credentials for the EKS token: check the Airflow connection")
    region = session.region_name
    sts = session.client("sts", region_name=region, endpoint_url=_sts_endpoint(session))
    signer = RequestSigner(sts.meta.service_model.service_id, region, "sts", "v4", credentials, session.events)
    url = signer.generate_presigned_url(
        {"method": "GET", "url": f"{sts.meta.endpoint_url}/?Action=GetCallerIdentity&Version=2011-06-15",
         "body": {}, "headers": {"x-k8s-aws-id": eks_cluster_name}, "context": {}},
        region_name=region, expires_in=TOKEN_EXPIRES_S, operation_name="")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def _sts_endpoint(session: Any) -> str | None:
    """The regional STS endpoint (``AWS_ENDPOINT_URL_STS`` / ``AWS_ENDPOINT_URL`` first, as botocore reads them)."""
    import os

    return os.environ.get("AWS_ENDPOINT_URL_STS") or os.environ.get("AWS_ENDPOINT_URL") or \
        f"https://sts.{session.region_name}.amazonaws.com"


def eks_cluster_name_of(describe: Mapping[str, Any]) -> str:
    """The EKS cluster name of a HyperPod ``DescribeCluster`` (``Orchestrator.Eks.ClusterArn``,
    ``arn:aws:eks:<region>:<account>:cluster/<name>``).

    :raises ValueError: the HyperPod cluster is not orchestrated by EKS (Slurm).
    """
    arn = ((describe.get("Orchestrator") or {}).get("Eks") or {}).get("ClusterArn") or ""
    match = re.match(r"^arn:[^:]+:eks:[^:]*:[^:]*:cluster/(.+)$", arn)
    if not match:
        raise ValueError(f"HyperPod cluster {describe.get('ClusterName')!r} has no Orchestrator.Eks.ClusterArn "
                         "(is it orchestrated by Slurm?): training_backend hyperpod_eks needs an EKS-orchestrated "
                         "cluster")
    return match.group(1)


class HyperPodEksHook(AwsBaseHook):
    """SageMaker (``DescribeCluster``) and EKS (``DescribeCluster``) for a HyperPod EKS cluster, and the Kubernetes
    client for its API server (:meth:`api_client`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["client_type"] = "sagemaker"
        super().__init__(*args, **kwargs)

    def eks_cluster(self, hyperpod_cluster: str) -> dict[str, Any]:
        """``{"name", "endpoint", "ca_data"}`` of the EKS cluster orchestrating ``hyperpod_cluster``.

        :raises ValueError: not an EKS-orchestrated cluster.
        """
        name = eks_cluster_name_of(self.conn.describe_cluster(ClusterName=hyperpod_cluster))
        eks = self.get_session().client("eks", region_name=self.conn_region_name,
                                        config=self.config, verify=self.verify)
        cluster = eks.describe_cluster(name=name)["cluster"]
        return {"name": name, "endpoint": cluster["endpoint"],
                "ca_data": (cluster.get("certificateAuthority") or {}).get("data") or ""}

    def api_client(self, hyperpod_cluster: str) -> Any:
        """A ``kubernetes.client.ApiClient`` for the cluster's API server, authenticated with an EKS token (the
        client's ``refresh_api_key_hook`` signs a new one when it is older than :data:`TOKEN_REFRESH_S`). The CA bundle
        (public data) goes to a file, the only form the client takes (:func:`ca_bundle_file`: one per CA, reused);
        the token stays in memory."""
        import time

        from kubernetes import client

        eks = self.eks_cluster(hyperpod_cluster)
        session = self.get_session(region_name=self.conn_region_name)
        config = client.Configuration()
        config.host = eks["endpoint"]
        config.api_key_prefix = {"BearerToken": "Bearer"}
        signed = {"at": -TOKEN_REFRESH_S}

        def refresh(configuration: Any) -> None:
            if time.monotonic() - signed["at"] >= TOKEN_REFRESH_S:
                configuration.api_key["BearerToken"] = eks_token(session, eks["name"])
                signed["at"] = time.monotonic()

        refresh(config)  # the client sends a key only once it has one, and refreshes it before each request
        config.refresh_api_key_hook = refresh
        if eks["ca_data"] and config.host.startswith("https"):
            config.ssl_ca_cert = ca_bundle_file(base64.b64decode(eks["ca_data"]))
        return client.ApiClient(config)


def ca_bundle_file(pem: bytes) -> str:
    """The path of a file holding ``pem`` (a cluster's CA bundle, public data), named by its SHA-256 in the temporary
    directory: every client of the same CA shares one file, written once (atomically), so polls add none."""
    import hashlib
    import os

    path = os.path.join(tempfile.gettempdir(), f"eks-ca-{hashlib.sha256(pem).hexdigest()[:32]}.crt")
    if not os.path.exists(path):
        with tempfile.NamedTemporaryFile("wb", dir=os.path.dirname(path), prefix=".eks-ca-", delete=False) as part:
            part.write(pem)
        os.replace(part.name, path)
    return path


# ---- Kubernetes API calls (the official client; ``api`` is a ``kubernetes.client.ApiClient``)

def _custom(api: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(api)


def _missing(error: Exception) -> bool:
    return getattr(error, "status", None) == 404


def create_job(api: Any, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Create the ``PyTorchJob`` (``POST .../namespaces/<ns>/pytorchjobs``); the created object."""
    meta = manifest["metadata"]
    return _custom(api).create_namespaced_custom_object(JOB_GROUP, JOB_VERSION, meta["namespace"], JOB_PLURAL,
                                                        dict(manifest))


def read_job(api: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The ``PyTorchJob`` ``namespace/name``, or None when there is none (404)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return _custom(api).get_namespaced_custom_object(JOB_GROUP, JOB_VERSION, namespace, JOB_PLURAL, name)
    except ApiException as error:
        if _missing(error):
            return None
        raise


def delete_job(api: Any, namespace: str, name: str) -> bool:
    """Delete the job and its pods (``propagationPolicy: Foreground``); False when it was already gone."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        _custom(api).delete_namespaced_custom_object(JOB_GROUP, JOB_VERSION, namespace, JOB_PLURAL, name,
                                                     body=client.V1DeleteOptions(propagation_policy="Foreground"))
    except ApiException as error:
        if _missing(error):
            return False
        raise
    return True


def list_jobs(api: Any, label_selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """The ``PyTorchJob``s matching ``label_selector`` in ``namespace`` (None: every namespace)."""
    custom = _custom(api)
    if namespace:
        answer = custom.list_namespaced_custom_object(JOB_GROUP, JOB_VERSION, namespace, JOB_PLURAL,
                                                      label_selector=label_selector)
    else:
        answer = custom.list_cluster_custom_object(JOB_GROUP, JOB_VERSION, JOB_PLURAL, label_selector=label_selector)
    return list(answer.get("items") or [])


def workload_of(api: Any, namespace: str, job_uid: str) -> dict[str, Any] | None:
    """Kueue's Workload of the job (label ``kueue.x-k8s.io/job-uid``), or None (not created yet, or no Kueue)."""
    answer = _custom(api).list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads",
                                                        label_selector=f"{JOB_UID_LABEL}={job_uid}")
    items = answer.get("items") or []
    return items[0] if items else None


def log_tail(api: Any, namespace: str, name: str, lines: int = 40) -> str:
    """The last ``lines`` lines of the job's master pod (label ``training.kubeflow.org/job-name``,
    ``training.kubeflow.org/replica-type=master``); "" when it has none or they cannot be read."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=f"training.kubeflow.org/job-name={name},"
                                                                  "training.kubeflow.org/replica-type=master").items
        if not pods:
            return ""
        # The raw answer (text/plain): the client's own decoding would give the bytes' repr.
        answer = core.read_namespaced_pod_log(pods[0].metadata.name, namespace, tail_lines=lines, _preload_content=False)
        return answer.data.decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - the failure message matters more than its log
        return ""


def capacity_problems(api: Any, *, namespace: str, queue: str, gpus: int, priority_class: str = "") -> list[str]:
    """Why the team's queue cannot run a job of ``gpus`` GPUs, before anything is submitted ([]: it can).

    Reads the WorkloadPriorityClass ``<priority_class>-priority`` (cluster-scoped; none is read for ""), the
    LocalQueue ``namespace/queue`` (its ``spec.clusterQueue``) and that ClusterQueue's
    ``spec.resourceGroups[].flavors[].resources[]`` (``name: nvidia.com/gpu``, ``nominalQuota``; Kueue API reference,
    ClusterQueue) and ``spec.stopPolicy``. Each problem names the object and what to change. Without the priority
    class Kueue creates no Workload for the job: it would stay suspended for ever.
    """
    from kubernetes.client.exceptions import ApiException

    custom = _custom(api)
    problems: list[str] = []
    if priority_class:
        label = priority_class_label(priority_class)
        try:
            custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses", label)
        except ApiException as error:
            if not _missing(error):
                raise
            problems.append(f"Kueue WorkloadPriorityClass {label} does not exist: Kueue would create no Workload for "
                            "the job (it would stay suspended); use a priority the cluster admin defined in the task "
                            "governance policy (hyperpod_eks_priority_class in the form / hyperpod_eks.priority_class "
                            "in the environment config)")
    try:
        local = custom.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", queue)
    except ApiException as error:
        if not _missing(error):
            raise
        return [*problems, f"Kueue LocalQueue {namespace}/{queue} does not exist: set up the team in SageMaker HyperPod task "
                "governance (its compute allocation creates hyperpod-ns-<team> and the queue), or correct "
                "hyperpod_eks_team in the form / hyperpod_eks.team in the environment config"]
    cq_name = (local.get("spec") or {}).get("clusterQueue") or ""
    try:
        cq = custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", cq_name)
    except ApiException as error:
        if not _missing(error):
            raise
        return [*problems, f"LocalQueue {namespace}/{queue} points at ClusterQueue {cq_name!r}, which does not "
                "exist: the team's compute allocation is incomplete (ask the cluster admin)"]
    spec = cq.get("spec") or {}
    if spec.get("stopPolicy") in ("Hold", "HoldAndDrain"):
        problems.append(f"ClusterQueue {cq_name} is stopped (stopPolicy {spec['stopPolicy']}): it admits no job")
    quota = sum(_quantity(r.get("nominalQuota"))
                for group in spec.get("resourceGroups") or [] for flavor in group.get("flavors") or []
                for r in flavor.get("resources") or [] if r.get("name") == GPU_RESOURCE)
    if gpus > quota:
        problems.append(f"ClusterQueue {cq_name} (team queue {namespace}/{queue}) has a nominal quota of {quota:g} "
                        f"{GPU_RESOURCE}; the job needs {gpus} (nodes x GPUs per node): lower num_nodes, or ask the "
                        "cluster admin to raise the team's compute allocation (task governance policies)")
    return problems


def _quantity(value: Any) -> float:
    """A Kubernetes quantity of whole units (``"8"``, 8, ``"8k"``) as a number; 0 for None."""
    if value in (None, ""):
        return 0.0
    text = str(value)
    suffixes = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * suffixes[text[-1]] if text[-1] in suffixes else float(text)
