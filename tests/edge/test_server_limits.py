"""Policy server hardening over real ZMQ sockets on 127.0.0.1: authentication before any array is decoded,
per-request limits answered with an error reply, camera frame sizes from the modality layout, CLIs that
take no abbreviations and never echo a secret."""

from __future__ import annotations

import dataclasses
import logging

import msgpack
import numpy as np
import pytest
from edge_helpers import SO101, TOKEN, export_onnx, make_mlp
from gr00t_clients import N15RobotClient, N16PolicyClient

import sim2real.edge.codec as codec
from sim2real.contract.modality import ModalityLayout
from sim2real.edge.codec import MISSING, CodecError, packb, read_request_token
from sim2real.edge.policy_client import PolicyClient, PolicyServerDisconnected, layout_observation
from sim2real.edge.policy_server import UNAUTHORIZED, PolicyServer, main

TASK = "annotation.human.task_description"
MAX_ARRAYS = 32
#: A request of many tiny arrays: 4,000 of them, ~0.5 MB (the reported attack used 95,000 in 15 MiB).
MANY = 4000


@pytest.fixture
def npy_decodes(monkeypatch):
    """Counts the arrays the codec builds (every array goes through ``codec.load_npy``)."""
    calls = []
    real = codec.load_npy

    def counting(raw):
        calls.append(len(raw))
        return real(raw)

    monkeypatch.setattr(codec, "load_npy", counting)
    return calls


@pytest.fixture(scope="module")
def guarded(onnx_model):
    """A token server with the default 16 MiB request limit and a small array cap."""
    handle = PolicyServer(onnx_model, port=0, api_token=TOKEN, max_arrays=MAX_ARRAYS).start_in_thread()
    yield handle
    handle.stop()


def many_arrays(n: int = MANY, token: str | None = None) -> bytes:
    """A get_action request whose data is ``n`` one-byte arrays, encoded as GR00T clients do (token last)."""
    req = {"endpoint": "get_action", "data": {f"k{i}": np.zeros(1, np.uint8) for i in range(n)}}
    if token is not None:
        req["api_token"] = token
    return packb(req)


# -- authentication before decoding ------------------------------------------------------------------
@pytest.mark.parametrize("token", [None, "wrong-token-0123456789", 7])
def test_unauthenticated_many_array_request_refused_before_decode(guarded, npy_decodes, token, caplog):
    caplog.set_level(logging.WARNING, logger="sim2real.edge.policy_server")
    guarded.server.rejections._last = float("-inf")
    with PolicyClient(port=guarded.port, api_token=TOKEN) as client:
        assert msgpack.unpackb(client.request_raw(many_arrays(token=token))) == {"error": UNAUTHORIZED}
        assert npy_decodes == []  # not one array built for a peer without the token
        assert client.ping()["status"] == "ok"
    assert "refused request (" in caplog.text and TOKEN not in caplog.text


def test_authenticated_request_over_the_array_cap_refused_after_at_most_the_cap(guarded, npy_decodes):
    with PolicyClient(port=guarded.port, api_token=TOKEN) as client:
        reply = msgpack.unpackb(client.request_raw(many_arrays(token=TOKEN)))
        assert reply == {"error": f"request holds more than {MAX_ARRAYS} arrays, the limit of this server"}
        assert len(npy_decodes) <= MAX_ARRAYS
        action, _ = client.get_action(layout_observation(SO101, image_size=(8, 8)))
        assert action["single_arm"].shape == (1, 16, 5)
        assert client.metadata()["max_arrays"] == MAX_ARRAYS


def test_upstream_clients_authenticate_with_the_token_in_the_request_map(guarded):
    """GR00T's clients add ``api_token`` to the request map after ``data``: still read before decoding."""
    obs = layout_observation(SO101, image_size=(8, 8))
    obs["language"] = {TASK: [["pick the cube"]]}
    with N16PolicyClient(port=guarded.port, api_token=TOKEN) as n16:
        assert n16.get_action(obs)[0]["gripper"].shape == (1, 16, 1)
    with N16PolicyClient(port=guarded.port, api_token="wrong-token-0123456789") as n16:
        with pytest.raises(RuntimeError, match=UNAUTHORIZED):
            n16.get_action(obs)


