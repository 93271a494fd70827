"""Policy server over real ZMQ sockets on 127.0.0.1, driven by GR00T N1.6 and N1.5 clients written from the
protocol (gr00t_clients.py), by this package's client, and by raw bad messages. GR00T N1.7's client is N1.6's
protocol unchanged: the N1.6 client's basic tests run against an ``n1.7``-format server too."""

from __future__ import annotations

import io
import re
import logging

import msgpack
import numpy as np
import pytest
import torch
import zmq
from edge_helpers import (ACTION_DIM, FLAT_ACTION_DIM, FLAT_STATE_DIM, MAX_REQUEST_BYTES, SO101, STATE_DIM, TOKEN,
                          export_onnx, make_mlp)
from gr00t_clients import N15RobotClient, N16PolicyClient

from sim2real.edge.codec import CodecError, load_npy, packb, unpackb
from sim2real.contract.modality import LAYOUT_PROPERTY
from sim2real.edge.onnx_policy import modality_configs
from sim2real.edge.policy_client import PolicyClient, PolicyServerError, PolicyServerTimeout, layout_observation
from sim2real.edge.policy_server import HARD_LIMIT_FACTOR, UNAUTHORIZED, PolicyServer, main
from sim2real.edge.security import is_loopback

PARITY_ATOL = 1e-5  # float32 MLP, onnxruntime CPU vs torch CPU
TASK = "annotation.human.task_description"


def n16_obs(batch: int = 1, seed: int = 0, **override) -> dict:
    """A GR00T N1.6 observation for the SO-101 layout (small frames)."""
    obs = layout_observation(SO101, batch=batch, image_size=(8, 8), seed=seed)
    obs["language"] = {TASK: [["pick the cube"]] * batch}
    for path, value in override.items():
        modality, key = path.split("__")
        obs[modality][key] = value
    return obs


def n15_obs(batch: int | None = None, seed: int = 0) -> dict:
    """A GR00T N1.5 flat observation as N1.5 robot clients send it: float64 states, unbatched by default."""
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    return {
        "video.front": np.zeros((*lead, 1, 8, 8, 3), np.uint8),
        "video.wrist": np.zeros((*lead, 1, 8, 8, 3), np.uint8),
        "state.single_arm": rng.standard_normal((*lead, 1, 5)),
        "state.gripper": rng.standard_normal((*lead, 1, 1)),
        TASK: ["pick the cube"] * (batch or 1),
    }


def reference(mlp, state: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return mlp(torch.from_numpy(np.ascontiguousarray(state, dtype=np.float32))).numpy()


@pytest.fixture
def client(server):
    with PolicyClient("127.0.0.1", server.port, timeout_ms=5000, api_token=TOKEN) as c:
        yield c


@pytest.fixture
def n16(server):
    with N16PolicyClient(port=server.port, api_token=TOKEN) as c:
        yield c


@pytest.fixture(scope="module", params=["n1.6", "n1.7"])
def n16_of_format(request, onnx_model):
    """An N1.6 ``PolicyClient`` of a server started with ``--modality-config-format`` ``n1.6`` or ``n1.7``: N1.7's
    ``PolicyClient`` is N1.6's ``gr00t/policy/server_client.py`` unchanged, so the same client and the same
    expectations hold for both formats (nothing N1.7-specific is served)."""
    with PolicyServer(onnx_model, host="127.0.0.1", port=0, api_token=TOKEN,
                      modality_config_format=request.param).start_in_thread() as handle, \
            N16PolicyClient(port=handle.port, api_token=TOKEN) as c:
        yield c


@pytest.fixture
def n15(server):
    with N15RobotClient(port=server.port, api_token=TOKEN) as c:
        yield c


def raw(client: PolicyClient, payload: bytes):
    return unpackb(client.request_raw(payload), max_bytes=None)


def _ok_after(client: PolicyClient) -> None:
    assert client.ping()["status"] == "ok"


# -- codec --------------------------------------------------------------------------------------------
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


NPY_CASES = [np.zeros((1, 1, 10), np.float32), np.arange(5), np.ones(()), np.zeros((0, 3)), np.ones((2, 3), ">f8"),
             np.array([True, False]), np.zeros((1, 1, 4, 4, 3), np.uint8), np.array(["ab", "c"]),
             np.asfortranarray(np.arange(6.0).reshape(2, 3)), np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])]


