"""Test-wide safety and isolation: fake AWS credentials, no real endpoint, a private AIRFLOW_HOME.

Set before any test module imports airflow or boto3 (pytest imports conftest first).
"""

from __future__ import annotations

import os
import tempfile

from sim2real.dev.boto_data import parse_once

from tests.paths import REPO_ROOT

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
# A test must never reach a real AWS endpoint: drop anything that could point at one.
for _k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AIRFLOW_CONN_AWS_DEFAULT", "AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"):
    os.environ.pop(_k, None)


# botocore's JSON data files are parsed once per test process, not once per session (see the module).
parse_once()


#: The longest test files (each a few minutes: DAG runs, browser, fresh venvs), longest first. They are collected
#: first so that pytest-xdist (``--dist loadfile --no-loadscope-reorder``, see the Makefile) starts them first,
#: on different workers, and the short files fill in around them instead of the long ones ending the run alone.
SLOW_FILES_FIRST = (
    "tests/dev/faults/test_fault_replay.py",
    "tests/e2e/test_release_dag.py",
    "tests/e2e/test_hyperpod_run.py",
    "tests/e2e/test_sandbox_run.py",
    "tests/dev/ui/test_trigger_form.py",
    "tests/infra/test_mwaa_package_check.py",
    "tests/pipelines/test_pipeline_venv.py",
    "tests/infra/test_cdk_cli.py",
    "tests/dev/ui/test_ui_stack.py",
)


def pytest_collection_modifyitems(session, config, items):  # noqa: ARG001 - pytest hook signature
    """Move the items of :data:`SLOW_FILES_FIRST` to the front, in that order; the rest keep their order."""
    rank = {path: i for i, path in enumerate(SLOW_FILES_FIRST)}

    def key(indexed):
        index, item = indexed
        path = item.nodeid.split("::", 1)[0]
        return (rank.get(path, len(rank)), index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]
