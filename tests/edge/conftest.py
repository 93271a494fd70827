"""Fixtures for the edge tests: a tiny torch MLP exported to ONNX, and a running policy server."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from edge_helpers import export_onnx, make_mlp

from sim2real.edge.policy_server import PolicyServer


@pytest.fixture(scope="session")
def mlp() -> torch.nn.Module:
    return make_mlp()


@pytest.fixture(scope="session")
def onnx_model(mlp, tmp_path_factory) -> Path:
    return export_onnx(mlp, tmp_path_factory.mktemp("model") / "policy.onnx")


@pytest.fixture(scope="module")
def server(onnx_model):
    handle = PolicyServer(onnx_model, host="127.0.0.1", port=0, action_horizon=16,
                          max_request_bytes=64 * 1024).start_in_thread()
    yield handle
    handle.stop()