@pytest.mark.parametrize("array", NPY_CASES, ids=lambda a: f"{a.dtype}{a.shape}")
def test_load_npy_matches_np_load(array):
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    got, ref = load_npy(buf.getvalue()), np.load(io.BytesIO(buf.getvalue()))
    assert got.dtype == ref.dtype and got.shape == ref.shape and np.array_equal(got, ref)
    assert got.flags.writeable  # a client may edit the action chunk it received


def test_load_npy_refuses_bad_payloads():
    buf = io.BytesIO()
    np.save(buf, np.zeros(10, np.float32), allow_pickle=False)
    raw = buf.getvalue()
    with pytest.raises(CodecError, match=r"36 data bytes for shape \(10,\) of float32 \(40 expected\)"):
        load_npy(raw[:-4])
    with pytest.raises(CodecError, match="42 data bytes"):
        load_npy(raw + b"xx")
    with pytest.raises(CodecError, match="does not start with the .npy magic"):
        load_npy(b"junk")
    evil = io.BytesIO()
    np.save(evil, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(CodecError, match="object arrays cannot be loaded"):
        load_npy(evil.getvalue())


# -- GR00T N1.6 client ----------------------------------------------------------------------------------
def test_n16_ping_reset_and_modality_config(n16_of_format):
    n16 = n16_of_format
    assert n16.ping() is True
    assert n16.reset() == {} and n16.reset({"episode": 3}) == {}
    config = n16.get_modality_config()
    assert set(config) == {"video", "state", "action", "language"}
    assert config["state"].modality_keys == ["single_arm", "gripper"] and config["state"].delta_indices == [0]
    assert config["action"].modality_keys == ["single_arm", "gripper"]
    assert config["action"].delta_indices == list(range(16))
    assert config["video"].modality_keys == ["front", "wrist"]
    assert config["language"].modality_keys == [TASK]


def test_n16_get_action_one_array_per_action_key(n16_of_format, mlp):
    n16 = n16_of_format
    obs = n16_obs(batch=2, seed=1)
    action, info = n16.get_action(obs)
    assert set(action) == {"single_arm", "gripper"}
    assert action["single_arm"].shape == (2, 16, 5) and action["gripper"].shape == (2, 16, 1)
    assert action["single_arm"].dtype == np.float32 == action["gripper"].dtype
    state = np.concatenate([obs["state"]["single_arm"][:, -1], obs["state"]["gripper"][:, -1]], axis=1)
    expected = reference(mlp, state)
    got = np.concatenate([action["single_arm"], action["gripper"]], axis=2)
    np.testing.assert_allclose(got[:, 0], expected, atol=PARITY_ATOL, rtol=0)
    np.testing.assert_array_equal(got, np.repeat(got[:, :1], 16, axis=1))  # single-step MLP: zero-order hold
    assert info["chunking"] == "repeat" and info["provider"] == "CPUExecutionProvider"
    assert info["ignored_modalities"] == ["video", "language"]
    assert info["latency_ms"] >= info["inference_ms"] >= 0


def test_state_keys_concatenate_in_layout_order(n16, mlp):
    """The layout says single_arm then gripper, whatever order the client's map has."""
    obs = n16_obs(seed=2)
    obs["state"] = {"gripper": obs["state"]["gripper"], "single_arm": obs["state"]["single_arm"]}
    action, _ = n16.get_action(obs)
    state = np.concatenate([obs["state"]["single_arm"][:, -1], obs["state"]["gripper"][:, -1]], axis=1)
    np.testing.assert_allclose(action["single_arm"][:, 0], reference(mlp, state)[:, :5], atol=PARITY_ATOL)


def test_n16_kill_disabled_by_default(n16, client):
    with pytest.raises(RuntimeError, match="kill endpoint is disabled"):
        n16.kill_server()
    _ok_after(client)


# -- GR00T N1.5 client ----------------------------------------------------------------------------------
def test_n15_unbatched_flat_observation(n15, mlp):
    obs = n15_obs(seed=4)
    action = n15.get_action(obs)
    assert set(action) == {"action.single_arm", "action.gripper"}
    # as N1.5's Gr00tPolicy answers an unbatched observation: the batch of one squeezed away
    assert action["action.single_arm"].shape == (16, 5) and action["action.gripper"].shape == (16,)
    state = np.concatenate([obs["state.single_arm"][-1:], obs["state.gripper"][-1:]], axis=1)
    expected = reference(mlp, state)[0]
    np.testing.assert_allclose(action["action.single_arm"][0], expected[:5], atol=PARITY_ATOL)
    np.testing.assert_allclose(action["action.gripper"][0], expected[5], atol=PARITY_ATOL)
    # what N1.5 robot scripts do with the chunk
    step = np.concatenate([np.atleast_1d(action[f"action.{k}"][3]) for k in ("single_arm", "gripper")])
    assert step.shape == (6,)


def test_n15_batched_flat_observation(n15, mlp):
    obs = n15_obs(batch=3, seed=5)
    obs["state.single_arm"] = obs["state.single_arm"].astype(np.float32)  # float32 and float64 both accepted
    action = n15.get_action(obs)
    assert action["action.single_arm"].shape == (3, 16, 5) and action["action.gripper"].shape == (3, 16, 1)
    state = np.concatenate([obs["state.single_arm"][:, -1], obs["state.gripper"][:, -1]], axis=1)
    np.testing.assert_allclose(action["action.gripper"][:, 0, 0], reference(mlp, state)[:, 5], atol=PARITY_ATOL)


def test_n15_modality_config_encoding(onnx_model):
    with PolicyServer(onnx_model, port=0, modality_config_format="n1.5").start_in_thread() as handle:
        with N15RobotClient(port=handle.port) as n15:
            config = n15.get_modality_config()
    assert config["state"].modality_keys == ["state.single_arm", "state.gripper"]
    assert config["action"].modality_keys == ["action.single_arm", "action.gripper"]
    assert config["video"].modality_keys == ["video.front", "video.wrist"]
    assert config["language"].modality_keys == [TASK] and config["action"].delta_indices == list(range(16))


def test_request_without_endpoint_is_get_action(client):
    req = {"data": {"observation": n16_obs(), "options": None}, "api_token": TOKEN}
    action, info = raw(client, packb(req))
    assert action["single_arm"].shape == (1, 16, 5) and "latency_ms" in info


# -- authentication -------------------------------------------------------------------------------------
@pytest.mark.parametrize("token", [None, "wrong-token-0123456789", 12345, TOKEN + "x", TOKEN[:-1]])
def test_wrong_or_missing_token_refused_then_served(server, client, token, caplog):
    before = server.server.rejections.total
    server.server.rejections._last = float("-inf")  # the next refusal is logged at once
    caplog.set_level(logging.WARNING, logger="sim2real.edge.policy_server")
    for endpoint in ("ping", "get_action", "get_modality_config", "kill"):
        req = {"endpoint": endpoint} if token is None else {"endpoint": endpoint, "api_token": token}
        assert raw(client, packb(req)) == {"error": UNAUTHORIZED}
    with N16PolicyClient(port=server.port, api_token=token if isinstance(token, str) else None) as stranger:
        with pytest.raises(RuntimeError, match=UNAUTHORIZED):
            stranger.get_action(n16_obs())
    assert server.server.rejections.total == before + 5
    reason = "missing" if token is None else "invalid"
    assert f"refused request ({reason} api_token) from 127.0.0.1" in caplog.text
    _ok_after(client)


def test_refusals_are_rate_limited_in_the_log(server, client, caplog):
    server.server.rejections._last = float("-inf")
    caplog.set_level(logging.WARNING, logger="sim2real.edge.policy_server")
    for _ in range(20):
        raw(client, packb({"endpoint": "ping"}))
    assert caplog.text.count("refused request") == 1


def test_loopback_server_without_token_serves_clients_without_one(onnx_model):
    with PolicyServer(onnx_model, port=0).start_in_thread() as handle, N16PolicyClient(port=handle.port) as c:
        assert c.get_action(n16_obs())[0]["gripper"].shape == (1, 16, 1)


@pytest.mark.parametrize("host", ["0.0.0.0", "*", "192.168.1.20", "eth0", "robot.local", "::"])
def test_non_loopback_bind_without_token_refused_at_start(onnx_model, host):
    with pytest.raises(PermissionError, match=f"refusing to bind '{re.escape(host)}' without an api_token"):
        PolicyServer(onnx_model, host=host, port=0)


def test_non_loopback_bind_with_token_requires_it(onnx_model):
    with PolicyServer(onnx_model, host="0.0.0.0", port=0, api_token=TOKEN).start_in_thread() as handle:
        with N16PolicyClient(port=handle.port) as c, pytest.raises(RuntimeError, match=UNAUTHORIZED):
            c.get_action(n16_obs())
        with N16PolicyClient(port=handle.port, api_token=TOKEN) as c:
            assert c.ping()


@pytest.mark.parametrize("token", ["short", "has space in the token 123", " leading-space-0123456789"])
def test_weak_tokens_refused(onnx_model, token):
    with pytest.raises(ValueError, match="at least 16 characters without whitespace"):
        PolicyServer(onnx_model, port=0, api_token=token)


def test_is_loopback():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "*", "::", "10.0.0.1", "lo", "example.com", ""))


