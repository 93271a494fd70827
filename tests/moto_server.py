"""A moto server for tests whose AWS calls must cross a real socket (aiobotocore-based triggers, a child process),
and the ``aws_default`` Airflow connection that points at it."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator

REGION = "us-east-1"


def aws_connection(endpoint_url: str | None = None, max_attempts: int | None = None) -> str:
    """The ``aws_default`` connection as ``AIRFLOW_CONN_AWS_DEFAULT`` JSON: fake credentials, :data:`REGION`, and,
    when given, ``endpoint_url`` and botocore's ``retries.max_attempts``."""
    extra: dict = {"region_name": REGION}
    if endpoint_url:
        extra["endpoint_url"] = endpoint_url
    if max_attempts is not None:
        extra["config_kwargs"] = {"retries": {"max_attempts": max_attempts}}
    return json.dumps({"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra})


@contextlib.contextmanager
def threaded_moto_server() -> Iterator[str]:
    """A ``moto.server.ThreadedMotoServer`` on a free 127.0.0.1 port, its account empty at start; yields its URL
    and stops it at exit."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto's backends live in this process, not in the server: start each module from an empty account
    # (another file's sandbox may have left e.g. the thing group sim2real-robots behind in this worker).
    urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST"), timeout=30)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def moto_aws_default(max_attempts: int | None = None) -> Iterator[str]:
    """A :func:`threaded_moto_server` that the ``aws_default`` connection (:func:`aws_connection`) and plain boto3
    clients (fake ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``) reach while open; yields its URL."""
    import pytest

    with threaded_moto_server() as endpoint:
        mp = pytest.MonkeyPatch()
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AIRFLOW_CONN_AWS_DEFAULT", aws_connection(endpoint, max_attempts=max_attempts))
        try:
            yield endpoint
        finally:
            mp.undo()


@contextlib.contextmanager
def moto_s3_bucket(bucket: str) -> Iterator:
    """An in-process moto S3 (``mock_aws``, no server) with ``bucket`` created; yields a boto3 S3 client on it."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=bucket)
        yield client
