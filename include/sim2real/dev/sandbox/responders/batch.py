"""AWS Batch responder: SubmitJob runs the training launcher locally as a subprocess.

moto 5.2.5 runs Batch jobs in Docker (``use_docker: true``) or finishes them synchronously inside
SubmitJob (``batch_simple``), and ignores ``nodeOverrides``. The sandbox replaces the SubmitJob
handler: it creates moto's job object (so DescribeJobs/ListJobs/TerminateJob keep working), reads
the raw request itself, and drives the job through the real status sequence
``SUBMITTED → PENDING → RUNNABLE → STARTING → RUNNING → SUCCEEDED | FAILED`` in a thread.

RUNNING = ``bash <launcher>`` (default ``<repo_root>/containers/rl/distributed_run.bash``) with the
AWS Batch environment of the **main node only**: a multi-node job asks for N nodes (reported in
``nodeProperties.numNodes``, and every node gets a log stream and a ``<jobId>#<i>`` description),
but only node 0 runs here and it is told ``AWS_BATCH_JOB_NUM_NODES=1`` (a torchrun rendezvous
for nodes that do not exist would wait forever). Output goes to CloudWatch Logs
``/aws/batch/job``, stream ``<job-definition-name>/default/<id>`` per node.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moto.batch.exceptions import ClientException
from moto.batch.models import JOB_NAME_REGEX, BatchBackend, Job, JobDefinition, datetime2int_milliseconds
from moto.batch.responses import BatchResponse
from moto.core.utils import utcnow
from moto.logs.models import logs_backends

from sim2real.dev.sandbox._core import PREFIX, Patcher, active, free_port, log, safe_thread

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox

LOG_GROUP = "/aws/batch/job"
ESSENTIAL_EXIT = "Essential container in task exited"
DEFAULT_STUCK_REASON = (
    "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested for "
    "instance type [{instance_type}]"
)


def _covers(target_nodes: str, index: int) -> bool:
    """Whether a Batch ``targetNodes`` range ("0:", "0:3", "2", ":1") includes ``index``."""
    text = str(target_nodes).strip()
    if ":" not in text:
        return text.isdigit() and int(text) == index
    lo, hi = text.split(":", 1)
    return (int(lo) if lo else 0) <= index <= (int(hi) if hi else 1 << 30)


class SandboxJob(Job):
    """moto's Job whose status only the responder moves (no state-manager ticks, no Docker)."""

    def __init__(self, *args: Any, num_nodes: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.num_nodes = num_nodes
        self.node_streams: list[str] = []
        self.node_attempts: list[dict[str, Any]] = []
        self.stop_event = threading.Event()
        self.process: subprocess.Popen | None = None

    @property  # type: ignore[override]
    def status(self) -> str | None:
        return self._status

    @status.setter
    def status(self, value: str) -> None:
        self._status = value

    def terminate(self, reason: str) -> None:
        if self.job_stopped:
            return
        self.job_stopped_reason = reason
        self.stop = True
        self.stop_event.set()
        _kill(self.process)

    @property
    def is_multinode(self) -> bool:
        return self.job_definition.type == "multinode"

    def describe(self) -> dict[str, Any]:
        result = super().describe()
        container: dict[str, Any] = result.get("container") or {}
        if self.is_multinode:
            props = copy.deepcopy(self.job_definition.node_properties or {})
            props["numNodes"] = self.num_nodes
            result["nodeProperties"] = props
            container = {"logStreamName": self.node_streams[0] if self.node_streams else None}
        if self.exit_code is not None:
            container["exitCode"] = self.exit_code
        if self.job_stopped and self.job_stopped_reason and self.status == "FAILED":
            container.setdefault("reason", self.job_stopped_reason)
        if container.get("logStreamName") is None:
            container.pop("logStreamName", None)
        result["container"] = container
        return result

    def describe_node(self, index: int) -> dict[str, Any]:
        result = self.describe()
        main = int((self.job_definition.node_properties or {}).get("mainNode", 0))
        result["jobId"] = f"{self.job_id}#{index}"
        result["jobArn"] = f"{self.arn}#{index}"
        result["nodeDetails"] = {"nodeIndex": index, "isMainNode": index == main}
        container: dict[str, Any] = {}
        if index < len(self.node_streams):
            container["logStreamName"] = self.node_streams[index]
        if self.exit_code is not None and index == 0:
            container["exitCode"] = self.exit_code
        result["container"] = container
        result["attempts"] = [a for a in self.node_attempts if a.get("_node") == index]
        result["attempts"] = [{k: v for k, v in a.items() if k != "_node"} for a in result["attempts"]]
        return result


def _kill(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return

    def hard_kill() -> None:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    threading.Thread(target=hard_kill, daemon=True).start()


class BatchResponder:
    """Owns the emulated Batch jobs of one Sandbox."""

    def __init__(self, sandbox: Sandbox, launcher: str | os.PathLike | None, step_seconds: float) -> None:
        self.sandbox = sandbox
        self.launcher = Path(launcher) if launcher else Path(sandbox.repo_root) / "containers/rl/distributed_run.bash"
        self.step_seconds = step_seconds
        self.jobs: dict[str, SandboxJob] = {}
        self.requests: dict[str, dict[str, Any]] = {}
        self.output: dict[str, deque[str]] = {}
        self._threads: list[threading.Thread] = []

    # -- patches ---------------------------------------------------------------------------
    def install(self, patcher: Patcher) -> None:
        def submitjob(resp: BatchResponse) -> str:
            return active().batch._submit(resp)

        original_describe = BatchBackend.describe_jobs

        def describe_jobs(backend: BatchBackend, jobs: list[str] | None) -> list[dict[str, Any]]:
            plain = [j for j in (jobs or []) if "#" not in j]
            result = original_describe(backend, plain) if (plain or not jobs) else []
            for ident in jobs or []:
                if "#" not in ident:
                    continue
                parent_id, _, index = ident.rpartition("#")
                parent = backend._jobs.get(parent_id.rsplit("/", 1)[-1])
                if isinstance(parent, SandboxJob) and index.isdigit() and int(index) < parent.num_nodes:
                    result.append(parent.describe_node(int(index)))
            return result

        original_jd_describe = JobDefinition.describe

        def describe_job_definition(jd: JobDefinition) -> dict[str, Any]:
            # moto 5.2.5 leaves nodeProperties out of DescribeJobDefinitions; AWS returns it.
            result = original_jd_describe(jd)
            if getattr(jd, "node_properties", None) is not None:
                result["nodeProperties"] = jd.node_properties
            return result

        patcher.setattr(BatchResponse, "submitjob", submitjob)
        patcher.setattr(BatchBackend, "describe_jobs", describe_jobs)
        patcher.setattr(JobDefinition, "describe", describe_job_definition)

    def shutdown(self) -> None:
        for job in list(self.jobs.values()):
            if not job.job_stopped:
                job.terminate("Sandbox shut down")
        for thread in self._threads:
            thread.join(timeout=10)

    # -- SubmitJob -------------------------------------------------------------------------
    def _submit(self, resp: BatchResponse) -> str:
        backend: BatchBackend = resp.batch_backend
        job_name = resp._get_param("jobName")
        job_def_id = resp._get_param("jobDefinition")
        queue_id = resp._get_param("jobQueue")
        if not job_name or JOB_NAME_REGEX.match(job_name) is None:
            raise ClientException("Job name should match valid pattern")
        job_def = backend.get_job_definition(job_def_id)
        if job_def is None:
            raise ClientException(f"Job definition {job_def_id} does not exist")
        queue = backend.get_job_queue(queue_id)
        if queue is None:
            raise ClientException(f"Job queue {queue_id} does not exist")
        if (resp._get_param("arrayProperties") or {}).get("size"):
            raise ClientException("array jobs are not emulated by the sim2real sandbox")
        node_overrides = resp._get_param("nodeOverrides") or {}
        container_overrides = resp._get_param("containerOverrides") or {}
        num_nodes = 1
        if job_def.type == "multinode":
            num_nodes = int(node_overrides.get("numNodes") or (job_def.node_properties or {}).get("numNodes", 1))
        job = SandboxJob(
            job_name,
            job_def,
            queue,
            backend,
            log_backend=backend.logs_backend,
            container_overrides=container_overrides,
            eks_properties_override=None,
            depends_on=resp._get_param("dependsOn"),
            all_jobs=backend._jobs,
            timeout=resp._get_param("timeout"),
            array_properties={},
            parameters=resp._get_param("parameters"),
            tags=resp._get_param("tags"),
            num_nodes=num_nodes,
        )
        job.status = "SUBMITTED"
        backend._jobs[job.job_id] = job
        self.jobs[job.job_id] = job
        self.requests[job.job_id] = {
            "nodeOverrides": node_overrides,
            "containerOverrides": container_overrides,
            "raw": json.loads(resp.body or "{}") if isinstance(resp.body, (str, bytes)) and resp.body else {},
        }
        self.output[job.job_id] = deque(maxlen=500)
        self.sandbox.events.emit(
            "batch", "job-status", f"job {job_name} ({job.job_id}) SUBMITTED to {queue.name}"
            f" (nodes requested: {num_nodes}; only node 0 runs locally)",
            job_id=job.job_id, status="SUBMITTED",
        )
        self.sandbox.aws_events.batch_job(job.describe())
        self._threads.append(safe_thread(self._drive, f"batch-{job.job_id[:8]}", job))
        return json.dumps({"jobId": job.job_id, "jobName": job_name, "jobArn": job.arn})

    # -- job lifecycle ---------------------------------------------------------------------
    def _set(self, job: SandboxJob, status: str, reason: str | None = None) -> None:
        job.status = status
        if reason is not None:
            job.job_stopped_reason = reason
        self.sandbox.events.emit(
            "batch", "job-status", f"job {job.job_name} ({job.job_id}) {status}" + (f": {reason}" if reason else ""),
            job_id=job.job_id, status=status,
        )
        self.sandbox.aws_events.batch_job(job.describe())

    def _finish(self, job: SandboxJob, success: bool, reason: str | None = None, exit_code: int | None = None) -> None:
        if job.job_stopped:
            return
        now = utcnow()
        job.exit_code = exit_code
        if reason is not None:
            job.job_stopped_reason = reason
        job.job_stopped_at = now
        for attempt in [job.latest_attempt, *job.node_attempts]:
            if attempt:
                attempt["stoppedAt"] = datetime2int_milliseconds(now)
                attempt.setdefault("statusReason", reason or ("" if success else ESSENTIAL_EXIT))
                if exit_code is not None:
                    attempt["container"]["exitCode"] = exit_code
        job.job_stopped = True
        self._set(job, "SUCCEEDED" if success else "FAILED", None)
        self.sandbox.events.emit(
            "batch", "job-done",
            f"job {job.job_name} ({job.job_id}) finished: {'SUCCEEDED' if success else 'FAILED'}"
            + (f" exitCode={exit_code}" if exit_code is not None else "") + (f" reason={job.job_stopped_reason}" if not success else ""),
            job_id=job.job_id, status="SUCCEEDED" if success else "FAILED", exit_code=exit_code,
        )

    def _wait(self, job: SandboxJob, seconds: float) -> bool:
        """Sleep; True when the job was terminated meanwhile."""
        return job.stop_event.wait(seconds)

    def _drive(self, job: SandboxJob) -> None:
        try:
            self._drive_inner(job)
        except Exception as exc:  # noqa: BLE001 - never leave a job hanging
            log.exception("%s batch job %s crashed", PREFIX, job.job_id)
            self._finish(job, False, f"CannotStartContainerError: sandbox error: {exc}")

    def _drive_inner(self, job: SandboxJob) -> None:
        faults = self.sandbox.faults
        stuck = faults.get("batch_stuck_runnable")
        if not stuck and job.job_name in set(faults.get("batch_hold_job_names") or []):
            stuck = True  # only these jobs are held (a job an earlier, dead run left behind)
        since = float(faults.get("batch_runnable_since_seconds") or 0) if stuck else 0.0
        if since > 0:
            # as if the job had already waited `since` seconds for capacity: createdAt is set at SubmitJob, so every
            # answer and state-change event of the job carries the earlier time, the first (PENDING) included
            job.job_created_at = job.job_created_at - dt.timedelta(seconds=since)
        for status in ("PENDING", "RUNNABLE"):
            if self._wait(job, self.step_seconds):
                return self._finish(job, False)
            self._set(job, status)
        if stuck:
            message = stuck if isinstance(stuck, str) else DEFAULT_STUCK_REASON.format(
                instance_type=self.sandbox.config.get("batch", {}).get("instance_type", "g6.12xlarge"))
            job.job_stopped_reason = message
            self.sandbox.events.emit("batch", "fault", f"job {job.job_id} held in RUNNABLE: {message}"
                                     + (f" (createdAt reported {since:.0f} s earlier)" if since > 0 else ""),
                                     job_id=job.job_id)
            job.stop_event.wait()
            return self._finish(job, False)
        if self._wait(job, self.step_seconds):
            return self._finish(job, False)
        # STARTING: streams + attempt, like a task placed on container instances
        self._start_attempt(job)
        self._set(job, "STARTING")
        if self._wait(job, self.step_seconds):
            return self._finish(job, False)
        fail_node = faults.get("batch_fail_node")
        if any(job.job_name.endswith(str(end)) for end in faults.get("batch_fail_job_names_ending") or []):
            fail_node = 0  # only these jobs fail (a sweep candidate's, by its -c<i> suffix)
        if fail_node is not None and fail_node is not False:
            index = 0 if fail_node is True else int(fail_node)
            self._set(job, "RUNNING")
            self._log(job, index, [f"{PREFIX} fault batch_fail_node: node {index} exits with code 1"])
            return self._finish(job, False, ESSENTIAL_EXIT, 1)
        env = self._environment(job)
        if not self.launcher.is_file():
            return self._finish(job, False, f"CannotStartContainerError: launcher {self.launcher} not found", None)
        process = subprocess.Popen(
            ["bash", str(self.launcher)],
            cwd=str(self.sandbox.repo_root),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
            errors="replace",
            bufsize=1,
        )
        job.process = process
        if job.stop_event.is_set():  # terminated between the check and Popen
            _kill(process)
        self._set(job, "RUNNING")
        self.sandbox.events.emit(
            "batch", "process", f"job {job.job_id} node 0 runs `bash {self.launcher}` locally (pid {process.pid})",
            job_id=job.job_id, pid=process.pid,
        )
        self._pump(job, process)
        code = process.wait()
        if job.stop_event.is_set():
            return self._finish(job, False, None, code if code >= 0 else 128 - code)
        if code == 0:
            if faults.get("checkpoint_bad_sha256"):
                self._corrupt_manifest(job, env.get("OUTPUT_URI", ""))
            return self._finish(job, True, None, 0)
        return self._finish(job, False, ESSENTIAL_EXIT, code if code >= 0 else 128 - code)

    def _corrupt_manifest(self, job: SandboxJob, output_uri: str) -> None:
        """Fault ``checkpoint_bad_sha256``: rewrite ``<OUTPUT_URI>manifest.json`` with a wrong sha256."""
        if not output_uri.startswith("s3://"):
            return
        bucket, _, prefix = output_uri[len("s3://"):].partition("/")
        key = prefix.rstrip("/") + "/manifest.json" if prefix else "manifest.json"
        s3 = self.sandbox.client("s3", internal=True)
        manifest = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        good = str(manifest.get("sha256") or "")
        manifest["sha256"] = ("0" if good[:1] != "0" else "1") + good[1:] if len(good) == 64 else "0" * 64
        s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(manifest).encode())
        self.sandbox.events.emit("batch", "fault", f"job {job.job_id}: s3://{bucket}/{key} rewritten with a wrong "
                                 f"sha256 {manifest['sha256'][:12]}... (checkpoint_bad_sha256)", job_id=job.job_id)

    def _start_attempt(self, job: SandboxJob) -> None:
        logs = logs_backends[self.sandbox.account_id][self.sandbox.region]
        if LOG_GROUP not in logs.groups:
            logs.create_log_group(LOG_GROUP, {})
        now = utcnow()
        job.job_started_at = now
        started = datetime2int_milliseconds(now)
        containers = []
        for index in range(job.num_nodes):
            stream = f"{job.job_definition.name}/default/{uuid.uuid4().hex}"
            logs.ensure_log_stream(LOG_GROUP, stream)
            job.node_streams.append(stream)
            task_arn = f"arn:aws:ecs:{self.sandbox.region}:{self.sandbox.account_id}:task/sandbox/{stream.rsplit('/', 1)[-1]}"
            detail = {"containerInstanceArn": "sandbox-local", "taskArn": task_arn, "logStreamName": stream,
                      "networkInterfaces": [{"privateIpv4Address": "127.0.0.1"}]}
            job.node_attempts.append({"_node": index, "container": dict(detail), "startedAt": started})
            containers.append({"name": f"node-{index}", "logStreamName": stream})
            if index != 0:
                self._log(job, index, [
                    f"{PREFIX} node {index} of {job.num_nodes} is not run locally; the sandbox runs the main node only"
                ])
        job.log_stream_name = job.node_streams[0]
        job.latest_attempt = {
            "container": {"containerInstanceArn": "sandbox-local", "taskArn": job.node_attempts[0]["container"]["taskArn"],
                          "logStreamName": job.node_streams[0], "networkInterfaces": []},
            "startedAt": started,
        }
        if job.is_multinode:
            job.latest_attempt["taskProperties"] = [{"containers": containers}]
        job.attempts.append(job.latest_attempt)
        self.sandbox.events.emit(
            "batch", "log-streams", f"job {job.job_id} log streams in {LOG_GROUP}: {', '.join(job.node_streams)}",
            job_id=job.job_id, streams=list(job.node_streams),
        )

    def _environment(self, job: SandboxJob) -> dict[str, str]:
        jd = job.job_definition
        env_list: list[dict[str, str]] = []
        overrides: list[dict[str, str]] = []
        request = self.requests.get(job.job_id, {})
        if jd.type == "multinode":
            props = jd.node_properties or {}
            for rng in props.get("nodeRangeProperties", []):
                if _covers(rng.get("targetNodes", "0:"), 0):
                    env_list = list((rng.get("container") or {}).get("environment", []))
            for override in (request.get("nodeOverrides") or {}).get("nodePropertyOverrides", []):
                if _covers(override.get("targetNodes", "0:"), 0):
                    overrides += (override.get("containerOverrides") or {}).get("environment", [])
            main = int(props.get("mainNode", 0))
        else:
            env_list = list((jd.container_properties or {}).get("environment", []))
            main = 0
        overrides += (request.get("containerOverrides") or {}).get("environment", [])
        job_env = {e["name"]: str(e.get("value", "")) for e in env_list}
        job_env.update({e["name"]: str(e.get("value", "")) for e in overrides})
        env = self.sandbox.process_env()
        env.update(job_env)
        env.update({
            "AWS_BATCH_JOB_ID": job.job_id,
            "AWS_BATCH_JOB_ATTEMPT": str(len(job.attempts)),
            "AWS_BATCH_JOB_NUM_NODES": "1",
            "AWS_BATCH_JOB_NODE_INDEX": "0",
            "AWS_BATCH_JOB_MAIN_NODE_INDEX": str(main),
            "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "127.0.0.1",
            "AWS_BATCH_JQ_NAME": job.job_queue.name,
            "AWS_BATCH_CE_NAME": self.sandbox.config.get("batch", {}).get("compute_environment", ""),
            "SIM2REAL_SANDBOX_REQUESTED_NODES": str(job.num_nodes),
        })
        env["PROC_PER_NODE"] = job_env.get("PROC_PER_NODE", "1")  # one worker on a CPU machine
        if "RDZV_PORT" not in job_env:
            env["RDZV_PORT"] = str(free_port())
        return env

    def _log(self, job: SandboxJob, node: int, lines: list[str]) -> None:
        if not lines or node >= len(job.node_streams):
            return
        logs = logs_backends[self.sandbox.account_id][self.sandbox.region]
        now = int(time.time() * 1000)
        try:
            logs.put_log_events(LOG_GROUP, job.node_streams[node], [{"timestamp": now, "message": m} for m in lines])
        except Exception:  # noqa: BLE001
            log.exception("%s could not write batch log lines", PREFIX)

    def _pump(self, job: SandboxJob, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        buffer: list[str] = []
        last = time.monotonic()
        sink = self.output[job.job_id]
        for line in process.stdout:
            line = line.rstrip("\n")
            sink.append(line)
            buffer.append(line)
            if len(buffer) >= 50 or time.monotonic() - last > 0.5:
                self._log(job, 0, buffer)
                buffer, last = [], time.monotonic()
        self._log(job, 0, buffer)