# -- bad inputs: each gets an error reply and the server keeps serving ------------------------------------
BAD_N16 = [
    (dict(state__single_arm=np.zeros((1, 1, 4), np.float32)),
     r"state\['single_arm'\] must have shape \(B, T, D\) with T=1, D=5"),
    (dict(state__gripper=np.zeros((1, 1, 2), np.float32)), r"D=1; got \(1, 1, 2\)"),
    (dict(state__single_arm=np.zeros((1, 1, 5), np.float64)), r"state\['single_arm'\] must be float32, got float64"),
    (dict(state__single_arm=np.zeros((1, 5), np.float32)), r"must have shape \(B, T, D\)"),
    (dict(state__single_arm=np.zeros((1, 2, 5), np.float32)), r"T=1"),
    (dict(state__single_arm=[0.0] * 5), "must be a numpy array, got list"),
    (dict(state__elbow=np.zeros((1, 1, 1), np.float32)), r"unexpected \['elbow'\]"),
    (dict(state__single_arm=np.full((1, 1, 5), np.nan, np.float32)), "NaN or Inf"),
    (dict(state__single_arm=np.zeros((2, 1, 5), np.float32)), "batch sizes differ"),
    (dict(video__front=np.zeros((1, 1, 8, 8, 3), np.float32)), r"video\['front'\] must be uint8, got float32"),
    (dict(video__wrist=np.zeros((1, 1, 8, 8, 4), np.uint8)), r"must have shape \(B, T, H, W, 3\)"),
    (dict(video__top=np.zeros((1, 1, 8, 8, 3), np.uint8)),
     r"observation\['video'\] keys must be exactly \['front', 'wrist'\]"),
    (dict(language__annotation=[["x"]]), r"unexpected \['annotation'\]"),
]


