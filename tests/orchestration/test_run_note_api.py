"""The run note's writer against a real HTTP server: the Airflow connection's API server gets a JWT request
(``/auth/token``: POST with the connection's login, GET without) and the ``PATCH`` of the run with the note and
``update_mask=note``, the UI's own call; a refusal is reported, never raised; the right way in is chosen (MWAA,
``dag.test()``'s in-process API, the connection)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sim2real.orchestration import run_note


class FakeAirflowApi(BaseHTTPRequestHandler):
    """Answers like Airflow 3's API server: ``/auth/token`` (201 + access_token; a wrong password is 401) and
    ``PATCH /api/v2/dags/<dag>/dagRuns/<run>`` (needs the token; echoes the note)."""

    requests: list[dict] = []
    patch_status = 200

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _record(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        entry = {"method": self.command, "path": self.path, "body": body,
                 "authorization": self.headers.get("Authorization")}
        type(self).requests.append(entry)
        return entry

    def do_GET(self):
        self._record()
        self._answer(200, {"access_token": "tok-all-admins"}) if self.path == "/auth/token" else self._answer(404, {})

    def do_POST(self):
        entry = self._record()
        if self.path != "/auth/token":
            return self._answer(404, {})
        if entry["body"] != {"username": "ops", "password": "s3cret"}:
            return self._answer(401, {"detail": "Invalid credentials"})
        self._answer(201, {"access_token": "tok-ops"})

    def do_PATCH(self):
        entry = self._record()
        if not (entry["authorization"] or "").startswith("Bearer tok-"):
            return self._answer(401, {"detail": "Not authenticated"})
        if type(self).patch_status >= 400:
            return self._answer(type(self).patch_status, {"detail": "Dag run not found"})
        self._answer(200, {"dag_run_id": "r", "note": entry["body"]["note"]})


@pytest.fixture
def api(monkeypatch) -> Iterator[type[FakeAirflowApi]]:
    handler = type("Api", (FakeAirflowApi,), {"requests": [], "patch_status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.port = server.server_address[1]
    monkeypatch.delenv("AIRFLOW_ENV_NAME", raising=False)
    yield handler
    server.shutdown()
    server.server_close()


def connect(monkeypatch, api, conn_id="SIM2REAL_AIRFLOW_API", **extra):
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "http", "host": "127.0.0.1", "port": api.port, "schema": "http", **extra}))


RUN_ID = "manual__2026-11-29T23:59:50+00:00"
RUN_PATH = "/api/v2/dags/sim_to_real/dagRuns/manual__2026-11-29T23%3A59%3A50%2B00%3A00?update_mask=note"


def test_through_the_connection_with_login_the_token_is_posted_then_the_note_patched(monkeypatch, api):
    connect(monkeypatch, api, login="ops", password="s3cret")
    out = run_note.set_run_note(dag_id="sim_to_real", run_id=RUN_ID, note="**hello**", env={"sandbox": True},
                                in_process=False)
    assert out == {"set": True, "via": "connection:sim2real_airflow_api", "error": None}
    token, patch = api.requests
    assert (token["method"], token["path"], token["body"]) == ("POST", "/auth/token",
                                                              {"username": "ops", "password": "s3cret"})
    assert (patch["method"], patch["path"], patch["body"]) == ("PATCH", RUN_PATH, {"note": "**hello**"})
    assert patch["authorization"] == "Bearer tok-ops"


def test_without_login_the_token_is_the_all_admins_get_and_the_connection_id_is_configurable(monkeypatch, api):
    connect(monkeypatch, api, conn_id="my_airflow")
    out = run_note.set_run_note(dag_id="sim_to_real", run_id=RUN_ID, note="n",
                                env={"airflow": {"api_connection_id": "my_airflow"}}, in_process=False)
    assert out["set"] and out["via"] == "connection:my_airflow"
    assert [(r["method"], r["path"]) for r in api.requests] == [("GET", "/auth/token"), ("PATCH", RUN_PATH)]
    assert api.requests[1]["authorization"] == "Bearer tok-all-admins"


def test_a_refused_token_or_patch_is_reported_not_raised(monkeypatch, api):
    connect(monkeypatch, api, login="ops", password="wrong")
    out = run_note.set_run_note(dag_id="sim_to_real", run_id=RUN_ID, note="n", env={}, in_process=False)
    assert out["set"] is False and "answered 401" in out["error"] and "Invalid credentials" in out["error"]
    connect(monkeypatch, api, login="ops", password="s3cret")
    api.patch_status = 404
    out = run_note.set_run_note(dag_id="sim_to_real", run_id=RUN_ID, note="n", env={}, in_process=False)
    assert out["set"] is False and "answered 404" in out["error"] and "Dag run not found" in out["error"]


def test_without_the_connection_the_error_names_it(monkeypatch, api):
    monkeypatch.delenv("AIRFLOW_CONN_SIM2REAL_AIRFLOW_API", raising=False)
    out = run_note.set_run_note(dag_id="d", run_id="r", note="n", env={"sandbox": True}, in_process=False)
    assert out["set"] is False and "sim2real_airflow_api" in out["error"] and not api.requests


def test_mwaa_comes_first_then_dag_test_then_the_connection(monkeypatch):
    calls = []
    monkeypatch.setattr(run_note, "set_note_through_mwaa", lambda **kw: calls.append(("mwaa", kw["env_name"])))
    monkeypatch.setattr(run_note, "set_note_in_process", lambda **kw: calls.append(("in-process", None)))
    monkeypatch.setattr(run_note, "set_note_through_connection", lambda **kw: calls.append(("conn", kw["conn_id"])))
    monkeypatch.delenv("AIRFLOW_ENV_NAME", raising=False)
    run_note.set_run_note(dag_id="d", run_id="r", note="n", env={"airflow": {"mwaa_environment_name": "e"}},
                          in_process=True)
    run_note.set_run_note(dag_id="d", run_id="r", note="n", env={"sandbox": True}, in_process=True)
    run_note.set_run_note(dag_id="d", run_id="r", note="n", env={"sandbox": True}, in_process=False)
    assert calls == [("mwaa", "e"), ("in-process", None), ("conn", "sim2real_airflow_api")]
    assert run_note.in_process_test_run() is False  # a test process is no dag.test() task


def test_the_in_process_api_is_airflows_own_patch_route_behind_the_authenticated_user():
    """``dag.test()``'s in-process API serves Airflow's ``patch_dag_run`` (from the installed Airflow's DAG-run
    routes file, with its own dependencies: authorization, audit log) under ``/api/v2``, behind the public API's
    authenticated-router dependency (``get_user``), which is the in-process admin; not the whole core app."""
    from pathlib import Path

    import airflow.api_fastapi.core_api.routes as routes
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.routing import APIRoute

    app = run_note.in_process_api().app.app  # httpx.WSGITransport -> a2wsgi.ASGIMiddleware -> FastAPI
    patches = [r for r in app.routes if isinstance(r, APIRoute) and "PATCH" in r.methods
               and r.path == "/api/v2" + run_note.DAG_RUN_PATH.replace("{run_id}", "{dag_run_id}")]
    assert len(patches) == 1, [getattr(r, "path", r) for r in app.routes]
    (route,) = patches
    assert route.endpoint.__name__ == "patch_dag_run"
    assert Path(route.endpoint.__code__.co_filename) == Path(routes.__path__[0]) / "public" / "dag_run.py"
    assert any(dep.dependency is get_user for dep in route.dependencies)
    assert app.dependency_overrides[get_user]().get_id() == run_note.IN_PROCESS_USER
    assert not any(getattr(r, "path", "").startswith("/api/v2/connections") for r in app.routes)  # only DAG runs
