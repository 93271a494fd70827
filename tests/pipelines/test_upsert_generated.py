"""Upserting the real generated definition (moto): first call creates, the same definition again
makes no UpdatePipeline call, a changed environment value updates."""

from __future__ import annotations

import json

import boto3
import pytest
from moto.sagemaker.responses import SageMakerResponse

from airflow.sdk.bases.operator import ExecutorSafeguard
from sim2real.orchestration.operators.sagemaker_pipeline import PipelineDefinitionUpsertOperator
from sim2real.orchestration.pipelines.groot import pipeline_definition_json

from tests.moto_server import moto_aws_default

from .golden_env import KWARGS, ROLE_ARN

ExecutorSafeguard.test_mode = True


@pytest.fixture(scope="module")
def endpoint():
    with moto_aws_default(max_attempts=1) as url:
        yield url


def test_generated_definition_upserts_idempotently(endpoint, monkeypatch):
    updates: list[str] = []
    original = SageMakerResponse.update_pipeline

    def counting_update(resp):
        updates.append(resp._get_param("PipelineName"))
        return original(resp)

    monkeypatch.setattr(SageMakerResponse, "update_pipeline", counting_update)

    def upsert(definition: str) -> dict:
        op = PipelineDefinitionUpsertOperator(task_id="upsert_pipeline", pipeline_name="sim2real-groot-finetune",
                                              definition=definition, role_arn=ROLE_ARN)
        return op.execute({})

    definition = pipeline_definition_json(**KWARGS)
    assert upsert(definition)["action"] == "created"
    assert upsert(pipeline_definition_json(**KWARGS))["action"] == "unchanged"
    assert updates == []
    stored = boto3.client("sagemaker", region_name="us-east-1", endpoint_url=endpoint).describe_pipeline(
        PipelineName="sim2real-groot-finetune")["PipelineDefinition"]
    assert json.loads(stored) == json.loads(definition)
    images = dict(KWARGS["images"], training=KWARGS["images"]["training"].replace("2222", "4444"))
    assert upsert(pipeline_definition_json(**dict(KWARGS, images=images)))["action"] == "updated"
    assert updates == ["sim2real-groot-finetune"]