@pytest.mark.parametrize("override, match", BAD_N16)
def test_bad_n16_observation_then_served(n16, client, override, match):
    with pytest.raises(RuntimeError, match=match):
        n16.get_action(n16_obs(**override))
    _ok_after(client)


@pytest.mark.parametrize("mutate, match", [
    (lambda o: o.pop("state"), r"observation\['state'\] must be a map"),
    (lambda o: o["state"].pop("gripper"), r"missing \['gripper'\]"),
    (lambda o: o.update(depth={}), r"unknown observation modalities \['depth'\]"),
    (lambda o: o["language"].update({TASK: ["pick"]}), r"must be a list of B lists of one string"),
    (lambda o: o["language"].update({TASK: [["a"], ["b"]]}), "batch sizes differ"),
    (lambda o: o.pop("video"), r"missing \['front', 'wrist'\]"),
])
def test_bad_n16_structure_then_served(n16, client, mutate, match):
    obs = n16_obs()
    mutate(obs)
    with pytest.raises(RuntimeError, match=match):
        n16.get_action(obs)
    _ok_after(client)


@pytest.mark.parametrize("mutate, match", [
    (lambda o: o.update({"state.single_arm": np.zeros((1, 5), np.int64)}), "must be a float array"),
    (lambda o: o.update({"state.single_arm": np.zeros((1, 4))}), r"\(T, D\) with T=1, D=5"),
    (lambda o: o.update({"state.gripper": np.zeros((1, 1, 1))}), "all be batched"),
    (lambda o: o.pop("video.wrist"),
     r"flat observation \(GR00T N1.5 form\) keys must be exactly .* missing \['video.wrist'\]"),
    (lambda o: o.update({"state.elbow": np.zeros((1, 1))}), r"unexpected \['state.elbow'\]"),
    (lambda o: o.update({TASK: ["a", "b"]}), "one string for an unbatched observation"),
    (lambda o: o.update({TASK: 3}), "must be a string or a list of strings"),
    (lambda o: o.update({"video.front": np.zeros((1, 8, 8, 3), np.int16)}), "must be uint8, got int16"),
])
def test_bad_n15_observation_then_served(n15, client, mutate, match):
    obs = n15_obs()
    mutate(obs)
    with pytest.raises(RuntimeError, match=match):
        n15.get_action(obs)
    _ok_after(client)


