"""MLflow tracking without a server: off by default, the contract, SigV4 for SageMaker MLflow, the pipeline's
MlflowConfig against botocore's shape, the plan's environments."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sim2real.contract import env_vars
from sim2real.contract import tracking as contract

ARN = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/sim2real"
TRACKING = {"enabled": True, "tracking_uri": ARN, "experiment_name": "sim2real", "experiment_id": "7",
            "parent_run_id": "a" * 32, "runs": {"rl_training": "b" * 32, "evaluation": "c" * 32,
                                                "vla_finetune": "d" * 32}, "ui_url": None}


def test_tracking_uri_check():
    assert contract.check_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert contract.check_tracking_uri(ARN) == ARN
    assert contract.parse_sagemaker_arn(ARN)["name"] == "sim2real"
    for bad in ("file:///tmp/mlruns", "databricks", "arn:aws:s3:::bucket"):
        with pytest.raises(ValueError, match="neither http"):
            contract.check_tracking_uri(bad)


def test_off_by_default_nothing_imported_nothing_changed():
    code = ("import os, sys; os.environ.pop('MLFLOW_TRACKING_URI', None); "
            "from sim2real.workloads.tracking import run_logger_from_env; "
            "l = run_logger_from_env(stage='rl_training', run_name='x'); "
            "l.log_metrics({'a': 1.0}, step=1); l.finish(); "
            "print(l.enabled, 'mlflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "False"], proc.stderr


def _plan(**overrides):
    from sim2real.orchestration.stages.run import plan_run

    from tests.orchestration.test_config import GOOD
    from tests.orchestration.stages.test_stages import PARAMS

    return plan_run(dag_id="sim_to_real", run_id="manual__2026-11-29T00:00:00+00:00",
                    params={**PARAMS, **overrides}, env=GOOD)


def test_start_tracking_without_config_leaves_the_plan_as_it_was():
    from sim2real.orchestration.stages import eval_commands
    from sim2real.orchestration.stages.run import TrackingPlan
    from sim2real.orchestration.tracking import start_tracking
    from sim2real.orchestration.stages.run import apply_tracking

    plan = _plan()
    assert TrackingPlan.from_plan(plan) == TrackingPlan.off("not started (prepare_run starts it)")
    before = json.loads(json.dumps(plan))
    tracking = start_tracking(plan=plan, env={}, dag_id="d", run_id="r")
    assert tracking == {"enabled": False, "reason": "the environment config has no mlflow.tracking_uri"}
    apply_tracking(plan, tracking, {})
    assert plan["tracking"] == TrackingPlan.off("the environment config has no mlflow.tracking_uri").to_json()
    assert {k: v for k, v in plan.items() if k != "tracking"} == {k: v for k, v in before.items() if k != "tracking"}
    manifest = {"checkpoint_uri": "s3://b/c.pt"}
    assert eval_commands(plan, manifest) == eval_commands(before, manifest)
    assert "export " not in eval_commands(plan, manifest)[0]


def test_apply_tracking_puts_each_child_run_in_its_stage():
    from sim2real.orchestration.stages import eval_commands
    from sim2real.orchestration.stages.evaluate import EvaluationPlan
    from sim2real.orchestration.stages.run import TrackingPlan
    from sim2real.orchestration.stages.vla import VlaPlan
    from sim2real.orchestration.stages.run import apply_tracking

    from tests.orchestration.test_config import GOOD

    plan = json.loads(json.dumps(_plan()))  # as an XCom pull hands it on
    apply_tracking(plan, TRACKING, GOOD)
    assert TrackingPlan.from_plan(plan).runs == TRACKING["runs"]
    assert plan["batch"]["environment"][env_vars.MLFLOW_RUN_ID] == "b" * 32
    assert plan["batch"]["environment"][env_vars.MLFLOW_TRACKING_URI] == ARN
    assert plan["batch"]["environment"][env_vars.MLFLOW_PARENT_RUN_ID] == "a" * 32
    assert plan["hyperpod"]["environment"][env_vars.MLFLOW_RUN_ID] == "b" * 32
    assert plan["hyperpod_eks"]["environment"][env_vars.MLFLOW_RUN_ID] == "b" * 32  # the PyTorchJob's env
    assert plan["hyperpod_eks"]["environment"][env_vars.MLFLOW_TRACKING_URI] == ARN
    assert EvaluationPlan.from_plan(plan).environment[env_vars.MLFLOW_RUN_ID] == "c" * 32
    vla = VlaPlan.from_plan(plan)
    assert vla.parameters["MlflowRunId"] == "d" * 32
    assert vla.mlflow == {"tracking_uri": ARN, "experiment_name": "sim2real"}
    commands = eval_commands(plan, {"checkpoint_uri": "s3://b/c.pt"})
    assert f"export MLFLOW_RUN_ID={'c' * 32}" in commands[0] and "sim2real-evaluate" in commands[0]
    assert commands[0].index("export MLFLOW_RUN_ID") < commands[0].index("sim2real-evaluate")


def test_apply_tracking_refuses_a_record_that_is_not_a_tracking_plan():
    from sim2real.orchestration.stages.run import apply_tracking

    from tests.orchestration.test_config import GOOD

    with pytest.raises(TypeError, match="run_ids"):
        apply_tracking(_plan(), {**TRACKING, "run_ids": {}}, GOOD)


def test_server_version_must_match_the_client():
    from sim2real.orchestration.tracking import MlflowTrackingError, check_server_version

    check_server_version("3.17", "3.17.2")
    with pytest.raises(MlflowTrackingError, match="MLflow 2.16.*client 3.17.2"):
        check_server_version("2.16", "3.17.2")


def test_sagemaker_arn_requests_are_sigv4_signed_for_sagemaker_mlflow():
    from botocore.credentials import Credentials

    from sim2real.orchestration.hooks.mlflow import MlflowHook

    hook = MlflowHook(ARN)
    hook._credentials = Credentials("AKIDEXAMPLE", "secret").get_frozen_credentials()
    assert hook.base_url == "https://us-east-1.experiments.sagemaker.aws"
    url = hook.base_url + "/api/2.0/mlflow/runs/create"
    headers = hook._headers_and_auth("POST", url, b"{}")
    assert headers["x-mlflow-sm-tracking-server-arn"] == ARN
    assert "/us-east-1/sagemaker-mlflow/aws4_request" in headers["Authorization"]


def test_pipeline_mlflow_config_matches_botocore_shape_and_off_is_the_template():
    from botocore.session import get_session
    from botocore.validate import ParamValidator

    from sim2real.orchestration.pipelines.groot import pipeline_definition

    kwargs = {"role_arn": "arn:aws:iam::123456789012:role/p", "model_package_group": "g", "bucket": "b",
              "images": {k: f"123456789012.dkr.ecr.us-east-1.amazonaws.com/r:{k}"
                         for k in ("processing", "training", "smoke_eval")}}
    plain = pipeline_definition(**kwargs)
    assert plain["MlflowConfig"] is None  # the SDK template's, untouched without tracking
    tracked = pipeline_definition(**kwargs, mlflow={"tracking_uri": ARN, "experiment_name": "sim2real"})
    shape = get_session().get_service_model("sagemaker").shape_for("MlflowConfig")
    report = ParamValidator().validate(tracked["MlflowConfig"], shape)
    assert not report.has_errors(), report.generate_report()
    assert {"Name": "MlflowRunId", "Type": "String", "DefaultValue": ""} in tracked["Parameters"]
    step = next(s for s in tracked["Steps"] if s["Name"] == "GR00TFinetune")
    assert step["Arguments"]["Environment"]["MLFLOW_RUN_ID"] == {"Get": "Parameters.MlflowRunId"}
    # a local (http) server: no MlflowConfig (the service takes an ARN only), the run id still passed on
    local = pipeline_definition(**kwargs, mlflow={"tracking_uri": "http://127.0.0.1:5000", "experiment_name": "s"})
    assert local["MlflowConfig"] is None and "MlflowRunId" in json.dumps(local["Parameters"])


def test_lineage_records_tracking_off_with_the_reason():
    from sim2real.orchestration.lineage import build_lineage, validate_lineage

    lineage = build_lineage(run_key="k", dag_id="d", run_id="r", params={},
                            plan={"run_key": "k", "bucket": "b", "run_uri": "s3://b/runs/k/",
                                  "tracking": {"enabled": False, "reason": "no tracking URI"}})
    validate_lineage(lineage)
    assert lineage["mlflow"] == {"enabled": False, "reason": "no tracking URI"}
    tracked = build_lineage(run_key="k", dag_id="d", run_id="r", params={},
                            plan={"run_key": "k", "bucket": "b", "run_uri": "s3://b/runs/k/",
                                  "tracking": {**TRACKING, "ui_url": "https://t-1.us-east-1.experiments.sagemaker.aws"}})
    validate_lineage(tracked)
    assert tracked["mlflow"]["parent_run_url"].endswith(f"/#/experiments/7/runs/{'a' * 32}")


def test_demo_without_the_server_venv_stops_before_starting_and_says_what_to_do(tmp_path, monkeypatch, capsys):
    from sim2real.dev import demo

    monkeypatch.setenv("SIM2REAL_MLFLOW_SERVER_BIN", str(tmp_path / "no-such" / "mlflow"))
    assert demo.main(["--home", str(tmp_path / "airflow")]) == 2
    err = capsys.readouterr().err
    assert "make mlflow-venv" in err and "--no-mlflow" in err
    assert not (tmp_path / "airflow").exists()  # nothing was started


def test_a_server_that_never_answers_cannot_hold_the_first_task():
    """A tracking server that accepts connections and never answers: start_tracking gives up at its overall
    deadline (not after every call's timeout and retries) and the run goes on untracked, saying why."""
    import socket
    import time

    from sim2real.orchestration.hooks.mlflow import MlflowHook
    from sim2real.orchestration.tracking import start_tracking

    black_hole = socket.socket()
    black_hole.bind(("127.0.0.1", 0))
    black_hole.listen(16)  # connections complete in the backlog; nothing ever reads or answers
    try:
        url = f"http://127.0.0.1:{black_hole.getsockname()[1]}"
        hook = MlflowHook(url, timeout=30, retries=3)  # one call alone could take 3 x 30 s + pauses
        started = time.monotonic()
        tracking = start_tracking(plan=_plan(), env={"mlflow": {"tracking_uri": url}}, dag_id="d", run_id="r",
                                  hook=hook, deadline_s=1.5)
        elapsed = time.monotonic() - started
    finally:
        black_hole.close()
    assert tracking["enabled"] is False and "deadline passed" in tracking["reason"], tracking
    assert elapsed < 10, f"start_tracking took {elapsed:.1f} s with a 1.5 s deadline"


def test_the_hook_deadline_stops_retries_and_cuts_the_request_timeout(monkeypatch):
    import time

    import requests

    from sim2real.orchestration.hooks.mlflow import MlflowApiError, MlflowHook

    timeouts = []

    def refuse(self, method, url, **kwargs):
        timeouts.append(kwargs["timeout"])
        raise requests.ConnectionError("refused")

    monkeypatch.setattr(requests.Session, "request", refuse)
    hook = MlflowHook("http://127.0.0.1:9", timeout=30, retries=5, deadline=time.monotonic() + 1.5)
    with pytest.raises(MlflowApiError, match="deadline passed.*refused"):
        hook.call("GET", "/experiments/get-by-name", query={"experiment_name": "x"})
    assert 1 <= len(timeouts) < 5 and all(t <= 1.5 for t in timeouts)
    no_deadline = MlflowHook("http://127.0.0.1:9", timeout=30, retries=1)
    with pytest.raises(MlflowApiError, match="failed after 1 attempt"):
        no_deadline.call("GET", "/experiments/get-by-name")
    assert timeouts[-1] == 30


class RecordingMlflowHook:
    """The MLflow hook's ``get_run`` / ``update_run`` (every run RUNNING until updated), recording the updates."""

    def __init__(self):
        self.status: dict[str, str] = {}

    def get_run(self, run_id):
        return {"info": {"run_id": run_id, "status": self.status.get(run_id, "RUNNING")}}

    def update_run(self, run_id, status):
        self.status[run_id] = status


def test_each_sweep_candidates_runs_close_from_its_own_map_index():
    """c0's training failed, c1's succeeded and c1's evaluation never ran: each candidate's MLflow runs take
    their own map index's state, never another candidate's."""
    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.tracking import close_tracking

    tracking = {**TRACKING, "candidate_runs": {"c0": {"rl_training": "e" * 32, "evaluation": "f" * 32},
                                               "c1": {"rl_training": "1" * 32, "evaluation": "2" * 32}}}
    hook = RecordingMlflowHook()
    closed = close_tracking(tracking, succeeded=False, hook=hook, task_states={
        f"{ids.SWEEP_TRAIN_POLICY}[0]": {"state": "failed"},
        f"{ids.SWEEP_RUN_EVALUATION}[0]": {"state": "upstream_failed"},
        f"{ids.SWEEP_TRAIN_POLICY}[1]": {"state": "success"},
        ids.SWEEP_PICK_BEST: {"state": "upstream_failed"}})
    assert closed["c0.rl_training"] == "FAILED" and hook.status["e" * 32] == "FAILED"
    assert closed["c0.evaluation"] == "KILLED"
    assert closed["c1.rl_training"] == "FINISHED" and hook.status["1" * 32] == "FINISHED"
    assert closed["c1.evaluation"] == "KILLED"  # it never ran
    assert closed["rl_training"] == "KILLED" and closed["parent"] == "FAILED"


def test_a_successful_hyperpod_eks_training_closes_its_run_finished():
    from sim2real.contract import task_ids as ids
    from sim2real.orchestration.tracking import close_tracking

    hook = RecordingMlflowHook()
    closed = close_tracking(TRACKING, succeeded=True, hook=hook, task_states={
        ids.BATCH_TRAIN_POLICY: {"state": "skipped"}, ids.HYPERPOD_TRAIN_POLICY: {"state": "skipped"},
        ids.HYPERPOD_EKS_TRAIN_POLICY: {"state": "success"}})
    assert closed["rl_training"] == "FINISHED" and hook.status["b" * 32] == "FINISHED"


def test_candidate_index_is_the_inverse_of_candidate_id():
    from sim2real.orchestration.candidates import candidate_id, candidate_index

    assert [candidate_index(candidate_id(i)) for i in (0, 7, 31)] == [0, 7, 31]
    for bad in ("7", "c", "c-1", "cx", "c²"):
        with pytest.raises(ValueError, match="not a candidate id"):
            candidate_index(bad)


@pytest.fixture()
def black_hole_url():
    """A tracking server that accepts connections and never answers (real sockets)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_closing_the_runs_against_a_hanging_server_is_bounded(black_hole_url, monkeypatch):
    """The run's last task closes the MLflow runs: with a server that never answers, each conversation (the sweep
    record, the headline metrics, closing the runs) ends at its deadline. Before: the hook's default 30 s x 3
    attempts per call (over 90 s for the first call alone) against the task's 2-minute timeout."""
    import time

    from sim2real.orchestration import report, tracking as tr  # noqa: F401 - imported before the clock starts
    from sim2real.orchestration.hooks import mlflow  # noqa: F401

    monkeypatch.setattr(tr, "CLOSE_DEADLINE_S", 1.5, raising=False)
    tracking = {**TRACKING, "tracking_uri": black_hole_url, "ui_url": black_hole_url}
    picked = {"rule": "r", "candidate": "c0", "candidates": [{"candidate": "c0", "success_rate": 0.5,
                                                             "ci95": [0.3, 0.7], "params": {}}]}
    lineage = {"chain": {"success_rate": 0.5, "success_rate_ci95": [0.3, 0.7]}, "mlflow": {}}
    for call in (lambda: tr.close_tracking(tracking, succeeded=True),
                 lambda: tr.record_sweep(tracking, picked),
                 lambda: tr.record_headline(tracking, lineage)):
        started = time.monotonic()
        assert call() == {}  # nothing closed or recorded, logged, never raised
        assert time.monotonic() - started < 6, "an MLflow call outlived its conversation's deadline"


