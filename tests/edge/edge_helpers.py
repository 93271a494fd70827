"""Shared helpers of the edge tests: tiny MLP policies, their ONNX export, the SO-101 modality layout."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import torch

from sim2real.contract.modality import LAYOUT_PROPERTY, ModalityLayout

#: The SO-101 arm as GR00T sees it: cameras front and wrist; state/action single_arm (5) and gripper (1);
#: one instruction; 16-step action chunks.
SO101 = ModalityLayout(state=(("single_arm", 5), ("gripper", 1)), action=(("single_arm", 5), ("gripper", 1)),
                       action_horizon=16, video=("front", "wrist"), language=("annotation.human.task_description",))
STATE_DIM, ACTION_DIM = SO101.state_dim, SO101.action_dim
#: A model exported without a layout (an older export or a foreign ONNX file).
FLAT_STATE_DIM, FLAT_ACTION_DIM = 10, 4
#: The api token and request limit of the ``server`` fixture.
TOKEN = "test-token-0123456789abcdef"
MAX_REQUEST_BYTES = 64 * 1024


def make_mlp(seed: int = 0, state_dim: int = STATE_DIM, action_dim: int = ACTION_DIM) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(state_dim, 32), torch.nn.ELU(), torch.nn.Linear(32, 32),
                               torch.nn.ELU(), torch.nn.Linear(32, action_dim)).eval()


def export_onnx(module: torch.nn.Module, path: Path, state_dim: int = STATE_DIM,
                layout: ModalityLayout | None = SO101, raw_layout: str | None = None) -> Path:
    """Export with the TorchScript exporter (the dynamo one needs onnxscript), dynamic batch axis, and the
    modality layout in the metadata (``raw_layout`` is written verbatim instead, when given)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(1, state_dim),), str(path), dynamo=False,
                          input_names=["obs"], output_names=["actions"],
                          dynamic_axes={"obs": {0: "batch"}, "actions": {0: "batch"}})
    if layout is not None or raw_layout is not None:
        model = onnx.load(str(path))
        text = raw_layout if raw_layout is not None else layout.to_json()
        onnx.helper.set_model_props(model, {LAYOUT_PROPERTY: text})
        onnx.save(model, str(path))
    return path
