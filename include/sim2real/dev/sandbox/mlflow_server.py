"""A real local MLflow tracking server for the sandbox (``mlflow server``: SQLite backend, artefacts in S3).

Stands in for SageMaker managed MLflow: the same client API, the same REST API (the Airflow side's hook), the
artefacts in the sandbox's S3 (moto, reached through ``MLFLOW_S3_ENDPOINT_URL``) under
``s3://<artifacts bucket>/mlflow/`` as a tracking server's ``ArtifactStoreUri`` would be. The server proxies
artefact uploads and downloads (``--artifacts-destination``), so clients need no S3 access of their own.

The server runs from its own venv ``.venv/mlflow`` (``make mlflow-venv``, pins in
requirements-mlflow-server.txt): the full ``mlflow`` package needs ``graphene`` 3, whose ``graphql-core<3.3``
cannot sit beside the dev venv's ``graphql-core`` 3.3 (moto's pin); the dev venv has only the client
(``mlflow-skinny``, the version the images pin, which matches this server's).

It listens on 127.0.0.1 only (MLflow's server has no authentication), on a free port, and is stopped (its
process group terminated) with the sandbox.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from sim2real.dev.sandbox._core import free_port, log

#: Where ``make mlflow-venv`` puts the server's venv (relative to the repository root).
MLFLOW_VENV = Path(".venv") / "mlflow"
#: Overrides the ``mlflow`` executable used (a full MLflow install of the pinned version).
MLFLOW_BIN_ENV = "SIM2REAL_MLFLOW_SERVER_BIN"


class MlflowServerError(RuntimeError):
    """The local MLflow server could not be started (the message says why and what to do)."""


def mlflow_executable(repo_root: Path) -> Path:
    """The ``mlflow`` CLI of the server venv (or ``SIM2REAL_MLFLOW_SERVER_BIN``): ``<repo_root>/.venv/mlflow``, else
    ``mlflow/`` inside the running venv (where ``make mlflow-venv`` puts it).

    :raises MlflowServerError: when it is not there (run ``make mlflow-venv``).
    """
    override = os.environ.get(MLFLOW_BIN_ENV)
    if override:
        candidates = [Path(override)]
    else:  # the checkout's .venv/mlflow, or the one inside the running dev venv (sys.prefix = .venv)
        candidates = [Path(repo_root) / MLFLOW_VENV / "bin" / "mlflow", Path(sys.prefix) / "mlflow" / "bin" / "mlflow"]
    for path in candidates:
        if path.is_file():
            return path
    raise MlflowServerError(f"no MLflow server at {candidates[0]}: run `make mlflow-venv` (the full mlflow package, "
                            f"requirements-mlflow-server.txt) or set {MLFLOW_BIN_ENV}")


class MlflowServer:
    """``mlflow server`` as a subprocess.

    Tracking only: its job runner (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION``, on by default since MLflow 3: huey
    consumer processes for MLflow's own GenAI jobs, which nothing here submits) is off, which about halves the
    server's start time on 2 cores.

    :param repo_root: the checkout (for ``.venv/mlflow``).
    :param work_dir: folder for the SQLite database (``mlflow.db``) and the server's log (``mlflow-server.log``).
    :param artifacts_destination: ``s3://bucket/prefix`` the server stores artefacts under.
    :param s3_endpoint_url: the sandbox's S3 endpoint (moto).
    :param aws_env: credentials/region for the server's S3 client (the sandbox's fake ones).
    """

    def __init__(self, *, repo_root: Path, work_dir: Path, artifacts_destination: str, s3_endpoint_url: str,
                 aws_env: dict[str, str]) -> None:
        self.repo_root = Path(repo_root)
        self.work_dir = Path(work_dir)
        self.artifacts_destination = artifacts_destination
        self.s3_endpoint_url = s3_endpoint_url
        self.aws_env = dict(aws_env)
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the tracking URI and the MLflow UI."""
        if self.port is None:
            raise RuntimeError("the MLflow server is not running")
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "mlflow-server.log"

    def start(self, timeout: float = 300.0) -> MlflowServer:
        """Start the server and wait until ``/health`` answers.

        :raises MlflowServerError: no server venv, the process exited, or not healthy within ``timeout`` s
            (the log's tail is in the message).
        """
        exe = mlflow_executable(self.repo_root)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        db = self.work_dir / "mlflow.db"
        cmd = [str(exe), "server", "--host", "127.0.0.1", "--port", str(self.port),
               "--backend-store-uri", f"sqlite:///{db}", "--artifacts-destination", self.artifacts_destination,
               "--workers", "1"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MLFLOW_"))}
        env.update(self.aws_env)
        env.update({"MLFLOW_S3_ENDPOINT_URL": self.s3_endpoint_url, "AWS_CONFIG_FILE": os.devnull,
                    "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "PYTHONUNBUFFERED": "1",
                    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        with self.log_path.open("ab") as out:
            self._proc = subprocess.Popen(cmd, cwd=self.work_dir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise MlflowServerError(f"mlflow server exited with code {code}:\n{self._tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise MlflowServerError(f"mlflow server not healthy after {timeout:.0f}s:\n{self._tail()}")
            time.sleep(0.3)
        log.info("[sandbox] MLflow tracking server %s (SQLite %s, artefacts %s)", self.url, db,
                 self.artifacts_destination)
        return self

    def _tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 15.0) -> None:
        """Terminate the server's process group (SIGTERM, then SIGKILL after ``grace`` s)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=grace)
        except ProcessLookupError:
            pass