def test_run_names_are_short_and_distinct():
    from sim2real.orchestration.tracking import run_names, short_name

    plan = {"run_key": "sim-to-real-manual-2026-11-29t00-00-00-00-00-91216f4c",
            "sweep": {"candidates": [{"candidate": "c0"}, {"candidate": "c1"}]}}
    names = run_names(plan)
    assert names["parent"] == "91216f4c" and names["rl_training"] == "91216f4c train"
    assert names["evaluation"] == "91216f4c eval" and names["c1.rl_training"] == "91216f4c c1 train"
    assert len(set(names.values())) == len(names)
    assert short_name({**plan, "rounds": {"round": 2, "max_rounds": 3}}) == "91216f4c round 2"
    assert short_name({**plan, "rounds": {"round": 1, "max_rounds": 3}}) == "91216f4c"


def test_headline_metrics_are_the_runs_numbers():
    from sim2real.orchestration.tracking import headline_metrics

    lineage = {"chain": {"success_rate": 0.85, "success_rate_ci95": [0.7, 0.93]},
               "stages": {"quality_gate": {"passed": True, "threshold": 0.6},
                          "evaluation": {"successes": 17, "episodes": 20}},
               "cost_actual": {"total_usd": 1.25}, "cost_estimate": {"total_usd": None},
               "rounds": {"round": 2, "max_rounds": 3}, "sweep": {"winner": 1}, "candidates": [{}, {}, {}]}
    assert headline_metrics(lineage) == {
        "success_rate": 0.85, "ci95_lower": 0.7, "ci95_upper": 0.93, "successes": 17.0, "episodes": 20.0,
        "gate_threshold": 0.6, "gate_passed": 1.0, "cost_usd": 1.25, "round": 2.0, "max_rounds": 3.0,
        "sweep_candidates": 3.0}
    assert headline_metrics({"chain": {}}) == {}  # not evaluated: nothing invented