@pytest.mark.parametrize("data, match", [
    (None, "get_action data must be"),
    ({"observation": {}, "options": None, "extra": 1}, r"unexpected \['extra'\]"),
    ({"observation": n16_obs(), "options": 5}, "options must be a map or nil"),
    ({"observation": [1, 2]}, "observation must be a map"),
])
def test_bad_get_action_data_then_served(client, data, match):
    with pytest.raises(PolicyServerError, match=match):
        client.call("get_action", data)
    _ok_after(client)


def test_oversized_message_gets_error_then_served(client):
    big = n16_obs(video__front=np.zeros((1, 1, 160, 160, 3), np.uint8))  # ~77 kB > 64 KiB
    with pytest.raises(PolicyServerError, match=f"exceeds the limit of {MAX_REQUEST_BYTES} bytes"):
        client.get_action(big)
    _ok_after(client)


def test_message_over_hard_limit_drops_only_that_connection(server, client):
    """Over HARD_LIMIT_FACTOR × the limit ZMQ drops the sender unread; other clients are served."""
    with PolicyClient("127.0.0.1", server.port, timeout_ms=500, api_token=TOKEN) as greedy:
        with pytest.raises(PolicyServerTimeout):
            greedy.request_raw(b"\x00" * (HARD_LIMIT_FACTOR * MAX_REQUEST_BYTES + 1))
    _ok_after(client)


def test_unknown_endpoint_then_served(client, n16):
    with pytest.raises(PolicyServerError, match="Unknown endpoint: 'get_actions'"):
        client.call("get_actions")
    with pytest.raises(RuntimeError, match="Unknown endpoint"):
        n16.call_endpoint("teleport", requires_input=False)
    _ok_after(client)


