"""The approval request's review (sim2real.orchestration.review) from the run's XComs and S3 (moto)."""

from __future__ import annotations

import json

from sim2real.orchestration.stages.rounds import lineage_entry
from sim2real.contract import task_ids as ids
from sim2real.orchestration.review import approval_body, smoke_line
from tests.orchestration.test_report_figures import (BUCKET, PREFIX, RunningTask, events_dir, evaluation,  # noqa: F401
                                                     manifest, plan, upload_events)
from tests.orchestration import test_report_figures

s3 = test_report_figures.s3  # the fixture: a moto S3 with the bucket BUCKET

ARN = "arn:aws:sagemaker:us-east-1:123456789012:model-package/sim2real-groot-models/3"
PACKAGE = {"ModelPackageArn": ARN, "ModelPackageGroupName": "sim2real-groot-models",
           "ModelApprovalStatus": "PendingManualApproval"}


def review_plan():
    return {**plan(), "params": {"min_success_rate": 0.15, "eval_episodes": 10},
            "vla": {"enabled": True, "parameters": {"OutputS3Uri": f"s3://{BUCKET}/{PREFIX}vla/"}},
            "tracking": {"enabled": True, "ui_url": "https://mlflow.example", "experiment_id": "7",
                         "parent_run_id": "p" * 32}}


def outputs():
    return {ids.WAIT_FOR_CHECKPOINT: manifest(), ids.READ_EVAL_REPORT: evaluation(),
            ids.QUALITY_GATE: {"passed": True, "metric": "success_rate", "value": 0.3, "threshold": 0.15}}


def body(env, **kwargs):
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return approval_body(rounds_entry=lineage_entry, plan=review_plan(), ti=RunningTask(outputs()), package=PACKAGE, dag_id="sim_to_real",
                         run_id="manual__1", s3_hook=S3Hook(aws_conn_id=None), sagemaker_client=None, env=env,
                         **kwargs)


def test_the_review_on_aws_has_every_fact_and_console_links_only(s3, events_dir):  # noqa: F811 - the fixture
    upload_events(s3, events_dir)
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}vla/smoke/smoke.json",
                  Body=json.dumps({"passed": True, "reason": "16-step chunks, finite actions"}))
    text = body({})
    assert "**Success rate:** 0.300, 95% Wilson [" in text and "threshold 0.150" in text
    assert "**Quality gate passed:**" in text and "**GPU cost so far:**" in text
    assert "**Smoke check:** passed (16-step chunks, finite actions)" in text
    assert f"[{ARN}](https://console.aws.amazon.com/sagemaker/home?region=us-east-1#/model-registry/" \
           "sim2real-groot-models/versions/3)" in text
    assert "update-model-package" in text
    assert "[Training curve](https://console.aws.amazon.com/s3/object/" in text
    assert "[Evaluation outcome](https://console.aws.amazon.com/s3/object/" in text
    assert f"[MLflow run](https://mlflow.example/#/experiments/7/runs/{'p' * 32})" in text
    assert "![" not in text and "/tmp" not in text  # links only: no embedded pictures, no local paths on AWS
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}report/")["Contents"]}
    assert keys == {f"{PREFIX}report/training_curve.png", f"{PREFIX}report/eval_outcome.png"}


def test_the_review_in_the_sandbox_embeds_the_pictures_and_says_what_is_missing(s3):
    text = body({"sandbox": True})  # no TensorBoard events, no smoke.json
    assert "Training curve: not drawn (" in text
    assert "[![Evaluation outcome](" in text and "Signature=" in text  # presigned, loaded from the sandbox
    assert ")](http" in text  # each picture links to itself: one click opens it full size
    assert "**Smoke check:** unknown (" in text and "smoke/smoke.json" in text


def test_the_review_of_a_later_round_shows_every_rounds_success_rate(s3):
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    first = {"round": 1, "run_id": "manual__r1", "run_key": "key-1", "success_rate": 0.1, "ci95": [0.018, 0.404],
             "successes": 1, "episodes": 10, "first_seed": 1000, "checkpoint_uri": "s3://b/runs/key-1/agent_000002.pt",
             "checkpoint_sha256": "a" * 64, "iteration": 2, "passed": False}
    rounds = {"round": 2, "max_rounds": 3, "round_iterations": 1, "max_iterations": 3, "eval_seed": 1010,
              "parent_run_id": "manual__r1", "parent_run_key": "key-1",
              "resume_from": {"checkpoint_uri": first["checkpoint_uri"], "sha256": "a" * 64, "iteration": 2,
                              "round": 1},
              "resumed_checkpoint_uri": f"s3://{BUCKET}/{PREFIX}checkpoints/agent_000002.pt", "history": [first]}
    text = approval_body(rounds_entry=lineage_entry, plan={**review_plan(), "rounds": rounds}, ti=RunningTask(outputs()), package=PACKAGE,
                         dag_id="sim_to_real", run_id="manual__2", s3_hook=S3Hook(aws_conn_id=None),
                         sagemaker_client=None, env={})
    assert "**Round 2 of 3** (parent run `manual__r1`; success rate per round, 95% Wilson): " in text
    assert "0.100 [0.018, 0.404]" in text and "0.300 [" in text  # round 1's and this round's
    assert "[Success rate per round](https://console.aws.amazon.com/s3/object/" in text
    assert "Success rate per round: not drawn" not in text
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}report/")["Contents"]}
    assert f"{PREFIX}report/round_success.png" in keys


def test_the_review_of_a_run_without_rounds_lists_no_round_picture(s3):
    assert "Success rate per round" not in body({})


def test_smoke_line_says_failed_with_the_reason():
    assert smoke_line({"passed": False, "reason": "NaN actions"}, "s3://b/k") == \
        "**Smoke check:** FAILED (NaN actions), `s3://b/k`"


def test_the_package_line_dates_its_status_instead_of_stating_it():
    from sim2real.orchestration.review import package_lines

    line = package_lines(PACKAGE, "us-east-1")[0]
    assert "(PendingManualApproval when this request was written; the decision is this request's answer)" in line


def test_the_review_of_a_canary_run_lists_no_field_picture(s3, monkeypatch):
    """The approval comes before the canary: its request must not say the field picture 'was not drawn' (it named
    the canary's missing verdict in every canary run's approval request)."""
    import sys

    monkeypatch.setattr(sys.modules[__name__], "review_plan", lambda: {
        **plan(), "params": {"min_success_rate": 0.15, "eval_episodes": 10}, "vla": {"enabled": False},
        "deploy": {"canary_thing_group_name": "robots-canary"}})
    text = body({})
    assert "Simulation vs field" not in text and "canary" not in text


def test_a_smoke_report_uri_that_is_not_s3_is_named_and_nothing_is_read():
    """Before: ``runs/k/vla`` was split by hand into bucket ``runs`` and key ``k/vla/smoke/smoke.json`` and read."""
    from sim2real.orchestration.review import read_smoke_report

    class _Hook:
        def read_key(self, key, bucket_name):
            raise AssertionError(f"read {bucket_name}/{key}")

    report, uri, error = read_smoke_report({"vla": {"parameters": {"OutputS3Uri": "runs/k/vla/"}}}, _Hook())
    assert report is None and uri == "runs/k/vla/smoke/smoke.json"
    assert "not an s3:// URI" in error, error
