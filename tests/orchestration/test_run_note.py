"""The DAG run's note: results (gate, interval, cost, stages, links) rendered from the lineage and set
through the MWAA REST API (request checked against botocore's InvokeRestApi shape) or an Airflow connection's
API server (test_run_note_api.py); weak gate settings flagged in the form and the note."""

from __future__ import annotations


import boto3
import pytest
from botocore.stub import Stubber

from sim2real.orchestration.stages.rounds import lineage_entry
from sim2real.contract import task_ids as ids
from sim2real.orchestration import run_note
from sim2real.orchestration.params import gate_warnings
from sim2real.orchestration.stages import gate
from tests.orchestration import test_report_figures as figs
from tests.orchestration.test_report_figures import BUCKET, PREFIX, RUN_KEY, RunningTask, events_dir, s3  # noqa: F401


def lineage(**over):
    doc = {
        "run_key": RUN_KEY, "dag_id": "sim_to_real", "run_id": "manual__1", "params": {"min_success_rate": 0.8},
        "chain": {"success_rate": 0.95, "success_rate_ci95": [0.888, 0.978]},
        "stages": {"evaluation": {"episodes": 100},
                   "quality_gate": {"passed": True, "metric": "ci95_lower", "value": 0.888, "threshold": 0.8,
                                    "reason": "ci95_lower 0.888 >= threshold 0.800"}},
        "cost_estimate": {"total_usd": 3.2, "max_budget_usd": 500.0},
        "cost_actual": {"total_usd": 1.07, "unknown": [], "within_budget": True},
        "tasks": {ids.PREPARE_RUN: {"state": "success", "duration_s": 1.5},
                  ids.BATCH_TRAIN_POLICY: {"state": "success", "duration_s": 40.0},
                  # a skipped task has the fraction of a second its skip took: not shown as stage time
                  ids.HYPERPOD_CHECK_CAPACITY: {"state": "skipped", "duration_s": 0.2},
                  ids.EVAL_COMMAND: {"state": "success", "duration_s": 1.0},
                  ids.RUN_EVALUATION: {"state": "failed", "duration_s": 12.25},
                  ids.DEPLOY_TO_ROBOTS: {"state": "upstream_failed", "duration_s": None}},
    }
    doc.update(over)
    return doc


def test_note_has_rate_interval_threshold_verdict_cost_stage_table_and_links():
    note = run_note.render_run_note(lineage(), links={"S3 run folder": "https://x/folder", "missing": None})
    assert "**Success rate:** 0.950, 95% Wilson [0.888, 0.978], 100 episodes; threshold 0.800" in note
    assert "**Quality gate passed:** ci95_lower 0.888 >= 0.800" in note
    assert "**GPU cost:** estimated $3.20 (max $500.00), actual $1.07, within budget" in note
    assert "| training (Batch) | success | 40.0 |" in note
    assert "| training (HyperPod) | skipped | — |" in note
    assert "| evaluation | failed | 13.2 |" in note  # worst state of the group, summed task time
    assert "| deployment | upstream_failed | — |" in note
    assert "[S3 run folder](https://x/folder)" in note and "missing" not in note
    assert "Warning" not in note and run_note.SHORTENED not in note


def test_the_hyperpod_scale_down_teardown_counts_in_the_hyperpod_row():
    # The teardown is outside group hyperpod (else hyperpod and sweep would depend on each other both ways); a
    # failed scale-down (nodes left up) must still show in the HyperPod training row.
    tasks = {**lineage()["tasks"], ids.HYPERPOD_SCALE_DOWN: {"state": "failed", "duration_s": 30.0}}
    note = run_note.render_run_note(lineage(tasks=tasks))
    assert "| training (HyperPod) | failed | 30.2 |" in note  # with hyperpod.check_capacity's 0.2 s


def test_after_a_reattach_the_training_stage_shows_the_jobs_running_time_labelled():
    tasks = {**lineage()["tasks"], ids.BATCH_TRAIN_POLICY: {
        "state": "success", "duration_s": 8.6, "job_duration_s": 3720.5,
        "job_duration_source": "AWS Batch job j-1 startedAt → stoppedAt (DescribeJobs)"}}
    note = run_note.render_run_note(lineage(tasks=tasks))
    assert "| training (Batch), job's running time | success | 3720.5 |" in note
    assert "8.6" not in note


def test_a_run_without_evaluation_or_cost_says_so():
    note = run_note.render_run_note(lineage(chain={}, stages={}, cost_actual=None, tasks={}))
    assert "not measured" in note and "**Quality gate:** not reached." in note and "actual unknown" in note


