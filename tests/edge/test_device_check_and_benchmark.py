"""Device health check and benchmark entry points: clients of the public protocol (no timing assertions)."""

from __future__ import annotations

import json

from edge_helpers import FLAT_ACTION_DIM, TOKEN, export_onnx, make_mlp

from sim2real.edge.benchmark import main as bench_main
from sim2real.edge.benchmark import policy_server_latency, run_benchmark
from sim2real.edge.device_check import check_policy_endpoint


def test_device_check_ok_reads_the_layout_over_the_wire(onnx_model):
    ok, reason, details = check_policy_endpoint(onnx_model)
    assert ok, reason
    assert details["action_shapes"] == {"single_arm": [1, 16, 5], "gripper": [1, 16, 1]}
    assert details["provider"] == "CPUExecutionProvider" and details["modality_layout"]["video"] == ["front", "wrist"]


def test_device_check_model_without_layout(flat_model):
    ok, reason, details = check_policy_endpoint(flat_model, action_horizon=4)
    assert ok, reason
    assert details["action_shapes"] == {"action": [1, 4, FLAT_ACTION_DIM]}


def test_device_check_failures_are_reported(onnx_model, tmp_path):
    ok, reason, _ = check_policy_endpoint(onnx_model, action_horizon=8)
    assert not ok and "did not start" in reason and "action horizon of 16, not 8" in reason
    ok, reason, _ = check_policy_endpoint(tmp_path / "nope.onnx")
    assert not ok and "did not start" in reason
    wide = export_onnx(make_mlp(state_dim=7), tmp_path / "wide.onnx", state_dim=7)
    ok, reason, _ = check_policy_endpoint(wide)
    assert not ok and "add up to 6, but the model input is 7 wide" in reason


def test_policy_server_latency_keys(onnx_model):
    res = policy_server_latency(onnx_model, n=20)
    assert {"p50_ms", "p99_ms", "throughput_rps", "n", "request_bytes", "reply_bytes"} <= set(res)
    assert res["n"] == 20
    assert {"p50_ms", "p99_ms", "throughput_rps"} <= set(res["transport"]) and res["transport"]["n"] == 20
    assert res["request_bytes"] > 2 * 224 * 224 * 3  # two 224x224 camera frames travel with each request


def test_run_benchmark_writes_json(onnx_model, mlp, tmp_path):
    out = tmp_path / "bench.json"
    report = run_benchmark(onnx_model, n=10, torch_module=mlp, output=out)
    assert json.loads(out.read_text()) == report
    assert {"torch_cpu", "onnxruntime_cpu", "zmq_end_to_end"} <= set(report["results"])


def test_benchmark_cli_against_running_server_with_token(server, tmp_path):
    token_file = tmp_path / "api_token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    out = tmp_path / "b.json"
    assert bench_main(["--port", str(server.port), "--requests", "5", "--wait-s", "5", "--output", str(out),
                       "--api-token-file", str(token_file), "--image-size", "8x8"]) == 0
    assert json.loads(out.read_text())["results"]["zmq_end_to_end"]["n"] == 5


def test_flood_latency_measures_a_client_beside_a_refused_flood(onnx_model):
    from sim2real.edge.benchmark import flood_latency

    res = flood_latency(onnx_model, n=10, flooders=1, arrays=500, warmup=2)
    assert res["alone"]["n"] == res["flood"]["n"] == 10
    assert res["flood_refused"] >= 2 and res["flood_request_bytes"] > 500 * 128  # the flood ran, and was refused
    assert res["bound_p99_ms"] > res["alone"]["p99_ms"] and res["decode_ms"] > 0 and res["refuse_ms"] > 0