def test_lineage_and_run_note_say_what_a_workload_could_not_track():
    """The trainer's manifest says 3 metric batches never reached MLflow: the lineage's mlflow entry (schema-valid)
    and the run note say so; a run where everything was recorded says nothing."""
    from sim2real.orchestration.lineage import build_lineage, validate_lineage
    from sim2real.orchestration.run_note import render_run_note

    summary = {"mlflow_run_id": "b" * 32, "recorded": False, "not_recorded": {"metric_batches": 3, "metrics": 15,
                                                                             "status": 1},
               "first_unreachable_at": "2026-12-03T10:00:00Z", "unreachable_since": "2026-12-03T10:00:00Z",
               "last_error": "MlflowException: ...", "caller_s": 0.01, "close_wait_s": 5.0}
    plan = {"run_key": "k", "bucket": "b", "run_uri": "s3://b/runs/k/", "tracking": TRACKING}
    lineage = build_lineage(run_key="k", dag_id="d", run_id="r", params={}, plan=plan,
                            checkpoint={"checkpoint_uri": "s3://b/runs/k/checkpoints/agent_000003.pt",
                                        "sha256": "0" * 64, "tracking": summary},
                            evaluation={"success_rate": 0.5, "successes": 1, "episodes": 2, "ci95": [0.1, 0.9],
                                        "checkpoint_sha256": "0" * 64,
                                        "tracking": {**summary, "recorded": True, "not_recorded": {}}})
    validate_lineage(lineage)
    gaps = lineage["mlflow"]["not_recorded"]
    assert list(gaps) == ["rl_training"]
    assert gaps["rl_training"]["text"] == ("3 metric batches (15 values), the run's final status not recorded "
                                           "(server unreachable since 2026-12-03T10:00:00Z)")
    assert "Tracking (rl_training): 3 metric batches (15 values)" in render_run_note(lineage)
    clean = build_lineage(run_key="k", dag_id="d", run_id="r", params={}, plan=plan)
    assert clean["mlflow"]["not_recorded"] is None and "Tracking (" not in render_run_note(clean)


