"""``make ui``: the Airflow 3 UI (``airflow standalone``) against the local AWS sandbox.

Two process trees, both started in their own session so that one Ctrl-C (or SIGTERM) here stops
everything they started:

1. the sandbox (``python -m sim2real.dev.sandbox serve``): moto + responders + provisioning + the
   emulated robots (and, with ``--decision Approved|Rejected``, an emulated reviewer deciding in the registry;
   by default none: the release approval waits for you under Browse > Required Actions) + the local MLflow
   tracking server, whose UI (printed at start, also the "MLflow run" link of each DAG run) lists every
   run's parent and child runs: tick two runs there and Compare; it writes the Airflow environment (``aws_default`` connection,
   ``sim2real_environment`` Variable, ``SIM2REAL_POLL_SECONDS``) to ``<home>/sandbox.env``;
2. ``airflow standalone`` (scheduler with the LocalExecutor, dag-processor, triggerer, API server)
   with a fresh ``AIRFLOW_HOME`` (SQLite) under ``<home>/airflow``, DAGs from ``dags/``, plugins from
   ``plugins/``, no examples, and that environment. The DAG is unpaused and its nightly schedule is
   off (``[scheduler] use_job_schedule = False``): runs start only from the trigger form (or the API).

Login: none. The API server listens on 127.0.0.1 only and runs the SimpleAuthManager with
``[core] simple_auth_manager_all_admins = True``: every visitor of this local sandbox UI is an
admin, and ``GET /auth/token`` hands out a token with no credentials (for scripts and tests).

Logs: ``<home>/logs/sandbox.log`` (every ``[sandbox:emulated]`` step) and
``<home>/logs/airflow.log`` (all four Airflow components); task logs under ``<home>/airflow/logs``.

:class:`UiStack` is the same stack as a context manager (the browser test uses it on free ports).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from sim2real.dev.sandbox._core import free_port
from sim2real.orchestration.dag_defaults import NAMESPACE_LEVELS  # noqa: F401 - re-exported for callers of this module
from sim2real.dev.sandbox.__main__ import DECISIONS

REPO_ROOT = Path(__file__).resolve().parents[3]  # include/sim2real/dev/<module>.py -> repository root
DAG_ID = "sim_to_real"
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
#: The SimpleAuthManager user the run note is written as when the stack has logins (``users``).
NOTE_WRITER = "sim2real-run-note"


class UiStackError(RuntimeError):
    """The stack did not start (or died); the message carries the tail of the logs."""


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no {path})"


class AirflowApiClient:
    """Calls to a running Airflow's public REST API, as the SimpleAuthManager sets it up: with every user admin
    (a token needs no credentials) or, with ``users``, with one login (random password) per user.

    :param users: SimpleAuthManager users, ``{username: role}``; empty: every user is admin.
    :param extra_logins: more logins with a password, beyond ``users`` (e.g. :data:`NOTE_WRITER`).

    A subclass provides :attr:`url`.
    """

    def __init__(self, users: dict[str, str] | None, *, extra_logins: tuple[str, ...] = ()) -> None:
        self._token: str | None = None
        self.users = dict(users or {})
        self._passwords = {user: secrets.token_urlsafe(16) for user in (*self.users, *extra_logins)}
        self._tokens: dict[str, str] = {}

    @property
    def url(self) -> str:
        """Base URL of the API server, ``http://127.0.0.1:<port>``."""
        raise NotImplementedError

    def password(self, user: str) -> str:
        """The password of one of ``users`` (SimpleAuthManager's passwords file, written at start)."""
        return self._passwords[user]

    def forget_tokens(self) -> None:
        """Drop the cached tokens (the API server's JWT secret changes when it restarts)."""
        self._token = None
        self._tokens.clear()

    def token(self, user: str | None = None) -> str:
        """A JWT for the public API: ``GET /auth/token`` (no credentials needed with all_admins), or, with
        ``users``, ``POST /auth/token`` with ``user``'s password (default: the first user)."""
        if not self.users:
            if self._token is None:
                self._token = self.api("GET", "/auth/token", auth=False)["access_token"]
            return self._token
        user = user or next(iter(self.users))
        if user not in self._tokens:
            self._tokens[user] = self.api("POST", "/auth/token", {"username": user, "password": self.password(user)},
                                          auth=False)["access_token"]
        return self._tokens[user]

    def api(self, method: str, path: str, body: Any = None, *, auth: bool = True, timeout: float = 30,
            user: str | None = None) -> Any:
        """Call the API server and return its JSON answer.

        :param path: e.g. ``/api/v2/dags/sim_to_real/dagRuns``.
        :param user: with ``users``: who calls (default: the first user).
        :raises urllib.error.HTTPError: on a 4xx/5xx answer (its body is in the message).
        """
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token(user)}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:2000]
            raise urllib.error.HTTPError(err.url, err.code, f"{err.reason}: {detail}", err.headers, None) from None
        return json.loads(raw) if raw else None


