"""Policy server over real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import io

import msgpack
import numpy as np
import pytest
import torch

from sim2real.edge.codec import CodecError, packb, unpackb
from sim2real.edge.policy_server import (PolicyClient, PolicyServer, PolicyServerError, PolicyServerTimeout,
                                         main)

from edge_helpers import ACTION_DIM, STATE_DIM

PARITY_ATOL = 1e-5  # float32 MLP, onnxruntime CPU vs torch CPU


@pytest.fixture
def client(server):
    with PolicyClient("127.0.0.1", server.port, timeout_ms=5000) as c:
        yield c


def raw(client: PolicyClient, payload: bytes):
    return unpackb(client.request_raw(payload), max_bytes=None)


def test_codec_roundtrip_arrays_and_refuses_pickle():
    obj = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": "x", "n": [1, 2.5, None]}
    back = unpackb(packb(obj))
    np.testing.assert_array_equal(back["a"], obj["a"])
    assert back["a"].dtype == np.float32 and back["s"] == "x" and back["n"] == [1, 2.5, None]
    buf = io.BytesIO()
    np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    evil = msgpack.packb({"__ndarray_class__": True, "as_npy": buf.getvalue()}, use_bin_type=True)
    with pytest.raises(CodecError, match="invalid .npy"):
        unpackb(evil)
    with pytest.raises(CodecError, match="exceeds the limit"):
        unpackb(b"\x00" * 11, max_bytes=10)


def test_ping(client):
    assert client.ping() == {"status": "ok", "message": "Server is running"}


@pytest.mark.parametrize("shape", [(3, 2, STATE_DIM), (3, STATE_DIM), (1, 1, STATE_DIM)])
def test_get_action_shapes(client, shape):
    obs = {"state": {"joints": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}}
    actions, info = client.get_action(obs)
    a = actions["action"]
    assert a.shape == (shape[0], 16, ACTION_DIM) and a.dtype == np.float32
    assert np.isfinite(a).all()
    # single-step MLP: the chunk repeats the one action over the horizon
    np.testing.assert_array_equal(a, np.repeat(a[:, :1], 16, axis=1))
    assert info["chunking"] == "repeat" and info["provider"] == "CPUExecutionProvider"
    assert info["latency_ms"] >= info["inference_ms"] >= 0


def test_state_keys_concatenate_in_sorted_order_and_last_step_used(client, mlp):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3, 6)).astype(np.float32)
    b = rng.standard_normal((2, 4)).astype(np.float32)
    actions, _ = client.get_action({"state": {"b": b, "a": a}, "language": {"task": [["reach"]]}})
    flat = np.concatenate([a[:, -1], b], axis=1)
    with torch.no_grad():
        ref = mlp(torch.from_numpy(flat)).numpy()
    np.testing.assert_allclose(actions["action"][:, 0], ref, atol=PARITY_ATOL)


def test_onnx_matches_torch(client, mlp):
    x = np.random.default_rng(3).standard_normal((32, STATE_DIM)).astype(np.float32) * 3
    actions, _ = client.get_action({"state": {"s": x}})
    with torch.no_grad():
        ref = mlp(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(actions["action"][:, 0], ref, atol=PARITY_ATOL, rtol=0)


def test_metadata_and_alias(client, onnx_model):
    meta = client.metadata()
    assert meta == client.call("get_modality_config")
    assert meta["inputs"] == [{"name": "obs", "shape": ["batch", STATE_DIM], "dtype": "tensor(float)"}]
    assert meta["outputs"][0]["name"] == "actions"
    assert meta["state_dim"] == STATE_DIM and meta["action_dim"] == ACTION_DIM
    assert meta["action_horizon"] == 16 and meta["provider"] == "CPUExecutionProvider"
    import hashlib
    assert meta["model_sha256"] == hashlib.sha256(onnx_model.read_bytes()).hexdigest()


def _ok_after(client):
    assert client.ping()["status"] == "ok"


def test_not_msgpack_then_served(client):
    reply = raw(client, b"\xc1\xc1 not msgpack")
    assert "not a valid msgpack message" in reply["error"]
    _ok_after(client)


def test_oversized_then_served(client):
    big = {"state": {"s": np.zeros((2000, STATE_DIM), np.float32)}}  # 80 kB > 64 kB limit
    with pytest.raises(PolicyServerError, match="exceeds the limit of 65536 bytes"):
        client.get_action(big)
    _ok_after(client)


def test_unknown_endpoint_then_served(client):
    with pytest.raises(PolicyServerError, match="unknown endpoint 'reset'"):
        client.call("reset")
    assert "endpoint" in raw(client, packb([1, 2]))["error"]
    _ok_after(client)


@pytest.mark.parametrize("obs, match", [
    ({"state": {"s": np.zeros((1, STATE_DIM + 1), np.float32)}}, "state width 11"),
    ({"state": {"s": np.zeros((1, STATE_DIM), np.float64)}}, "must be float32, got float64"),
    ({"state": {"s": np.zeros((1, 1, 1, STATE_DIM), np.float32)}}, r"must be \(B, T, D\) or \(B, D\)"),
    ({"state": {"s": [0.0] * STATE_DIM}}, "must be a numpy array"),
    ({"state": {"a": np.zeros((1, 5), np.float32), "b": np.zeros((2, 5), np.float32)}}, "has batch 2"),
    ({"state": {"s": np.full((1, STATE_DIM), np.nan, np.float32)}}, "NaN or Inf"),
    ({"video": {}}, "non-empty map"),
])
def test_bad_observation_then_served(client, obs, match):
    with pytest.raises(PolicyServerError, match=match):
        client.get_action(obs)
    _ok_after(client)


def test_missing_observation(client):
    with pytest.raises(PolicyServerError, match="observation"):
        client.call("get_action", {"obs": 1})
    _ok_after(client)


def test_timeout_against_stopped_server(onnx_model):
    handle = PolicyServer(onnx_model, host="127.0.0.1", port=0).start_in_thread()
    port = handle.port
    with PolicyClient("127.0.0.1", port, timeout_ms=300) as c:
        assert c.ping()["status"] == "ok"
        handle.stop()
        with pytest.raises(PolicyServerTimeout, match=f"no reply from tcp://127.0.0.1:{port} within 300 ms"):
            c.ping()
        with pytest.raises(PolicyServerTimeout):  # the socket was reset: a second call times out too, not EFSM
            c.ping()
        handle2 = PolicyServer(onnx_model, host="127.0.0.1", port=port).start_in_thread()
        try:
            assert c.ping()["status"] == "ok"  # same client recovers once a server is back
        finally:
            handle2.stop()


def test_bind_conflict_raises(server, onnx_model):
    import zmq

    with pytest.raises(zmq.ZMQError, match="cannot bind"):
        PolicyServer(onnx_model, host="127.0.0.1", port=server.port).start_in_thread()


def test_bad_model_refused(tmp_path):
    with pytest.raises(FileNotFoundError):
        PolicyServer(tmp_path / "missing.onnx", port=0)


def test_cli_parses_and_refuses_missing_model(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(FileNotFoundError):
        main(["--model-path", str(tmp_path / "nope.onnx"), "--host", "127.0.0.1", "--port", "0"])
