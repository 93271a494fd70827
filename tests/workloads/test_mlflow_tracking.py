"""Experiment tracking against a real local ``mlflow server`` (SQLite, artefacts in moto S3), at toy scale.

One server (and one moto) for the module: the DAG side creates the parent and child runs over REST
(:mod:`sim2real.orchestration.tracking`), the real trainer and evaluator log into their child runs, and
everything is read back with ``mlflow.MlflowClient`` and boto3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from sim2real.contract import tracking as contract

from .conftest import REPO_ROOT, clean_env, free_port, run_train

pytestmark = [
    pytest.mark.integration,  # a local MLflow tracking server and the sandbox's S3
    pytest.mark.skipif(not (REPO_ROOT / ".venv" / "mlflow" / "bin" / "mlflow").is_file()
                       and not os.environ.get("SIM2REAL_MLFLOW_SERVER_BIN"),
                       reason="no MLflow server venv: run `make mlflow-venv`"),
]

BUCKET = "sim2real-test"
RUN_KEY = "sim-to-real-mlflow-toy"


@pytest.fixture(scope="module")
def mlflow_stack(tmp_path_factory):
    """moto (S3) + ``mlflow server``; yields ``{"s3": endpoint, "url": tracking URI}``."""
    import boto3
    from moto.server import ThreadedMotoServer

    from sim2real.dev.sandbox.mlflow_server import MlflowServer

    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    s3 = f"http://127.0.0.1:{port}"
    aws = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    boto3.client("s3", endpoint_url=s3, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=BUCKET)
    server = MlflowServer(repo_root=REPO_ROOT, work_dir=tmp_path_factory.mktemp("mlflow"),
                          artifacts_destination=f"s3://{BUCKET}/mlflow", s3_endpoint_url=s3, aws_env=aws).start()
    try:
        yield {"s3": s3, "url": server.url, "aws": aws}
    finally:
        server.stop()
        moto.stop()


def _plan(vla: bool = False) -> dict:
    return {"run_key": RUN_KEY, "params": {"task": "Reacher-v5", "max_iterations": 3, "seed": 0},
            "vla": {"enabled": vla, "parameters": {"RunKey": RUN_KEY}},
            "batch": {"environment": {"TASK": "Reacher-v5"}}, "evaluation": {}}


@pytest.fixture(scope="module")
def tracked_run(mlflow_stack, tmp_path_factory):
    """Parent + children created by the DAG side, then the toy trainer (3 iterations) and the evaluator run."""
    from sim2real.orchestration.tracking import start_tracking, stage_env

    tracking = start_tracking(plan=_plan(vla=True), env={"mlflow": {"tracking_uri": mlflow_stack["url"]}},
                              dag_id="sim_to_real", run_id="manual__toy")
    assert tracking["enabled"], tracking
    out = tmp_path_factory.mktemp("ckpt")
    env = clean_env(TASK="Reacher-v5", MAX_ITERATIONS="3", NUM_ENVS="2", OUTPUT_URI=str(out), RUN_KEY=RUN_KEY,
                    CHECKPOINT_INTERVAL="1", SIM2REAL_MLFLOW_FLUSH_EVERY="2",
                    **stage_env(tracking, "rl_training"))
    train = run_train(env)
    assert train.returncode == 0, train.stderr[-3000:]
    report = out / "report.json"
    ev = subprocess.run([sys.executable, "-m", "sim2real.workloads.evaluate", "--manifest-uri",
                         str(out / "manifest.json"), "--episodes", "3", "--seed", "0", "--report-uri", str(report)],
                        env=clean_env(RUN_KEY=RUN_KEY, **stage_env(tracking, "evaluation")), capture_output=True,
                        text=True, timeout=120)
    assert ev.returncode == 0, ev.stderr[-3000:]
    return {"tracking": tracking, "out": out, "train": train, "eval": ev, "report": json.loads(report.read_text())}


def _client(url: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=url)


def test_trainer_logs_params_batched_metrics_and_artefacts(mlflow_stack, tracked_run):
    client = _client(mlflow_stack["url"])
    run = client.get_run(tracked_run["tracking"]["runs"]["rl_training"])
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["task"] == "Reacher-v5" and params["max_iterations"] == "3" and params["num_envs"] == "2"
    assert params["ppo.rollouts"] == "64" and params["version.torch"]
    history = client.get_metric_history(run.info.run_id, "mean_reward")
    assert [m.step for m in history] == [1, 2, 3]
    timesteps = client.get_metric_history(run.info.run_id, "timesteps")
    assert [m.value for m in timesteps] == [128.0, 256.0, 384.0]  # 64 rollouts x 2 envs per iteration
    manifest = json.loads((tracked_run["out"] / "manifest.json").read_text())
    assert run.data.tags["checkpoint_sha256"] == manifest["sha256"]
    assert run.data.tags[contract.RUN_KEY_TAG] == RUN_KEY
    names = {a.path for a in client.list_artifacts(run.info.run_id)} | \
        {a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")}
    assert {"manifest.json", "checkpoint/agent_000003.pt"} <= names
    # the checkpoint artefact is the checkpoint, byte for byte, stored in the sandbox's S3 under mlflow/
    local = client.download_artifacts(run.info.run_id, "checkpoint/agent_000003.pt",
                                      str(tracked_run["out"] / "dl"))
    import hashlib

    assert hashlib.sha256(Path(local).read_bytes()).hexdigest() == manifest["sha256"]
    import boto3

    keys = [o["Key"] for o in boto3.client("s3", endpoint_url=mlflow_stack["s3"], region_name="us-east-1",
                                           aws_access_key_id="testing", aws_secret_access_key="testing")
            .list_objects_v2(Bucket=BUCKET, Prefix="mlflow/")["Contents"]]
    assert any(k.endswith(f"{run.info.run_id}/artifacts/checkpoint/agent_000003.pt") for k in keys), keys


def test_trainer_sends_metrics_in_batches_not_per_metric(tracked_run):
    # 3 iterations, flush every 2: the metrics go in 2 log_batch requests (iterations 1-2, then 3 at the end);
    # the server's access log is not needed: the trainer's own line says where it logs, and no per-metric call
    # exists in the code path (RunLogger only calls log_batch)
    from sim2real.workloads.tracking import RunLogger

    sent = []

    class Client:
        def log_batch(self, run_id, metrics=(), params=(), tags=()):
            sent.append(len(metrics))

        def set_terminated(self, run_id, status):
            sent.append(status)

    logger = RunLogger(Client(), "r", flush_every=2)
    for step in (1, 2, 3):
        logger.log_metrics({"mean_reward": -1.0 * step, "timesteps": 128 * step, "nan": float("nan")}, step=step)
    logger.finish()
    assert sent == [4, 2, "FINISHED"]
    assert "logging to run" in tracked_run["train"].stdout


def test_evaluator_logs_summary_episodes_report_and_onnx(mlflow_stack, tracked_run):
    client = _client(mlflow_stack["url"])
    run = client.get_run(tracked_run["tracking"]["runs"]["evaluation"])
    report = tracked_run["report"]
    assert run.info.status == "FINISHED"
    assert run.data.metrics["success_rate"] == pytest.approx(report["success_rate"])
    assert run.data.metrics["ci95_lower"] == pytest.approx(report["ci95"][0])
    assert run.data.params["checkpoint_sha256"] == report["checkpoint_sha256"]
    returns = client.get_metric_history(run.info.run_id, "episode_return")
    assert [m.step for m in returns] == [0, 1, 2]
    assert [m.value for m in returns] == pytest.approx(report["returns"])
    paths = {a.path for a in client.list_artifacts(run.info.run_id)} | \
        {a.path for a in client.list_artifacts(run.info.run_id, "model")}
    assert {"report.json", "model/policy.onnx"} <= paths
    import onnx

    onnx.checker.check_model(onnx.load(client.download_artifacts(run.info.run_id, "model/policy.onnx",
                                                                 str(tracked_run["out"] / "dl-onnx"))))


def test_parent_child_structure_and_close(mlflow_stack, tracked_run):
    from sim2real.orchestration.tracking import close_tracking

    client = _client(mlflow_stack["url"])
    tracking = tracked_run["tracking"]
    parent = client.get_run(tracking["parent_run_id"])
    assert parent.info.run_name == "toy" and parent.info.status == "RUNNING"  # the run key's distinct tail
    assert parent.data.tags[contract.RUN_KEY_TAG] == RUN_KEY
    assert parent.data.params["max_iterations"] == "3"  # the run's params, to compare runs in the UI
    children = client.search_runs([tracking["experiment_id"]],
                                  f"tags.`mlflow.parentRunId` = '{tracking['parent_run_id']}'")
    by_stage = {r.data.tags[contract.STAGE_TAG]: r.info.run_id for r in children}
    assert by_stage == tracking["runs"]
    assert set(by_stage) == {"rl_training", "evaluation", "vla_finetune"}
    # short, distinct names that MLflow's run table does not cut into identical rows
    assert sorted(r.info.run_name for r in children) == ["toy eval", "toy fine-tune", "toy train"]
    # the experiment opens in MLflow's model-training view, not its GenAI view
    assert client.get_experiment(tracking["experiment_id"]).tags["mlflow.experimentKind"] == "custom_model_development"
    closed = close_tracking(tracking, succeeded=False, task_states={
        "train.train_policy": {"state": "success"}, "evaluate.run_evaluation": {"state": "success"},
        "vla.finetune_groot": {"state": "upstream_failed"}})
    assert closed == {"rl_training": "FINISHED", "evaluation": "FINISHED", "vla_finetune": "KILLED",
                      "parent": "FAILED"}
    assert client.get_run(tracking["parent_run_id"]).info.status == "FAILED"
    assert client.get_run(tracking["runs"]["vla_finetune"]).info.status == "KILLED"


def test_mlflow_run_link_points_at_the_parent_run_page(mlflow_stack, tracked_run):
    from sim2real.orchestration.links.mlflow import MlflowRunLink

    tracking = tracked_run["tracking"]
    pushed = {}

    class TI:
        def xcom_push(self, key, value):
            pushed[key] = value

    url = MlflowRunLink.persist(TI(), tracking)
    assert url == f"{mlflow_stack['url']}/#/experiments/{tracking['experiment_id']}/runs/{tracking['parent_run_id']}"
    assert pushed == {MlflowRunLink.key: url}
    with urllib.request.urlopen(url.split("#")[0], timeout=10) as resp:  # the MLflow UI itself
        assert resp.status == 200 and b"MLflow" in resp.read()
    assert MlflowRunLink.persist(TI(), {"enabled": False, "reason": "off"}) is None


def test_lineage_holds_the_run_ids(tracked_run):
    from sim2real.orchestration.lineage import build_lineage, render_markdown, validate_lineage

    tracking = tracked_run["tracking"]
    lineage = build_lineage(run_key=RUN_KEY, dag_id="sim_to_real", run_id="manual__toy", params={},
                            plan={"run_key": RUN_KEY, "bucket": BUCKET, "run_uri": f"s3://{BUCKET}/runs/{RUN_KEY}/",
                                  "tracking": tracking})
    validate_lineage(lineage)
    assert lineage["mlflow"]["parent_run_id"] == tracking["parent_run_id"]
    assert lineage["mlflow"]["runs"] == tracking["runs"]
    assert tracking["parent_run_id"] in render_markdown(lineage)


def test_unreachable_server_turns_tracking_off_without_failing(tmp_path):
    from sim2real.orchestration.tracking import start_tracking

    dead = f"http://127.0.0.1:{free_port()}"
    from sim2real.orchestration.hooks.mlflow import MlflowHook

    result = start_tracking(plan=_plan(), env={"mlflow": {"tracking_uri": dead}}, dag_id="d", run_id="r",
                            hook=MlflowHook(dead, retries=1, timeout=2))
    assert result["enabled"] is False and "reachable" in result["reason"]
    # the workload side: the logger is there at once (the run is opened on its thread), and says what it lost
    from sim2real.workloads.tracking import NullRunLogger, run_logger_from_env

    code = ("import json, time, mlflow.entities; from sim2real.workloads.tracking import run_logger_from_env as f; "
            "t = time.monotonic(); "
            "l = f(stage='rl_training', run_name='x'); l.log_metrics({'a': 1.0}, step=1); "
            "opened = time.monotonic() - t; l.finish(); print(json.dumps({'opened_s': opened, **l.summary()}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=clean_env(MLFLOW_TRACKING_URI=dead))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["opened_s"] < 1.0 and summary["close_wait_s"] < 5, summary
    assert summary["not_recorded"] == {"run": 1, "tags": 1, "metric_batches": 1, "metrics": 1, "status": 1}, summary
    assert "not recorded (server unreachable since" in proc.stderr
    assert isinstance(run_logger_from_env(stage="x", run_name="x", environ={}), NullRunLogger)


class TogglingProxy:
    """A TCP proxy on 127.0.0.1 to ``target`` (host, port): while ``up`` it forwards, while down it closes each
    connection at once (the MLflow client sees the server go away and come back, on real sockets)."""

    def __init__(self, target):
        import socket
        import threading

        self.target, self.up = target, False
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if not self.up:
                conn.close()
                continue
            upstream = socket.create_connection(self.target)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(2)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


def test_a_server_that_comes_back_gets_the_buffered_metrics_and_a_tag_for_what_was_dropped(mlflow_stack, monkeypatch):
    """The server is away for the first calls: they are buffered (up to the buffer, the oldest dropped and counted),
    sent when it answers again with their own steps, and the run says on a tag what it never got."""
    import time
    from urllib.parse import urlparse

    from sim2real.workloads.tracking import CLIENT_HTTP_DEFAULTS, NOT_RECORDED_TAG, RunLogger

    for key, value in CLIENT_HTTP_DEFAULTS.items():  # what run_logger_from_env sets in a workload's process
        monkeypatch.setenv(key, value)
    client = _client(mlflow_stack["url"])
    exp = client.get_experiment_by_name("sim2real") or client.get_experiment(client.create_experiment("sim2real"))
    run_id = client.create_run(exp.experiment_id, run_name="outage").info.run_id
    target = urlparse(mlflow_stack["url"])
    proxy = TogglingProxy((target.hostname, target.port))
    try:
        from mlflow import MlflowClient

        logger = RunLogger(MlflowClient(tracking_uri=proxy.url), run_id, flush_every=1, max_pending=3,
                           retry_pauses=(0.2,))
        started = time.monotonic()
        for step in range(1, 6):  # 5 batches while the server is away: the 2 oldest are dropped
            logger.log_metrics({"mean_reward": float(step)}, step=step)
        assert time.monotonic() - started < 0.5  # the caller never waits for the server
        deadline = time.monotonic() + 30
        while logger.first_unreachable_at is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert logger.first_unreachable_at is not None
        proxy.up = True
        logger.finish()
    finally:
        proxy.close()
    summary = logger.summary()
    assert summary["not_recorded"] == {"metric_batches": 2, "metrics": 2}, summary
    assert summary["unreachable_since"] is None and summary["first_unreachable_at"]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "mean_reward")] == \
        [(s, float(s)) for s in (3, 4, 5)]
    assert run.data.tags[NOT_RECORDED_TAG].startswith("2 metric batches (2 values) not recorded (server unreachable")


def test_groot_finetune_logs_params_and_the_trainer_history_to_its_child_run(mlflow_stack, tracked_run, tmp_path):
    """The fine-tune's entry point (a stand-in trainer writing the Hugging Face Trainer's trainer_state.json)
    logs into the vla_finetune child run the DAG created, as the pipeline's environment names it."""
    from sim2real.orchestration.tracking import stage_env
    from sim2real.workloads.groot import finetune_entry as fe
    from sim2real.workloads.groot import smoke_eval as se

    config, ckpt = tmp_path / "config", tmp_path / "checkpoints"
    config.mkdir()
    (config / "hyperparameters.json").write_text(json.dumps({"embodiment_tag": "libero_panda", "max_steps": "20",
                                                             "global_batch_size": "4", "num_gpus": "1",
                                                             "save_steps": "10"}))
    (config / "checkpointconfig.json").write_text(json.dumps({"LocalPath": str(ckpt)}))

    def trainer(cmd, env, cwd):
        step_dir = ckpt / "checkpoint-20"
        arm = {"single_arm": {"start": 0, "end": 5}, "gripper": {"start": 5, "end": 6}}
        se.write_standin_checkpoint(step_dir, modality={"state": arm, "action": arm, "video": {
            "front": {"original_key": "observation.images.front"}}}, seed=0)
        history = [{"loss": 1.5, "grad_norm": 3.0, "learning_rate": 1e-4, "epoch": 0.5, "step": 10},
                   {"loss": 0.7, "grad_norm": 2.0, "learning_rate": 5e-5, "epoch": 1.0, "step": 20},
                   {"train_runtime": 12.5, "train_loss": 1.1, "total_flos": float("nan"), "step": 20}]
        (step_dir / "trainer_state.json").write_text(json.dumps({"global_step": 20, "log_history": history}))
        return 0

    env = {"SM_CHANNEL_DATASET": str(tmp_path / "dataset"), "SM_CHANNEL_MODEL": str(tmp_path / "base"),
           "SM_MODEL_DIR": str(tmp_path / "model"), "GROOT_HOME": str(tmp_path), "SIM2REAL_GPUS": "1",
           "SIM2REAL_RUN_KEY": RUN_KEY, **mlflow_stack["aws"], **stage_env(tracked_run["tracking"], "vla_finetune")}
    assert fe.main([], env=env, runner=trainer, config_dir=config) == 0
    client = _client(mlflow_stack["url"])
    run = client.get_run(tracked_run["tracking"]["runs"]["vla_finetune"])
    assert run.info.status == "FINISHED"
    assert run.data.params["embodiment_tag"] == "libero_panda" and run.data.params["max_steps"] == "20"
    assert run.data.params["gpus"] == "1"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == [(10, 1.5), (20, 0.7)]
    assert run.data.metrics["train_runtime"] == 12.5 and "total_flos" not in run.data.metrics  # NaN is left out
    assert run.data.tags[contract.STAGE_TAG] == "vla_finetune"


