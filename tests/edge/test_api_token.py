"""The install step that resolves the policy server's api token (Secrets Manager / SSM SecureString, moto)."""

from __future__ import annotations

import json
import stat

import boto3
import pytest
from moto import mock_aws

from sim2real.edge.api_token import ApiTokenError, main, resolve_api_token, write_token_file
from sim2real.edge.security import read_api_token_file

TOKEN = "robot-token-0123456789abcdef"


@pytest.fixture
def aws(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sm, ssm = boto3.client("secretsmanager"), boto3.client("ssm")
        sm.create_secret(Name="sim2real-robots/policy-token", SecretString=TOKEN)
        sm.create_secret(Name="sim2real-robots/policy-json", SecretString=json.dumps({"api_token": TOKEN, "x": 1}))
        sm.create_secret(Name="sim2real-robots/weak", SecretString="1234")
        sm.create_secret(Name="sim2real-robots/other-json", SecretString=json.dumps({"password": TOKEN}))
        ssm.put_parameter(Name="/sim2real/robots/policy-token", Value=TOKEN, Type="SecureString")
        ssm.put_parameter(Name="/sim2real/robots/plain", Value=TOKEN, Type="String")
        yield sm, ssm


def test_secret_string_plain_or_json(aws):
    assert resolve_api_token("sim2real-robots/policy-token") == TOKEN
    assert resolve_api_token("sim2real-robots/policy-json") == TOKEN


def test_ssm_secure_string(aws):
    assert resolve_api_token(ssm_parameter="/sim2real/robots/policy-token") == TOKEN


@pytest.mark.parametrize("kwargs, match", [
    ({"ssm_parameter": "/sim2real/robots/plain"}, "is a String, not a SecureString"),
    ({"secret_id": "sim2real-robots/missing"}, "cannot read the api token from sim2real-robots/missing"),
    ({"ssm_parameter": "/sim2real/robots/missing"}, "cannot read the api token from /sim2real/robots/missing"),
    ({"secret_id": "sim2real-robots/weak"}, "not usable: api_token must be a string of at least 16"),
    ({"secret_id": "sim2real-robots/other-json"}, "JSON object without a string 'api_token' field"),
    ({"secret_id": "a", "ssm_parameter": "b"}, "not both"),
])
def test_unusable_sources_refused(aws, kwargs, match):
    with pytest.raises(ApiTokenError, match=match):
        resolve_api_token(**kwargs)


def test_nothing_named_means_no_token():
    assert resolve_api_token("", "  ") is None


def test_cli_writes_token_file_mode_600_or_empty(aws, tmp_path):
    out = tmp_path / "work" / "api_token"
    assert main(["--ssm-parameter", "/sim2real/robots/policy-token", "--out", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and read_api_token_file(out) == TOKEN
    assert main(["--secret-id", "", "--ssm-parameter", "", "--out", str(out)]) == 0  # source removed: no token
    assert out.read_text() == "" and read_api_token_file(out) is None
    assert main(["--secret-id", "sim2real-robots/missing", "--out", str(out)]) == 2


def test_write_token_file_replaces_atomically(tmp_path):
    out = write_token_file(tmp_path / "t", TOKEN)
    write_token_file(out, "another-token-0123456789")
    assert out.read_text() == "another-token-0123456789" and [p.name for p in tmp_path.iterdir()] == ["t"]
