import re

import pytest

from sim2real.contract.run_key import MAX_LEN, is_valid_run_key, make_run_key, run_prefix

BATCH_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{1,127}$")
PIPELINE_DISPLAY_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,81}$")


@pytest.mark.parametrize("run_id", [
    "manual__2026-11-29T23:17:36.123456+00:00",
    "scheduled__2026-11-29T02:00:00+00:00",
    "a" * 300,
    "___weird   ids//with::colons__",
    "UPPER-case_Run.ID",
])
def test_run_key_is_valid_for_every_aws_name(run_id):
    key = make_run_key("sim_to_real", run_id)
    assert is_valid_run_key(key)
    assert len(key) <= MAX_LEN
    assert BATCH_JOB_NAME.match(key) and PIPELINE_DISPLAY_NAME.match(key)
    assert run_prefix(key) == f"runs/{key}/"


def test_run_key_is_deterministic_and_unique():
    a = make_run_key("sim_to_real", "manual__2026-01-01T00:00:00+00:00")
    assert a == make_run_key("sim_to_real", "manual__2026-01-01T00:00:00+00:00")
    # Two run ids that slug to the same text still get different keys.
    b = make_run_key("sim_to_real", "manual__2026-01-01T00-00-00+00-00")
    assert a != b
    assert make_run_key("other_dag", "manual__2026-01-01T00:00:00+00:00") != a


def test_run_key_refuses_empty_input():
    with pytest.raises(ValueError):
        make_run_key("", "x")
    with pytest.raises(ValueError):
        make_run_key("dag", "")
