"""The suite's own set-up in tests/conftest.py: the slow-files order, botocore's parsed data files, and the guard
that keeps unit tests (no ``integration`` marker) off the sandbox, servers and the Airflow metadata DB."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from sim2real.dev.boto_data import caller_lookup_by_frames, list_services_once, parse_once

from tests.conftest import (NO_SERVERS_ENV, SHARED_SESSION_FOLDERS, SLOW_FILES_FIRST, UnitTestBoundaryError,
                            pytest_xdist_make_scheduler)
from tests.paths import REPO_ROOT


def test_every_slow_file_listed_first_exists_once():
    # a renamed or removed file would silently drop out of the order (and start whenever its turn came)
    missing = [path for path in SLOW_FILES_FIRST if not (REPO_ROOT / path).is_file()]
    assert not missing, missing
    assert len(set(SLOW_FILES_FIRST)) == len(SLOW_FILES_FIRST)


def test_loadfile_sends_a_shared_session_folder_to_one_worker_and_other_files_alone(pytestconfig):
    from xdist.scheduler import LoadFileScheduling

    assert all((REPO_ROOT / folder).is_dir() for folder in SHARED_SESSION_FOLDERS)
    scheduler = pytest_xdist_make_scheduler(_DistConfig(pytestconfig, "loadfile"), None)
    assert isinstance(scheduler, LoadFileScheduling)
    split = scheduler._split_scope
    assert split("tests/infra/test_stacks.py::test_a") == split("tests/infra/test_mwaa.py::test_b[x]") == "tests/infra/"
    # the HyperPod files share one process's five runs (tests/e2e/hyperpod/conftest.py): one worker runs them once
    assert split("tests/e2e/hyperpod/test_hyperpod_run.py::test_a") == split(
        "tests/e2e/hyperpod/test_hyperpod_eks_run.py::test_b") == "tests/e2e/hyperpod/"
    assert split("tests/workloads/test_train.py::test_a") == "tests/workloads/test_train.py"
    assert split("tests/infrastructure_notes.py::test_a") == "tests/infrastructure_notes.py"  # a folder, not a prefix
    assert pytest_xdist_make_scheduler(_DistConfig(pytestconfig, "load"), None) is None  # xdist's own


class _DistConfig:
    """``pytestconfig`` with another ``--dist`` value."""

    def __init__(self, config, dist: str) -> None:
        self._config, self._dist = config, dist

    def getvalue(self, name: str):
        given = {"dist": self._dist, "tx": ["2*popen"]}  # as -n 2 sets them
        return given[name] if name in given else self._config.getvalue(name)

    def __getattr__(self, name: str):
        return getattr(self._config, name)


def test_sessions_share_one_parse_of_each_data_file_and_still_build_working_clients():
    assert parse_once() is False  # installed by conftest; the sandbox's second call leaves it as it is
    first, second = boto3.session.Session(), boto3.session.Session()
    endpoints = [s._session.get_component("data_loader").load_data("endpoints") for s in (first, second)]
    assert endpoints[0] is endpoints[1]  # parsed once for both sessions
    models = [s._session.get_component("data_loader").load_service_model("s3", "service-2") for s in (first, second)]
    assert models[0] is models[1]
    # the clients of both sessions resolve endpoints and build requests as before
    for session in (first, second):
        client = session.client("s3", region_name="eu-west-1")
        assert client.meta.endpoint_url == "https://s3.eu-west-1.amazonaws.com"
        assert client.meta.service_model.operation_model("PutObject").http["method"] == "PUT"


def test_sessions_share_one_listing_of_the_data_folders_and_get_the_same_services(monkeypatch):
    from botocore import loaders

    assert list_services_once() is False  # installed by conftest
    wrapped = loaders.Loader.list_available_services.__wrapped__  # botocore's own (cached per loader)
    fresh = loaders.create_loader()
    expected = wrapped(fresh, "service-2")
    assert "s3" in expected and "sagemaker" in expected and expected == sorted(expected)
    first, second = (boto3.session.Session()._session.get_component("data_loader") for _ in range(2))
    listed = [loader.list_available_services("service-2") for loader in (first, second)]
    assert listed[0] == listed[1] == expected and listed[0] is not listed[1]  # each caller has its own copy
    listed[0].append("not-a-service")
    assert "not-a-service" not in second.list_available_services("service-2")
    assert first.list_available_services("waiters-2") == wrapped(fresh, "waiters-2") != expected  # per type name

    def no_walk(path):
        raise AssertionError(f"walked {path} again")

    monkeypatch.setattr(loaders.os, "listdir", no_walk)  # a new session's loader lists without walking the folders
    assert boto3.session.Session()._session.get_component("data_loader").list_available_services(
        "service-2") == expected


def test_the_caller_lookup_by_frames_names_the_operator_as_the_providers_own_does():
    """The user-agent's ``Caller/...``: the frame-walking lookups answer as the provider's ``inspect.stack()`` ones
    (kept as ``__wrapped__``) in the same stacks: the operator whose ``execute`` (or a sensor's ``poke``) created the
    client, none, and an executor class found in a frame's globals."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook, AwsGenericHook

    assert caller_lookup_by_frames() is False  # installed by conftest
    by_frames = (AwsGenericHook._find_operator_class_name, AwsGenericHook._find_executor_class_name)
    provider = tuple(f.__wrapped__ for f in by_frames)

    def both(target: str) -> tuple[tuple, tuple]:
        return ((by_frames[0](target), by_frames[1]()), (provider[0](target), provider[1]()))

    class TrainOperator:
        def execute(self):
            return both("execute")

    class Sensor:
        def poke(self):
            return both("poke")

    new, old = TrainOperator().execute()
    assert new == old and new[0] == "TrainOperator"
    new, old = Sensor().poke()
    assert new == old and new[0] == "Sensor"
    new, old = both("not_on_the_stack")
    assert new == old == (None, None)
    # an executor's module: a frame whose globals hold BaseExecutor names the last class defined there
    executor_module: dict = {}
    exec(compile("class BaseExecutor: pass\nclass LocalExecutor(BaseExecutor): pass\n"
                 "def heartbeat(lookups):\n    return [f() for f in lookups]\n", "<executor>", "exec"),
         executor_module)
    assert executor_module["heartbeat"]([by_frames[1], provider[1]]) == ["LocalExecutor", "LocalExecutor"]

    class ReleaseOperator:
        def execute(self):
            return AwsBaseHook(client_type="s3")._generate_user_agent_extra_field("")

    assert "Caller/ReleaseOperator" in ReleaseOperator().execute()  # what the client's user agent carries


# ------------------------------------------------------------------------------------------------ unit / integration
# These tests are unit tests (no marker): the guard of tests/conftest.py is armed while they run.


def test_a_unit_test_that_starts_the_sandbox_fails_naming_the_marker():
    from sim2real.dev.sandbox import Sandbox

    sandbox = Sandbox()
    with pytest.raises(UnitTestBoundaryError, match=r"started the sandbox.*@pytest.mark.integration"):
        sandbox.start()
    assert sandbox._server is None  # refused before anything listened


def test_a_unit_test_that_starts_an_mlflow_server_fails(tmp_path):
    from sim2real.dev.sandbox.mlflow_server import MlflowServer

    with pytest.raises(UnitTestBoundaryError, match="MLflow tracking server"):
        MlflowServer(repo_root=REPO_ROOT, work_dir=tmp_path, artifacts_destination="s3://bucket/mlflow",
                     s3_endpoint_url="http://127.0.0.1:1", aws_env={}).start()


def test_a_unit_test_that_uses_the_airflow_db_fails():
    from airflow.utils.session import create_session
    from sqlalchemy import text

    with pytest.raises(UnitTestBoundaryError, match="Airflow metadata DB"):
        with create_session() as session:
            session.execute(text("SELECT 1"))


def test_a_unit_test_that_starts_a_sandbox_in_a_subprocess_fails_there_too():
    proc = subprocess.run([sys.executable, "-c", "from sim2real.dev.sandbox import Sandbox; Sandbox().start()"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert f"{NO_SERVERS_ENV}): tests/test_suite_setup.py::" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.integration
def test_an_integration_test_runs_without_the_guard():
    assert NO_SERVERS_ENV not in os.environ
    from airflow.utils.session import create_session
    from sqlalchemy import text

    with create_session() as session:  # the test process's SQLite DB (tests/conftest.py's AIRFLOW_HOME)
        assert session.execute(text("SELECT 1")).scalar() == 1


class _Item:
    """Enough of a pytest item for the collection hook: a node id and its markers."""

    def __init__(self, nodeid: str, *markers: str) -> None:
        self.nodeid, self.markers = nodeid, set(markers)

    def get_closest_marker(self, name: str):
        return name if name in self.markers else None

    def add_marker(self, name: str) -> None:
        self.markers.add(name)


def test_every_marker_that_implies_integration_adds_it_so_the_unit_run_deselects_it():
    import tests.conftest as suite

    items = [_Item("tests/a.py::unit"), *(_Item(f"tests/a.py::{m}", m) for m in suite.INTEGRATION_MARKERS)]
    suite.pytest_collection_modifyitems(None, None, items)
    assert [i.nodeid for i in items if "integration" not in i.markers] == ["tests/a.py::unit"]


def test_a_param_schema_is_checked_against_its_meta_schema_once_and_every_value_still_validated(monkeypatch):
    """``sim2real.dev.schema_checks``: Airflow's Param validation checks the schema itself (``check_schema``) on every
    call; installed by conftest (and in the sandbox's DAG runs), a schema that passed is not checked again, one that
    fails raises every time, and the value is validated on every call."""
    from airflow.sdk import Param
    from airflow.sdk.definitions.param import ParamValidationError
    from jsonschema import Draft7Validator, Draft202012Validator, SchemaError

    from sim2real.dev import schema_checks

    assert schema_checks.check_schema_once() is False  # installed by conftest
    monkeypatch.setattr(schema_checks, "CHECKED", set())  # nothing checked yet, whatever ran before in this process
    calls: list[tuple[type, dict]] = []

    def counting(cls):
        original = schema_checks.ORIGINAL[cls]

        def counted(klass, schema, *args, **kwargs):
            calls.append((cls, schema))
            return original(klass, schema, *args, **kwargs)
        monkeypatch.setitem(schema_checks.ORIGINAL, cls, counted)

    counting(Draft7Validator)
    counting(Draft202012Validator)
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer", "minimum": 1}
    param = Param(3, **schema)  # as the DAG's params declare their draft
    assert param.schema == schema
    assert [param.resolve(v) for v in (3, 4, 5)] == [3, 4, 5]
    assert calls == [(Draft7Validator, schema)]  # the schema once, for three values
    with pytest.raises(ParamValidationError, match="less than the minimum of 1"):
        param.resolve(0)  # the value is still checked
    assert len(calls) == 1

    newest = Param(2, type="integer", maximum=2)  # no $schema: jsonschema's newest draft, installed too
    assert [newest.resolve(), newest.resolve()] == [2, 2]
    assert calls[1:] == [(Draft202012Validator, newest.schema)]

    schema["minimum"] = "one"  # changed in place after it passed: its text is another, checked again and refused
    for _ in range(2):
        with pytest.raises(SchemaError):
            Draft7Validator.check_schema(schema)
    assert len(calls) == 4  # refused each time, never remembered

    listed = {"enum": [1, 2]}
    Draft7Validator.check_schema(listed)
    with pytest.raises(SchemaError):  # the same JSON text as the list, but not an array: jsonschema refuses it
        Draft7Validator.check_schema({"enum": (1, 2)})

    class Stricter(Draft7Validator):  # a subclass inherits the installed check
        pass

    Stricter.check_schema(listed)
    Stricter.check_schema(listed)
    assert [cls for cls, _ in calls[4:]] == [Draft7Validator] * 3  # listed, the tuple, Stricter's first


def _module_marks(tree: ast.Module) -> set[str]:
    """The names of the ``pytest.mark.<name>`` in a test file's module-level ``pytestmark`` (a mark or a list)."""
    marks: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for sub in ast.walk(node.value):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                        and sub.value.attr == "mark"):
                    marks.add(sub.attr)
    return marks


def test_every_file_that_drives_chromium_is_marked_browser():
    # `-m browser` / `-m "not browser"` select the tests that need Chromium (pyproject.toml's marker); read from
    # each file's syntax tree, so the check imports no test file and needs no Playwright
    def drives_chromium(tree: ast.Module) -> bool:
        return any((isinstance(n, ast.Attribute) and n.attr in ("sync_playwright", "chromium"))
                   or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "playwright")
                   or (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "playwright" for a in n.names))
                   for n in ast.walk(tree))

    drivers = {}
    for path in sorted((REPO_ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        if path.resolve() != Path(__file__).resolve() and drives_chromium(tree):
            drivers[str(path.relative_to(REPO_ROOT))] = _module_marks(tree)
    assert "tests/dev/ui/test_trigger_form.py" in drivers, sorted(drivers)
    assert {name for name, marks in drivers.items() if "browser" not in marks} == set()
