"""ONNX export of the deterministic policy: parity with torch, names/shapes, S3 output."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from sim2real.workloads.export import PARITY_TOLERANCE, export_onnx
from sim2real.workloads.policy import deterministic_policy, load_checkpoint


def test_export_parity_and_io(trained_dir, tmp_path):
    ckpt_path = str(trained_dir / "agent_000002.pt")
    out = tmp_path / "policy.onnx"
    info = export_onnx(ckpt_path, str(out), "Reacher-v5")
    assert info["inputs"] == [{"name": "observation", "shape": ["batch", 10], "dtype": "float32"}]
    assert info["outputs"] == [{"name": "action", "shape": ["batch", 2], "dtype": "float32"}]
    assert info["parity_max_abs_diff"] <= PARITY_TOLERANCE == 1e-5
    # independent check on other inputs, batch of 5
    obs = np.random.default_rng(1).standard_normal((5, 10)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(["action"], {"observation": obs})[0]
    with torch.no_grad():
        expected = deterministic_policy(load_checkpoint(ckpt_path))(torch.from_numpy(obs)).numpy()
    assert np.max(np.abs(got - expected)) <= PARITY_TOLERANCE
    assert np.all(got <= 1.0) and np.all(got >= -1.0)  # clipped to Reacher's action bounds


def test_export_rejects_wrong_task(trained_dir, tmp_path):
    with pytest.raises(ValueError, match="InvertedPendulum-v5"):
        export_onnx(str(trained_dir / "agent_000002.pt"), str(tmp_path / "p.onnx"), "InvertedPendulum-v5")


def test_export_records_the_modality_layout(trained_dir, tmp_path):
    import onnx

    from sim2real.contract.modality import LAYOUT_PROPERTY, ModalityLayout

    ckpt_path = str(trained_dir / "agent_000002.pt")
    info = export_onnx(ckpt_path, str(tmp_path / "flat.onnx"))
    flat = ModalityLayout.flat(10, 2)
    assert info["modality_layout"] == flat.to_dict()
    props = {p.key: p.value for p in onnx.load(str(tmp_path / "flat.onnx")).metadata_props}
    assert ModalityLayout.from_json(props[LAYOUT_PROPERTY]) == flat

    reacher = {"state": [{"key": "joint_cos", "width": 2}, {"key": "joint_sin", "width": 2},
                         {"key": "target_position", "width": 2}, {"key": "joint_velocity", "width": 2},
                         {"key": "fingertip_to_target", "width": 2}],
               "action": [{"key": "joint_torque", "width": 2}], "action_horizon": 8}
    out = tmp_path / "named.onnx"
    info = export_onnx(ckpt_path, str(out), modality_layout=reacher)
    layout = ModalityLayout.from_json({p.key: p.value for p in onnx.load(str(out)).metadata_props}[LAYOUT_PROPERTY])
    assert layout.state_keys == ["joint_cos", "joint_sin", "target_position", "joint_velocity", "fingertip_to_target"]
    assert layout.action == (("joint_torque", 2),) and layout.action_horizon == 8
    assert info["modality_layout"] == layout.to_dict()

    wrong = {**reacher, "state": reacher["state"][:4]}
    with pytest.raises(ValueError, match=r"widths \(state 8, action 2\) do not match the policy \(observation 10"):
        export_onnx(ckpt_path, str(tmp_path / "wrong.onnx"), modality_layout=wrong)


def test_malicious_pickle_checkpoint_refused(tmp_path):
    """A checkpoint whose pickle stream calls a function is refused before anything in it runs."""
    import os

    from sim2real.workloads.policy import UnsafeCheckpointError

    proof = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return (os.makedirs, (str(proof),))

    evil = tmp_path / "agent_000001.pt"
    torch.save({"policy": {}, "sim2real": {"task": "Reacher-v5"}, "payload": Payload()}, evil)
    torch.load(evil, weights_only=False)  # the file is really malicious: a plain unpickle runs the payload
    assert proof.is_dir()
    proof.rmdir()
    with pytest.raises(UnsafeCheckpointError, match=r"references os.makedirs, which is outside the weights-only "
                                                    r"allow-list .* unpickling it could run arbitrary code"):
        load_checkpoint(str(evil))
    with pytest.raises(UnsafeCheckpointError):
        export_onnx(str(evil), str(tmp_path / "p.onnx"))
    assert not proof.exists()


def test_garbage_checkpoint_refused(tmp_path):
    bad = tmp_path / "agent_000001.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="is not a valid torch checkpoint"):
        load_checkpoint(str(bad))


def _lerobot_dataset(root, cameras):
    """A LeRobot v2.1 dataset's metadata for the toy Reacher policy (10 → 2): ``cameras`` is
    ``{name: (shape, names)}`` of its ``observation.images.<name>`` features."""
    import json

    features = {"observation.state": {"dtype": "float32", "shape": [10], "names": None},
                "action": {"dtype": "float32", "shape": [2], "names": None}}
    features.update({f"observation.images.{c}": {"dtype": "video", "shape": list(shape), "names": names}
                     for c, (shape, names) in cameras.items()})
    modality = {"state": {"arm": {"start": 0, "end": 10}}, "action": {"joint_torque": {"start": 0, "end": 2}},
                "video": {c: {"original_key": f"observation.images.{c}"} for c in cameras},
                "annotation": {"human.task_description": {"original_key": "task_index"}}}
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v2.1", "fps": 10, "features": features}))
    (root / "meta" / "modality.json").write_text(json.dumps(modality))
    return root


def test_export_declares_the_dataset_frame_sizes_and_the_server_refuses_other_sizes(trained_dir, tmp_path):
    """End to end at toy size: the layout the robot receives declares each camera's size from the dataset's
    meta/info.json, and a policy server started from that model refuses a frame of another size."""
    import onnx

    from sim2real.contract.modality import LAYOUT_PROPERTY, ModalityLayout
    from sim2real.edge.policy_client import PolicyClient, PolicyServerError, layout_observation
    from sim2real.edge.policy_server import PolicyServer

    dataset = _lerobot_dataset(tmp_path / "dataset", {"front": ([48, 64, 3], ["height", "width", "channels"]),
                                                      "wrist": ([3, 24, 32], ["channel", "height", "width"])})
    out = tmp_path / "policy.onnx"
    info = export_onnx(str(trained_dir / "agent_000002.pt"), str(out), dataset=str(dataset))
    layout = ModalityLayout.from_json({p.key: p.value for p in onnx.load(str(out)).metadata_props}[LAYOUT_PROPERTY])
    assert layout.image_sizes == (("front", 48, 64), ("wrist", 24, 32))
    assert info["modality_layout"]["video"] == [{"key": "front", "height": 48, "width": 64},
                                                {"key": "wrist", "height": 24, "width": 32}]
    assert layout.state == (("arm", 10),) and layout.language == ("annotation.human.task_description",)

    with PolicyServer(str(out), port=0).start_in_thread() as handle, PolicyClient(port=handle.port) as client:
        action, _ = client.get_action(layout_observation(layout))  # frames of the declared sizes
        assert action["joint_torque"].shape == (1, 16, 2)
        wrong = layout_observation(layout)
        wrong["video"]["front"] = np.zeros((1, 1, 64, 48, 3), np.uint8)  # height and width swapped
        with pytest.raises(PolicyServerError, match=r"video\['front'\] frames must be 48x64 \(H x W\)"):
            client.get_action(wrong)


def test_export_takes_frame_sizes_for_a_given_layout_from_the_dataset(trained_dir, tmp_path, caplog):
    ckpt = str(trained_dir / "agent_000002.pt")
    dataset = str(_lerobot_dataset(tmp_path / "dataset", {"front": ([48, 64, 3], ["height", "width", "channels"])}))
    layout = {"state": [{"key": "arm", "width": 10}], "action": [{"key": "joint_torque", "width": 2}],
              "action_horizon": 4, "video": ["front"]}
    info = export_onnx(ckpt, str(tmp_path / "a.onnx"), modality_layout=layout, dataset=dataset)
    assert info["modality_layout"]["video"] == [{"key": "front", "height": 48, "width": 64}]
    assert info["modality_layout"]["action_horizon"] == 4  # the given layout's, only the sizes come from the data
    assert "no declared frame size" not in caplog.text
    export_onnx(ckpt, str(tmp_path / "unsized.onnx"), modality_layout=layout)  # no dataset: not size-checked, said so
    assert "cameras ['front'] have no declared frame size: the policy server will not check" in caplog.text

    with pytest.raises(ValueError, match=r"camera 'wrist' of the modality layout is not a camera of the dataset"):
        export_onnx(ckpt, str(tmp_path / "b.onnx"), modality_layout={**layout, "video": ["wrist"]}, dataset=dataset)
    sized = {**layout, "video": [{"key": "front", "height": 64, "width": 64}]}
    with pytest.raises(ValueError, match=r"declares 64x64 frames, the dataset .* has 48x64"):
        export_onnx(ckpt, str(tmp_path / "c.onnx"), modality_layout=sized, dataset=dataset)
    (tmp_path / "dataset" / "meta" / "modality.json").unlink()
    with pytest.raises(ValueError, match=r"meta/modality.json is missing"):
        export_onnx(ckpt, str(tmp_path / "d.onnx"), dataset=dataset)