class UiStack(AirflowApiClient):
    """The sandbox process plus ``airflow standalone``, started and stopped together.

    :param home: folder for everything the stack writes (default ``.sandbox/ui``); its ``airflow/``
        subfolder (Airflow home, SQLite DB, task logs) is recreated on each start, since the
        sandbox's AWS state is new on each start too.
    :param api_port: port of the Airflow API server and UI on 127.0.0.1 (default 8080).
    :param poll_seconds: ``SIM2REAL_POLL_SECONDS`` of the DAG's waits (default 2).
    :param decision: ``airflow`` (default): no emulated reviewer, each model package waits for an answer in
        Airflow (Required Actions) or in the registry; ``Approved`` / ``Rejected``: what the emulated reviewer
        decides in the registry.
    :param parallelism: ``[core] parallelism`` (task slots of the LocalExecutor; default 4).
    :param extra_env: more environment for both processes (e.g. ``SIM2REAL_RETRY_DELAY_SECONDS``).
    :param mlflow: also run the local MLflow tracking server (``make ui``; default on); off: untracked runs.
    :param users: SimpleAuthManager users, ``{username: role}`` (``admin``, ``op``, ``user``, ``viewer``), each
        with a random password (:meth:`password`): logins instead of ``simple_auth_manager_all_admins``; the API
        calls of :meth:`api` then act as ``user=`` (default: the first one). None (default): every visitor is admin.
    :param dags_folder: the DAGs folder (default the repository's ``dags/``; tests run a small DAG of their own).
    :param dag_id: the DAG :meth:`wait_ready` waits for (default ``sim_to_real``).
    """

    def __init__(self, home: str | os.PathLike | None = None, *, api_port: int = 8080, poll_seconds: int = 2,
                 decision: str = "airflow", parallelism: int = 4, extra_env: dict[str, str] | None = None,
                 mlflow: bool = True, users: dict[str, str] | None = None,
                 dags_folder: str | os.PathLike | None = None, dag_id: str = DAG_ID) -> None:
        self.home = Path(home).resolve() if home else REPO_ROOT / ".sandbox" / "ui"
        self.mlflow = mlflow  # the served sandbox also runs a local MLflow tracking server
        self.api_port = api_port
        self.poll_seconds = poll_seconds
        self.decision = decision
        self.parallelism = parallelism
        self.extra_env = dict(extra_env or {})
        self.dags_folder = Path(dags_folder).resolve() if dags_folder else REPO_ROOT / "dags"
        self.dag_id = dag_id
        self.airflow_home = self.home / "airflow"
        self.env_file = self.home / "sandbox.env"
        self.sandbox_log = self.home / "logs" / "sandbox.log"
        self.airflow_log = self.home / "logs" / "airflow.log"
        self._sandbox: subprocess.Popen | None = None
        self._airflow: subprocess.Popen | None = None
        super().__init__(users, extra_logins=(NOTE_WRITER,))
        self._secret_key = secrets.token_urlsafe(64)
        self._jwt_secret = secrets.token_urlsafe(64)
        self._log_ports = (free_port(), free_port())

    # -- addresses ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL of the UI and API server, ``http://127.0.0.1:<api_port>``."""
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def dag_url(self) -> str:
        """The ``sim_to_real`` DAG's page in the UI."""
        return f"{self.url}/dags/{self.dag_id}"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, timeout: float = 300.0) -> UiStack:
        """Start the sandbox, then Airflow; return once the DAG is parsed and every component is healthy.

        :param timeout: seconds for the whole start (sandbox provisioned, components healthy, DAG parsed).
        :raises UiStackError: the port is taken, a process died, the DAG has import errors, or the
            timeout passed; the message has the logs' tail. Whatever was started is stopped first.
        """
        deadline = time.monotonic() + timeout
        if _port_in_use(self.api_port):
            raise UiStackError(f"port {self.api_port} on 127.0.0.1 is in use: stop what listens there or pick "
                               "another one (make ui UI_ARGS=\"--port N\", or SIM2REAL_UI_PORT=N)")
        try:
            self._start_sandbox(deadline)
            self._start_airflow()
            self.wait_ready(deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise
        return self

    def _start_sandbox(self, deadline: float) -> None:
        self.sandbox_log.parent.mkdir(parents=True, exist_ok=True)
        self.env_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "sim2real.dev.sandbox", "serve", "--env-file", str(self.env_file),
               "--work-dir", str(self.home / "sandbox"), "--poll-seconds", str(self.poll_seconds),
               "--decision", self.decision, *([] if self.mlflow else ["--no-mlflow"])]
        env = {**os.environ, **self.extra_env, "PYTHONUNBUFFERED": "1"}
        for key in ("AWS_ENDPOINT_URL", "AIRFLOW_CONN_AWS_DEFAULT", "AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"):
            env.pop(key, None)
        with self.sandbox_log.open("wb") as log:
            self._sandbox = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
        while not self.env_file.exists():
            if self._sandbox.poll() is not None:
                raise UiStackError(f"the sandbox exited with code {self._sandbox.returncode} before it was ready:\n"
                                   + _tail(self.sandbox_log, 40))
            if time.monotonic() > deadline:
                raise UiStackError("the sandbox was not ready in time:\n" + _tail(self.sandbox_log, 40))
            time.sleep(0.2)

    def airflow_env(self) -> dict[str, str]:
        """The environment of ``airflow standalone``: this process's, the sandbox's env file, and the
        local-UI settings (home, folders, executor, auth, ports, secrets)."""
        from sim2real.dev.sandbox.__main__ import read_env_file

        venv_bin = str(Path(sys.executable).parent)
        env = {**os.environ, **self.extra_env, **read_env_file(self.env_file)}
        env.update({
            "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
            "PYTHONUNBUFFERED": "1",
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # The API server the tasks write each run's note through (sim2real.orchestration.run_note); no
            # login: GET /auth/token answers with simple_auth_manager_all_admins.
            "AIRFLOW_CONN_SIM2REAL_AIRFLOW_API": json.dumps({"conn_type": "http", "host": "127.0.0.1",
                                                              "port": self.api_port, "schema": "http"}),
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.airflow_home}/airflow.db",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": self._secret_key,
            "AIRFLOW__API_AUTH__JWT_SECRET": self._jwt_secret,
            # Log servers of the scheduler's workers and of the triggerer (default 8793/8794): free
            # ports, so that two stacks (e.g. `make ui` and the browser test) can run side by side.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self._log_ports[0]),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self._log_ports[1]),
            # Manual runs only: no nightly run appears when the DAG is unpaused (a scheduled run would
            # also hold the only active-run slot, max_active_runs=1, ahead of the form's run).
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO"),
            "AIRFLOW__LOGGING__NAMESPACE_LEVELS": NAMESPACE_LEVELS,  # no "credentials retrieved" on every poll
            # DAG processor, for DAG files that do not change while the stack runs, on a busy 2-core laptop
            # (a parse there took 10-50 s; Airflow's defaults abort it after 30 s, kill the parser after 50 s and
            # deactivate the DAG 50 s after its last good parse): no re-parse every 30 s (an edited file is
            # still parsed at once: modified_time order puts a file changed since its last parse first), a
            # parse may take 4 minutes, and the DAG is deactivated only after an hour without one good parse.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            "AIRFLOW__DAG_PROCESSOR__FILE_PARSING_SORT_MODE": "modified_time",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "240",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "300",
            "AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD": "3600",
        })
        if self.users:
            # With logins, the run note's writer logs in as a user of its own (role "user": it may edit DAG runs).
            accounts = {**self.users, NOTE_WRITER: "user"}
            env.update({
                "AIRFLOW_CONN_SIM2REAL_AIRFLOW_API": json.dumps({
                    "conn_type": "http", "host": "127.0.0.1", "port": self.api_port, "schema": "http",
                    "login": NOTE_WRITER, "password": self._passwords[NOTE_WRITER]}),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in accounts.items()),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            })
        return env

    def _start_airflow(self) -> None:
        if self.airflow_home.exists():
            shutil.rmtree(self.airflow_home)
        self.airflow_home.mkdir(parents=True)
        if self.users:
            passwords = self.home / "passwords.json"
            passwords.touch(mode=0o600)
            passwords.write_text(json.dumps(self._passwords) + "\n")
        airflow = str(Path(sys.executable).parent / "airflow")
        with self.airflow_log.open("wb") as log:
            self._airflow = subprocess.Popen([airflow, "standalone"], cwd=REPO_ROOT, env=self.airflow_env(),
                                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)

    def _check_alive(self) -> None:
        for name, proc, log in (("the sandbox", self._sandbox, self.sandbox_log),
                                ("airflow standalone", self._airflow, self.airflow_log)):
            if proc is not None and proc.poll() is not None:
                raise UiStackError(f"{name} exited with code {proc.returncode}:\n{_tail(log, 60)}")

    def wait_ready(self, timeout: float) -> None:
        """Wait until scheduler, triggerer and dag-processor are healthy and ``sim_to_real`` is parsed.

        :raises UiStackError: a process died, the DAG file has an import error, or ``timeout`` s passed.
        """
        deadline = time.monotonic() + max(timeout, 0)
        last = "no answer from the API server yet"
        while True:
            self._check_alive()
            try:
                health = self.api("GET", "/api/v2/monitor/health", auth=False)
                unhealthy = [c for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")
                             if (health.get(c) or {}).get("status") != "healthy"]
                if unhealthy:
                    last = f"components not healthy yet: {unhealthy}"
                else:
                    errors = [e for e in self.api("GET", "/api/v2/importErrors").get("import_errors", [])
                              if self.dag_id in str(e.get("filename"))]
                    if errors:
                        raise UiStackError(f"{self.dag_id} has import errors: {errors[0].get('stack_trace')}")
                    self.api("GET", f"/api/v2/dags/{self.dag_id}")
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError) as err:
                last = f"{type(err).__name__}: {err}"
            if time.monotonic() > deadline:
                raise UiStackError(f"Airflow was not ready in time ({last}):\n{self.logs_tail()}")
            time.sleep(1.0)

    def stop(self, airflow_grace: float = 30.0) -> None:
        """Stop Airflow (SIGINT to standalone, which terminates its components), then the sandbox
        (SIGTERM: it terminates the jobs and commands it started); anything left in either process
        group after a grace period is killed.

        :param airflow_grace: seconds ``airflow standalone`` gets to stop its components before its whole process
            group is sent SIGTERM (a second SIGTERM makes the triggerer exit at once), then SIGKILL (default 30).
            After a DAG run the triggerer and the API server took about 11 s to exit on standalone's single
            SIGTERM; a caller that throws the stack away (a test's Airflow home is deleted) passes a few seconds.

        A second Ctrl-C (or SIGTERM) while stopping is ignored: the children run in their own sessions,
        so an interrupted stop would leave them running with no terminal to reach them."""
        held = {}
        if threading.current_thread() is threading.main_thread():
            held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            try:
                if self._airflow is not None:
                    _stop_group(self._airflow, signal.SIGINT, grace=airflow_grace)
            finally:
                self._airflow = None
                if self._sandbox is not None:
                    try:
                        _stop_group(self._sandbox, signal.SIGTERM, grace=30)
                    finally:
                        self._sandbox = None
            self.forget_tokens()
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)

    def __enter__(self) -> UiStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs_tail(self, lines: int = 80) -> str:
        """The last ``lines`` lines of the Airflow and sandbox logs (for error messages)."""
        return (f"--- {self.airflow_log} (last {lines} lines)\n{_tail(self.airflow_log, lines)}\n"
                f"--- {self.sandbox_log} (last {lines} lines)\n{_tail(self.sandbox_log, lines)}")