def test_sweep_candidates_nest_under_the_rl_training_run_which_records_the_winner(mlflow_stack):
    """A sweep's candidate runs are children of the run's RL-training run (not siblings of it beside an empty
    one), and the pick's outcome lands on that run: winner tags, the winner's params, each candidate's bounds."""
    from sim2real.orchestration.tracking import SWEEP_WINNER_RUN_TAG, SWEEP_WINNER_TAG, record_sweep, start_tracking

    plan = {**_plan(), "sweep": {"enabled": True, "candidates": [
        {"candidate": f"c{i}", "candidate_key": f"{RUN_KEY}-c{i}"} for i in range(2)]}}
    tracking = start_tracking(plan=plan, env={"mlflow": {"tracking_uri": mlflow_stack["url"]}},
                              dag_id="sim_to_real", run_id="manual__sweep")
    assert tracking["enabled"], tracking
    client = _client(mlflow_stack["url"])
    rl_run = tracking["runs"]["rl_training"]
    nested = client.search_runs([tracking["experiment_id"]], f"tags.`mlflow.parentRunId` = '{rl_run}'")
    assert {r.info.run_id for r in nested} == {run for c in tracking["candidate_runs"].values() for run in c.values()}
    assert len(nested) == 4
    picked = {"rule": "best Wilson 95% lower bound", "winner": 1, "candidate": "c1", "candidates": [
        {"candidate": "c0", "params": {"seed": 3}, "success_rate": 0.5, "ci95": [0.3, 0.7]},
        {"candidate": "c1", "params": {"seed": 4}, "success_rate": 0.9, "ci95": [0.7, 0.97]}]}
    assert record_sweep(tracking, picked) == {"run_id": rl_run, "winner": "c1", "metrics": 6}
    data = client.get_run(rl_run).data
    assert data.tags[SWEEP_WINNER_TAG] == "c1"
    assert data.tags[SWEEP_WINNER_RUN_TAG] == tracking["candidate_runs"]["c1"]["rl_training"]
    assert data.params["seed"] == "4"
    assert data.metrics["c1.ci95_lower"] == 0.7 and data.metrics["c0.success_rate"] == 0.5
    assert record_sweep(tracking, None) == {} and record_sweep({"enabled": False}, picked) == {}


