"""An emulated Kubernetes API server of a HyperPod EKS cluster with Kueue: just the kinds and verbs the
``hyperpod_eks`` training backend uses, driven by the official Python client.

Loopback only (127.0.0.1), plain HTTP, and every request needs ``Authorization: Bearer <token>``: an EKS token
the server verifies (:func:`verify_eks_token`: the presigned STS ``GetCallerIdentity`` URL's SigV4 signature
recomputed with botocore from the server's own ``credentials``, the ``x-k8s-aws-id`` header bound to its
``eks_cluster_name``, not expired; what the backend sends) or the server's own
:attr:`KubernetesApiServer.static_token` (for a test's kubeconfig); anything else is answered 401. The sandbox's
secret key is random per sandbox, so no token can be forged from a known constant.

Routes (shapes: Kubernetes API conventions — ``Status`` errors, ``<Kind>List`` lists, ``labelSelector`` ``k=v,...``;
Kubeflow training operator v1 ``PyTorchJob``; Kueue API reference v1beta1 ``LocalQueue``, ``ClusterQueue``,
``Workload``):

* ``/apis/kubeflow.org/v1/namespaces/<ns>/pytorchjobs[/<name>]``: POST, GET, list, DELETE; ``/apis/kubeflow.org/v1/
  pytorchjobs``: list in every namespace.
* ``/apis/kueue.x-k8s.io/v1beta1/namespaces/<ns>/localqueues/<name>``, ``.../clusterqueues/<name>``,
  ``.../workloadpriorityclasses/<name>``: GET;
  ``.../namespaces/<ns>/workloads``: list.
* ``/api/v1/namespaces/<ns>/pods``: list; ``.../pods/<name>/log?tailLines=N``: the pod's output.

A created job plays what the training operator and Kueue do: a Workload (label ``kueue.x-k8s.io/job-uid``) is
created (none when its ``kueue.x-k8s.io/priority-class`` names no WorkloadPriorityClass: it stays suspended); when
the ClusterQueue's ``nvidia.com/gpu`` nominal quota holds it beside the admitted ones it is
``QuotaReserved`` + ``Admitted`` and the job unsuspended; each replica's pod (Master and Workers) then runs its
container command as a local process (its ``env`` plus what the training operator adds, :func:`operator_env`, with
the Master's Service and port on 127.0.0.1) and the job is ``Running``, then, when the Master's process exits,
``Succeeded`` (exit 0) or ``Failed``. :meth:`KubernetesApiServer.preempt` evicts a running job (Workload ``Evicted`` reason
``Preempted``, its admitted seconds added to ``status.accumulatedPastExexcutionTimeSeconds`` as Kueue does, job
suspended, its process killed), and it is readmitted after ``step_seconds``: its command runs
again. A deleted job's process is killed.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import secrets
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from sim2real.contract.hyperpod_eks import (GPU_RESOURCE, JOB_UID_LABEL, PRIORITY_LABEL, QUEUE_LABEL,
                                            eks_token_url)

_JOBS = re.compile(r"^/apis/kubeflow\.org/v1(?:/namespaces/(?P<ns>[^/]+))?/pytorchjobs(?:/(?P<name>[^/]+))?$")
_KUEUE = re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta1(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>localqueues|"
                    r"clusterqueues|workloads|workloadpriorityclasses)(?:/(?P<name>[^/]+))?$")
_PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?P<log>/log)?)?$")


def verify_eks_token(token: str, credentials: Mapping[str, str], cluster_name: str,
                     now: float | None = None) -> bool:
    """Whether ``token`` is an EKS token (:func:`~sim2real.contract.hyperpod_eks.eks_token_url`) whose presigned STS
    ``GetCallerIdentity`` URL carries a valid SigV4 query signature (botocore's ``SigV4QueryAuth`` recomputes it
    with the secret key of its ``X-Amz-Credential`` access key id in ``credentials``), signs the ``x-k8s-aws-id``
    header as ``cluster_name`` (what EKS checks: "aws-iam-authenticator"), and is within ``X-Amz-Date`` +
    ``X-Amz-Expires`` (``now``: epoch s, default the clock). False for anything else."""
    import datetime as dt
    import hmac
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = eks_token_url(token) if cluster_name else None
    if url is None:
        return False
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = dict(pairs)
    try:
        access_key, _day, region, service, _ = query["X-Amz-Credential"].split("/")
        signed_at = dt.datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        expires = int(query["X-Amz-Expires"])
        signature = query["X-Amz-Signature"]
    except (KeyError, ValueError):
        return False
    secret = credentials.get(access_key)
    clock = time.time() if now is None else now
    if (secret is None or query.get("Action") != "GetCallerIdentity" or service != "sts"
            or "x-k8s-aws-id" not in query.get("X-Amz-SignedHeaders", "").split(";")
            or not signed_at.timestamp() - 60 <= clock <= signed_at.timestamp() + expires):
        return False
    unsigned = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in pairs if k != "X-Amz-Signature"])))
    request = AWSRequest("GET", unsigned, headers={"x-k8s-aws-id": cluster_name})
    request.context["timestamp"] = query["X-Amz-Date"]
    auth = SigV4QueryAuth(Credentials(access_key, secret), service, region, expires=expires)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    return hmac.compare_digest(expected, signature)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _set_condition(obj: dict[str, Any], kind: str, status: bool, reason: str = "", message: str = "") -> None:
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c["type"] != kind]
    conditions.append({"type": kind, "status": "True" if status else "False", "reason": reason, "message": message,
                       "lastTransitionTime": _now()})


def _add_admitted_seconds(workload: dict[str, Any]) -> None:
    """What Kueue does when a Workload's ``Admitted`` condition turns False: add the whole seconds since it turned
    True to ``status.accumulatedPastExexcutionTimeSeconds`` (sic; Kueue API reference v1beta1, WorkloadStatus)."""
    status = workload.setdefault("status", {})
    admitted = next((c for c in status.get("conditions") or [] if c["type"] == "Admitted" and c["status"] == "True"),
                    None)
    if admitted is None:
        return
    since = calendar.timegm(time.strptime(admitted["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ"))
    field = "accumulatedPastExexcutionTimeSeconds"
    status[field] = int(status.get(field) or 0) + max(int(time.time() - since), 0)


def _gpus(job: dict[str, Any]) -> int:
    total = 0
    for spec in (job.get("spec") or {}).get("pytorchReplicaSpecs", {}).values():
        for container in spec["template"]["spec"]["containers"]:
            total += int(((container.get("resources") or {}).get("requests") or {}).get(GPU_RESOURCE) or 0) * \
                int(spec.get("replicas", 1))
    return total


class KubernetesApiServer:
    """The emulated API server (start with :meth:`start`, or as a context manager).

    :param step_seconds: pause between the emulated controllers' steps (admission, pod start, readmission).
    :param process_env: the base environment of a job's process (default: this process's).
    :param events: ``emit(kind, message)`` for each emulation step (default: none).
    :param credentials: / :param eks_cluster_name: whose EKS tokens are accepted (:func:`verify_eks_token`).
    """

    def __init__(self, *, step_seconds: float = 0.2, process_env: Callable[[], dict[str, str]] | None = None,
                 emit: Callable[[str, str], None] | None = None, cwd: str | None = None,
                 credentials: Mapping[str, str] | None = None, eks_cluster_name: str = "") -> None:
        self.step_seconds = step_seconds
        #: access key id -> secret access key whose EKS tokens are accepted (none: only :attr:`static_token`).
        self.credentials = dict(credentials or {})
        self.eks_cluster_name = eks_cluster_name
        self.process_env = process_env or (lambda: dict(os.environ))
        self.emit = emit or (lambda kind, message: None)
        self.cwd = cwd
        self.static_token = secrets.token_urlsafe(24)
        #: ``(verb, path)`` of every authenticated request, in order (what a client called).
        self.calls: list[tuple[str, str]] = []
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, namespace, name) -> object
        self.logs: dict[tuple[str, str], deque[str]] = {}
        self._processes: dict[tuple[str, str], list[subprocess.Popen]] = {}
        self._lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None
        #: ``preempt_after_seconds``: every job is preempted once, that long after its process started;
        #: ``preempt_hold_seconds``: how long it then waits before it is readmitted (default ``step_seconds``).
        self.faults: dict[str, Any] = {}
        self._held_until: dict[tuple[str, str], float] = {}
        self._preempted: set[tuple[str, str]] = set()

    # -- set-up ----------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._httpd is not None, "not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> KubernetesApiServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self, verb: str) -> None:
                server._serve(self, verb)

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

            def do_DELETE(self) -> None:  # noqa: N802
                self._handle("DELETE")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True, name="k8s-api").start()
        return self

    def stop(self) -> None:
        for key in list(self._processes):
            self._kill(key)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> KubernetesApiServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def add_team(self, team: str, *, gpu_quota: int, cluster_queue: str | None = None) -> None:
        """Create what task governance creates for a team: LocalQueue ``hyperpod-ns-<team>-localqueue`` in
        ``hyperpod-ns-<team>`` pointing at ClusterQueue ``hyperpod-ns-<team>-clusterqueue`` with ``gpu_quota``."""
        ns, cq = f"hyperpod-ns-{team}", cluster_queue or f"hyperpod-ns-{team}-clusterqueue"
        with self._lock:
            self.objects[("clusterqueues", "", cq)] = {
                "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cq},
                "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": [
                    {"name": "default-flavor", "resources": [{"name": GPU_RESOURCE, "nominalQuota": gpu_quota}]}]}]}}
            self.objects[("localqueues", ns, f"{ns}-localqueue")] = {
                "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                "metadata": {"name": f"{ns}-localqueue", "namespace": ns}, "spec": {"clusterQueue": cq}}

    def add_priority_class(self, name: str, value: int = 100) -> None:
        """Create the WorkloadPriorityClass ``name`` (cluster-scoped; task governance's ``<name>-priority``)."""
        with self._lock:
            self.objects[("workloadpriorityclasses", "", name)] = {
                "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
                "value": value}

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig (as a dict) for this server with :attr:`static_token`, for tests that load one."""
        return {"apiVersion": "v1", "kind": "Config", "current-context": "sandbox",
                "clusters": [{"name": "sandbox", "cluster": {"server": self.url}}],
                "users": [{"name": "sandbox", "user": {"token": self.static_token}}],
                "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": "sandbox"}}]}

    # -- HTTP ------------------------------------------------------------------------------------------------
    def _serve(self, request: BaseHTTPRequestHandler, verb: str) -> None:
        auth = request.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
        if not (token and (secrets.compare_digest(token, self.static_token) or
                           verify_eks_token(token, self.credentials, self.eks_cluster_name))):
            return self._reply(request, 401, _status(401, "Unauthorized", "a bearer token is required"))
        url = urlparse(request.path)
        self.calls.append((verb, url.path))
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = None
        if verb == "POST":
            length = int(request.headers.get("Content-Length") or 0)
            body = json.loads(request.rfile.read(length) or b"{}")
        elif request.headers.get("Content-Length"):
            request.rfile.read(int(request.headers["Content-Length"]))
        try:
            code, answer = self._route(verb, url.path, query, body)
        except KeyError as missing:
            code, answer = 404, _status(404, "NotFound", f"{missing.args[0]} not found")
        return self._reply(request, code, answer)

    @staticmethod
    def _reply(request: BaseHTTPRequestHandler, code: int, answer: Any) -> None:
        """``answer`` as ``text/plain`` (a str: a pod's log) or ``application/json``."""
        text = isinstance(answer, str)
        data = (answer if text else json.dumps(answer)).encode()
        request.send_response(code)
        for name, value in (("Content-Type", "text/plain" if text else "application/json"),
                            ("Content-Length", str(len(data)))):
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(data)

    def _route(self, verb: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        selector = query.get("labelSelector", "")
        if (m := _JOBS.match(path)) is not None:
            ns, name = m.group("ns"), m.group("name")
            if verb == "POST":
                return self._create_job(ns, body)
            if verb == "DELETE":
                return 200, self._delete_job(ns, name)
            if name:
                return 200, self._get("pytorchjobs", ns, name)
            return 200, self._list("pytorchjobs", ns, selector, "PyTorchJobList", "kubeflow.org/v1")
        if (m := _KUEUE.match(path)) is not None and verb == "GET":
            plural, ns, name = m.group("plural"), m.group("ns") or "", m.group("name")
            if name:
                return 200, self._get(plural, ns, name)
            kind = {"workloadpriorityclasses": "WorkloadPriorityClass"}.get(plural, plural[:-1].capitalize())
            return 200, self._list(plural, ns, selector, kind + "List", "kueue.x-k8s.io/v1beta1")
        if (m := _PODS.match(path)) is not None and verb == "GET":
            ns, name = m.group("ns"), m.group("name")
            if m.group("log"):
                self._get("pods", ns, name)
                lines = list(self.logs.get((ns, name), ()))
                return 200, "\n".join(lines[-int(query.get("tailLines") or len(lines) or 1):]) + "\n"
            return 200, self._list("pods", ns, selector, "PodList", "v1")
        return 404, _status(404, "NotFound", f"{verb} {path} is not emulated")

    def _get(self, plural: str, ns: str, name: str) -> dict[str, Any]:
        with self._lock:
            obj = self.objects.get((plural, ns or "", name))
            if obj is None:
                raise KeyError(f"{plural} {ns}/{name}")
            return json.loads(json.dumps(obj))

    def _list(self, plural: str, ns: str | None, selector: str, kind: str, api_version: str) -> dict[str, Any]:
        with self._lock:
            items = [json.loads(json.dumps(o)) for (p, n, _), o in sorted(self.objects.items())
                     if p == plural and (not ns or n == ns) and _matches(o["metadata"].get("labels") or {}, selector)]
        return {"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items}

    # -- the training operator and Kueue -----------------------------------------------------------------------
    def _create_job(self, ns: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body["metadata"]["name"]
        with self._lock:
            if ("pytorchjobs", ns, name) in self.objects:
                return 409, _status(409, "AlreadyExists", f'pytorchjobs.kubeflow.org "{name}" already exists')
            uid = str(uuid.uuid4())
            body["metadata"].update(namespace=ns, uid=uid, creationTimestamp=_now())
            _set_condition(body, "Created", True, "PyTorchJobCreated", f"PyTorchJob {name} is created.")
            self.objects[("pytorchjobs", ns, name)] = body
            labels = body["metadata"].get("labels") or {}
            priority = labels.get(PRIORITY_LABEL, "")
            if priority and ("workloadpriorityclasses", "", priority) not in self.objects:
                # Kueue's job reconciler cannot build the Workload: the job stays suspended, with none.
                self.emit("k8s", f"PyTorchJob {ns}/{name} created; Kueue: workloadPriorityClass {priority} not found")
                return 201, self._get("pytorchjobs", ns, name)
            workload = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                        "metadata": {"name": f"pytorchjob-{name}-{uid[:5]}", "namespace": ns,
                                     "labels": {JOB_UID_LABEL: uid}},
                        "spec": {"queueName": labels.get(QUEUE_LABEL, ""),
                                 "priorityClassName": labels.get(PRIORITY_LABEL, "")}, "status": {"conditions": []}}
            self.objects[("workloads", ns, workload["metadata"]["name"])] = workload
        self.emit("k8s", f"PyTorchJob {ns}/{name} created (queue {labels.get(QUEUE_LABEL)})")
        threading.Thread(target=self._drive, args=(ns, name, uid), daemon=True, name=f"pytorchjob-{name}").start()
        return 201, self._get("pytorchjobs", ns, name)

    def _delete_job(self, ns: str, name: str) -> dict[str, Any]:
        with self._lock:
            job = self.objects.pop(("pytorchjobs", ns, name), None)
            if job is None:
                raise KeyError(f"pytorchjobs {ns}/{name}")
            uid = job["metadata"]["uid"]
            for key in [k for k, o in self.objects.items() if k[0] == "workloads" and
                        o["metadata"]["labels"].get(JOB_UID_LABEL) == uid]:
                del self.objects[key]
            for key in [k for k, o in self.objects.items() if k[0] == "pods" and
                        o["metadata"]["labels"].get("training.kubeflow.org/job-name") == name and k[1] == ns]:
                del self.objects[key]
        self._kill((ns, name))
        self.emit("k8s", f"PyTorchJob {ns}/{name} deleted")
        return _status(200, "", "", status="Success")

    def _job(self, ns: str, name: str, uid: str) -> dict[str, Any] | None:
        job = self.objects.get(("pytorchjobs", ns, name))
        return job if job is not None and job["metadata"]["uid"] == uid else None

    def _workload(self, ns: str, uid: str) -> dict[str, Any] | None:
        return next((o for (p, n, _), o in self.objects.items() if p == "workloads" and n == ns and
                     o["metadata"]["labels"].get(JOB_UID_LABEL) == uid), None)

    def _quota_free(self, ns: str, job: dict[str, Any]) -> tuple[bool, str]:
        queue = (job["metadata"].get("labels") or {}).get(QUEUE_LABEL, "")
        local = self.objects.get(("localqueues", ns, queue))
        if local is None:
            return False, f"LocalQueue {queue} doesn't exist"
        cq_name = local["spec"]["clusterQueue"]
        cq = self.objects.get(("clusterqueues", "", cq_name))
        if cq is None:
            return False, f"ClusterQueue {cq_name} doesn't exist"
        quota = sum(int(r.get("nominalQuota") or 0) for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
                    for r in f["resources"] if r["name"] == GPU_RESOURCE)
        used = sum(_gpus(o) for (p, n, _), o in self.objects.items() if p == "pytorchjobs" and o is not job and
                   not o["spec"]["runPolicy"].get("suspend") and not _ended(o))
        need = _gpus(job)
        if used + need > quota:
            return False, (f"couldn't assign flavors to pod set master: insufficient unused quota for {GPU_RESOURCE} "
                           f"in flavor default-flavor, {used + need - quota} more needed")
        return True, ""

    def _drive(self, ns: str, name: str, uid: str) -> None:
        """The job's life: admitted when quota allows, its command run, preempted and readmitted on request."""
        while True:
            time.sleep(self.step_seconds)
            with self._lock:
                job = self._job(ns, name, uid)
                if job is None or _ended(job):
                    return
                workload = self._workload(ns, uid)
                if not job["spec"]["runPolicy"].get("suspend") or workload is None:
                    continue
                if time.monotonic() < self._held_until.get((ns, name), 0.0):
                    continue  # evicted a moment ago: queued behind the workload that preempted it
                free, why = self._quota_free(ns, job)
                if not free:
                    _set_condition(workload, "QuotaReserved", False, "Pending", why)
                    continue
                for kind, reason in (("QuotaReserved", "QuotaReserved"), ("Admitted", "Admitted")):
                    _set_condition(workload, kind, True, reason, f"The workload is {reason.lower()}")
                _set_condition(workload, "Evicted", False, "")
                job["spec"]["runPolicy"]["suspend"] = False
                _set_condition(job, "Suspended", False, "PyTorchJobResumed", "PyTorchJob is resumed")
            self.emit("k8s", f"Kueue admitted PyTorchJob {ns}/{name}")
            time.sleep(self.step_seconds)
            self._run(ns, name, uid)

    def _run(self, ns: str, name: str, uid: str) -> None:
        from sim2real.dev.sandbox._core import free_port

        with self._lock:
            job = self._job(ns, name, uid)
            if job is None or job["spec"]["runPolicy"].get("suspend"):
                return
            # Every replica is a local process: the Master's Service is this machine, and its port a free one
            # (replicas and jobs share one network namespace here, not a pod's own).
            master_port = free_port()
            started: list[tuple[subprocess.Popen, deque[str]]] = []
            for rtype, index in _replicas(job):
                container = job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]
                env = {**self.process_env(), **{e["name"]: str(e.get("value", "")) for e in container.get("env", [])},
                       **operator_env(job, rtype, index, master_addr="127.0.0.1", master_port=master_port)}
                if "PET_NPROC_PER_NODE" not in env:
                    env.setdefault("PROC_PER_NODE", "1")
                pod = f"{name}-{rtype.lower()}-{index}"
                self.objects[("pods", ns, pod)] = {
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": ns, "labels": {
                        "training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": rtype.lower(),
                        "training.kubeflow.org/replica-index": str(index)}},
                    "status": {"phase": "Running"}}
                log = self.logs.setdefault((ns, pod), deque(maxlen=2000))
                started.append((subprocess.Popen(list(container["command"]), env=env, cwd=self.cwd,
                                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True, text=True,
                                                 errors="replace"), log))
            mine = self._processes[(ns, name)] = [p for p, _ in started]
            _set_condition(job, "Running", True, "PyTorchJobRunning", f"PyTorchJob {name} is running.")
        (process, log), workers = started[0], started[1:]
        for worker, worker_log in workers:
            threading.Thread(target=_drain, args=(worker, worker_log), daemon=True, name=f"{name}-worker").start()
        delay = self.faults.get("preempt_after_seconds")
        if delay and (ns, name) not in self._preempted:
            self._preempted.add((ns, name))
            timer = threading.Timer(float(delay), self.preempt, (ns, name))
            timer.daemon = True
            timer.start()
        self.emit("k8s", f"PyTorchJob {ns}/{name}: {len(started)} replica(s) run `{' '.join(process.args)}` "
                         f"(master pid {process.pid})")
        _drain(process, log)
        code = process.wait()
        with self._lock:
            # the job ends with its Master replica (the operator's default success policy): stop any Worker left
            if self._processes.get((ns, name)) is mine:
                self._kill((ns, name))
            job = self._job(ns, name, uid)
            if job is None or job["spec"]["runPolicy"].get("suspend"):
                return  # deleted, or preempted (the driver readmits it)
            _set_condition(job, "Running", False, "PyTorchJobRunning", "")
            if code == 0:
                _set_condition(job, "Succeeded", True, "PyTorchJobSucceeded", f"PyTorchJob {name} is successfully "
                                                                              "completed.")
            else:
                _set_condition(job, "Failed", True, "PyTorchJobFailed",
                               f"PyTorchJob {name} is failed because 1 Master replica(s) failed (exit code {code}).")
            workload = self._workload(ns, uid)
            if workload is not None:
                _set_condition(workload, "Finished", True, "Succeeded" if code == 0 else "Failed", "")
        self.emit("k8s", f"PyTorchJob {ns}/{name} ended (exit code {code})")

    def preempt(self, ns: str, name: str, message: str = "Preempted to accommodate a higher priority Workload") -> None:
        """Kueue evicts the job's Workload: the job is suspended (its process killed) and queued again."""
        with self._lock:
            job = self.objects.get(("pytorchjobs", ns, name))
            if job is None or _ended(job):
                return
            workload = self._workload(ns, job["metadata"]["uid"])
            job["spec"]["runPolicy"]["suspend"] = True
            _set_condition(job, "Running", False, "PyTorchJobSuspended", "")
            _set_condition(job, "Suspended", True, "PyTorchJobSuspended", "PyTorchJob suspended")
            if workload is not None:
                _add_admitted_seconds(workload)
                _set_condition(workload, "Admitted", False, "NoReservation", "")
                _set_condition(workload, "QuotaReserved", False, "Pending", "")
                _set_condition(workload, "Evicted", True, "Preempted", message)
        self._held_until[(ns, name)] = time.monotonic() + float(self.faults.get("preempt_hold_seconds") or 0.0)
        self._kill((ns, name))
        self.emit("k8s", f"Kueue preempted PyTorchJob {ns}/{name}: {message}")

    def _kill(self, key: tuple[str, str]) -> None:
        from sim2real.dev.sandbox.responders.batch import _kill

        for process in self._processes.pop(key, []):
            _kill(process)


def _replicas(job: dict[str, Any]) -> list[tuple[str, int]]:
    """``(replica type, index)`` of every replica of ``job``, the Master first."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    return [(rtype, index) for rtype in ("Master", "Worker") for index in range(int((specs.get(rtype) or {})
                                                                                    .get("replicas", 0)))]


def operator_env(job: dict[str, Any], replica_type: str, index: int, *, master_addr: str,
                 master_port: int) -> dict[str, str]:
    """The variables the Kubeflow training operator adds to replica ``replica_type`` (``Master`` / ``Worker``)
    ``index`` of ``job``, a PyTorchJob with a Master replica and no ``elasticPolicy`` (kubeflow/training-operator
    v1.9.0, pkg/controller.v1/pytorch/envvar.go ``setPodEnv`` and master.go): ``PET_NNODES`` (replicas in all),
    ``RANK`` = ``PET_NODE_RANK`` (Master 0, Worker i → i + 1), ``WORLD_SIZE`` (replicas x ``nprocPerNode`` when an
    integer, else x 1), ``PET_NPROC_PER_NODE`` (when ``nprocPerNode`` is set), ``MASTER_ADDR`` = ``PET_MASTER_ADDR``
    (the operator's ``<job>-master-0``; here ``master_addr``), ``MASTER_PORT`` = ``PET_MASTER_PORT`` (the Master
    container's ``pytorchjob-port``; here ``master_port``) and ``PYTHONUNBUFFERED=1``. They follow the container's
    own ``env``, so they win over it."""
    replicas = sum(int(spec.get("replicas", 1)) for spec in job["spec"]["pytorchReplicaSpecs"].values())
    nproc = str(job["spec"].get("nprocPerNode") or "")
    rank = index + 1 if replica_type == "Worker" else index
    env = {"PYTHONUNBUFFERED": "1", "MASTER_PORT": str(master_port), "PET_MASTER_PORT": str(master_port),
           "MASTER_ADDR": master_addr, "PET_MASTER_ADDR": master_addr,
           "WORLD_SIZE": str(replicas * (int(nproc) if nproc.isdigit() else 1)), "RANK": str(rank),
           "PET_NODE_RANK": str(rank), "PET_NNODES": str(replicas)}
    if nproc:
        env["PET_NPROC_PER_NODE"] = nproc
    return env


def _drain(process: subprocess.Popen, log: deque[str]) -> None:
    """Append ``process``'s output lines to ``log`` until it closes."""
    assert process.stdout is not None
    for line in process.stdout:
        log.append(line.rstrip("\n"))


def _ended(job: dict[str, Any]) -> bool:
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def _status(code: int, reason: str, message: str, status: str = "Failure") -> dict[str, Any]:
    """A Kubernetes ``Status`` object (API conventions)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status, "message": message,
            "reason": reason, "code": code}


def provision_hyperpod_eks(sandbox: Any, *, launcher: str, team: str = "robotics",
                           gpu_quota: int = 8) -> dict[str, Any]:
    """Start the emulated API server for ``sandbox`` (``sandbox.kubernetes``; faults from ``sandbox.faults``, e.g.
    ``eks_preempt_after_seconds``) with ``team``'s queue, create the EKS cluster (moto) whose endpoint is that
    server and the HyperPod cluster ``sim2real-hyperpod-eks`` orchestrated by it (``Orchestrator.Eks.ClusterArn``,
    which moto does not keep: added to its DescribeCluster here); return the environment config's ``hyperpod_eks``
    section."""
    from moto.eks.models import eks_backends
    from moto.sagemaker.models import Cluster

    from sim2real.dev.sandbox.server import FAKE_ACCESS_KEY

    server = KubernetesApiServer(step_seconds=sandbox.step_seconds, process_env=sandbox.process_env,
                                 emit=lambda kind, message: sandbox.events.emit("eks", kind, message),
                                 cwd=str(sandbox.repo_root), credentials={FAKE_ACCESS_KEY: sandbox.secret_key},
                                 eks_cluster_name="sim2real-eks").start()
    server.faults = _SandboxFaults(sandbox.faults)
    server.add_team(team, gpu_quota=gpu_quota)
    server.add_priority_class("training-priority")
    sandbox.kubernetes = server
    role = f"arn:aws:iam::{sandbox.account_id}:role/sim2real-hyperpod"
    eks = sandbox.client("eks", internal=True)
    arn = eks.create_cluster(name="sim2real-eks", roleArn=role, resourcesVpcConfig={"subnetIds": []})["cluster"]["arn"]
    eks_backends[sandbox.account_id][sandbox.region].clusters["sim2real-eks"].endpoint = server.url
    original = Cluster.describe

    def describe(cluster: Cluster) -> dict[str, Any]:
        answer = original(cluster)
        if cluster.cluster_name == "sim2real-hyperpod-eks":
            answer["Orchestrator"] = {"Eks": {"ClusterArn": arn}}
        return answer

    sandbox._patcher.setattr(Cluster, "describe", describe)
    sandbox.client("sagemaker", internal=True).create_cluster(ClusterName="sim2real-hyperpod-eks", InstanceGroups=[
        # no node: the Kubernetes jobs run on this machine, and the HyperPod (Slurm) capacity checks count the
        # account's cluster instances
        {"InstanceGroupName": "gpu", "InstanceType": "ml.g5.12xlarge", "InstanceCount": 0,
         "LifeCycleConfig": {"SourceS3Uri": f"s3://sagemaker-sim2real-hyperpod-lifecycle-{sandbox.account_id}/lifecycle/",
                            "OnCreate": "on_create.sh"}, "ExecutionRole": role,
         "ThreadsPerCore": 1}])
    sandbox.events.emit("eks", "api-server", f"HyperPod EKS cluster sim2real-hyperpod-eks: emulated Kubernetes API "
                        f"server (PyTorchJob, Kueue) on {server.url}, team {team} with {gpu_quota} GPUs")
    return {"cluster_name": "sim2real-hyperpod-eks", "team": team, "priority_class": "training", "gpus_per_node": 1,
            "instance_type": "ml.g5.12xlarge", "command": ["bash", launcher]}


class _SandboxFaults(dict):
    """The sandbox's faults as the API server reads them (``eks_preempt_after_seconds`` → ``preempt_after_seconds``)."""

    def __init__(self, faults: dict[str, Any]) -> None:
        super().__init__()
        self._faults = faults

    def get(self, key: str, default: Any = None) -> Any:
        return self._faults.get(f"eks_{key}", default)
