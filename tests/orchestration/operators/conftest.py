"""Generic fixtures for the AWS operator tests (no test-specific resources here).

* ``aws_env``: the ``aws_default`` Airflow connection (fake credentials, us-east-1, no endpoint:
  for ``moto.mock_aws`` in-process tests), ``ExecutorSafeguard.test_mode`` so ``operator.execute``
  can be called directly, and no Batch polling jitter.
* ``moto_server``: a ``moto.server.ThreadedMotoServer`` on a free 127.0.0.1 port (Batch without
  Docker), reset before each test, with the ``aws_default`` connection pointing at it
  (aiobotocore-based triggers need a real endpoint). Yields the endpoint URL.
* ``moto_endpoint``: a ``ThreadedMotoServer`` of its own for each test module, *not* reset between
  the module's tests (module-scoped fixtures build resources on it once and later tests rely on
  them), with the ``aws_default`` connection pointing at it and one attempt per call (no retries).
  Yields the endpoint URL. A module may override it to add module-wide resources.
* ``context``: ``{"ti": FakeTI(ti_task_id)}``; a module overrides ``ti_task_id`` to name its task.

Plain helpers (``FakeTI``, ``first_event``) are in ``operator_helpers.py``; the moto server and the connection in
``tests/moto_server.py``.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from operator_helpers import FakeTI
from tests.moto_server import REGION
from tests.moto_server import aws_connection as _conn
from tests.moto_server import moto_aws_default
from tests.moto_server import threaded_moto_server as _threaded_moto_server


@pytest.fixture
def aws_env(monkeypatch):
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
    from airflow.sdk.bases.operator import ExecutorSafeguard

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", _conn())
    monkeypatch.setattr(ExecutorSafeguard, "test_mode", True, raising=False)
    monkeypatch.setattr(BatchClientHook, "DEFAULT_DELAY_MIN", 0)
    monkeypatch.setattr(BatchClientHook, "DEFAULT_DELAY_MAX", 0)
    return REGION


@pytest.fixture(scope="session")
def _moto_threaded_server():
    with _threaded_moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def moto_server(_moto_threaded_server, aws_env, monkeypatch):
    endpoint = _moto_threaded_server
    urllib.request.urlopen(urllib.request.Request(endpoint + "/moto-api/reset", data=b"", method="POST"))
    urllib.request.urlopen(
        urllib.request.Request(
            endpoint + "/moto-api/config", data=json.dumps({"batch": {"use_docker": False}}).encode(), method="POST"
        )
    )
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", _conn(endpoint))
    return endpoint


@pytest.fixture(scope="module")
def moto_endpoint():
    with moto_aws_default(max_attempts=1) as endpoint:
        yield endpoint


@pytest.fixture
def ti_task_id():
    return "task"


@pytest.fixture
def context(ti_task_id):
    return {"ti": FakeTI(ti_task_id)}