@pytest.mark.parametrize("payload, match", [
    (b"\xc1\xc1 not msgpack", "not a valid msgpack message"),
    (np.random.default_rng(7).bytes(64), ""),
    (b"", "not a valid msgpack message"),
    (packb([1, 2]), "request must be a map"),
    (packb({"endpoint": 5, "api_token": TOKEN}), "'endpoint' must be a string"),
    (msgpack.packb({"endpoint": "ping", "api_token": TOKEN, "data": {"__ndarray_class__": True, "as_npy": b"junk"}}),
     "invalid .npy payload"),
])
def test_garbage_then_served(client, payload, match):
    reply = raw(client, payload)
    assert isinstance(reply, dict) and match in reply.get("error", "") and reply["error"]
    _ok_after(client)


def test_multipart_refused_then_served(server, client):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(f"tcp://127.0.0.1:{server.port}")
    try:
        sock.send_multipart([packb({"endpoint": "ping", "api_token": TOKEN}), b"extra"])
        assert "multipart" in unpackb(sock.recv())["error"]
    finally:
        sock.close(0)
        ctx.term()
    _ok_after(client)


def test_reset_bad_data_then_served(client):
    with pytest.raises(PolicyServerError, match=r"reset takes only 'options'"):
        client.call("reset", {"options": None, "seed": 1})
    _ok_after(client)


# -- metadata, layout, kill -----------------------------------------------------------------------------
def test_metadata_has_layout_and_model_facts(client, onnx_model):
    import hashlib

    meta = client.metadata()
    assert meta["modality_layout"] == SO101.to_dict()
    assert meta["inputs"] == [{"name": "obs", "shape": ["batch", STATE_DIM], "dtype": "tensor(float)"}]
    assert meta["state_dim"] == STATE_DIM and meta["action_dim"] == ACTION_DIM and meta["action_horizon"] == 16
    assert meta["api_token_required"] is True and meta["kill_enabled"] is False
    assert meta["model_sha256"] == hashlib.sha256(onnx_model.read_bytes()).hexdigest()
    assert {"ping", "get_action", "reset", "get_modality_config", "kill", "get_metadata"} == set(meta["endpoints"])
    assert client.modality_config()["state"]["modality_keys"] == ["single_arm", "gripper"]


def test_model_without_layout_is_served_as_observation_to_action(flat_model, flat_mlp):
    with PolicyServer(flat_model, port=0, action_horizon=8).start_in_thread() as handle:
        with N16PolicyClient(port=handle.port) as c:
            config = c.get_modality_config()
            assert set(config) == {"state", "action"}  # no cameras, no instruction: left out
            x = np.random.default_rng(6).standard_normal((4, 1, FLAT_STATE_DIM)).astype(np.float32)
            action, _ = c.get_action({"video": {}, "state": {"observation": x}, "language": {}})
    assert action["action"].shape == (4, 8, FLAT_ACTION_DIM)
    np.testing.assert_allclose(action["action"][:, 0], reference(flat_mlp, x[:, 0]), atol=PARITY_ATOL)


def test_inconsistent_layout_refused_at_start(tmp_path):
    wide = export_onnx(make_mlp(state_dim=7), tmp_path / "wide.onnx", state_dim=7)
    with pytest.raises(ValueError, match="layout state widths .* add up to 6, but the model input is 7 wide"):
        PolicyServer(wide, port=0)
    bad = export_onnx(make_mlp(), tmp_path / "bad.onnx", raw_layout='{"state": [], "action": []}')
    with pytest.raises(ValueError, match=f"invalid '{LAYOUT_PROPERTY}' metadata: state: at least one key"):
        PolicyServer(bad, port=0)


def test_horizon_conflicting_with_layout_refused(onnx_model):
    with pytest.raises(ValueError, match="action horizon of 16, not 8"):
        PolicyServer(onnx_model, port=0, action_horizon=8)


