"""A tracking outage never costs the job time: the real trainer and evaluator with the MLflow server down from
their first call, on real sockets (a port with nothing listening: connection refused; a port that accepts and
never answers: every request waits for its timeout), against the same job without tracking."""

from __future__ import annotations

import json
import socket
import time

import pytest

from .conftest import clean_env, free_port, run_evaluate, run_train

RUN_ID = "0123456789abcdef0123456789abcdef"


@pytest.fixture()
def black_hole():
    """``http://127.0.0.1:<port>`` of a socket that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _timed(fn):
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def test_training_with_the_server_hanging_from_its_first_call_keeps_its_budget(tmp_path, black_hole):
    """Before: the run's first MLflow call waited 120 s per attempt for 8 attempts before training started; now the
    loop runs its time budget as without tracking and the end waits at most about one request timeout (5 s)."""
    budget = {"TASK": "Reacher-v5", "MAX_ITERATIONS": "1000", "NUM_ENVS": "2", "TIME_BUDGET_SECONDS": "4",
              "CHECKPOINT_INTERVAL": "1000", "RUN_KEY": "outage-toy"}
    off, off_s = _timed(lambda: run_train(clean_env(**budget, OUTPUT_URI=str(tmp_path / "off"))))
    assert off.returncode == 0, off.stderr[-3000:]
    down, down_s = _timed(lambda: run_train(clean_env(
        **budget, OUTPUT_URI=str(tmp_path / "down"), MLFLOW_TRACKING_URI=black_hole, MLFLOW_RUN_ID=RUN_ID,
        MLFLOW_EXPERIMENT_ID="1", SIM2REAL_MLFLOW_FLUSH_EVERY="1"), timeout=90))
    assert down.returncode == 0, down.stderr[-3000:]
    base = json.loads((tmp_path / "off" / "manifest.json").read_text())
    manifest = json.loads((tmp_path / "down" / "manifest.json").read_text())
    # the budget went to training: the loop spent well under a second in tracking (its calls only queue), and ran
    # about as many iterations as without tracking (loosely: other work on 2 busy cores moves both counts)
    assert manifest["tracking"]["caller_s"] < 0.5, manifest["tracking"]
    baseline = base["iteration"]
    if manifest["iteration"] < baseline * 0.4:
        # the other test process's load moves a 4 s budget's count: the untracked run again, right after, and the
        # slower of the two untracked runs is the baseline (a tracking cost would show against both)
        again = run_train(clean_env(**budget, OUTPUT_URI=str(tmp_path / "off-again")))
        assert again.returncode == 0, again.stderr[-3000:]
        baseline = min(baseline, json.loads((tmp_path / "off-again" / "manifest.json").read_text())["iteration"])
    assert manifest["iteration"] >= max(1, baseline * 0.4), (manifest["iteration"], base["iteration"], baseline)
    # the end waited about one request timeout (MLFLOW_HTTP_REQUEST_TIMEOUT 5 s) for the server, not minutes;
    # the rest of the difference in wall time is importing mlflow (seconds on 2 busy cores)
    assert manifest["tracking"]["close_wait_s"] <= 10, manifest["tracking"]
    assert down_s <= off_s + 45, f"tracking down cost {down_s - off_s:.1f} s (without tracking: {off_s:.1f} s)"
    # what was not recorded: every metric batch (one per iteration), the run's status, said since when
    tracking = manifest["tracking"]
    assert tracking["recorded"] is False and tracking["mlflow_run_id"] == RUN_ID
    assert tracking["not_recorded"]["metric_batches"] == manifest["iteration"]
    assert tracking["not_recorded"]["status"] == 1 and tracking["unreachable_since"]
    assert f"tracking: {manifest['iteration']} metric batch" in down.stderr
    assert "tracking" not in base  # tracking off: the manifest is what it was
    from sim2real.contract import schemas

    assert schemas.errors("checkpoint_manifest", manifest) == []


def _evaluate(manifest, report, **env):
    return run_evaluate(clean_env(**env), "--manifest-uri", str(manifest), "--episodes", "2", "--seed", "0",
                        "--report-uri", str(report), timeout=90)


@pytest.fixture(scope="module")
def untracked_evaluation(trained_dir, tmp_path_factory):
    """The same evaluation without tracking: its report and wall time."""
    report = tmp_path_factory.mktemp("eval-off") / "off.json"
    off, off_s = _timed(lambda: _evaluate(trained_dir / "manifest.json", report))
    assert off.returncode == 0, off.stderr[-3000:]
    return json.loads(report.read_text()), off_s


@pytest.mark.parametrize("server", ["refused", "hanging"])
def test_evaluation_with_the_server_down_is_held_seconds_not_minutes(trained_dir, tmp_path, server, request,
                                                                     untracked_evaluation):
    """Before: the evaluator's first MLflow call retried for about 4 minutes (7 retries, backoff factor 2) on a
    refused port, and 8 x 120 s on a hanging one; now it ends within seconds of the evaluation itself and the
    report says what was not recorded."""
    uri = request.getfixturevalue("black_hole") if server == "hanging" else f"http://127.0.0.1:{free_port()}"
    baseline, off_s = untracked_evaluation
    down, down_s = _timed(lambda: _evaluate(trained_dir / "manifest.json", tmp_path / "down.json",
                                            MLFLOW_TRACKING_URI=uri, MLFLOW_RUN_ID=RUN_ID, MLFLOW_EXPERIMENT_ID="1"))
    assert down.returncode == 0, down.stderr[-3000:]
    report = json.loads((tmp_path / "down.json").read_text())
    assert report["tracking"]["close_wait_s"] <= 10, report["tracking"]  # about one request timeout (5 s)
    assert down_s <= off_s + 45, f"tracking down cost {down_s - off_s:.1f} s (without tracking: {off_s:.1f} s)"
    assert report["success_rate"] == baseline["success_rate"]  # the score does not depend on tracking
    lost = report["tracking"]["not_recorded"]
    assert lost["metric_batches"] >= 1 and lost["artifacts"] >= 1 and lost["status"] == 1, report["tracking"]
    assert report["tracking"]["first_unreachable_at"]
    assert "not recorded (server unreachable since" in down.stderr
    from sim2real.contract import schemas

    assert schemas.errors("eval_report", report) == []
