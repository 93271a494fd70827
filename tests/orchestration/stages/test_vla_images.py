"""The SageMaker step images of each GR00T version: ``sagemaker.images`` (the default version's) and
``sagemaker.images_by_groot_version``; a version without its own is refused by the run's first task, before any
AWS call or spend."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest

from sim2real.contract import groot
from sim2real.contract import task_ids as ids
from sim2real.orchestration.config import EnvironmentConfigError, groot_images, validate_environment
from sim2real.orchestration.params import ParamRuleError
from sim2real.orchestration.stages.run import plan_run

from tests.orchestration.environments import GROOT_VERSION_IMAGES, MINIMAL_ENVIRONMENT, VERSIONED_ENVIRONMENT
from tests.orchestration.stages.test_stages import PARAMS
from tests.paths import DAGS

N17 = {**PARAMS, "groot_version": "n1.7", "hf_token_secret_id": "sim2real-groot/hf-token"}
DEFAULT_IMAGES = {"processing": "123456789012.dkr.ecr.us-east-1.amazonaws.com/p@sha256:" + "1" * 64,
                  "training": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t@sha256:" + "2" * 64,
                  "smoke_eval": "123456789012.dkr.ecr.us-east-1.amazonaws.com/s@sha256:" + "3" * 64}
#: N1.6's images configured (as a real environment has them), none for N1.7
N16_ONLY = {**MINIMAL_ENVIRONMENT, "sagemaker": {**MINIMAL_ENVIRONMENT["sagemaker"], "images": DEFAULT_IMAGES}}


def test_a_version_without_its_images_is_refused_by_the_first_task_before_any_call(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException

    bag = DagBag(dag_folder=str(DAGS / "sim_to_real.py"))
    dag = bag.dags["sim_to_real"]
    assert ids.PREPARE_RUN in dag.task_dict and not dag.get_task(ids.PREPARE_RUN).upstream_task_ids  # the first
    calls: list = []
    monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", json.dumps(N16_ONLY))
    monkeypatch.delenv("SIM2REAL_ENVIRONMENT_FILE", raising=False)
    prepare = dag.get_task(ids.PREPARE_RUN).python_callable
    monkeypatch.setitem(prepare.__globals__, "get_current_context", lambda: {"ti": None, "task": None})
    monkeypatch.setattr("sim2real.orchestration.sweeper.sweep_before_run", lambda *a, **k: calls.append("sweep"))
    monkeypatch.setattr("sim2real.orchestration.tracking.start_tracking", lambda **k: calls.append("mlflow"))
    monkeypatch.setattr("sim2real.orchestration.stages.rounds.seed_checkpoint", lambda *a, **k: calls.append("s3"))
    params = dag.params.validate()
    params.update(groot_version="n1.7", hf_token_secret_id="sim2real-groot/hf-token")
    with pytest.raises(AirflowFailException) as err:
        prepare(params=params, dag=dag,
                dag_run=SimpleNamespace(run_id="manual__2026-12-04T00:00:00+00:00", run_type="manual", conf={}))
    text = str(err.value)
    assert ("groot_version 'n1.7' has no SageMaker images: the environment config lacks "
            "sagemaker.images_by_groot_version.n1.7.training, sagemaker.images_by_groot_version.n1.7.smoke_eval") in text
    assert "GROOT_COMMIT set to the commit of Isaac-GR00T's n1.7-release tag" in text
    assert calls == []  # refused before the orphan sweep, MLflow or S3: nothing started, nothing spent


def test_only_the_version_the_images_are_missing_for_is_refused():
    with pytest.raises(ParamRuleError, match=r"lacks sagemaker\.images_by_groot_version\.n1\.5\.smoke_eval \("):
        env = copy.deepcopy(VERSIONED_ENVIRONMENT)
        del env["sagemaker"]["images_by_groot_version"]["n1.5"]["smoke_eval"]
        plan_run(dag_id="d", run_id="r", params={**PARAMS, "groot_version": "n1.5", "embodiment_tag": "gr1"},
                 env=env)
    # the default version keeps the run's own image for what the config lacks (the sandbox has no GR00T images)
    assert plan_run(dag_id="d", run_id="r", params=PARAMS, env=MINIMAL_ENVIRONMENT)["vla"]["images"] == {}
    # the fine-tune off: no images needed
    plan_run(dag_id="d", run_id="r", params={**N17, "run_vla_finetune": False, "deploy_to_edge": False}, env=N16_ONLY)


def test_each_version_resolves_to_its_own_images():
    sm = {"images": DEFAULT_IMAGES, "images_by_groot_version": GROOT_VERSION_IMAGES}
    assert groot_images(sm, groot.DEFAULT_VERSION) == DEFAULT_IMAGES
    # another version: its own Isaac-GR00T images, the shared processing image (it holds no Isaac-GR00T)
    assert groot_images(sm, "n1.7") == {"processing": DEFAULT_IMAGES["processing"], **GROOT_VERSION_IMAGES["n1.7"]}
    own = {"processing": "e/p:n17", "inference": "e/i:n17", **GROOT_VERSION_IMAGES["n1.7"]}
    assert groot_images({**sm, "images_by_groot_version": {"n1.7": own}}, "n1.7") == own
    # an entry for the default version overrides sagemaker.images key by key
    override = {"training": "e/t:n16-rebuilt"}
    assert groot_images({**sm, "images_by_groot_version": {"n1.6": override}}, "n1.6") == {**DEFAULT_IMAGES,
                                                                                           **override}


@pytest.mark.parametrize("sagemaker, message", [
    ({"images": {**DEFAULT_IMAGES, "n1.7": {"training": "x"}}},
     "sagemaker.images has unknown keys ['n1.7'] (known: ['processing', 'training', 'smoke_eval', 'inference']; "
     "the images of another GR00T version go in sagemaker.images_by_groot_version.<version>)"),
    ({"images_by_groot_version": {"n2.0": {"training": "x"}}},
     "sagemaker.images_by_groot_version has unknown GR00T version 'n2.0' (one of ['n1.5', 'n1.6', 'n1.7'])"),
    ({"images_by_groot_version": {"n1.7": {"training": ""}}},
     "sagemaker.images_by_groot_version.n1.7.training must be an image URI (a non-empty string), got ''"),
    ({"images_by_groot_version": ["n1.7"]},
     "sagemaker.images_by_groot_version must map GR00T versions to image objects, got ['n1.7']"),
])
def test_a_malformed_images_section_is_refused_naming_the_key(sagemaker, message):
    env = {**MINIMAL_ENVIRONMENT, "sagemaker": {**MINIMAL_ENVIRONMENT["sagemaker"], **sagemaker}}
    with pytest.raises(EnvironmentConfigError) as err:
        validate_environment(env)
    assert message in str(err.value)
    assert validate_environment(VERSIONED_ENVIRONMENT) == VERSIONED_ENVIRONMENT
