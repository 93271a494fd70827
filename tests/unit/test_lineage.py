import json

from sim2real.lineage import build_lineage, chain_rows, render_markdown
from sim2real.pipelines.groot import pipeline_definition, pipeline_definition_json


def test_lineage_chain_and_markdown():
    lin = build_lineage(
        run_key="k", dag_id="sim_to_real", run_id="r", params={"seed": 1},
        image={"image_digest": "sha256:aa", "image_uri": "x@sha256:aa"},
        training={"job_id": "job-1"},
        checkpoint={"checkpoint_uri": "s3://b/c.pt", "sha256": "ff"},
        evaluation={"success_rate": 0.35, "ci95": [0.18, 0.57]},
        quality_gate={"passed": True, "reason": "0.35 >= 0.05"},
        vla={"pipeline_execution_arn": "arn:exec"},
        model_package={"model_package_arn": "arn:pkg", "approval_status": "Approved"},
        deployment={"deployment_id": "dep-1", "devices": {"robot-1": "SUCCEEDED"}},
        task_states={"prepare_run": {"state": "success", "duration_s": 1.5}},
    )
    json.dumps(lin)
    assert lin["chain"]["checkpoint_sha256"] == "ff" and lin["chain"]["deployment_id"] == "dep-1"
    assert lin["stages"]["preflight"] is None  # a stage that did not run is explicit null
    rows = dict(chain_rows(lin))
    assert rows["success rate [95% CI]"] == "0.350 [0.180, 0.570]"
    assert rows["model package"] == "arn:pkg (Approved)"
    md = render_markdown(lin)
    assert "| checkpoint sha256 | `ff` |" in md and "Quality gate: **passed**" in md and "| prepare_run | success | 1.5 |" in md


def test_pipeline_definition_has_five_stages_and_is_canonical():
    kw = dict(role_arn="arn:aws:iam::1:role/r", model_package_group="g",
              images={"processing": "i", "training": "i", "smoke_eval": "i"}, bucket="b")
    d = pipeline_definition(**kw)
    names = [s["Name"] for s in d["Steps"]]
    assert names == ["TransformDataset", "GR00TFinetune", "SmokeEval", "SmokeGate"]
    gate = d["Steps"][3]["Arguments"]
    assert [s["Name"] for s in gate["IfSteps"]] == ["RegisterModel"]
    assert [s["Name"] for s in gate["ElseSteps"]] == ["SmokeFailed"]
    reg = gate["IfSteps"][0]["Arguments"]
    assert reg["ModelApprovalStatus"] == "PendingManualApproval"
    assert reg["CustomerMetadataProperties"]["sim2real:run-key"] == {"Get": "Parameters.RunKey"}
    assert d["Steps"][0]["CacheConfig"] == {"Enabled": True, "ExpireAfter": "P30D"}
    assert "CheckpointConfig" in d["Steps"][1]["Arguments"]
    assert pipeline_definition_json(**kw) == pipeline_definition_json(**kw)
