"""lineage.json has a JSON schema (draft 2020-12) in the repository; documents are checked against it."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from sim2real.orchestration.lineage import SCHEMA_PATH, LineageSchemaError, build_lineage, lineage_errors, validate_lineage

SHA = "425b8af7" + "0" * 56
DIGEST = "sha256:" + "e" * 64


def full_lineage(**overrides):
    kw = dict(
        run_key="sim-to-real-manual-2026-11-29t23-59-50-00-00-1a2b3c4d", dag_id="sim_to_real",
        run_id="manual__2026-11-29T23:59:50+00:00", params={"seed": 1, "num_nodes": 1},
        plan={"run_key": "k", "bucket": "b", "run_uri": "s3://b/runs/k/"},
        image={"image_digest": DIGEST, "image_uri": f"1.dkr.ecr.us-east-1.amazonaws.com/r@{DIGEST}"},
        preflight={"ok": True, "needed_vcpu": 48},
        training={"job_id": "712d25ad-4769-4599-bcfc-4605b0af382a", "attempts": 1},
        checkpoint={"checkpoint_uri": "s3://b/runs/k/checkpoints/agent_000225.pt", "sha256": SHA},
        evaluation={"success_rate": 0.2, "successes": 10, "episodes": 50, "ci95": [0.112, 0.330],
                    "checkpoint_sha256": SHA, "report_uri": "s3://b/runs/k/eval/report.json"},
        quality_gate={"passed": True, "reason": "success_rate 0.200 >= threshold 0.150"},
        vla={"pipeline_execution_arn":
             "arn:aws:sagemaker:us-east-1:123456789012:pipeline/sim2real-groot-finetune/execution/abc123"},
        model_package={"model_package_arn":
                       "arn:aws:sagemaker:us-east-1:123456789012:model-package/sim2real-groot-models/1",
                       "approval_status": "Approved"},
        deployment={"deployment_id": "e9cfbe8d-dcf1-439b-82c6-bc1bee7028a2",
                    "devices": {"sim2real-robot-1": "SUCCEEDED"}},
        task_states={"prepare_run": {"state": "success", "duration_s": 7.2}},
    )
    kw.update(overrides)
    return build_lineage(**kw)


def test_the_schema_is_a_valid_draft_2020_12_schema():
    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_a_complete_run_matches_the_schema():
    validate_lineage(full_lineage())


def test_a_run_stopped_early_matches_too():
    """Stages that did not run are null (the report is a teardown: it writes whatever failed)."""
    doc = build_lineage(run_key="k-1", dag_id="sim_to_real", run_id="r", params={})
    assert lineage_errors(doc) == []


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d["chain"].update(checkpoint_sha256="not-a-sha"), "$.chain.checkpoint_sha256"),
    (lambda d: d["chain"].update(image_digest="latest"), "$.chain.image_digest"),
    (lambda d: d["chain"].update(success_rate=1.5), "$.chain.success_rate"),
    (lambda d: d["chain"].pop("deployment_id"), "$.chain"),
    (lambda d: d["stages"]["evaluation"].pop("episodes"), "$.stages.evaluation"),
    (lambda d: d.update(schema_version=2), "$.schema_version"),
])
def test_a_broken_document_is_refused_with_the_path(mutate, where):
    doc = full_lineage()
    mutate(doc)
    with pytest.raises(LineageSchemaError) as err:
        validate_lineage(doc)
    assert any(e.startswith(where) for e in err.value.errors), err.value.errors


FIELD_DATASET = {"dataset_version": "fd-0123456789abcdef", "episodes": 2, "frames": 9, "source": "latest",
                 "manifest_uri": "s3://b/field/datasets/fd-0123456789abcdef/manifest.json"}


def test_the_field_dataset_of_the_fine_tune_is_recorded_and_checked():
    from sim2real.orchestration.lineage import render_markdown

    doc = full_lineage(field_dataset=FIELD_DATASET)
    assert doc["stages"]["field_dataset"] == FIELD_DATASET
    validate_lineage(doc)
    assert ("| field dataset | `fd-0123456789abcdef (2 episodes, 9 frames; "
            "s3://b/field/datasets/fd-0123456789abcdef/manifest.json)` |") in render_markdown(doc)
    assert full_lineage()["stages"]["field_dataset"] is None and "field dataset" not in render_markdown(full_lineage())
    for bad, where in ((dict(FIELD_DATASET, dataset_version="latest"), "$.stages.field_dataset"),
                       ({k: v for k, v in FIELD_DATASET.items() if k != "frames"}, "$.stages.field_dataset"),
                       (dict(FIELD_DATASET, manifest_uri="s3://b/field/datasets/x/"), "$.stages.field_dataset")):
        with pytest.raises(LineageSchemaError) as err:
            validate_lineage(full_lineage(field_dataset=bad))
        assert any(e.startswith(where) for e in err.value.errors), err.value.errors
