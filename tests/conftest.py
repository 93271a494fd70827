"""Test-wide safety and isolation: fake AWS credentials, no real endpoint, a private AIRFLOW_HOME; the unit /
integration split and its guard; the slow files' order.

The environment is set before any test module imports airflow or boto3 (pytest imports conftest first).

Unit and integration (README, "Tests"): a test is a *unit* test unless it is marked ``integration`` (or ``e2e``,
``browser``, ``package_check``, ``system``, which imply it). ``make test-unit`` runs ``-m "not integration"``. A unit
test must not start the sandbox (:class:`sim2real.dev.sandbox.Sandbox`, in this process or a subprocess, the UI
stack's included) or an MLflow server, and must not use a database connection (the Airflow metadata DB: ``dag.test()``,
``create_session``, a task instance's XCom): :func:`pytest_runtest_protocol` arms a guard that fails it with a
message saying how to mark it.
"""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

# No cyclic garbage collection until the tests start (see pytest_runtestloop below): imported here, before the
# heavy imports of this file and of the test modules.
gc.disable()

from sim2real.dev.boto_data import caller_lookup_by_frames, list_services_once, parse_once  # noqa: E402 - after gc.disable()
from sim2real.dev.schema_checks import check_schema_once  # noqa: E402 - after gc.disable()

from tests.paths import REPO_ROOT  # noqa: E402

_HOME = tempfile.mkdtemp(prefix="sim2real-airflow-home-")
for _k, _v in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AIRFLOW_HOME": _HOME,
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
}.items():
    os.environ[_k] = _v
# Every sandbox run's Airflow home (demo, end-to-end tests, fault replay) starts from one migrated DB, copied
# (sim2real.dev.sandbox.airflow_db): `airflow db migrate` runs once per Airflow release set, not once per run.
os.environ.setdefault("SIM2REAL_AIRFLOW_DB_CACHE", str(REPO_ROOT / ".sandbox" / "airflow-db"))
# A test must never reach a real AWS endpoint: drop anything that could point at one.
for _k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AIRFLOW_CONN_AWS_DEFAULT", "AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"):
    os.environ.pop(_k, None)
# moto creates its ~1300 default AMIs (each with random ids) whenever it builds an EC2 backend for a region: every
# mock_aws test that touches EC2 paid about half a second of CPU for them. Nothing here lists them (RunInstances takes
# any AMI id; the sandbox uses a fixed one), so the tests and the sandboxes they start do without.
os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


# botocore's JSON data files are parsed, and its data folders listed, once per test process, not once per session
# (see the module).
parse_once()
list_services_once()


# The Amazon provider's user-agent caller lookup without its source-file reads (see the function): about a third of
# a moto operator test's time.
caller_lookup_by_frames()

# Each Param schema is checked against its meta-schema once per test process, not on every validation (see the module).
check_schema_once()


