import json
import re

import pytest

from sim2real.orchestration.config import EnvironmentConfigError, load_environment, validate_environment

from tests.orchestration.environments import MINIMAL_ENVIRONMENT

GOOD = MINIMAL_ENVIRONMENT


def test_validate_accepts_a_complete_config():
    assert validate_environment(GOOD) == GOOD


def test_an_evaluation_command_template_that_drops_a_contract_field_is_refused():
    """A template written for an older evaluator interface would silently drop the version (and later arguments)."""
    from sim2real.contract import evaluator

    config = json.loads(json.dumps(GOOD))
    config["evaluation"]["command_template"] = ("/opt/eval/run --manifest-uri {manifest_uri} --checkpoint-uri "
                                                "{checkpoint_uri} --episodes {episodes} --report-uri {report_uri}")
    with pytest.raises(EnvironmentConfigError) as err:
        validate_environment(config)
    assert "evaluation.command_template" in str(err.value) and "{seed}, {contract_version}" in str(err.value)
    config["evaluation"]["command_template"] = "/opt/eval/" + evaluator.default_template()
    assert validate_environment(config)["evaluation"]["command_template"].startswith("/opt/eval/")


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


HYPERPOD = {"cluster_name": "c", "gpu_instance_group": "gpu", "submit_host_tag_key": "role",
            "submit_host_tag_value": "head"}


def test_hyperpod_section_defaults_filled_in():
    from sim2real.orchestration.config import hyperpod_settings

    settings = hyperpod_settings(validate_environment({**GOOD, "hyperpod": HYPERPOD}))
    assert settings["min_count"] == 0 and settings["partition"] == "dev"
    assert settings["use_container_image"] is True and settings["cluster_name"] == "c"
    assert hyperpod_settings(GOOD)["cluster_name"] == ""


@pytest.mark.parametrize("override, needle", [
    ({"min_count": -1}, "hyperpod.min_count must be an integer >= 0"),
    ({"min_count": "0"}, "hyperpod.min_count must be an integer >= 0"),
    ({"use_container_image": "yes"}, "hyperpod.use_container_image must be true or false"),
    ({"submit_host_tag_value": ""}, "go together"),
    ({"shared_dir": "fsx/sim2real"}, "absolute path"),
    ({"cluster_name": 3}, "hyperpod.cluster_name must be a string"),
])
def test_hyperpod_section_bad_values_named(override, needle):
    with pytest.raises(EnvironmentConfigError, match=needle):
        validate_environment({**GOOD, "hyperpod": {**HYPERPOD, **override}})


def test_hyperpod_section_must_be_an_object():
    with pytest.raises(EnvironmentConfigError, match="hyperpod must be an object"):
        validate_environment({**GOOD, "hyperpod": ["c"]})


def test_approval_section_defaults_and_values():
    from sim2real.orchestration.config import approval_settings

    assert approval_settings(GOOD) == {"approvers": [], "aws_identities": {}, "self_approval": False}
    env = {**GOOD, "approval": {"approvers": ["bob", "carol"], "aws_identities": {"alice": ["arn:aws:sts::1:x"]}}}
    assert validate_environment(env)["approval"]["approvers"] == ["bob", "carol"]
    assert approval_settings(env)["aws_identities"] == {"alice": ["arn:aws:sts::1:x"]}


@pytest.mark.parametrize(("section", "needle"), [
    ({"approvers": "bob"}, "approval.approvers must be a list"),
    ({"approvers": ["bob", " carol"]}, "approval.approvers must be a list"),
    ({"aws_identities": {"alice": "arn"}}, "approval.aws_identities must map"),
    ({"self_approval": "yes"}, "approval.self_approval must be true or false"),
    ({"approver": ["bob"]}, "approval has unknown keys ['approver']"),
    (["bob"], "approval must be an object"),
])
def test_approval_section_bad_values_named(section, needle):
    with pytest.raises(EnvironmentConfigError, match=re.escape(needle)):
        validate_environment({**GOOD, "approval": section})


def test_field_data_section_default_and_value():
    from sim2real.orchestration.config import field_data_settings

    assert field_data_settings(GOOD) == {"min_new_episodes": 50}
    env = validate_environment({**GOOD, "field_data": {"min_new_episodes": 7}})
    assert field_data_settings(env) == {"min_new_episodes": 7}


@pytest.mark.parametrize(("section", "needle"), [
    ({"min_new_episodes": 0}, "field_data.min_new_episodes must be an integer >= 1"),
    ({"min_new_episodes": "5"}, "field_data.min_new_episodes must be an integer >= 1"),
    ({"min_new_episodes": True}, "field_data.min_new_episodes must be an integer >= 1"),
    ({"min_new_episode": 5}, "field_data has unknown keys ['min_new_episode']"),
    ([5], "field_data must be an object"),
])
def test_field_data_section_bad_values_named(section, needle):
    with pytest.raises(EnvironmentConfigError, match=re.escape(needle)):
        validate_environment({**GOOD, "field_data": section})
