import json

import pytest

from sim2real.config import EnvironmentConfigError, load_environment, validate_environment

GOOD = {
    "region": "us-east-1", "artifacts_bucket": "b",
    "image_build": {"codebuild_project": "p", "ecr_repository": "r", "source_version": "main"},
    "batch": {"job_queue": "q", "job_definition": "d", "compute_environment": "ce", "instance_type": "g6.12xlarge"},
    "evaluation": {"workstation_tag_key": "k", "workstation_tag_value": "v"},
    "sagemaker": {"pipeline_name": "p", "pipeline_role_arn": "arn:aws:iam::1:role/r", "model_package_group": "g"},
    "greengrass": {"thing_group_name": "t", "components": {"c": "1.0.0"}},
}


def test_validate_accepts_a_complete_config():
    assert validate_environment(GOOD) == GOOD


def test_validate_names_every_missing_key():
    bad = json.loads(json.dumps(GOOD))
    del bad["batch"]["job_queue"]
    bad["sagemaker"]["model_package_group"] = ""
    del bad["greengrass"]
    with pytest.raises(EnvironmentConfigError) as err:
        validate_environment(bad)
    msg = str(err.value)
    assert "batch.job_queue" in msg and "sagemaker.model_package_group" in msg and "greengrass" in msg


def test_load_environment_from_env_var(monkeypatch):
    monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", json.dumps(GOOD))
    assert load_environment()["batch"]["job_queue"] == "q"


def test_load_environment_missing_says_where_to_set_it(monkeypatch):
    monkeypatch.delenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", raising=False)
    monkeypatch.delenv("SIM2REAL_ENVIRONMENT_FILE", raising=False)
    with pytest.raises(EnvironmentConfigError, match="sim2real_environment"):
        load_environment()
