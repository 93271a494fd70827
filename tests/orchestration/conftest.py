"""Fixtures of the orchestration tests that read the robots' field uploads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.moto_server import moto_s3_bucket

#: The artifacts bucket the robots upload their field episodes to, in moto.
FIELD_BUCKET = "sim2real-artifacts-123456789012"


@pytest.fixture
def s3() -> Iterator:
    """A boto3 S3 client on moto's in-process S3 with :data:`FIELD_BUCKET` created (a module's own ``s3`` fixture
    overrides it)."""
    with moto_s3_bucket(FIELD_BUCKET) as client:
        yield client
