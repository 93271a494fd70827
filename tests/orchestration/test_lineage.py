import json

from sim2real.orchestration.lineage import build_lineage, chain_rows, render_markdown
from sim2real.orchestration.pipelines.groot import pipeline_definition, pipeline_definition_json


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


def test_a_hyperpod_eks_run_names_its_pytorchjob_not_a_batch_job():
    from sim2real.contract import task_ids as ids

    training = {"backend": "hyperpod_eks", "job_id": "s2r-k", "cluster_name": "hp", "namespace": "hyperpod-ns-t",
                "job_name": "s2r-k", "job_uid": "u-1"}
    lin = build_lineage(run_key="k", dag_id="sim_to_real", run_id="r", params={}, plan={"backend": "hyperpod_eks"},
                        training=training, task_states={ids.HYPERPOD_EKS_TRAIN_POLICY: {"state": "success",
                                                                                         "duration_s": 2.0}})
    rows = dict(chain_rows(lin))
    assert "Batch job" not in rows
    assert rows["PyTorchJob (HyperPod EKS)"] == "hyperpod-ns-t/s2r-k on hp"
    assert "Batch job" not in render_markdown(lin)


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


def _figures(**overrides):
    from sim2real.orchestration.lineage import figure_entry

    figs = {
        "training_curve": figure_entry(uri="s3://b-1/runs/k-1/report/training_curve.png",
                                       source="s3://b-1/runs/k-1/checkpoints/tensorboard/", points=40),
        "eval_outcome": figure_entry(skipped_reason="evaluation did not run"),
    }
    figs.update(overrides)
    return figs


def test_figures_are_recorded_embedded_relative_and_skipped_with_reason():
    from sim2real.orchestration.lineage import lineage_errors

    lin = build_lineage(run_key="k-1", dag_id="sim_to_real", run_id="r", params={}, figures=_figures())
    assert lineage_errors(lin) == []
    md = render_markdown(lin)
    assert "![Training curve](report/training_curve.png)" in md
    assert "Training curve: `s3://b-1/runs/k-1/report/training_curve.png`" in md
    assert "Evaluation outcome: not drawn — evaluation did not run" in md
    # built without drawing (not by the report task): null, and no Figures section
    bare = build_lineage(run_key="k-1", dag_id="sim_to_real", run_id="r", params={})
    assert bare["figures"] is None and lineage_errors(bare) == [] and "## Figures" not in render_markdown(bare)


def test_figure_entry_needs_exactly_one_of_uri_and_reason():
    import pytest

    from sim2real.orchestration.lineage import figure_entry

    with pytest.raises(ValueError, match="exactly one of uri"):
        figure_entry(uri="s3://b/x.png", skipped_reason="why")
    with pytest.raises(ValueError, match="exactly one of uri"):
        figure_entry()


def test_the_schema_refuses_a_figure_that_is_both_or_neither_or_not_a_png():
    from sim2real.orchestration.lineage import lineage_errors

    cases = [
        {"uri": "s3://b-1/runs/k-1/report/x.png", "source": None, "points": 3, "skipped_reason": "why"},
        {"uri": None, "source": None, "points": None, "skipped_reason": None},
        {"uri": "s3://b-1/runs/k-1/report/x.jpg", "source": None, "points": 3, "skipped_reason": None},
        {"uri": "s3://b-1/runs/k-1/report/x.png", "source": None, "points": 3, "skipped_reason": None, "x": 1},
    ]
    for bad in cases:
        lin = build_lineage(run_key="k-1", dag_id="sim_to_real", run_id="r", params={},
                            figures=_figures(eval_outcome=bad))
        assert any(e.startswith("$.figures") for e in lineage_errors(lin)), bad
    lin = build_lineage(run_key="k-1", dag_id="sim_to_real", run_id="r", params={}, figures=_figures())
    del lin["figures"]["eval_outcome"]
    assert any(e.startswith("$.figures") for e in lineage_errors(lin))
    del lin["figures"]
    assert "$: 'figures' is a required property" in lineage_errors(lin)