def test_read_request_token_reads_only_the_token():
    assert read_request_token(msgpack.packb({"endpoint": "ping", "data": {"x": [1] * 100}, "api_token": "t"})) == "t"
    assert read_request_token(msgpack.packb({"api_token": "first", "data": b"x" * 100_000})) == "first"
    assert read_request_token(msgpack.packb({"endpoint": "ping"})) is MISSING
    assert read_request_token(msgpack.packb({"api_token": None})) is None
    for bad, match in [(b"", "empty"), (msgpack.packb([1]), "must be a map"), (b"\xc1", "no msgpack type"),
                       (msgpack.packb({"api_token": "t"})[:-1], "not a valid msgpack message"),
                       (msgpack.packb({"api_token": ["t"] * 3}), "not a valid msgpack message"),
                       (msgpack.packb({("k",) * 3: 1}), "not a valid msgpack message"),
                       (msgpack.packb({"api_token": "t" * 5000}), "not a valid msgpack message")]:
        with pytest.raises(CodecError, match=match):
            read_request_token(bad)


# -- size limits: an error reply, or at once a clear client error ---------------------------------------
def test_request_over_the_limit_gets_an_error_reply_from_upstream_clients(onnx_model):
    with PolicyServer(onnx_model, port=0, max_request_bytes=64 * 1024).start_in_thread() as handle:
        obs = layout_observation(SO101, image_size=(160, 160))  # ~154 kB: over the limit, under the frame ceiling
        obs["language"] = {TASK: [["pick"]]}
        with N16PolicyClient(port=handle.port, timeout_ms=10_000) as n16:
            with pytest.raises(RuntimeError, match="exceeds the limit of 65536 bytes"):
                n16.get_action(obs)
            assert n16.ping()


def test_request_far_over_the_limit_still_gets_an_error_reply(onnx_model):
    """GR00T's clients apply no receive timeout: a request the server never answers hangs them. The default
    frame ceiling is far above the request limit, so a request 8 times over it (ZMQ used to drop anything
    over 4 times) is answered."""
    with PolicyServer(onnx_model, port=0, max_request_bytes=64 * 1024).start_in_thread() as handle:
        assert handle.server.max_frame_bytes == 16 * 64 * 1024
        with N16PolicyClient(port=handle.port, timeout_ms=20_000) as n16:
            with pytest.raises(RuntimeError, match=r"request of \d+ bytes exceeds the limit of 65536 bytes"):
                n16.call_endpoint("get_action", {"observation": {"blob": np.zeros(8 * 64 * 1024, np.uint8)}})
            assert n16.ping()


def test_request_over_the_frame_ceiling_fails_at_once_with_a_reason(onnx_model):
    """ZMQ disconnects the sender of a message over ZMQ_MAXMSGSIZE without delivering it: the client is told
    so as soon as the connection drops, instead of waiting for its (here 60 s) timeout."""
    with PolicyServer(onnx_model, port=0, max_request_bytes=64 * 1024, max_frame_bytes=128 * 1024).start_in_thread() \
            as handle, PolicyClient(port=handle.port, timeout_ms=60_000) as client:
        assert client.metadata()["max_frame_bytes"] == 128 * 1024
        with pytest.raises(PolicyServerDisconnected, match="larger than its frame ceiling"):
            client.request_raw(b"\x00" * (128 * 1024 + 1))
        assert client.ping()["status"] == "ok"  # the client reconnected


def test_limits_validated(onnx_model):
    with pytest.raises(ValueError, match="max_frame_bytes .* must be larger than max_request_bytes"):
        PolicyServer(onnx_model, port=0, max_request_bytes=4096, max_frame_bytes=4096)
    with pytest.raises(ValueError, match="max_arrays must be >= 1"):
        PolicyServer(onnx_model, port=0, max_arrays=0)


