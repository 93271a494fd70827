"""Export a trained policy (the deterministic mean-action network) to ONNX, with a parity check.

The exported graph is :class:`sim2real.workloads.policy.DeterministicPolicy`: observation standardiser
(the checkpoint's RunningStandardScaler statistics) → policy MLP → clip to the action bounds. It is what
the evaluator runs, and what the edge policy server serves through onnxruntime.

Uses PyTorch's TorchScript-based ONNX exporter (``torch.onnx.export(..., dynamo=False)``; the dynamo
exporter needs ``onnxscript``, which the workload image does not ship), opset 17.

The model carries its modality layout (:class:`sim2real.contract.modality.ModalityLayout`: state keys in
concatenation order with widths, action keys with widths, action horizon, cameras, language keys) as the
ONNX metadata property ``sim2real:modality_layout``; the edge policy server reads it to check requests
and to split the action vector into one array per action key.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from sim2real.contract.modality import LAYOUT_PROPERTY, ModalityLayout
from sim2real.contract import storage

INPUT_NAME = "observation"
OUTPUT_NAME = "action"
OPSET = 17
PARITY_TOLERANCE = 1e-5  # max |onnxruntime - torch| over the parity batch (float32 MLP: differences ~1e-7)


def modality_layout_for(meta: dict[str, Any], layout: ModalityLayout | dict | None = None) -> ModalityLayout:
    """The layout to record for a checkpoint whose ``sim2real`` metadata is ``meta``.

    :param layout: explicit layout (object or :meth:`ModalityLayout.to_dict` form); else the checkpoint's
        ``modality_layout`` entry if it has one; else :meth:`ModalityLayout.flat` (``observation`` →
        ``action``, 16-step chunks).
    :raises ValueError: the layout's state/action widths do not add up to the network's input/output width.
    """
    chosen = layout if layout is not None else meta.get("modality_layout")
    if chosen is None:
        result = ModalityLayout.flat(int(meta["obs_dim"]), int(meta["act_dim"]))
    else:
        result = chosen if isinstance(chosen, ModalityLayout) else ModalityLayout.from_dict(chosen)
    if result.state_dim != int(meta["obs_dim"]) or result.action_dim != int(meta["act_dim"]):
        raise ValueError(f"modality layout widths (state {result.state_dim}, action {result.action_dim}) do not match "
                         f"the policy (observation {meta['obs_dim']}, action {meta['act_dim']})")
    return result


def export_onnx(checkpoint_path_or_uri: str, onnx_out: str, task: str | None = None, *,
                parity_samples: int = 256, seed: int = 0,
                modality_layout: ModalityLayout | dict | None = None) -> dict[str, Any]:
    """Export the checkpoint's deterministic policy to ONNX and check it against torch.

    :param checkpoint_path_or_uri: local path or ``s3://`` URI of a trainer checkpoint (``agent_<n>.pt``).
    :param onnx_out: where to write the ``.onnx`` file (local path or ``s3://`` URI).
    :param task: expected task id; when given it must equal the checkpoint's task.
    :param parity_samples: batch size of the parity check. Inputs are the observation statistics'
        mean ± 3 std (standard normal draws, seeded with ``seed``), so they cover the standardiser's clip.
    :param modality_layout: see :func:`modality_layout_for`; recorded in the model's metadata.
    :return: ``{"onnx_uri", "task", "iteration", "opset", "inputs": [{"name","shape","dtype"}],
        "outputs": [...], "parity_max_abs_diff", "parity_tolerance", "parity_samples", "sha256",
        "modality_layout": ModalityLayout.to_dict()}``;
        shapes use ``"batch"`` for the dynamic first axis (e.g. ``["batch", 10]`` in, ``["batch", 2]`` out for Reacher-v5).
    :raises ValueError: task mismatch, not a sim2real checkpoint (or one refused by the weights-only
        loader), or a layout that does not fit the policy.
    :raises AssertionError: parity max abs diff above :data:`PARITY_TOLERANCE`.
    """
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    from sim2real.workloads.policy import deterministic_policy, load_checkpoint

    ckpt = load_checkpoint(checkpoint_path_or_uri)
    meta = ckpt["sim2real"]
    if task is not None and meta.get("task") != task:
        raise ValueError(f"checkpoint {checkpoint_path_or_uri} is for task {meta.get('task')!r}, not {task!r}")
    policy = deterministic_policy(ckpt)
    obs_dim = int(meta["obs_dim"])
    layout = modality_layout_for(meta, modality_layout)

    with tempfile.TemporaryDirectory(prefix="sim2real-onnx-") as tmp:
        local = os.path.join(tmp, "policy.onnx")
        torch.onnx.export(
            policy, (torch.zeros(1, obs_dim),), local, dynamo=False, opset_version=OPSET,
            input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
        )
        model = onnx.load(local)
        onnx.helper.set_model_props(model, {LAYOUT_PROPERTY: layout.to_json()})
        onnx.save(model, local)
        onnx.checker.check_model(model)

        rng = np.random.default_rng(seed)
        mean = policy.obs_mean.numpy()
        std = policy.obs_std.numpy()
        obs = (mean + 3.0 * std * rng.standard_normal((parity_samples, obs_dim))).astype(np.float32)
        with torch.no_grad():
            expected = policy(torch.from_numpy(obs)).numpy()
        session = ort.InferenceSession(local, providers=["CPUExecutionProvider"])
        got = session.run([OUTPUT_NAME], {INPUT_NAME: obs})[0]
        max_diff = float(np.max(np.abs(got - expected)))
        if not max_diff <= PARITY_TOLERANCE:
            raise AssertionError(f"ONNX parity failed: max abs diff {max_diff} > {PARITY_TOLERANCE}")

        def _io(values):
            out = []
            for v in values:
                dims = [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
                out.append({"name": v.name, "shape": dims, "dtype": "float32"})
            return out

        info = {
            "onnx_uri": onnx_out,
            "task": meta.get("task"),
            "iteration": meta.get("iteration"),
            "opset": OPSET,
            "inputs": _io(model.graph.input),
            "outputs": _io(model.graph.output),
            "parity_max_abs_diff": max_diff,
            "parity_tolerance": PARITY_TOLERANCE,
            "parity_samples": parity_samples,
            "sha256": storage.sha256_file(local),
            "modality_layout": layout.to_dict(),
        }
        storage.upload_file(local, onnx_out)
    return info