def test_the_last_task_reads_the_runs_lineage_for_the_headline_metrics(monkeypatch):
    """run_outcome's MLflow close reads runs/<run_key>/lineage.json (written by write_lineage just before) for the
    parent run's headline metrics; a run without a lineage logs none, and the close goes on."""
    import boto3
    from moto import mock_aws

    from sim2real.orchestration import tracking as tr

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    plan = {"bucket": "sim2real-artifacts", "run_prefix": "runs/k/", "tracking": TRACKING}
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="sim2real-artifacts")
        assert tr._read_lineage(plan) is None
        lineage = {"chain": {"success_rate": 0.9, "success_rate_ci95": [0.8, 0.95]}}
        s3.put_object(Bucket="sim2real-artifacts", Key="runs/k/lineage.json", Body=json.dumps(lineage).encode())
        assert tr._read_lineage(plan) == lineage
        seen = {}
        monkeypatch.setattr(tr, "record_headline",
                            lambda tracking, lin, hook: seen.update(lineage=lin, deadline=hook.deadline) or {})
        monkeypatch.setattr(tr, "close_tracking", lambda tracking, **kw: seen.update(close=kw["hook"].deadline)
                            or {"parent": "FINISHED"})
        monkeypatch.setattr("sim2real.orchestration.report.collect_task_states", lambda dag_id, run_id: {})

        class TI:
            def xcom_pull(self, task_ids):
                return {"plan": plan}

        assert tr.close_dag_run(TI(), "sim_to_real", "r", succeeded=True) == {"parent": "FINISHED"}
        assert seen["lineage"] == lineage
        assert seen["deadline"] == seen["close"]  # one deadline for the whole close (CLOSE_DEADLINE_S)


