"""The canary in the deploy stage: its form fields (checked when the run is created), its plan, and its tasks
between the components and the fleet deployment; without a canary group they do nothing and the fleet deployment
follows as before."""

from __future__ import annotations

import json

import pytest

from sim2real.orchestration.params import ParamRuleError
from sim2real.orchestration.stages.deploy import SETUP_COMPONENT, canary_model_version
from sim2real.orchestration.stages.run import build_params, check_params, plan_run

from tests.orchestration.stages.test_stage_modules import dag  # noqa: F401 - the sim_to_real DAG (fixture)
from tests.orchestration.stages.test_stages import PARAMS
from tests.orchestration.test_config import GOOD

CANARY = {"canary_thing_group_name": "sim2real-canary", "canary_min_episodes": 30, "canary_window_minutes": 90,
          "field_min_success_rate": 0.75}


def test_without_the_fields_or_with_an_empty_group_the_run_has_no_canary():
    for params in (PARAMS, {**PARAMS, "canary_thing_group_name": None}, {**PARAMS, "canary_thing_group_name": ""}):
        deploy = plan_run(dag_id="sim_to_real", run_id="r", params=params, env=GOOD)["deploy"]
        assert deploy["canary_thing_group_name"] == ""
        assert (deploy["canary_min_episodes"], deploy["canary_window_minutes"], deploy["field_min_success_rate"]) == (
            20, 60, 0.8)


def test_the_canary_plan_names_its_deployment_and_where_the_robots_upload():
    plan = plan_run(dag_id="sim_to_real", run_id="r", params={**PARAMS, **CANARY}, env=GOOD)
    deploy, key = plan["deploy"], plan["run_key"]
    assert {k: deploy[k] for k in ("canary_thing_group_name", "canary_deployment_name", "canary_min_episodes",
                                   "canary_window_minutes", "field_min_success_rate", "field_bucket",
                                   "field_prefix")} == {
        "canary_thing_group_name": "sim2real-canary", "canary_deployment_name": f"sim2real-{key}-canary",
        "canary_min_episodes": 30, "canary_window_minutes": 90, "field_min_success_rate": 0.75,
        "field_bucket": GOOD["artifacts_bucket"], "field_prefix": ""}
    assert deploy["deployment_name"] == f"sim2real-{key}"  # the fleet's, as before


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("canary_min_episodes", 0, "less than the minimum of 1"),
    ("canary_window_minutes", 721, "greater than the maximum of 720"),
    ("field_min_success_rate", 1.5, "greater than the maximum of 1"),
    ("canary_thing_group_name", "no spaces", "does not match"),
])
def test_the_form_refuses_a_wrong_value_with_the_reason(field, value, reason):
    with pytest.raises(Exception, match=reason):
        build_params()[field].resolve(value)


def test_a_canary_group_that_is_the_fleet_group_is_refused():
    check_params({**PARAMS, **CANARY}, GOOD)
    fleet = GOOD["greengrass"]["thing_group_name"]
    with pytest.raises(ParamRuleError, match=f"canary_thing_group_name '{fleet}' is the fleet's thing group"):
        check_params({**PARAMS, **CANARY, "canary_thing_group_name": fleet}, GOOD)
    with pytest.raises(ParamRuleError, match="canary_thing_group_name 'g2' is the fleet's thing group"):
        check_params({**PARAMS, **CANARY, "thing_group_name": "g2", "canary_thing_group_name": "g2"}, GOOD)


def test_the_canary_is_judged_on_the_model_its_components_deploy():
    merge = json.dumps({"ModelS3Uri": "s3://b/m.onnx", "ModelSha256": "ab" * 32, "Exporter": ""})
    components = {SETUP_COMPONENT: {"componentVersion": "1.0.0", "configurationUpdate": {"merge": merge}}}
    assert canary_model_version({"deploy": {"canary_thing_group_name": "c"}}, components) == "ab" * 32
    assert canary_model_version({"deploy": {"canary_thing_group_name": ""}}, components) == ""



def test_the_canary_review_is_off_by_default_and_a_form_switch():
    assert plan_run(dag_id="sim_to_real", run_id="r", params={**PARAMS, **CANARY}, env=GOOD)["deploy"][
        "canary_review"] is False
    assert plan_run(dag_id="sim_to_real", run_id="r", params={**PARAMS, **CANARY, "canary_review": True},
                    env=GOOD)["deploy"]["canary_review"] is True
    field = build_params()["canary_review"]
    assert field.resolve() is False and field.resolve(True) is True
    with pytest.raises(Exception, match="is not of type 'boolean'"):
        field.resolve("yes")


def test_the_review_stands_between_the_verdict_and_the_fleet_deployment(dag):  # noqa: F811 - the fixture
    from sim2real.contract import task_ids
    from sim2real.orchestration.operators.canary_review import CanaryReviewOperator
    from sim2real.orchestration.stages.deploy import CANARY_REVIEW_RESPONSE_TIMEOUT

    review, verdict = dag.get_task(task_ids.CANARY_REVIEW), dag.get_task(task_ids.CANARY_VERDICT)
    assert isinstance(review, CanaryReviewOperator) and review.deferrable  # an abort's rollback wait
    assert review.upstream_task_ids == {task_ids.CANARY_VERDICT, task_ids.PREPARE_RUN}  # the plan
    assert task_ids.CANARY_REVIEW in dag.get_task(task_ids.DEPLOY_TO_ROBOTS).upstream_task_ids
    assert review.verdict_task_id == task_ids.CANARY_VERDICT
    assert review.response_timeout == CANARY_REVIEW_RESPONSE_TIMEOUT
    # the verdict and the review read the same plan field: on, the verdict only recommends and the review decides
    assert review.review.key == verdict.review.key == "deploy.canary_review"