def test_the_release_decision_records_who_where_when_and_why():
    from sim2real.orchestration.lineage import lineage_errors

    decision = {"decided_by": "alice", "via": "airflow", "at": "2026-12-02T07:00:00+00:00", "comment": "grasps 9/10",
                "status": "Approved"}
    approved = build_lineage(run_key="r", dag_id="d", run_id="x", params={},
                             model_package={"model_package_arn": "arn:aws:sagemaker:us-east-1:123456789012:model-package/g/1",
                                            "approval_status": "Approved",
                                            "decision": decision})
    assert approved["approval"] == {**decision, "triggered_by": None, "refused": []} and lineage_errors(approved) == []
    assert "| release decision | `Approved in airflow by alice at 2026-12-02T07:00:00+00:00: grasps 9/10` |" in \
        render_markdown(approved)
    # Four-eyes: who triggered the run, and every refused answer, are in the entry and its row.
    refusal = {"by": "alice", "via": "airflow", "status": "Approved", "at": "2026-12-02T06:59:00+00:00",
               "reason": "alice triggered this run and cannot answer its release request"}
    second = build_lineage(run_key="r", dag_id="d", run_id="x", params={},
                           approval={**decision, "decided_by": "bob", "triggered_by": "alice", "refused": [refusal]})
    assert second["approval"]["triggered_by"] == "alice" and second["approval"]["refused"] == [refusal]
    assert lineage_errors(second) == []
    assert "run triggered by alice; refused: Approved by alice in airflow" in render_markdown(second)
    # A rejection fails the approval step: its decision comes from the step's XCom, not its return value.
    rejected = build_lineage(run_key="r", dag_id="d", run_id="x", params={},
                             approval={**decision, "via": "sagemaker", "decided_by": None, "status": "Rejected"})
    assert rejected["approval"]["status"] == "Rejected" and lineage_errors(rejected) == []
    assert build_lineage(run_key="r", dag_id="d", run_id="x", params={})["approval"] is None
    for bad in ({**decision, "via": "email"}, {**decision, "status": "PendingManualApproval"}):
        lin = build_lineage(run_key="r", dag_id="d", run_id="x", params={}, approval=bad)
        assert any(e.startswith("$.approval") for e in lineage_errors(lin)), bad


def test_after_a_reattach_the_training_row_shows_the_jobs_running_time():
    """The reattaching try ran 8.6 s; the Batch job ran 1 h 2 min (DescribeJobs startedAt/stoppedAt)."""
    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.lineage import lineage_errors

    training = {"job_id": "j-1", "reattached": True, "started_at": 1_767_225_600.0, "stopped_at": 1_767_229_320.5}
    tasks = {ids.PREPARE_RUN: {"state": "success", "duration_s": 1.5},
             ids.BATCH_TRAIN_POLICY: {"state": "success", "duration_s": 8.6}}
    lin = build_lineage(run_key="k-1", dag_id="sim_to_real", run_id="r", params={},  # no plan: Batch
                        training=training, task_states=tasks)
    row = lin["tasks"][ids.BATCH_TRAIN_POLICY]
    assert row["duration_s"] == 8.6 and row["job_duration_s"] == 3720.5
    assert row["job_duration_source"] == "AWS Batch job j-1 startedAt → stoppedAt (DescribeJobs)"
    assert lin["tasks"][ids.PREPARE_RUN] == {"state": "success", "duration_s": 1.5}
    assert lineage_errors(lin) == []
    md = render_markdown(lin)
    assert f"| {ids.BATCH_TRAIN_POLICY} | success | 3720.5 (AWS Batch job's running time; this task's try 8.6) |" in md
    # A Slurm job on HyperPod the same; without the job's times (a failed submit) the task's duration stays alone.
    hp = build_lineage(run_key="k-1", dag_id="sim_to_real", run_id="r", params={}, plan={"backend": "hyperpod"},
                       training={"job_id": "42", "started_at": 100.0, "stopped_at": 160.0},
                       task_states={ids.HYPERPOD_TRAIN_POLICY: {"state": "success", "duration_s": 3.0}})
    assert hp["tasks"][ids.HYPERPOD_TRAIN_POLICY]["job_duration_s"] == 60.0
    assert "Slurm job 42" in hp["tasks"][ids.HYPERPOD_TRAIN_POLICY]["job_duration_source"]
    bare = build_lineage(run_key="k-1", dag_id="sim_to_real", run_id="r", params={}, plan={"backend": "batch"},
                         training={"job_id": "j-1", "started_at": None, "stopped_at": None}, task_states=tasks)
    assert "job_duration_s" not in bare["tasks"][ids.BATCH_TRAIN_POLICY]


def _canary_verdict(decision: str = "promote", **over) -> dict:
    """The canary task's XCom ``canary_verdict`` (CanaryVerdictOperator), 25 of 40 field episodes on 2 robots."""
    return {"decision": decision, "message": "field success rate 0.625 [0.470, 0.758] over 40 episodes",
            "rate": 0.625, "ci95": [0.470, 0.758], "n": 40, "successes": 25, "threshold": 0.4, "min_episodes": 20,
            "robots": {"robot-1": {"n": 20, "successes": 14, "interventions": 0},
                       "robot-2": {"n": 20, "successes": 11, "interventions": 1}},
            "silent": [], "refused": {"malformed": 1, "duplicated": 0, "foreign": 2, "early": 0, "late": 0},
            "refusals": [["field/episodes/robot-1/x.json", "malformed", "not JSON"]],
            "window": {"start": "2026-12-04T10:00:00Z", "end": "2026-12-04T11:00:00Z"}, "deployment_id": "d-1",
            "model_version": "a" * 64, **over}


