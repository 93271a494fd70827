"""Shared helpers of the edge tests (tiny MLP policy and its ONNX export)."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

STATE_DIM, ACTION_DIM = 10, 4


def make_mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(STATE_DIM, 32), torch.nn.ELU(), torch.nn.Linear(32, 32),
                               torch.nn.ELU(), torch.nn.Linear(32, ACTION_DIM)).eval()


def export_onnx(module: torch.nn.Module, path: Path, state_dim: int = STATE_DIM) -> Path:
    """Export with the TorchScript exporter (the dynamo one needs onnxscript), dynamic batch axis."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(1, state_dim),), str(path), dynamo=False,
                          input_names=["obs"], output_names=["actions"],
                          dynamic_axes={"obs": {0: "batch"}, "actions": {0: "batch"}})
    return path
