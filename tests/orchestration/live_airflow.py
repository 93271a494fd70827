"""A running Airflow for tests of what a person does to a run: API server, scheduler, DAG processor and one or
two triggerers, each its own process (so that a triggerer can be stopped, frozen or added), against an
in-process sandbox (moto + responders: the AWS calls it receives are in ``sandbox.requests``).

Only 127.0.0.1; the API server runs the SimpleAuthManager with every user admin (a token needs no
credentials), as ``make ui`` does, or, with ``users``, with those logins (each a random password). The DAG
folder is the test's own (tiny DAGs, parsed in a second).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim2real.dev.sandbox._core import free_port
from sim2real.dev.sandbox.airflow_db import migrated_db
from sim2real.dev.ui import SIMPLE_AUTH_MANAGER, AirflowApiClient, _stop_group, _tail

from tests.paths import REPO_ROOT


def trigger_ids_never_reused(db: Path) -> None:
    """Give the SQLite metadata DB's ``trigger`` table ``AUTOINCREMENT``, so a trigger id is never given twice, as
    on MWAA's PostgreSQL (a sequence).

    Airflow's model declares ``id INTEGER`` primary key: on SQLite that is the rowid, and a new row takes the
    largest id + 1, so the id of a trigger just deleted (the newest) comes back for the next one. Seen in a
    person's clear: try 1's trigger (id 1) kept running on its triggerer, which took try 2's new trigger with the
    same id 1 for the one it runs and never cancelled it (its job was never stopped); and a late event of a deleted
    trigger was delivered to the new one (the approval's double refusal). The table is empty after the migration;
    its columns, constraints and index are kept (SQLite's documented way: a new table, the rows copied, the old one
    dropped, the new one renamed, with foreign keys off).
    """
    import re
    import sqlite3

    con = sqlite3.connect(db)
    try:
        sql = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'trigger'").fetchone()[0]
        if "AUTOINCREMENT" in sql.upper():
            return
        indexes = [row[0] for row in con.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'trigger' AND sql IS NOT NULL")]
        new = re.sub(r"CONSTRAINT trigger_pkey PRIMARY KEY \(id\),\s*", "", sql.replace(
            'CREATE TABLE "trigger" (', "CREATE TABLE trigger_autoincrement (", 1).replace(
            "id INTEGER NOT NULL,", "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,", 1), count=1)
        if "AUTOINCREMENT" not in new or "trigger_pkey" in new:
            raise RuntimeError(f"unexpected trigger table in {db}: {sql}")
        con.executescript("PRAGMA foreign_keys = OFF; BEGIN; " + new + "; "
                          'INSERT INTO trigger_autoincrement SELECT * FROM "trigger"; DROP TABLE "trigger"; '
                          'ALTER TABLE trigger_autoincrement RENAME TO "trigger"; '
                          + "".join(f"{index}; " for index in indexes) + "COMMIT;")
    finally:
        con.close()


class LiveAirflow(AirflowApiClient):
    """Airflow components as separate processes over one SQLite database.

    :param home: folder for the Airflow home, DAGs and logs.
    :param dags: ``{file name: source}`` written to the DAG folder.
    :param env: more environment (the sandbox's connection and Variable, settings).
    :param triggerer_health_s: ``[triggerer] triggerer_health_check_threshold``: a triggerer whose heartbeat is
        older loses its triggers to another one.
    :param users: SimpleAuthManager users ``{username: role}`` (``admin``, ``op``, ``user``, ``viewer``), as
        :class:`sim2real.dev.ui.UiStack` sets them: logins instead of every user admin; :meth:`api` calls as one.
    """

    def __init__(self, home: Path, dags: dict[str, str], env: dict[str, str], *, triggerer_health_s: int = 8,
                 users: dict[str, str] | None = None) -> None:
        self.home = home
        self.dags_folder = home / "dags"
        self.logs = home / "logs"
        self.port = free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        super().__init__(users)
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        for name, source in dags.items():
            (self.dags_folder / name).write_text(source)
        self.env = {
            **os.environ, **env,
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
            "PYTHONUNBUFFERED": "1",
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow/airflow.db",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            # a busy 2-core machine answers slowly: the task supervisor waits longer than its default 5 s
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(triggerer_health_s),
        }
        (home / "airflow").mkdir(parents=True, exist_ok=True)
        if self.users:
            passwords = home / "passwords.json"
            passwords.touch(mode=0o600)
            passwords.write_text(json.dumps(self._passwords) + "\n")
            self.env.update({
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in self.users.items()),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            })

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- processes -------------------------------------------------------------------------
    def start(self, timeout: float = 240) -> LiveAirflow:
        """Migrate the database (a copy of the test session's migrated DB: :mod:`sim2real.dev.sandbox.airflow_db`),
        start every component, wait until the DAGs are parsed."""
        deadline = time.monotonic() + timeout
        migrated_db(self.home / "airflow" / "airflow.db", self.env)
        trigger_ids_never_reused(self.home / "airflow" / "airflow.db")
        self.spawn("api-server", "api-server")
        self.spawn("scheduler", "scheduler")
        self.spawn("dag-processor", "dag-processor")
        self.start_triggerer("triggerer-a")
        self.wait(lambda: self._healthy(), deadline - time.monotonic(), "Airflow healthy")
        names = [n[:-3] for n in os.listdir(self.dags_folder) if n.endswith(".py")]
        self.wait(lambda: all(self._dag_known(n) for n in names), deadline - time.monotonic(), "DAGs parsed")
        return self

    def _airflow(self) -> str:
        return str(Path(sys.executable).parent / "airflow")

    def spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen([self._airflow(), *args], env={**self.env, **(env or {})}, cwd=REPO_ROOT,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def start_triggerer(self, name: str) -> subprocess.Popen:
        """Start a triggerer (its own log-server port); its log is ``logs/<name>.log``."""
        return self.spawn(name, "triggerer", env={"AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())})

    def freeze(self, name: str) -> None:
        """SIGSTOP the component's whole process group (a stalled host: no heartbeat, no work)."""
        os.killpg(self.procs[name].pid, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGCONT)

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs.pop(name)
            try:
                os.killpg(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            _stop_group(proc, signal.SIGTERM, grace=15)

    def log_text(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def logs_tail(self, lines: int = 40) -> str:
        return "\n".join(f"--- {p.name}\n{_tail(p, lines)}" for p in sorted(self.logs.glob("*.log")))

    # -- waiting ---------------------------------------------------------------------------
    def wait(self, check: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
        """Poll ``check`` until it returns something truthy; fail with the logs' tail after ``timeout`` s."""
        end = time.monotonic() + max(timeout, 0)
        last: Any = None
        while True:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError(f"{name} exited ({proc.returncode}) while waiting for {what}\n"
                                         + self.logs_tail())
            try:
                last = check()
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError) as err:
                last = f"{type(err).__name__}: {err}"
                if isinstance(err, urllib.error.HTTPError) and err.code >= 500:
                    raise
            else:
                if last:
                    return last
            if time.monotonic() > end:
                raise AssertionError(f"no {what} in {timeout:.0f} s (last: {last!r})\n" + self.logs_tail())
            time.sleep(interval)

    def _healthy(self) -> bool:
        health = self.api("GET", "/api/v2/monitor/health", auth=False)
        return all((health.get(c) or {}).get("status") == "healthy"
                   for c in ("metadatabase", "scheduler", "triggerer", "dag_processor"))

    def _dag_known(self, dag_id: str) -> bool:
        try:
            self.api("GET", f"/api/v2/dags/{dag_id}")
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return False
            raise
        return True

    # -- REST API (token / api: AirflowApiClient) ----------------------------------------------
    def trigger(self, dag_id: str, conf: dict | None = None, *, user: str | None = None) -> str:
        run = self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}},
                       user=user)
        return run["dag_run_id"]

    def run_path(self, dag_id: str, run_id: str) -> str:
        return f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"

    def ti(self, dag_id: str, run_id: str, task_id: str) -> dict:
        return self.api("GET", f"{self.run_path(dag_id, run_id)}/taskInstances/{task_id}")

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.api("GET", self.run_path(dag_id, run_id))["state"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        tis = self.api("GET", f"{self.run_path(dag_id, run_id)}/taskInstances")["task_instances"]
        return {t["task_id"]: t["state"] for t in tis}
