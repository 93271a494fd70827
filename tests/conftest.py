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
    "tests/e2e/test_hyperpod_sweep_run.py",  # one HyperPod run of 3 candidates (a Slurm job array)
    "tests/e2e/test_hyperpod_run.py",
    "tests/e2e/test_sandbox_run.py",
    "tests/e2e/test_release_dag.py",
    "tests/dev/ui/test_trigger_form.py",
    "tests/orchestration/operators/test_hyperpod_slurm.py",
    "tests/orchestration/operators/test_model_approval_dag.py",
    "tests/orchestration/events/test_trigger_events.py",
    "tests/dev/test_bench_waits.py",
    "tests/workloads/test_mlflow_tracking.py",
    "tests/workloads/test_tracking_outage.py",  # training and evaluations beside the same without tracking
    "tests/infra/test_mwaa_package_check.py",
    "tests/orchestration/operators/test_preflight.py",
    "tests/workloads/test_train.py",
    "tests/infra/test_cdk_cli.py",
    "tests/workloads/test_evaluate.py",
    "tests/orchestration/operators/test_codebuild.py",
    "tests/workloads/test_publish.py",
    "tests/orchestration/test_release.py",
    "tests/orchestration/operators/test_quota.py",
    "tests/orchestration/operators/test_greengrass.py",
    "tests/workloads/test_export.py",
    "tests/infra/test_environment_config.py",
    "tests/workloads/test_launcher.py",
    "tests/pipelines/test_pipeline_venv.py",
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