#: The longest test files (over ~30 s each on 2 busy cores: DAG runs, browser, real training, fresh venvs), about
#: longest first (the seconds a file took in a full ``make test``). They are collected first so that pytest-xdist
#: (``--dist loadfile --no-loadscope-reorder``, see the Makefile) hands them out first, each to the next free
#: worker, and the many short files fill in at the end, instead of a long file starting last and ending the run
#: alone. A new file that takes longer than ~30 s goes here, at its place by time.
SLOW_FILES_FIRST = (
    "tests/dev/faults/test_fault_replay.py",  # ~20 DAG runs in 3 processes at once
    # the other worker meanwhile: the DAG runs, then the browser test, whose Airflow stack must answer the page and
    # the API in time (not beside the fault replay's three processes)
    "tests/e2e/test_sandbox_rounds.py",  # 4 DAG runs (2 retraining loops of 2 rounds)
    "tests/e2e/test_sweep_run.py",  # one run of 3 candidates
    # the HyperPod runs, 5 in one process (one scope: SHARED_SESSION_FOLDERS): Slurm, Slurm failing, a Slurm sweep,
    # EKS, an EKS sweep
    "tests/e2e/hyperpod/test_hyperpod_sweep_run.py",
    "tests/e2e/hyperpod/test_hyperpod_run.py",
    "tests/e2e/hyperpod/test_hyperpod_eks_run.py",
    "tests/e2e/test_sandbox_run.py",
    "tests/e2e/test_release_dag.py",
    "tests/dev/ui/test_release_approval.py",  # a live Airflow: one sim_to_real run approved by a second user
    "tests/dev/ui/test_trigger_form.py",
    "tests/orchestration/test_live_run_control.py",  # a live Airflow with two triggerers: stops, hand-over, marks
    "tests/orchestration/operators/test_live_approval_orderings.py",  # a live Airflow: two approval orderings
    "tests/dev/ui/test_run_note_ui.py",  # a live Airflow: the note through the REST API, a mark-failed after it
    "tests/orchestration/operators/test_hyperpod_slurm.py",
    "tests/orchestration/operators/test_model_approval_dag.py",
    "tests/dev/test_bench_waits.py",
    "tests/workloads/test_mlflow_tracking.py",
    "tests/infra/test_mwaa_package_check.py",
    "tests/orchestration/operators/test_preflight.py",
    "tests/infra/test_cdk_cli.py",
    # the unit set's longest files (make test-unit), longest first
    "tests/infra/test_stacks.py",  # and the rest of tests/infra after it: one scope (SHARED_SESSION_FOLDERS)
    "tests/workloads/test_publish.py",  # the launcher: torchrun and a stand-in Isaac Lab trainer, 5 launches
    "tests/orchestration/test_log_levels.py",  # two fresh interpreters that import Airflow
    "tests/orchestration/events/test_trigger_events.py",  # SQS long polls of 1 s
    "tests/workloads/test_tracking_outage.py",  # training and evaluations beside the same without tracking
    "tests/orchestration/test_release.py",
    "tests/orchestration/operators/test_codebuild.py",
    "tests/workloads/test_launcher.py",  # a real two-node rendezvous
    "tests/dev/test_bench_parse.py",  # DAG parses, one in a fresh interpreter
    "tests/orchestration/operators/test_quota.py",
    "tests/workloads/test_train.py",
    "tests/orchestration/operators/test_greengrass.py",
    "tests/workloads/test_evaluate.py",
    "tests/orchestration/test_checkpoint_event_once.py",
    "tests/workloads/test_export.py",
    "tests/infra/test_environment_config.py",
    "tests/pipelines/test_pipeline_venv.py",
    "tests/dev/ui/test_ui_stack.py",
)


def pytest_report_header(config):  # noqa: ARG001 - pytest hook signature
    """One header line saying why the progress dots come slowly at first (the longest files run first)."""
    return ("the longest test files this run collects run first (tests/conftest.py SLOW_FILES_FIRST, "
            f"{len(SLOW_FILES_FIRST)} files: DAG runs, live Airflow stacks, a browser): the progress line may grow "
            "slowly for the first minutes, then fast")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):  # noqa: ARG001 - pytest hook signature
    """Collect the garbage once, freeze what is left, then collect as usual during the tests.

    A test process holds millions of long-lived objects once collection has imported Airflow, torch, moto, botocore
    and the CDK; every full (oldest-generation) collection walked all of them again: about 0.5 s each, 17 of them
    during collection and more during the tests (measured with ``gc.callbacks``: about 10 s of a worker's
    collection at load 7, several seconds of its tests). Collection runs without the collector (``gc.disable()``
    at the top of this file: collection makes little cyclic garbage); here the heap is collected once and frozen
    (``gc.freeze``: the collector skips those objects from now on), then the collector runs for what the tests
    allocate. Runs in every process (the xdist controller and workers, and without xdist); returns None so the
    other ``pytest_runtestloop`` implementations still run the tests.
    """
    gc.collect()
    gc.freeze()
    gc.enable()


#: Folders whose files go to one worker together under ``--dist loadfile`` (as if they were one file), because their
#: session fixtures are expensive and shared: per folder, what they share.
SHARED_SESSION_FOLDERS = {
    "tests/infra/": "the synthesized CDK app (conftest's session fixtures synth and synth_full, about 10 s each)",
    "tests/e2e/hyperpod/": "the HyperPod end-to-end runs (its conftest's session fixture hyperpod_runs: five DAG runs in "
                          "one process)",
}


