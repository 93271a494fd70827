"""Each GR00T version's pipeline runs on its own images: the ``vla.pipeline_definition`` task's definition for a
planned N1.6 and N1.7 run, upserted into (moto) SageMaker and read back with DescribePipeline. The default
version's definition is the one before versions had images, byte for byte (the golden environment's)."""

from __future__ import annotations

import json

import boto3
import pytest

from airflow.sdk.bases.operator import ExecutorSafeguard
from sim2real.orchestration.operators.sagemaker_pipeline import PipelineDefinitionUpsertOperator
from sim2real.orchestration.pipelines.groot import pipeline_definition_json
from sim2real.orchestration.stages.run import plan_run
from sim2real.orchestration.stages.vla import definition_text

from tests.moto_server import moto_aws_default
from tests.orchestration.environments import MINIMAL_ENVIRONMENT
from tests.orchestration.stages.test_stages import PARAMS

from .golden_env import BUCKET, ECR, GROUP, IMAGES, KWARGS, ROLE_ARN

ExecutorSafeguard.test_mode = True
N17_IMAGES = {"training": f"{ECR}/sim2real-groot-training@sha256:" + "7" * 64,
              "smoke_eval": f"{ECR}/sim2real-groot-smoke-eval@sha256:" + "8" * 64}
ENV = {**MINIMAL_ENVIRONMENT, "artifacts_bucket": BUCKET,
       "sagemaker": {"pipeline_name": "sim2real-groot-finetune", "pipeline_role_arn": ROLE_ARN,
                     "model_package_group": GROUP, "images": IMAGES,
                     "images_by_groot_version": {"n1.7": N17_IMAGES}}}
RUN_IMAGE = f"{ECR}/sim2real-training@sha256:" + "9" * 64  # this run's RL image: no GR00T step may use it


@pytest.fixture(scope="module")
def endpoint():
    with moto_aws_default(max_attempts=1) as url:
        yield url


def _step_images(definition: dict) -> dict[str, str]:
    steps = {s["Name"]: s["Arguments"] for s in definition["Steps"]}
    register = next(s for s in definition["Steps"] if s["Name"] == "SmokeGate")["Arguments"]["IfSteps"][0]
    return {"processing": steps["TransformDataset"]["AppSpecification"]["ImageUri"],
            "training": steps["GR00TFinetune"]["AlgorithmSpecification"]["TrainingImage"],
            "smoke_eval": steps["SmokeEval"]["AppSpecification"]["ImageUri"],
            "inference": register["Arguments"]["InferenceSpecification"]["Containers"][0]["Image"]}


def test_each_version_upserts_a_definition_with_its_own_images(endpoint):
    sm = boto3.client("sagemaker", region_name="us-east-1", endpoint_url=endpoint)
    stored = {}
    for version, params in (("n1.6", PARAMS),
                            ("n1.7", {**PARAMS, "groot_version": "n1.7", "hf_token_secret_id": "sim2real-groot/hf"})):
        plan = plan_run(dag_id="sim_to_real", run_id=f"manual__{version}", params=params, env=ENV)
        text = definition_text(plan, RUN_IMAGE)
        PipelineDefinitionUpsertOperator(task_id="upsert_pipeline", pipeline_name="sim2real-groot-finetune",
                                         definition=text, role_arn=ROLE_ARN).execute({})
        stored[version] = json.loads(sm.describe_pipeline(PipelineName="sim2real-groot-finetune")["PipelineDefinition"])
        if version == "n1.6":
            assert text == pipeline_definition_json(**KWARGS)  # byte-stable: the golden environment's definition
    assert _step_images(stored["n1.6"]) == IMAGES
    assert _step_images(stored["n1.7"]) == {"processing": IMAGES["processing"], **N17_IMAGES,
                                            "inference": N17_IMAGES["training"]}
    assert RUN_IMAGE not in json.dumps(stored)
