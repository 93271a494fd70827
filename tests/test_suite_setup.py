"""The suite's own set-up in tests/conftest.py: the slow-files order and botocore's parsed data files."""

from __future__ import annotations

import boto3

from sim2real.dev.boto_data import parse_once

from tests.conftest import SLOW_FILES_FIRST
from tests.paths import REPO_ROOT


def test_every_slow_file_listed_first_exists_once():
    # a renamed or removed file would silently drop out of the order (and start whenever its turn came)
    missing = [path for path in SLOW_FILES_FIRST if not (REPO_ROOT / path).is_file()]
    assert not missing, missing
    assert len(set(SLOW_FILES_FIRST)) == len(SLOW_FILES_FIRST)


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
