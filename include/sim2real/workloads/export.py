"""Export a trained policy (the deterministic mean-action network) to ONNX, with a parity check.

The exported graph is :class:`sim2real.workloads.policy.DeterministicPolicy`: observation standardiser
(the checkpoint's RunningStandardScaler statistics) → policy MLP → clip to the action bounds. It is what
the evaluator runs, and what the edge policy server serves through onnxruntime.

Uses PyTorch's TorchScript-based ONNX exporter (``torch.onnx.export(..., dynamo=False)``; the dynamo
exporter needs ``onnxscript``, which the workload image does not ship), opset 17.

The model carries its modality layout (:class:`sim2real.contract.modality.ModalityLayout`: state keys in
concatenation order with widths, action keys with widths, action horizon, cameras, language keys) as the
ONNX metadata property ``sim2real:modality_layout``; the edge policy server reads it to check requests
and to split the action vector into one array per action key. Given the LeRobot dataset the policy was
trained on (``dataset=``), the export declares each camera's frame size (height, width) from the
dataset's ``meta/info.json``, so the server refuses frames of another size.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from typing import Any

from sim2real.contract import storage
from sim2real.contract.modality import DEFAULT_ACTION_HORIZON, LAYOUT_PROPERTY, LayoutError, ModalityLayout

INPUT_NAME = "observation"
OUTPUT_NAME = "action"
OPSET = 17
PARITY_TOLERANCE = 1e-5  # max |onnxruntime - torch| over the parity batch (float32 MLP: differences ~1e-7)

log = logging.getLogger(__name__)


def dataset_layout(dataset: str, action_horizon: int = DEFAULT_ACTION_HORIZON) -> ModalityLayout:
    """The modality layout of a LeRobot dataset (local folder or ``s3://`` prefix of its root), from its
    ``meta/info.json`` and GR00T's ``meta/modality.json`` (:meth:`ModalityLayout.from_lerobot`): keys,
    widths, and each camera's frame size.

    :raises ValueError: a metadata file is missing or not JSON, or the layout cannot be built (the
        message names the entry).
    """
    docs = []
    for name in ("info.json", "modality.json"):
        uri = storage.join(dataset, "meta", name)
        try:
            docs.append(json.loads(storage.read_bytes(uri)))
        except FileNotFoundError as exc:
            raise ValueError(f"dataset {dataset}: meta/{name} is missing (a LeRobot dataset with GR00T's "
                             "meta/modality.json is needed to describe the model's modalities)") from exc
        except ValueError as exc:
            raise ValueError(f"dataset {dataset}: meta/{name} is not JSON: {exc}") from exc
    try:
        return ModalityLayout.from_lerobot(docs[0], docs[1], action_horizon=action_horizon)
    except LayoutError as exc:
        raise ValueError(f"dataset {dataset}: {exc}") from exc


def _with_dataset_frame_sizes(layout: ModalityLayout, data: ModalityLayout, dataset: str) -> ModalityLayout:
    """``layout`` with each camera's frame size taken from the dataset's layout ``data``."""
    sizes = []
    for camera in layout.video:
        size = data.image_size(camera)
        if size is None:
            raise ValueError(f"camera {camera!r} of the modality layout is not a camera of the dataset {dataset} "
                             f"(its cameras: {list(data.video)})")
        declared = layout.image_size(camera)
        if declared is not None and declared != size:
            raise ValueError(f"camera {camera!r}: the modality layout declares {declared[0]}x{declared[1]} frames, "
                             f"the dataset {dataset} has {size[0]}x{size[1]}")
        sizes.append((camera, *size))
    return dataclasses.replace(layout, image_sizes=tuple(sizes))


def modality_layout_for(meta: dict[str, Any], layout: ModalityLayout | dict | None = None,
                        dataset: str | None = None) -> ModalityLayout:
    """The layout to record for a checkpoint whose ``sim2real`` metadata is ``meta``.

    :param layout: explicit layout (object or :meth:`ModalityLayout.to_dict` form); else the checkpoint's
        ``modality_layout`` entry if it has one; else the ``dataset``'s layout (:func:`dataset_layout`)
        when one is given; else :meth:`ModalityLayout.flat` (``observation`` → ``action``, 16-step chunks).
    :param dataset: the LeRobot dataset the policy was trained on (local folder or ``s3://`` prefix):
        every camera of the layout gets its frame size (height, width) from the dataset's
        ``meta/info.json``.
    :raises ValueError: the layout's state/action widths do not add up to the network's input/output
        width; a camera of the layout that the dataset does not have, or whose declared size differs
        from the dataset's; unreadable dataset metadata.
    """
    chosen = layout if layout is not None else meta.get("modality_layout")
    data = dataset_layout(dataset) if dataset is not None else None
    if chosen is None:
        result = data if data is not None else ModalityLayout.flat(int(meta["obs_dim"]), int(meta["act_dim"]))
    else:
        result = chosen if isinstance(chosen, ModalityLayout) else ModalityLayout.from_dict(chosen)
        if data is not None:
            result = _with_dataset_frame_sizes(result, data, str(dataset))
    if result.state_dim != int(meta["obs_dim"]) or result.action_dim != int(meta["act_dim"]):
        raise ValueError(f"modality layout widths (state {result.state_dim}, action {result.action_dim}) do not match "
                         f"the policy (observation {meta['obs_dim']}, action {meta['act_dim']})")
    return result


def export_onnx(checkpoint_path_or_uri: str, onnx_out: str, task: str | None = None, *,
                parity_samples: int = 256, seed: int = 0,
                modality_layout: ModalityLayout | dict | None = None, dataset: str | None = None) -> dict[str, Any]:
    """Export the checkpoint's deterministic policy to ONNX and check it against torch.

    :param checkpoint_path_or_uri: local path or ``s3://`` URI of a trainer checkpoint (``agent_<n>.pt``).
    :param onnx_out: where to write the ``.onnx`` file (local path or ``s3://`` URI).
    :param task: expected task id; when given it must equal the checkpoint's task.
    :param parity_samples: batch size of the parity check. Inputs are the observation statistics'
        mean ± 3 std (standard normal draws, seeded with ``seed``), so they cover the standardiser's clip.
    :param modality_layout: see :func:`modality_layout_for`; recorded in the model's metadata.
    :param dataset: the LeRobot dataset the policy was trained on (see :func:`modality_layout_for`): the
        recorded layout declares each camera's frame size from it.
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
    layout = modality_layout_for(meta, modality_layout, dataset)
    unsized = [c for c in layout.video if layout.image_size(c) is None]
    if unsized:
        log.warning("cameras %s have no declared frame size: the policy server will not check their frames' size "
                    "(export with dataset= to take the sizes from the training data)", unsized)

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