def test_parent_run_carries_the_runs_headline_metrics_for_compare(mlflow_stack, tracked_run):
    """The parent run gets the run's headline numbers as metrics (MLflow's Compare view shows metrics; params
    alone compare nothing), and a stage whose workload lost calls is tagged with what it lost."""
    from sim2real.contract.tracking import NOT_RECORDED_TAG
    from sim2real.orchestration.lineage import build_lineage
    from sim2real.orchestration.tracking import record_headline

    tracking, report = tracked_run["tracking"], tracked_run["report"]
    manifest = json.loads((tracked_run["out"] / "manifest.json").read_text())
    assert manifest["tracking"]["recorded"] is True and report["tracking"]["recorded"] is True  # server was up
    lost = {**report, "tracking": {**report["tracking"], "recorded": False,
                                   "not_recorded": {"metric_batches": 2, "metrics": 6},
                                   "first_unreachable_at": "2026-12-03T10:00:00Z"}}
    lineage = build_lineage(
        run_key=RUN_KEY, dag_id="sim_to_real", run_id="manual__toy", params={}, checkpoint=manifest, evaluation=lost,
        plan={"run_key": RUN_KEY, "tracking": tracking, "rounds": {"round": 1, "max_rounds": 2}},
        quality_gate={"passed": False, "threshold": 0.8, "metric": "ci95_lower", "value": 0.1, "reason": "x"},
        cost_actual={"total_usd": 0.42}, rounds={"round": 1, "max_rounds": 2})
    assert record_headline(tracking, lineage) == {"metrics": 10, "tagged": ["evaluation"]}
    client = _client(mlflow_stack["url"])
    metrics = client.get_run(tracking["parent_run_id"]).data.metrics
    assert metrics["success_rate"] == pytest.approx(report["success_rate"])
    assert metrics["ci95_lower"] == pytest.approx(report["ci95"][0])
    assert metrics["ci95_upper"] == pytest.approx(report["ci95"][1])
    assert metrics["gate_threshold"] == 0.8 and metrics["gate_passed"] == 0.0 and metrics["cost_usd"] == 0.42
    assert metrics["round"] == 1 and metrics["max_rounds"] == 2 and metrics["episodes"] == report["episodes"]
    tags = client.get_run(tracking["runs"]["evaluation"]).data.tags
    assert tags[NOT_RECORDED_TAG] == "2 metric batches (6 values) not recorded (server unreachable since " \
                                     "2026-12-03T10:00:00Z)"
    assert NOT_RECORDED_TAG not in client.get_run(tracking["runs"]["rl_training"]).data.tags


