"""GR00T version in the trigger form: the field, its trigger-time rules and what the plan hands the pipeline."""

from __future__ import annotations

import copy

import pytest
from airflow.sdk.exceptions import ParamValidationError

from sim2real.contract import groot
from sim2real.orchestration.params import ParamRuleError
from sim2real.orchestration.stages import vla
from sim2real.orchestration.stages.run import check_params, plan_run

from tests.orchestration.stages.test_stages import PARAMS
from tests.orchestration.environments import VERSIONED_ENVIRONMENT as VERSIONED
from tests.orchestration.test_config import GOOD

N17 = {**PARAMS, "groot_version": "n1.7", "hf_token_secret_id": "sim2real-groot/hf-token"}
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:sim2real-groot/hf-token-AbCdEf"


def test_form_fields_list_the_versions_and_refuse_a_malformed_secret_id():
    version = vla.params()["groot_version"]
    assert version.schema["enum"] == ["n1.5", "n1.6", "n1.7"] and version.resolve() == "n1.6"
    assert "Cosmos-Reason2-2B" in version.description and "Hugging Face token" in version.description
    with pytest.raises(ParamValidationError):
        version.resolve("n2.0")
    secret = vla.params()["hf_token_secret_id"]
    assert secret.resolve(None) is None and secret.resolve("sim2real-groot/hf-token") == "sim2real-groot/hf-token"
    assert secret.resolve(SECRET_ARN) == SECRET_ARN
    for bad in ("hf_0123456789 with space", "arn:aws:s3:::bucket/key", "x" * 513):
        with pytest.raises(ParamValidationError, match="does not match"):
            secret.resolve(bad)


def test_gr1_with_n17_is_refused_at_trigger_time_with_the_reason():
    with pytest.raises(ParamRuleError) as err:
        plan_run(dag_id="d", run_id="r", params={**N17, "embodiment_tag": "gr1"}, env=VERSIONED)
    text = str(err.value)
    assert "embodiment_tag 'gr1' is not a GR00T N1.7 embodiment (nvidia/GR00T-N1.7-3B)" in text
    assert "libero_panda" in text and "unitree_g1" in text and "new_embodiment" in text
    # the same tag is one of N1.6's and N1.5's; an N1.7 tag is not N1.5's
    check_params({**PARAMS, "embodiment_tag": "gr1"}, VERSIONED)
    check_params({**PARAMS, "groot_version": "n1.5", "embodiment_tag": "gr1"}, VERSIONED)
    with pytest.raises(ParamRuleError, match="'libero_panda' is not a GR00T N1.5 embodiment"):
        check_params({**PARAMS, "groot_version": "n1.5", "embodiment_tag": "libero_panda"}, VERSIONED)
    check_params({**N17, "embodiment_tag": "libero_panda"}, VERSIONED)
    check_params({**N17, "embodiment_tag": "gr1", "run_vla_finetune": False, "deploy_to_edge": False}, VERSIONED)


def test_n17_without_a_token_secret_is_refused_and_the_environment_config_can_name_it():
    with pytest.raises(ParamRuleError, match="gated nvidia/Cosmos-Reason2-2B: set hf_token_secret_id"):
        check_params({**N17, "hf_token_secret_id": None}, VERSIONED)
    env = copy.deepcopy(VERSIONED)
    env["sagemaker"]["hf_token_secret_id"] = SECRET_ARN
    plan = plan_run(dag_id="d", run_id="r", params={**N17, "hf_token_secret_id": None}, env=env)
    assert plan["vla"]["parameters"][vla.HF_SECRET_PARAMETER] == SECRET_ARN


def test_the_plan_hands_the_pipeline_the_version_its_base_model_and_only_the_secret_name():
    plan = plan_run(dag_id="d", run_id="r", params=N17, env=VERSIONED)
    p = plan["vla"]["parameters"]
    assert p["GrootVersion"] == "n1.7" and p["HfTokenSecretId"] == "sim2real-groot/hf-token"
    assert p["BaseModelS3Uri"] == f"s3://{GOOD['artifacts_bucket']}/models/groot-base/n1.7/"
    default = plan_run(dag_id="d", run_id="r", params=PARAMS, env=VERSIONED)["vla"]["parameters"]
    assert default["GrootVersion"] == groot.DEFAULT_VERSION and default["HfTokenSecretId"] == ""
    assert default["BaseModelS3Uri"] == f"s3://{GOOD['artifacts_bucket']}/models/groot-base/"


def test_a_token_secret_the_pipeline_role_may_not_read_is_refused_at_trigger_time():
    """infra/'s pipeline role may GetSecretValue only on <prefix>-groot/* (sagemaker.hf_token_secret_path)."""
    env = copy.deepcopy(VERSIONED)
    env["sagemaker"]["hf_token_secret_path"] = "sim2real-groot/"
    check_params(N17, env)
    check_params({**N17, "hf_token_secret_id": SECRET_ARN}, env)
    for outside in ("prod/hf-token", "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/hf-token-AbCdEf",
                    "sim2real-grootx/hf-token"):
        with pytest.raises(ParamRuleError) as err:
            check_params({**N17, "hf_token_secret_id": outside}, env)
        assert (f"hf_token_secret_id {outside!r} is outside sim2real-groot/: the SageMaker pipeline role may read "
                "only the secrets named sim2real-groot/*") in str(err.value)
    env["sagemaker"]["hf_token_secret_id"] = "prod/hf-token"  # the environment config's is held to the same rule
    with pytest.raises(ParamRuleError, match="'prod/hf-token' is outside sim2real-groot/"):
        check_params({**N17, "hf_token_secret_id": None}, env)
    check_params({**PARAMS, "run_vla_finetune": False, "deploy_to_edge": False}, env)  # no fine-tune: no rule