def test_the_note_fits_airflows_1000_characters_and_keeps_the_verdict():
    long_links = {f"link {i}": "https://console.aws.amazon.com/s3/object/b?prefix=" + "x" * 150 for i in range(5)}
    note = run_note.render_run_note(lineage(), warnings=gate_warnings({"min_success_rate": 0}),
                                    links=long_links, images={"Training curve": "http://127.0.0.1/" + "y" * 100})
    assert len(note) <= run_note.NOTE_MAX_CHARS
    assert note.endswith(run_note.SHORTENED + "\n")
    assert "Quality gate at 0" in note and "**Quality gate passed:**" in note and "GPU cost" in note
    assert "![Training curve]" not in note and "| evaluation | failed |" in note  # failures outlive the cut


def test_gate_warnings_flag_a_zero_threshold_and_few_episodes_without_changing_them():
    assert gate_warnings({"min_success_rate": 0.8, "eval_episodes": 100}) == []
    zero, few = gate_warnings({"min_success_rate": 0.0, "eval_episodes": 10})
    assert "every evaluated policy passes" in zero
    assert "Only 10 evaluation episodes" in few and "[0.24, 0.76]" in few  # Wilson of 5/10
    assert gate_warnings({"min_success_rate": 0.5, "eval_episodes": 20}) == []
    params = {"min_success_rate": 0.0, "eval_episodes": 10}
    gate_warnings(params)
    assert params == {"min_success_rate": 0.0, "eval_episodes": 10}


def test_the_form_help_warns_about_a_zero_gate_and_few_episodes():
    from sim2real.orchestration.stages import evaluate

    assert "0 lets every policy pass" in gate.params()["min_success_rate"].description
    assert "below 20" in evaluate.params()["eval_episodes"].description


def stubbed_mwaa(expected_params, status=200):
    from airflow.providers.amazon.aws.hooks.mwaa import MwaaHook

    client = boto3.client("mwaa", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)  # validates the request against botocore's InvokeRestApi input shape
    stubber.add_response("invoke_rest_api", {"RestApiStatusCode": status, "RestApiResponse": {"note": "n"}},
                         expected_params)
    stubber.activate()
    hook = MwaaHook()
    hook.__dict__["conn"] = client  # cached_property: the stubbed client
    return hook, stubber


def test_on_mwaa_the_note_is_patched_through_invoke_rest_api(monkeypatch):
    monkeypatch.setenv("AIRFLOW_ENV_NAME", "sim2real-prod")
    expected = {"Name": "sim2real-prod", "Path": "/dags/sim_to_real/dagRuns/manual__2026-11-29T23%3A59%3A50%2B00%3A00",
                "Method": "PATCH", "Body": {"note": "**hello**"}, "QueryParameters": {"update_mask": "note"}}
    hook, stubber = stubbed_mwaa(expected)
    out = run_note.set_run_note(dag_id="sim_to_real", run_id="manual__2026-11-29T23:59:50+00:00",
                                note="**hello**", env={}, mwaa_hook=hook)
    stubber.assert_no_pending_responses()
    assert out == {"set": True, "via": "mwaa:sim2real-prod", "error": None}


def test_an_airflow_api_error_is_reported_not_raised(monkeypatch):
    monkeypatch.delenv("AIRFLOW_ENV_NAME", raising=False)
    hook, _ = stubbed_mwaa(None, status=403)
    out = run_note.set_run_note(dag_id="d", run_id="r", note="n", env={"airflow": {"mwaa_environment_name": "e"}},
                                mwaa_hook=hook)
    assert out["set"] is False and out["via"] == "mwaa:e" and "answered 403" in out["error"]


