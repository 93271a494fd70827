"""The policy server answering a GR00T N1.7 client (``modality_config_format="n1.7"``) over real ZMQ sockets.

N1.7's ``PolicyClient`` speaks N1.6's protocol (:mod:`gr00t_clients`); what is checked here is what an N1.7
client and N1.7's model-free ``ReplayPolicy`` (``gr00t/policy/replay_policy.py``) expect of each other's maps:
observations ``video`` uint8 ``(B, T, H, W, 3)``, ``state`` float32 ``(B, T, D)``, ``language`` ``[[str]]`` per
batch item; actions float32 ``(B, H, D)`` with ``H = delta_indices[-1] - delta_indices[0] + 1`` of the action
``ModalityConfig``.
"""

from __future__ import annotations

import numpy as np
import pytest
from edge_helpers import SO101, TOKEN
from gr00t_clients import N17PolicyClient

from sim2real.edge.onnx_policy import modality_configs
from sim2real.edge.policy_client import layout_observation
from sim2real.edge.policy_server import PolicyServer

TASK = "annotation.human.task_description"


@pytest.fixture(scope="module")
def n17(onnx_model):
    handle = PolicyServer(onnx_model, port=0, api_token=TOKEN, modality_config_format="n1.7").start_in_thread()
    try:
        with N17PolicyClient(port=handle.port, api_token=TOKEN) as client:
            yield client
    finally:
        handle.stop()


def _observation(batch: int, seed: int = 0) -> dict:
    obs = layout_observation(SO101, batch=batch, image_size=(8, 8), seed=seed)
    obs["language"] = {TASK: [["pick the cube"] for _ in range(batch)]}
    return obs


def test_n17_modality_config_is_n16s_encoding():
    assert modality_configs(SO101, "n1.7") == modality_configs(SO101, "n1.6")


def test_n17_client_ping_modality_config_reset(n17):
    assert n17.ping() is True
    config = n17.get_modality_config()
    assert set(config) == {"video", "state", "action", "language"}
    assert config["video"].modality_keys == ["front", "wrist"] and config["state"].delta_indices == [0]
    assert config["action"].modality_keys == ["single_arm", "gripper"]
    assert config["language"].modality_keys == [TASK]
    assert n17.reset() == {} and n17.reset({"episode": 1}) == {}


def test_n17_request_and_response_shapes(n17):
    obs = _observation(batch=3, seed=5)
    # the request as N1.7's ReplayPolicy.check_observation wants it
    assert all(v.dtype == np.uint8 and v.ndim == 5 and v.shape[-1] == 3 for v in obs["video"].values())
    assert all(v.dtype == np.float32 and v.ndim == 3 for v in obs["state"].values())
    action, info = n17.get_action(obs)
    delta = n17.get_modality_config()["action"].delta_indices
    horizon = delta[-1] - delta[0] + 1
    assert horizon == 16
    assert {k: (v.dtype, v.shape) for k, v in action.items()} == {
        "single_arm": (np.float32, (3, horizon, 5)), "gripper": (np.float32, (3, horizon, 1))}
    assert np.isfinite(action["single_arm"]).all() and np.isfinite(action["gripper"]).all()
    assert {"latency_ms", "inference_ms", "provider", "chunking", "ignored_modalities"} <= set(info)


def test_n17_observation_with_float64_state_is_refused_and_the_server_keeps_serving(n17):
    obs = _observation(batch=1)
    obs["state"]["gripper"] = obs["state"]["gripper"].astype(np.float64)
    with pytest.raises(RuntimeError, match="gripper"):
        n17.get_action(obs)
    assert n17.ping() is True