def _loadfile_scope(nodeid: str) -> str:
    """The scope ``--dist loadfile`` sends to one worker: the file, or its folder of :data:`SHARED_SESSION_FOLDERS`."""
    path = nodeid.split("::", 1)[0]
    return next((folder for folder in SHARED_SESSION_FOLDERS if path.startswith(folder)), path)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # an xdist hook: known only with xdist
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the files of a :data:`SHARED_SESSION_FOLDERS` folder as one scope: each worker
    would otherwise build those session fixtures again."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFolderScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _loadfile_scope(nodeid)

    return SharedFolderScheduling(config, log)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: the implied marker must be there by then
def pytest_collection_modifyitems(session, config, items):  # noqa: ARG001 - pytest hook signature
    """Mark the items that imply ``integration`` with it (so ``-m "not integration"`` is the unit set), then move
    the items of :data:`SLOW_FILES_FIRST` to the front, in that order; the rest keep their order."""
    for item in items:
        if item.get_closest_marker("integration") is None and is_integration(item):
            item.add_marker("integration")
    rank = {path: i for i, path in enumerate(SLOW_FILES_FIRST)}

    def key(indexed):
        index, item = indexed
        path = item.nodeid.split("::", 1)[0]
        return (rank.get(path, len(rank)), index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


# ---------------------------------------------------------------------------------------------
# The unit / integration split and its guard.

#: Markers that say a test needs more than its own process (each implies ``integration``).
INTEGRATION_MARKERS = ("integration", "e2e", "browser", "package_check", "system")

#: Environment variable that makes :meth:`sim2real.dev.sandbox.Sandbox.start` refuse to start (in this process and
#: in every subprocess a unit test starts); its value is the reason, shown in the error.
NO_SERVERS_ENV = "SIM2REAL_NO_SERVERS"


class UnitTestBoundaryError(AssertionError):
    """A test without the ``integration`` marker started a server or used a database connection."""


_unit_item: list[Any] = []  # the unit test item running now (0 or 1 entries)


def _refuse(what: str) -> None:
    if _unit_item:
        nodeid = _unit_item[0].nodeid
        raise UnitTestBoundaryError(
            f"{nodeid} is a unit test (no integration marker) but it {what}. A test that needs the sandbox, a "
            "server, the Airflow metadata DB or a browser is an integration test: mark it with "
            "@pytest.mark.integration (or the file with pytestmark = pytest.mark.integration); see README, Tests.")


def _install_guards() -> None:
    """Wrap what a unit test must not start (each raises :class:`UnitTestBoundaryError` while a unit test runs)."""
    from sim2real.dev.sandbox.mlflow_server import MlflowServer
    from sim2real.dev.sandbox.server import Sandbox
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    def guarded(cls: type, name: str, what: str) -> None:
        original = getattr(cls, name)
        if getattr(original, "_unit_guard", False):
            return

        def wrapper(self, *args, **kwargs):
            _refuse(what)
            return original(self, *args, **kwargs)

        wrapper._unit_guard = True  # type: ignore[attr-defined]
        setattr(cls, name, wrapper)

    guarded(Sandbox, "start", "started the sandbox (sim2real.dev.sandbox.Sandbox)")
    guarded(MlflowServer, "start", "started an MLflow tracking server")
    # The UI stack (sim2real.dev.ui.UiStack) starts the sandbox in a subprocess, which SIM2REAL_NO_SERVERS refuses.

    def on_checkout(dbapi_connection, connection_record, connection_proxy) -> None:  # noqa: ARG001 - event API
        _refuse("used a database connection (the Airflow metadata DB: dag.test(), create_session, XCom, ...)")

    event.listen(Pool, "checkout", on_checkout)


_install_guards()


def is_integration(item: pytest.Item) -> bool:
    """Whether ``item`` carries ``integration`` or a marker that implies it (:data:`INTEGRATION_MARKERS`)."""
    return any(item.get_closest_marker(name) is not None for name in INTEGRATION_MARKERS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:  # noqa: ARG001
    """Arm the unit-test guard around a unit test's setup, call and teardown (module fixtures included)."""
    if is_integration(item):
        return (yield)
    _unit_item.append(item)
    previous = os.environ.get(NO_SERVERS_ENV)
    os.environ[NO_SERVERS_ENV] = f"{item.nodeid} is a unit test (no integration marker)"
    try:
        return (yield)
    finally:
        _unit_item.clear()
        if previous is None:
            os.environ.pop(NO_SERVERS_ENV, None)
        else:
            os.environ[NO_SERVERS_ENV] = previous