class LoggingMlflowHook:
    """The MLflow hook's ``log_batch``, recording each call."""

    def __init__(self):
        self.batches: list[tuple[str, dict, dict]] = []

    def log_batch(self, run_id, *, params=None, tags=None, metrics=None):
        self.batches.append((run_id, dict(params or {}), dict(tags or {})))


def test_the_field_dataset_is_logged_on_the_fine_tunes_run():
    from sim2real.orchestration.tracking import FIELD_DATASET_TAG, record_field_dataset

    entry = {"dataset_version": "fd-0123456789abcdef", "episodes": 2, "frames": 9, "source": "latest",
             "manifest_uri": "s3://b/field/datasets/fd-0123456789abcdef/manifest.json"}
    hook = LoggingMlflowHook()
    assert record_field_dataset(TRACKING, entry, hook=hook)["run_id"] == "d" * 32
    assert hook.batches == [("d" * 32, {"field_dataset_version": "fd-0123456789abcdef",
                                        "field_dataset_manifest_uri": entry["manifest_uri"],
                                        "field_dataset_episodes": 2, "field_dataset_frames": 9},
                             {FIELD_DATASET_TAG: "fd-0123456789abcdef"})]
    record_field_dataset(TRACKING, None, hook=hook)
    assert hook.batches[-1] == ("d" * 32, {}, {FIELD_DATASET_TAG: "none"})
    assert record_field_dataset({"enabled": False}, entry, hook=hook) == {} and len(hook.batches) == 2