def _stop_group(proc: subprocess.Popen, sig: int, grace: float) -> None:
    """Send ``sig`` to ``proc``, wait up to ``grace`` s, then SIGTERM and finally SIGKILL what is left
    of its process group (``proc`` leads its own session, started with ``start_new_session``)."""
    pgid = proc.pid
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    for follow_up, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, follow_up)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(0.2)  # grandchildren get the signal too; give them a moment before the next check
    if proc.poll() is None:
        proc.wait(timeout=5)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m sim2real.dev.ui", description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=int(os.environ.get("SIM2REAL_UI_PORT", "8080")),
                    help="port of the UI on 127.0.0.1 (default 8080, or $SIM2REAL_UI_PORT)")
    ap.add_argument("--home", default=None, help="folder for logs and the Airflow home (default .sandbox/ui)")
    ap.add_argument("--poll-seconds", type=int, default=int(os.environ.get("SIM2REAL_POLL_SECONDS", "2")),
                    help="status poll of every wait in the DAG (default 2, or $SIM2REAL_POLL_SECONDS)")
    ap.add_argument("--decision", choices=DECISIONS, default="airflow",
                    help="airflow (default): you approve each model package in the UI (Browse > Required "
                         "Actions); Approved / Rejected: an emulated reviewer decides in the registry instead")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the start (default 300)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)

    def _interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    # Explicit handlers: a process started in the background may inherit SIGINT ignored, and its
    # children would too (an ignored signal survives exec; a Python handler does not).
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    stack = UiStack(args.home, api_port=args.port, poll_seconds=args.poll_seconds, decision=args.decision)
    started = time.monotonic()
    print(f"[ui] starting the local AWS sandbox and airflow standalone (logs: {stack.home / 'logs'}) ...", flush=True)
    try:
        stack.start(timeout=args.timeout)
    except UiStackError as err:
        print(f"[ui] failed to start: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("[ui] interrupted while starting; stopped", flush=True)
        return 130
    try:
        print(f"[ui] ready in {time.monotonic() - started:.0f} s", flush=True)
        print(f"[ui] Airflow UI: {stack.dag_url}", flush=True)
        print("[ui] login: none — local sandbox UI, every visitor is admin "
              "([core] simple_auth_manager_all_admins = True; the UI, the API, the sandbox and MLflow listen on "
              "127.0.0.1 only; Airflow's own log servers bind every interface and answer only requests signed with "
              "this start's random JWT secret)", flush=True)
        from sim2real.dev.sandbox.__main__ import read_env_file

        print(f"[ui] AWS sandbox endpoint: {read_env_file(stack.env_file)['AWS_ENDPOINT_URL']} "
              f"(environment in {stack.env_file})", flush=True)
        mlflow_url = read_env_file(stack.env_file).get("SIM2REAL_MLFLOW_UI_URL")
        if mlflow_url:
            print(f"[ui] MLflow UI: {mlflow_url} (each run's parent run, with its training, evaluation and "
                  "fine-tune runs; select two runs → Compare)", flush=True)
        print(f"[ui] logs: {stack.airflow_log}, {stack.sandbox_log}", flush=True)
        print("[ui] trigger the DAG from its page (Trigger → the form); Ctrl-C stops everything", flush=True)
        while True:
            stack._check_alive()
            time.sleep(1.0)
    except KeyboardInterrupt:
        print("\n[ui] stopping Airflow and the sandbox ...", flush=True)
        return 0
    except UiStackError as err:
        print(f"[ui] {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        stack.stop()
        print("[ui] stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