def test_outside_mwaa_without_the_api_connection_the_note_is_not_set_and_says_why(monkeypatch):
    monkeypatch.delenv("AIRFLOW_ENV_NAME", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_SIM2REAL_AIRFLOW_API", raising=False)
    out = run_note.set_run_note(dag_id="d", run_id="r", note="n", env={})
    assert out["set"] is False and out["via"] == "connection:sim2real_airflow_api"
    assert "sim2real_airflow_api" in out["error"]


def test_report_in_the_sandbox_links_and_embeds_the_pictures_on_its_s3(s3, events_dir, monkeypatch):  # noqa: F811
    from sim2real.orchestration import report
    from sim2real.orchestration.links.s3 import S3TrainingCurveLink

    monkeypatch.delenv("AIRFLOW_ENV_NAME", raising=False)
    monkeypatch.setattr(report, "_environment", lambda: {"sandbox": True})
    written = []
    monkeypatch.setattr(run_note, "set_note_through_connection", lambda **kw: written.append(kw))
    figs.upload_events(s3, events_dir)
    ti = RunningTask({ids.BATCH_TRAIN_POLICY: {"job_id": "j-1"}, ids.WAIT_FOR_CHECKPOINT: figs.manifest(),
                      ids.READ_EVAL_REPORT: figs.evaluation(),
                      "quality_gate": {"passed": True, "metric": "success_rate", "value": 0.3, "threshold": 0.15,
                                       "reason": "ok"}})
    out = report.write_run_report(rounds_entry=lineage_entry, plan=figs.plan(), params={"min_success_rate": 0.15, "eval_episodes": 10},
                                  dag_run=figs.DagRun(), ti=ti)
    endpoint = s3.meta.endpoint_url
    curve = S3TrainingCurveLink().format_link(**ti.pushed[S3TrainingCurveLink.key])
    # a presigned GET of the PNG on the sandbox's S3 (the bucket is private): it opens the object
    assert curve.startswith((f"{endpoint}/{BUCKET}/{PREFIX}report/training_curve.png?",
                             f"https://{BUCKET}.s3.amazonaws.com/{PREFIX}report/training_curve.png?")), curve
    assert "Signature" in curve
    import requests  # mock_aws answers requests' calls too

    got = requests.get(curve, timeout=10)
    assert got.status_code == 200 and got.content[:8] == b"\x89PNG\r\n\x1a\n"
    note = out["run_note"]
    assert note["set"] and note["via"] == "connection:sim2real_airflow_api" and written[0]["note"] == note["markdown"]
    # presigned URLs are long: what does not fit Airflow's 1000 characters is left out, and the note says so
    assert "report/training_curve.png?" in note["markdown"] or run_note.SHORTENED in note["markdown"]
    assert note["warnings"] and "Only 10 evaluation episodes" in note["markdown"]
    assert len(note["markdown"]) <= run_note.NOTE_MAX_CHARS


def test_report_on_aws_links_the_console(s3, monkeypatch):  # noqa: F811
    from sim2real.orchestration import report

    monkeypatch.delenv("AIRFLOW_ENV_NAME", raising=False)
    monkeypatch.setattr(report, "_environment", lambda: {"sandbox": False})
    out = report.write_run_report(rounds_entry=lineage_entry, plan=figs.plan(), params={}, dag_run=figs.DagRun(), ti=RunningTask({}))
    md = out["run_note"]["markdown"]
    assert "[S3 run folder](https://console.aws.amazon.com/s3/buckets/sim2real-test?region=us-east-1" in md
    assert "![" not in md and out["run_note"]["set"] is False


def test_console_object_url_is_what_the_extra_link_renders():
    from sim2real.orchestration.links.s3 import S3TrainingCurveLink, console_object_url

    key = f"{PREFIX}report/training_curve.png"
    assert console_object_url("us-east-1", BUCKET, key) == S3TrainingCurveLink().format_link(
        region_name="us-east-1", aws_domain="aws.amazon.com", bucket=BUCKET, key=key)


class KeyedTask(RunningTask):
    """A running task whose upstream XComs have keys too: ``{(task_id, key): value}`` beside ``{task_id: value}``."""

    def xcom_pull(self, task_ids, key=None, **kw):
        return self.outputs.get((task_ids, key) if key else task_ids)


def test_a_failed_gate_shows_its_verdict_in_the_note_and_lineage_not_not_reached(s3, monkeypatch):  # noqa: F811
    """The gate task fails without a return value; its verdict XCom carries the value and reason."""
    from sim2real.orchestration import report
    from sim2real.orchestration.stages.gate import VERDICT_KEY, decide

    class Ti:
        pushed: dict = {}

        def xcom_push(self, key, value):
            self.pushed[key] = value

    gate_ti = Ti()
    plan = {**figs.plan(), "quality_gate": {"min_success_rate": 0.8, "on_lower_bound": True}}
    evaluation = {**figs.evaluation(), "success_rate": 0.3, "ci95": [0.108, 0.603], "successes": 3, "episodes": 10}
    with pytest.raises(RuntimeError, match="QUALITY GATE FAILED: ci95_lower 0.108 < threshold 0.800"):
        decide(evaluation, plan, gate_ti, fail=RuntimeError)
    monkeypatch.delenv("AIRFLOW_ENV_NAME", raising=False)
    monkeypatch.setattr(report, "_environment", lambda: {"sandbox": False})
    monkeypatch.setattr(run_note, "set_note_through_connection", lambda **kw: None)
    ti = KeyedTask({ids.READ_EVAL_REPORT: evaluation, (ids.QUALITY_GATE, VERDICT_KEY): gate_ti.pushed[VERDICT_KEY]})
    out = report.write_run_report(rounds_entry=lineage_entry, plan=plan, params={"min_success_rate": 0.8, "eval_episodes": 10},
                                  dag_run=figs.DagRun(), ti=ti)
    md = out["run_note"]["markdown"]
    assert "**Quality gate FAILED:** ci95_lower 0.108 < 0.800" in md and "not reached" not in md


def test_a_sweep_that_picked_a_winner_is_a_successful_stage_with_its_failed_candidates_counted():
    tasks = {ids.PREPARE_RUN: {"state": "success", "duration_s": 1.0},
             "sweep.train_policy[0]": {"state": "success", "duration_s": 30.0},
             "sweep.train_policy[1]": {"state": "failed", "duration_s": 5.0},
             "sweep.train_policy[2]": {"state": "success", "duration_s": 31.0},
             "sweep.pick_best": {"state": "success", "duration_s": 1.0}}
    doc = lineage(tasks=tasks, sweep={"winner": 2, "min_candidates": 2, "rule": "best"},
                  candidates=[{"candidate": "c0"}, {"candidate": "c1", "reason": "sweep.train_policy is failed"},
                              {"candidate": "c2"}])
    note = run_note.render_run_note(doc)
    assert "| training (sweep) | success (1 of 3 candidates failed) | 67.0 |" in note, note
    # a sweep that did not reach its pick stays failed
    assert "| training (sweep) | failed |" in run_note.render_run_note(lineage(tasks=tasks, sweep=None))


def test_a_later_rounds_note_names_its_parent_run():
    rounds = {"round": 2, "max_rounds": 3, "parent_run_id": "manual__r1", "outcome": "passed",
              "rounds": [{"success_rate": 0.3, "ci95": [0.1, 0.6]}, {"success_rate": 0.9, "ci95": [0.7, 0.97]}]}
    note = run_note.render_run_note(lineage(rounds=rounds))
    assert "**Round 2 of 3** (parent run `manual__r1`; success rate per round" in note, note


def test_a_successful_run_whose_warnings_fill_the_note_still_shows_its_stages_in_one_row():
    """make ui's quick settings (gate 0, 5 episodes): two long warnings, every stage succeeded or skipped; the note
    used to drop the whole stage table."""
    tasks = {task: {"state": "success", "duration_s": 10.0}
             for task in (ids.PREPARE_RUN, ids.BUILD_IMAGE, ids.BATCH_TRAIN_POLICY, ids.EVAL_COMMAND,
                          ids.RUN_EVALUATION, ids.READ_EVAL_REPORT, ids.DEPLOY_TO_ROBOTS)}
    tasks[ids.HYPERPOD_CHECK_CAPACITY] = {"state": "skipped", "duration_s": 0.2}
    long_links = {f"link {i}": "https://console.aws.amazon.com/s3/object/b?prefix=" + "x" * 150 for i in range(5)}
    note = run_note.render_run_note(lineage(tasks=tasks),
                                    warnings=gate_warnings({"min_success_rate": 0, "eval_episodes": 5}) * 2,
                                    links=long_links)
    assert len(note) <= run_note.NOTE_MAX_CHARS and note.endswith(run_note.SHORTENED + "\n")
    assert "| stage | state | time (s) |" in note, note
    row = next(line for line in note.splitlines() if "other stage" in line)
    assert row.startswith("| ") and "(1 skipped) | success |" in row, row


def test_the_one_row_of_only_skipped_stages_is_not_called_a_success():
    tasks = {ids.RUN_EVALUATION: {"state": "failed", "duration_s": 12.0},
             ids.HYPERPOD_CHECK_CAPACITY: {"state": "skipped", "duration_s": 0.2},
             ids.DEPLOY_TO_ROBOTS: {"state": "skipped", "duration_s": 0.1}}
    warnings = gate_warnings({"min_success_rate": 0, "eval_episodes": 5})
    full = run_note.render_run_note(lineage(tasks=tasks), warnings=warnings, limit=10_000)
    # links that cannot fit, and a limit the whole table with the "shortened" line just misses
    note = run_note.render_run_note(lineage(tasks=tasks), warnings=warnings, limit=len(full) + 30,
                                    links={"link": "https://console.aws.amazon.com/" + "x" * 300})
    assert "| evaluation | failed | 12.0 |" in note and "| 2 other stages | skipped | — |" in note, note


def test_the_field_dataset_the_fine_tune_included_is_one_line():
    entry = {"dataset_version": "fd-0123456789abcdef", "episodes": 2, "frames": 9,
             "manifest_uri": "s3://b/field/datasets/fd-0123456789abcdef/manifest.json"}
    base = lineage()
    note = run_note.render_run_note(lineage(stages={**base["stages"], "field_dataset": entry}), links={})
    assert [line for line in note.splitlines() if "field/datasets" in line] == [
        "**Field data in the fine-tune:** fd-0123456789abcdef (2 episodes, 9 frames; "
        "s3://b/field/datasets/fd-0123456789abcdef/manifest.json)."]
    assert "Field data in the fine-tune" not in run_note.render_run_note(base, links={})