def test_the_field_entry_sets_the_robots_beside_the_simulation_with_the_gap():
    from sim2real.orchestration.lineage import lineage_errors
    from sim2real.orchestration.run_note import render_run_note
    from sim2real.orchestration.tracking import headline_metrics

    evaluation = {"success_rate": 0.97, "ci95": [0.915, 0.99], "successes": 97, "episodes": 100}
    lineage = build_lineage(run_key="k", dag_id="d", run_id="r", params={}, evaluation=evaluation,
                            field=_canary_verdict())
    field = lineage["field"]
    assert field["field"] == {"success_rate": 0.625, "ci95": [0.47, 0.758], "successes": 25, "episodes": 40}
    assert field["simulation"] == evaluation and field["gap_pp"] == -34.5 and field["decision"] == "promote"
    assert [e for e in lineage_errors(lineage) if e.startswith("field")] == []
    markdown = render_markdown(lineage)
    assert "| simulation | 0.970 | [0.915, 0.990] | 97/100 |" in markdown
    assert "| field (robots) | 0.625 | [0.470, 0.758] | 25/40 |" in markdown
    assert "Gap (field − simulation): -34.5 percentage points." in markdown
    assert "| robot-2 | 20 | 11 | 1 |" in markdown and "Refused field episode objects: foreign 2, malformed 1." in markdown
    note = render_run_note(lineage)
    assert ("**Field (canary, 2 robots):** 0.625 [0.470, 0.758], 25/40 episodes vs simulation 0.970: gap -34.5 pp; "
            "promoted to the fleet (threshold 0.400 on the lower bound).") in note
    metrics = headline_metrics(lineage)
    assert {k: metrics[k] for k in metrics if k.startswith(("field", "sim_to", "canary"))} == {
        "field_success_rate": 0.625, "field_ci95_lower": 0.47, "field_ci95_upper": 0.758, "field_episodes": 40.0,
        "sim_to_real_gap_pp": -34.5, "canary_promoted": 1.0}
    # rolled back, a silent robot, no evaluation: said so, no gap invented
    silent = build_lineage(run_key="k", dag_id="d", run_id="r", params={}, field=_canary_verdict(
        "roll_back", rate=None, ci95=[0.0, 1.0], n=0, successes=0, robots={}, silent=["robot-1"]))
    assert silent["field"]["gap_pp"] is None and silent["field"]["simulation"] is None
    assert "| robot-1 | 0 (silent) | — | — |" in render_markdown(silent)
    assert "no episode; NOT promoted, canary rolled back" in render_run_note(silent)
    assert headline_metrics(silent)["canary_promoted"] == 0.0
    # no canary: no entry
    assert build_lineage(run_key="k", dag_id="d", run_id="r", params={},
                         field={"decision": "no_canary"})["field"] is None


def test_the_schema_checks_the_field_entry():
    from sim2real.orchestration.lineage import lineage_errors

    lineage = build_lineage(run_key="k", dag_id="d", run_id="r", params={}, field=_canary_verdict())
    assert lineage_errors(lineage) == []
    for broken in ({"field": {**lineage["field"]["field"], "success_rate": 1.5}}, {"gap_pp": "-34.5"},
                   {"decision": "promoted"}):
        errors = lineage_errors({**lineage, "field": {**lineage["field"], **broken}})
        assert len(errors) == 1 and errors[0].startswith("$.field: "), (broken, errors)


def test_a_person_who_overrules_the_verdict_is_what_the_record_says():
    """canary_review: the verdict recommended a roll back, a person promoted (the fleet got the release): before,
    the lineage, the note and canary_promoted said 'NOT promoted, canary rolled back'."""
    from sim2real.orchestration.lineage import lineage_errors
    from sim2real.orchestration.run_note import render_run_note
    from sim2real.orchestration.tracking import headline_metrics

    review = {"decided_by": "ana", "at": "2026-12-04T11:00:00Z", "comment": "robot 2 was misaligned",
              "status": "Promote"}
    lineage = build_lineage(run_key="k", dag_id="d", run_id="r", params={}, field=_canary_verdict("roll_back"),
                            canary_review=review)
    assert lineage["field"]["decision"] == "promote" and lineage["field"]["reviewed_by"] == review
    assert lineage_errors(lineage) == []
    assert "promoted to the fleet by ana (canary review)" in render_run_note(lineage)
    assert "**promote** by ana at 2026-12-04T11:00:00Z in the canary review (robot 2 was misaligned); the verdict said" \
        in render_markdown(lineage)
    assert headline_metrics(lineage)["canary_promoted"] == 1.0
    aborted = build_lineage(run_key="k", dag_id="d", run_id="r", params={}, field=_canary_verdict(),
                            canary_review={**review, "status": "Abort"})
    assert aborted["field"]["decision"] == "roll_back" and headline_metrics(aborted)["canary_promoted"] == 0.0
