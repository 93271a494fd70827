"""The local AWS sandbox: moto's ThreadedMotoServer plus the gap patches and responders.

Usage::

    with Sandbox(repo_root=".") as sandbox:
        config = sandbox.provision()          # every resource the DAG uses; returns the env config
        os.environ.update(sandbox.airflow_env())
        ...                                    # run Airflow / boto3 against sandbox.endpoint_url
        for event in sandbox.events: print(event.line())

Everything here runs in this process: moto's server thread, the responder threads that play what
AWS would do (Batch job → local subprocess, SSM command → local bash, Slurm job on the HyperPod head
node → emulated sbatch/srun running the launcher locally, pipeline execution → played
steps, CodeBuild → manifest pushed to ECR, Greengrass core devices), and the subprocesses they
start. moto keeps its state per process, so only one Sandbox may run at a time in a process.
Every emulation step is recorded in :attr:`Sandbox.events` and logged as ``[sandbox:emulated] ...``.

The gap patches change moto 5.2.5 internals (pinned in requirements-dev.txt); they are applied on
enter and undone on exit.

Faults (``Sandbox(faults={...})`` or ``sandbox.faults[...] = ...`` at any time):

* ``batch_stuck_runnable``: True or a message — jobs stay RUNNABLE with a capacity statusReason
  until terminated.
* ``batch_fail_node``: True / node index — the job fails with "Essential container in task exited"
  (exit code 1) instead of running the launcher.
* ``batch_fail_job_names_ending``: list of suffixes — only the jobs whose name ends with one of them fail so
  (e.g. ``["-c1"]``: a sweep's candidate c1, as when its instance is lost).
* ``ssm_timeout``: True — every command times out (``TimedOut``) after 1 s.
* ``ssm_agent_offline``: True — DescribeInstanceInformation reports ``ConnectionLost``.
* ``pipeline_status``: "Failed" | "CompletedWithFailures" | "Succeeded" — final pipeline status
  (failures name the step ``pipeline_fail_step``, default GR00TFinetune).
* ``reject_model_package``: True — :class:`~sim2real.dev.sandbox.approver.Approver` rejects by default.
* ``codebuild_fail_phase``: phase name, e.g. "BUILD".
* ``greengrass_device_fail``: thing name or list — those devices fail the deployment.
* ``greengrass_stuck``: True — devices stay IN_PROGRESS until the deployment is cancelled.
* ``throttle``: {"<Action>": n} — the next n external calls of that action get ThrottlingException.
* ``access_denied``: {"<Action>": n} — the next n external calls of that action get AccessDenied (HTTP 403; not
  retried by botocore: e.g. ``{"ReceiveMessage": 2}`` makes the wait-event queue unreachable for the consumer).
* ``server_error``: {"<Action>": n} — the next n external calls of that action get HTTP 503
  (``ServiceUnavailable``), a transient 5xx that clients retry.
* ``batch_lost_after_submit``: n — the first DescribeJobs after each of the next n SubmitJobs fails
  with a non-retryable ``ClientException`` (the submitting task dies with the job already created,
  as when a worker is killed right after SubmitJob).
* ``batch_runnable_since_seconds``: s — a job held by ``batch_stuck_runnable`` reports a ``createdAt``
  s seconds in the past (as a job that had already waited s seconds for capacity).
* ``checkpoint_bad_sha256``: True — after training succeeds, ``manifest.json`` is rewritten with a
  wrong sha256 before the job is reported SUCCEEDED.
* ``events_drop`` / ``events_duplicate``: True, n or a list of detail-types — AWS state-change events are
  not published / reach the wait-event queue twice with the same id; ``events_delay``: seconds each event is
  held back (:mod:`sim2real.dev.sandbox.aws_events`).
* ``eks_preempt_after_seconds``: s — every HyperPod EKS job is preempted by Kueue once, s seconds after it started
  running (suspended, then readmitted after ``eks_preempt_hold_seconds``; :mod:`sim2real.dev.sandbox.kubernetes_api`).
* ``slurm_job_fail``: True — a Slurm job submitted (``sbatch`` on the HyperPod head node) while it is
  set ends FAILED with exit code 1 instead of running its script.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from moto import backends as moto_backends
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult, BaseResponse
from moto.moto_server.werkzeug_app import MotoRequestHandler
from moto.server import ThreadedMotoServer

from sim2real.dev.sandbox.aws_events import AwsEventBus
from sim2real.dev.sandbox._core import INTERNAL_UA, PREFIX, EventLog, Patcher, RequestLog, log, set_active
from sim2real.dev.sandbox.responders.batch import BatchResponder
from sim2real.dev.sandbox.responders.codebuild import CodeBuildResponder
from sim2real.dev.sandbox.responders.greengrass import DeviceCheck, GreengrassResponder
from sim2real.dev.sandbox.responders.quotas import QuotaResponder
from sim2real.dev.sandbox.responders.sagemaker import SageMakerResponder
from sim2real.dev.sandbox.responders.slurm import SlurmResponder
from sim2real.dev.sandbox.responders.ssm import SsmResponder

FAKE_ACCESS_KEY = "testing"


class _Throttled(ServiceException):
    code = "ThrottlingException"
    message = "Rate exceeded"


class _Unavailable(ServiceException):
    code = "ServiceUnavailable"
    message = "Service unavailable (sandbox fault)"


class _AccessDenied(ServiceException):
    code = "AccessDenied"
    message = "Access to the resource is denied (sandbox fault access_denied)"


class _LostAfterSubmit(ServiceException):
    code = "ClientException"
    message = "sandbox fault batch_lost_after_submit: the submitting worker is gone"


def take_fault(faults: dict[str, Any], kind: str, action: str) -> bool:
    """Consume one injected error of ``kind`` ("throttle" / "server_error" / "access_denied") for ``action``."""
    table = faults.get(kind) or {}
    if table.get(action, 0) > 0:
        table[action] -= 1
        return True
    return False


_OPERATION_NAMES: dict[str, dict[str, str]] = {}


def _operation_name(resp: BaseResponse) -> str:
    """The botocore operation name of a request (moto gives some REST services' actions in lower case)."""
    action = resp._get_action() or ""
    service = resp.boto3_service_name
    if service not in _OPERATION_NAMES:
        try:
            from botocore.session import get_session

            model = get_session().get_service_model(service)
            _OPERATION_NAMES[service] = {n.lower(): n for n in model.operation_names}
        except Exception:  # noqa: BLE001
            _OPERATION_NAMES[service] = {}
    return _OPERATION_NAMES[service].get(action.lower(), action)


def _default_repo_root() -> Path:
    # include/sim2real/dev/sandbox/server.py -> repository root
    return Path(__file__).resolve().parents[4]


class Sandbox:
    """In-process AWS emulator for the sim2real DAG.

    :param repo_root: the repository root (launcher, Greengrass recipes, working directory of local
        commands); default: the checkout this package lives in.
    :param batch_launcher: script the Batch responder runs with bash; default
        ``<repo_root>/containers/rl/distributed_run.bash``.
    :param device_check: ``callable(deployment: dict, thing_name: str) -> (ok: bool, reason: str)``
        run by each emulated Greengrass core device for each deployment; default: succeed.
    :param faults: initial fault switches (see module docstring); mutable later via ``faults``.
    :param quota_limits: EC2 quota code → vCPU limit (default L-DB2E81BA=96, L-417A185B=0, L-1216C47A=256).
    :param quota_usage: usage class ("G", "P", "Standard") → vCPUs in use (default 0).
    :param step_seconds: delay between emulated status steps (seconds, default 0.3).
    :param echo: optional callable receiving each ``[sandbox:emulated]`` line (e.g. ``print``).
    :param region: AWS region name the sandbox answers for (default us-east-1).
    :param mlflow: also run a local MLflow tracking server (:mod:`sim2real.dev.sandbox.mlflow_server`), started by
        :meth:`provision` (its artefacts go to the artifacts bucket's ``mlflow/`` prefix) and stopped with the
        sandbox; the environment config then has an ``mlflow`` section pointing at it. Default off.
    :param mlflow_dir: folder of the server's SQLite database and log (default ``<repo>/.sandbox/mlflow``).
    """

    def __init__(
        self,
        *,
        repo_root: str | os.PathLike | None = None,
        batch_launcher: str | os.PathLike | None = None,
        device_check: DeviceCheck | None = None,
        faults: dict[str, Any] | None = None,
        quota_limits: dict[str, float] | None = None,
        quota_usage: dict[str, float] | None = None,
        step_seconds: float = 0.3,
        echo: Callable[[str], None] | None = None,
        region: str = "us-east-1",
        mlflow: bool = False,
        mlflow_dir: str | os.PathLike | None = None,
    ) -> None:
        self.repo_root = Path(repo_root).resolve() if repo_root else _default_repo_root()
        self.region = region
        self.account_id = DEFAULT_ACCOUNT_ID
        #: The secret key of the sandbox's fake credentials: moto checks no signature, but the emulated Kubernetes
        #: API server accepts only EKS tokens signed with it, so it is this sandbox's own, not a known constant.
        self.secret_key = secrets.token_urlsafe(30)
        self.faults: dict[str, Any] = dict(faults or {})
        self.events = EventLog(echo)
        self.requests = RequestLog()
        self.config: dict[str, Any] = {}
        self.step_seconds = step_seconds
        self.batch = BatchResponder(self, batch_launcher, step_seconds)
        self.ssm = SsmResponder(self)
        self.slurm = SlurmResponder(self)
        self.sagemaker = SageMakerResponder(self, step_seconds)
        self.codebuild = CodeBuildResponder(self, step_seconds)
        self.quotas = QuotaResponder(self, quota_limits, quota_usage)
        self.greengrass = GreengrassResponder(self, device_check, step_seconds)
        #: AWS state-change events to moto's EventBridge (faults events_drop / events_duplicate / events_delay)
        self.aws_events = AwsEventBus(self)
        self.wait_events_dead_letter_queue_url: str | None = None  # set by provision()
        self._server: ThreadedMotoServer | None = None
        self._patcher = Patcher()
        self._endpoint: str | None = None
        self._clients: dict[tuple[str, bool], Any] = {}
        self._client_lock = threading.Lock()
        self._lost_after_submit = 0  # armed by the batch_lost_after_submit fault
        self.mlflow_enabled = mlflow
        self.mlflow_dir = Path(mlflow_dir) if mlflow_dir else self.repo_root / ".sandbox" / "mlflow"
        self.mlflow: Any = None  # the MlflowServer once provision() started it
        self.kubernetes: Any = None  # the emulated Kubernetes API server once provision() started it

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>`` of the running emulator (RuntimeError before start)."""
        if self._endpoint is None:
            raise RuntimeError("the Sandbox is not running; use it as a context manager")
        return self._endpoint

    def start(self) -> Sandbox:
        """Start the emulator (moto on a free 127.0.0.1 port) and its responders; return ``self``.

        :raises RuntimeError: ``SIM2REAL_NO_SERVERS`` is set (its value, the reason, is in the message): the test
            suite sets it around each unit test, so a unit test that starts a sandbox, here or in a subprocess,
            fails instead of passing slowly.
        """
        refused = os.environ.get("SIM2REAL_NO_SERVERS")
        if refused:
            raise RuntimeError(f"the sandbox does not start here (SIM2REAL_NO_SERVERS): {refused}; a test that needs "
                               "it is an integration test: mark it with @pytest.mark.integration")
        set_active(self)
        try:
            from sim2real.dev.boto_data import list_services_once, parse_once

            # botocore's data files parsed, and its data folders listed, once for every session of this process
            parse_once(self._patcher)
            list_services_once(self._patcher)
            self._apply_patches()
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self._server.start()
            host, port = self._server.get_host_and_port()
            self._endpoint = f"http://{host}:{port}"
            # moto's state is per process: start from a clean account.
            urllib.request.urlopen(urllib.request.Request(self._endpoint + "/moto-api/reset", data=b"", method="POST"))
            self.quotas.start_publishing()
            self.aws_events.start()
        except BaseException:
            self.stop()
            raise
        self.events.emit("sandbox", "start", f"AWS emulator (moto) listening on {self._endpoint}, region {self.region}")
        return self

    def stop(self) -> None:
        if self.kubernetes is not None:
            self.kubernetes.stop()
            self.kubernetes = None
        if self.mlflow is not None:
            try:
                self.mlflow.stop()
            except Exception:  # noqa: BLE001
                log.exception("%s MLflow server stop failed", PREFIX)
            self.mlflow = None
        for responder in (self.batch, self.ssm, self.slurm, self.sagemaker, self.codebuild, self.greengrass,
                          self.quotas):
            try:
                responder.shutdown()
            except Exception:  # noqa: BLE001
                log.exception("%s responder shutdown failed", PREFIX)
        self.aws_events.shutdown()
        if self._server is not None:
            try:
                self._server.stop()
            except Exception:  # noqa: BLE001
                log.exception("%s moto server stop failed", PREFIX)
            self._server = None
        self._patcher.undo_all()
        self._endpoint = None
        self._clients.clear()
        set_active(None)

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- patches ---------------------------------------------------------------------------
    def _apply_patches(self) -> None:
        original_call_action = BaseResponse.call_action
        sandbox = self

        def call_action(resp: BaseResponse) -> Any:
            try:
                action = _operation_name(resp)
                internal = INTERNAL_UA in str(resp.headers.get("User-Agent") or resp.headers.get("user-agent") or "")
                if not internal:
                    body = resp.body.decode("utf-8", "replace") if isinstance(resp.body, bytes) else str(resp.body or "")
                    sandbox.requests.record(resp.service_name or "", action, body)
                    error: ServiceException | None = None
                    status_override: int | None = None
                    if take_fault(sandbox.faults, "throttle", action):
                        error = _Throttled()
                        sandbox.events.emit("sandbox", "fault", f"{action} throttled (fault)", action=action)
                    elif take_fault(sandbox.faults, "access_denied", action):
                        error, status_override = _AccessDenied(), 403
                        sandbox.events.emit("sandbox", "fault", f"{action} answered AccessDenied (fault)", action=action)
                    elif take_fault(sandbox.faults, "server_error", action):
                        error, status_override = _Unavailable(), 503
                        sandbox.events.emit("sandbox", "fault", f"{action} answered 503 (fault)", action=action)
                    elif action == "DescribeJobs" and sandbox._lost_after_submit:
                        sandbox._lost_after_submit -= 1
                        error = _LostAfterSubmit()
                        sandbox.events.emit("sandbox", "fault", "DescribeJobs after SubmitJob failed: the "
                                            "submitting worker is lost (fault)", action=action)
                    elif action == "SubmitJob" and (sandbox.faults.get("batch_lost_after_submit") or 0) > 0:
                        sandbox.faults["batch_lost_after_submit"] -= 1
                        sandbox._lost_after_submit += 1
                    if error is not None:
                        with warnings.catch_warnings():  # moto warns that few models declare the shape
                            warnings.simplefilter("ignore", UserWarning)
                            status, headers, body = resp.serialized(ActionResult(error))
                        status = status_override or status
                        headers["status"] = status
                        return status, headers, body
            except Exception:  # noqa: BLE001 - bookkeeping never breaks a request
                log.exception("%s request bookkeeping failed", PREFIX)
            return original_call_action(resp)

        self._patcher.setattr(BaseResponse, "call_action", call_action)
        # one access-log line per request would drown the emulation log
        self._patcher.setattr(MotoRequestHandler, "log_request", lambda *a, **k: None)
        # moto's dispatcher (DomainDispatcherApplication.get_backend_for_host) lists moto's package folder on
        # every request (a listdir and an isdir per entry, about 175: 1 ms of CPU, several seconds in a DAG run
        # whose triggers, responders and jobs poll the sandbox). The folder does not change while it runs.
        modules = tuple(moto_backends.list_of_moto_modules())
        self._patcher.setattr(moto_backends, "list_of_moto_modules", lambda: modules)
        for responder in (self.batch, self.ssm, self.sagemaker, self.codebuild, self.quotas, self.greengrass,
                          self.aws_events):
            responder.install(self._patcher)

    # -- clients and environments ------------------------------------------------------------
    def client(self, service: str, *, internal: bool = False) -> Any:
        """A boto3 client bound to the sandbox (fake credentials). ``internal=True`` marks the
        requests as the sandbox's own (not counted in :attr:`requests`)."""
        key = (service, internal)
        with self._client_lock:
            if key not in self._clients:
                config = Config(
                    retries={"max_attempts": 2, "mode": "standard"},
                    user_agent_extra=INTERNAL_UA if internal else "sim2real-sandbox-user",
                )
                self._clients[key] = boto3.session.Session().client(
                    service, endpoint_url=self.endpoint_url, region_name=self.region,
                    aws_access_key_id=FAKE_ACCESS_KEY, aws_secret_access_key=self.secret_key, config=config,
                )
            return self._clients[key]

    def aws_env(self) -> dict[str, str]:
        """Env vars that point boto3/botocore (and the AWS CLI) at the sandbox."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": FAKE_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }

    def process_env(self) -> dict[str, str]:
        """Environment for local subprocesses standing in for AWS machines: this process's env
        without AWS credentials/profiles, plus :meth:`aws_env`, PATH with the venv's bin first."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "AIRFLOW_CONN_", "AIRFLOW_VAR_")) or k in ("AWS_SHARED_CREDENTIALS_FILE",)}
        env.pop("AWS_SHARED_CREDENTIALS_FILE", None)
        env.update(self.aws_env())
        env["AWS_CONFIG_FILE"] = os.devnull
        env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
        venv_bin = str(Path(sys.executable).parent)
        env["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")
        env["SIM2REAL_SANDBOX"] = "1"
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def airflow_env(self) -> dict[str, str]:
        """Env vars to run Airflow against the sandbox: the ``aws_default`` connection (JSON form,
        endpoint_url + fake credentials + region), the ``sim2real_environment`` Variable (the
        provisioned config; ``{}`` before :meth:`provision`), and :meth:`aws_env`."""
        connection = {
            "conn_type": "aws",
            "login": FAKE_ACCESS_KEY,
            "password": self.secret_key,
            "extra": {"region_name": self.region, "endpoint_url": self.endpoint_url},
        }
        return {
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(connection),
            "AIRFLOW_VAR_SIM2REAL_ENVIRONMENT": json.dumps(self.config),
            **self.aws_env(),
        }

    def provision(self, **kwargs: Any) -> dict[str, Any]:
        """Create every resource the DAG uses; see :func:`sim2real.dev.sandbox.provision.provision`."""
        from sim2real.dev.sandbox.provision import provision

        kwargs.setdefault("repo_root", self.repo_root)
        config = provision(self, **kwargs)
        if self.mlflow_enabled and self.mlflow is None:
            config = self.start_mlflow(config)
        return config

    def start_mlflow(self, config: dict[str, Any]) -> dict[str, Any]:
        """Start the local MLflow tracking server (artefacts in ``s3://<artifacts bucket>/mlflow/``) and add the
        environment config's ``mlflow`` section; return the config (also stored on :attr:`config`).

        :raises sim2real.dev.sandbox.mlflow_server.MlflowServerError: when the server cannot start.
        """
        from sim2real.contract.tracking import DEFAULT_EXPERIMENT_NAME
        from sim2real.dev.sandbox.mlflow_server import MlflowServer

        bucket = config["artifacts_bucket"]
        self.mlflow = MlflowServer(repo_root=self.repo_root, work_dir=self.mlflow_dir,
                                   artifacts_destination=f"s3://{bucket}/mlflow", s3_endpoint_url=self.endpoint_url,
                                   aws_env=self.aws_env()).start()
        config = {**config, "mlflow": {"tracking_uri": self.mlflow.url, "experiment_name": DEFAULT_EXPERIMENT_NAME,
                                       "ui_url": self.mlflow.url}}
        self.config = config
        self.events.emit("mlflow", "start", f"MLflow tracking server (mlflow server, SQLite) on {self.mlflow.url}, "
                         f"artefacts in s3://{bucket}/mlflow", url=self.mlflow.url)
        return config
