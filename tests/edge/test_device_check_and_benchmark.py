"""Device health check and benchmark entry points (no timing assertions)."""

from __future__ import annotations

import json

from edge_helpers import ACTION_DIM, STATE_DIM

from sim2real.edge.benchmark import main as bench_main
from sim2real.edge.benchmark import policy_server_latency, run_benchmark
from sim2real.edge.device_check import check_policy_endpoint


def test_device_check_ok(onnx_model):
    ok, reason, details = check_policy_endpoint(onnx_model, STATE_DIM)
    assert ok, reason
    assert details["action_shape"] == [1, 16, ACTION_DIM] and details["provider"] == "CPUExecutionProvider"


def test_device_check_wrong_dim_and_missing_model(onnx_model, tmp_path):
    ok, reason, _ = check_policy_endpoint(onnx_model, STATE_DIM + 3)
    assert not ok and "state width 13" in reason
    ok, reason, _ = check_policy_endpoint(tmp_path / "nope.onnx", STATE_DIM)
    assert not ok and "did not start" in reason


def test_policy_server_latency_keys(onnx_model):
    res = policy_server_latency(onnx_model, n=20)
    assert {"p50_ms", "p99_ms", "throughput_rps", "n"} <= set(res) and res["n"] == 20


def test_run_benchmark_writes_json(onnx_model, mlp, tmp_path):
    out = tmp_path / "bench.json"
    report = run_benchmark(onnx_model, n=10, torch_module=mlp, output=out)
    assert json.loads(out.read_text()) == report
    assert {"torch_cpu", "onnxruntime_cpu", "zmq_end_to_end"} <= set(report["results"])


def test_benchmark_cli_against_running_server(server, tmp_path, capsys):
    out = tmp_path / "b.json"
    assert bench_main(["--port", str(server.port), "--requests", "5", "--wait-s", "5", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["results"]["zmq_end_to_end"]["n"] == 5
