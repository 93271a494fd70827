"""The AWS connection's "credentials retrieved" line, logged by the Amazon provider each time a hook reads its
connection (every poll of every wait), is quieted with Airflow's own ``[logging] namespace_levels``
(:data:`sim2real.orchestration.dag_defaults.NAMESPACE_LEVELS`) in every deployment this repository sets up
(``make ui``, MWAA); warnings and errors of that logger still show."""

from __future__ import annotations

import os
import subprocess
import sys

from sim2real.orchestration.dag_defaults import NAMESPACE_LEVELS

PROBE = """
from airflow.sdk.log import configure_logging
configure_logging()  # as a task process or the triggerer sets up its logging
from airflow.models.connection import Connection
from airflow.providers.amazon.aws.utils.connection_wrapper import AwsConnectionWrapper
wrapper = AwsConnectionWrapper(conn=Connection(conn_id="aws_default", conn_type="aws", login="AKIAEXAMPLE",
                                               password="secret"))
wrapper.log.warning("a warning of the same logger")
"""


def run_probe(levels: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__LOGGING__NAMESPACE_LEVELS"}
    if levels is not None:
        env["AIRFLOW__LOGGING__NAMESPACE_LEVELS"] = levels
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def test_credentials_retrieved_is_quiet_and_warnings_still_show():
    assert "credentials retrieved" in run_probe(None)  # the provider's default: one line per hook, every poll
    quiet = run_probe(NAMESPACE_LEVELS)
    assert "credentials retrieved" not in quiet and "a warning of the same logger" in quiet


def test_make_ui_and_mwaa_set_the_levels(tmp_path):
    from sim2real.dev.ui import UiStack

    (tmp_path / "sandbox.env").write_text("")  # what the sandbox writes for Airflow (empty here)
    assert UiStack(tmp_path).airflow_env()["AIRFLOW__LOGGING__NAMESPACE_LEVELS"] == NAMESPACE_LEVELS
    sys.path.insert(0, str(__import__("tests.paths", fromlist=["REPO_ROOT"]).REPO_ROOT / "infra"))
    from sim2real_infra.mwaa import airflow_configuration

    assert airflow_configuration("/sim2real/airflow/variables")["logging.namespace_levels"] == NAMESPACE_LEVELS
