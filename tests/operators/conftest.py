"""Generic fixtures for the AWS operator tests (no test-specific resources here).

* ``aws_env``: the ``aws_default`` Airflow connection (fake credentials, us-east-1, no endpoint:
  for ``moto.mock_aws`` in-process tests), ``ExecutorSafeguard.test_mode`` so ``operator.execute``
  can be called directly, and no Batch polling jitter.
* ``moto_server``: a ``moto.server.ThreadedMotoServer`` on a free 127.0.0.1 port (Batch without
  Docker), reset before each test, with the ``aws_default`` connection pointing at it
  (aiobotocore-based triggers need a real endpoint). Yields the endpoint URL.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

REGION = "us-east-1"


def _conn(endpoint_url: str | None = None) -> str:
    extra: dict = {"region_name": REGION}
    if endpoint_url:
        extra["endpoint_url"] = endpoint_url
    return json.dumps({"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra})


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
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


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