def test_a_call_the_server_refuses_is_dropped_and_counted_and_the_rest_recorded(mlflow_stack, monkeypatch):
    """A param logged again with another value (MLflow refuses it, HTTP 400): that call is dropped and counted,
    not retried, and tracking goes on with the next calls."""
    from sim2real.workloads.tracking import CLIENT_HTTP_DEFAULTS, RunLogger

    for key, value in CLIENT_HTTP_DEFAULTS.items():
        monkeypatch.setenv(key, value)
    client = _client(mlflow_stack["url"])
    exp = client.get_experiment_by_name("sim2real") or client.get_experiment(client.create_experiment("sim2real"))
    run_id = client.create_run(exp.experiment_id, run_name="refusal").info.run_id
    client.log_param(run_id, "seed", "1")
    logger = RunLogger(client, run_id, flush_every=1)
    logger.log_params({"seed": 2})
    logger.log_metrics({"mean_reward": 1.5}, step=1)
    logger.finish()
    summary = logger.summary()
    assert summary["not_recorded"] == {"params": 1} and summary["first_unreachable_at"] is None, summary
    assert "INVALID_PARAMETER_VALUE" in summary["last_error"]
    run = client.get_run(run_id)
    assert run.data.params["seed"] == "1" and run.data.metrics["mean_reward"] == 1.5
    assert run.info.status == "FINISHED"