def test_kill_when_enabled_stops_the_server(onnx_model):
    handle = PolicyServer(onnx_model, port=0, enable_kill=True).start_in_thread()
    try:
        with N16PolicyClient(port=handle.port) as c:
            assert c.kill_server() == {"status": "ok", "message": "Server is shutting down"}
        handle.thread.join(5)
        assert not handle.thread.is_alive() and handle.server.killed
    finally:
        handle.stop()


def test_modality_configs_formats():
    n16 = modality_configs(SO101)
    assert n16["state"]["as_json"]["modality_keys"] == ["single_arm", "gripper"]
    assert modality_configs(SO101, "n1.7") == n16  # N1.7's client decodes N1.6's encoding
    assert isinstance(modality_configs(SO101, "n1.5")["state"]["as_json"], str)
    with pytest.raises(ValueError, match="n1.6"):
        modality_configs(SO101, "n2")


# -- lifecycle --------------------------------------------------------------------------------------------
def test_timeout_against_stopped_server(onnx_model):
    handle = PolicyServer(onnx_model, host="127.0.0.1", port=0).start_in_thread()
    port = handle.port
    with PolicyClient("127.0.0.1", port, timeout_ms=300) as c:
        assert c.ping()["status"] == "ok"
        handle.stop()
        # a timeout, or PolicyServerDisconnected (a PolicyServerTimeout) when the drop is seen with the ping in flight
        with pytest.raises(PolicyServerTimeout, match=f"no reply from tcp://127.0.0.1:{port}"):
            c.ping()
        with pytest.raises(PolicyServerTimeout):  # the socket was reset: a second call times out too, not EFSM
            c.ping()
        handle2 = PolicyServer(onnx_model, host="127.0.0.1", port=port).start_in_thread()
        try:
            assert c.ping()["status"] == "ok"  # same client recovers once a server is back
        finally:
            handle2.stop()


def test_bind_conflict_raises(server, onnx_model):
    with pytest.raises(zmq.ZMQError, match="cannot bind"):
        PolicyServer(onnx_model, host="127.0.0.1", port=server.port).start_in_thread()


def test_bad_model_refused(tmp_path):
    with pytest.raises(FileNotFoundError):
        PolicyServer(tmp_path / "missing.onnx", port=0)


def test_cli_refuses_missing_model_open_bind_and_loose_token_file(tmp_path, onnx_model, monkeypatch):
    monkeypatch.delenv("SIM2REAL_POLICY_API_TOKEN", raising=False)
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(FileNotFoundError):
        main(["--model-path", str(tmp_path / "nope.onnx"), "--port", "0"])
    with pytest.raises(PermissionError, match="refusing to bind '0.0.0.0'"):
        main(["--model-path", str(onnx_model), "--host", "0.0.0.0", "--port", "0"])
    empty = tmp_path / "empty_token"
    empty.write_text("")
    empty.chmod(0o600)
    with pytest.raises(PermissionError, match="refusing to bind"):  # an empty token file means no token
        main(["--model-path", str(onnx_model), "--host", "0.0.0.0", "--port", "0", "--api-token-file", str(empty)])
    loose = tmp_path / "token"
    loose.write_text(TOKEN)
    loose.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        main(["--model-path", str(onnx_model), "--api-token-file", str(loose)])
    with pytest.raises(FileNotFoundError, match="api token file"):
        main(["--model-path", str(onnx_model), "--api-token-file", str(tmp_path / "absent")])
    monkeypatch.setenv("SIM2REAL_POLICY_API_TOKEN", "short")
    with pytest.raises(ValueError, match="at least 16 characters"):
        main(["--model-path", str(onnx_model), "--port", "0"])


def test_cli_boolean_flags_take_greengrass_values():
    """The recipe passes --enable-kill '{configuration:/EnableKill}', which Greengrass renders as true/false."""
    from sim2real.edge.policy_server import _bool

    assert _bool("true") is True and _bool("True") is True and _bool("1") is True
    assert _bool("false") is False and _bool("") is False
    with pytest.raises(Exception, match="expected true or false"):
        _bool("maybe")