# -- camera frame sizes ------------------------------------------------------------------------------------
SIZED = dataclasses.replace(SO101, image_sizes=(("front", 8, 8), ("wrist", 6, 10)))


@pytest.fixture(scope="module")
def sized_server(tmp_path_factory):
    model = export_onnx(make_mlp(), tmp_path_factory.mktemp("sized") / "sized.onnx", layout=SIZED)
    handle = PolicyServer(model, port=0).start_in_thread()
    yield handle
    handle.stop()


def test_frames_of_the_declared_size_served(sized_server):
    obs = layout_observation(SIZED)  # the layout's sizes: front 8x8, wrist 6x10
    assert obs["video"]["wrist"].shape == (1, 1, 6, 10, 3)
    with N16PolicyClient(port=sized_server.port) as n16:
        assert n16.get_action(obs)[0]["single_arm"].shape == (1, 16, 5)
    with PolicyClient(port=sized_server.port) as client:
        assert ModalityLayout.from_dict(client.metadata()["modality_layout"]) == SIZED


def test_wrong_frame_size_refused_naming_the_camera_and_both_shapes(sized_server):
    obs = layout_observation(SIZED, batch=2)
    obs["video"]["wrist"] = np.zeros((2, 1, 8, 8, 3), np.uint8)
    with N16PolicyClient(port=sized_server.port) as n16:
        with pytest.raises(RuntimeError, match=r"video\['wrist'\] frames must be 6x10 \(H x W\).* expected shape "
                                               r"\(2, 1, 6, 10, 3\), got \(2, 1, 8, 8, 3\)"):
            n16.get_action(obs)
    flat = {"video.front": np.zeros((1, 8, 8, 3), np.uint8), "video.wrist": np.zeros((1, 10, 6, 3), np.uint8),
            "state.single_arm": np.zeros((1, 5)), "state.gripper": np.zeros((1, 1)), TASK: "pick"}
    with N15RobotClient(port=sized_server.port) as n15:
        with pytest.raises(RuntimeError, match=r"observation\['video.wrist'\] frames must be 6x10 .* expected shape "
                                               r"\(1, 6, 10, 3\), got \(1, 10, 6, 3\)"):
            n15.get_action(flat)


# -- command lines -----------------------------------------------------------------------------------------
def test_api_token_option_refused_without_echoing_the_token(onnx_model, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    for argv in (["--api-token", TOKEN], [f"--api-token={TOKEN}"]):
        with pytest.raises(SystemExit) as exc:
            main(["--model-path", str(onnx_model), "--port", "0", *argv])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "unrecognized arguments: --api-token (and 1 value(s), not shown)" in err
        assert TOKEN not in err and TOKEN not in caplog.text


@pytest.mark.parametrize("module, argv", [
    ("sim2real.edge.policy_server", ["--model-path", "m.onnx", "--max-req", "4096"]),
    ("sim2real.edge.api_token", ["--secret", "name", "--out", "f"]),
    ("sim2real.edge.setup_component", ["--model-uri", "s3://b/k", "--sha256", "0" * 64, "--work-dir", "w",
                                       "--prec", "fp32"]),
    ("sim2real.edge.benchmark", ["--model", "m.onnx"]),
])
def test_edge_clis_take_no_abbreviations(module, argv, capsys):
    import importlib

    with pytest.raises(SystemExit) as exc:
        importlib.import_module(module).main(argv)
    assert exc.value.code == 2 and "unrecognized arguments: --" in capsys.readouterr().err


def test_unknown_words_are_counted_not_echoed(capsys):
    from sim2real.edge.security import StrictArgumentParser

    parser = StrictArgumentParser(prog="tool")
    parser.add_argument("--port", type=int)
    with pytest.raises(SystemExit):
        parser.parse_args(["--port", "1", TOKEN])
    err = capsys.readouterr().err
    assert "unrecognized arguments: 1 value(s), not shown" in err and TOKEN not in err
