"""Fixtures for the edge tests: tiny torch MLPs exported to ONNX, and running policy servers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from edge_helpers import FLAT_ACTION_DIM, FLAT_STATE_DIM, MAX_REQUEST_BYTES, TOKEN, export_onnx, make_mlp

from sim2real.edge.policy_server import PolicyServer


@pytest.fixture(scope="session")
def mlp() -> torch.nn.Module:
    return make_mlp()


@pytest.fixture(scope="session")
def onnx_model(mlp, tmp_path_factory) -> Path:
    """The SO-101 toy policy (6 → 6) with its modality layout in the ONNX metadata."""
    return export_onnx(mlp, tmp_path_factory.mktemp("model") / "policy.onnx")


@pytest.fixture(scope="session")
def flat_mlp() -> torch.nn.Module:
    return make_mlp(seed=3, state_dim=FLAT_STATE_DIM, action_dim=FLAT_ACTION_DIM)


@pytest.fixture(scope="session")
def flat_model(flat_mlp, tmp_path_factory) -> Path:
    """A 10 → 4 policy exported without a modality layout."""
    return export_onnx(flat_mlp, tmp_path_factory.mktemp("flat") / "flat.onnx", state_dim=FLAT_STATE_DIM, layout=None)


@pytest.fixture(scope="module")
def server(onnx_model):
    """The SO-101 policy on loopback, with an api token and a 64 KiB request limit."""
    handle = PolicyServer(onnx_model, host="127.0.0.1", port=0, max_request_bytes=MAX_REQUEST_BYTES,
                          api_token=TOKEN).start_in_thread()
    yield handle
    handle.stop()
