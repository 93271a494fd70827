"""ModalityLayout: construction checks and the JSON form carried in the ONNX metadata."""

from __future__ import annotations

import pytest
from edge_helpers import SO101

from sim2real.contract.modality import LayoutError, ModalityLayout


def test_round_trip_and_widths():
    assert ModalityLayout.from_json(SO101.to_json()) == SO101
    assert SO101.state_dim == 6 and SO101.action_dim == 6 and SO101.state_keys == ["single_arm", "gripper"]
    flat = ModalityLayout.flat(10, 2, action_horizon=4)
    assert flat.to_dict() == {"version": 1, "state": [{"key": "observation", "width": 10}],
                              "action": [{"key": "action", "width": 2}], "action_horizon": 4, "state_horizon": 1,
                              "video": [], "video_horizon": 1, "language": []}


@pytest.mark.parametrize("doc, match", [
    ({"state": [], "action": [{"key": "a", "width": 1}]}, "state: at least one key"),
    ({"state": [{"key": "a", "width": 0}], "action": [{"key": "a", "width": 1}]}, "width of 'a' must be a positive"),
    ({"state": [{"key": "a", "width": True}], "action": [{"key": "a", "width": 1}]}, "positive integer"),
    ({"state": [{"key": "a", "width": 1}, {"key": "a", "width": 2}], "action": [{"key": "b", "width": 1}]},
     r"state: duplicate keys \['a'\]"),
    ({"state": [{"key": "a b", "width": 1}], "action": [{"key": "b", "width": 1}]}, "key 'a b' must be"),
    ({"state": [{"key": "a", "width": 1}], "action": [{"key": "b", "width": 1}], "action_horizon": 0},
     r"action_horizon must be an integer in \[1, 1024\]"),
    ({"state": [{"key": "a", "width": 1}], "action": [{"key": "b", "width": 1}], "video": ["front", "front"]},
     "video: duplicate keys"),
    ({"state": [{"key": "a", "width": 1}], "action": [{"key": "b", "width": 1}], "cameras": []},
     r"unknown modality layout fields \['cameras'\]"),
    ({"version": 2, "state": [{"key": "a", "width": 1}], "action": [{"key": "b", "width": 1}]}, "version 2"),
    ({"state": "a", "action": []}, "state must be a list"),
    ([1], "must be a JSON object"),
])
def test_invalid_layouts_refused(doc, match):
    with pytest.raises(LayoutError, match=match):
        ModalityLayout.from_dict(doc)


def test_invalid_json_refused():
    with pytest.raises(LayoutError, match="not valid JSON"):
        ModalityLayout.from_json("{state")


def test_camera_frame_sizes_round_trip():
    doc = {"state": [{"key": "arm", "width": 2}], "action": [{"key": "arm", "width": 2}],
           "video": [{"key": "front", "height": 480, "width": 640}, "wrist"]}
    layout = ModalityLayout.from_dict(doc)
    assert layout.video == ("front", "wrist") and layout.image_sizes == (("front", 480, 640),)
    assert layout.image_size("front") == (480, 640) and layout.image_size("wrist") is None
    assert layout.to_dict()["video"] == doc["video"]
    assert ModalityLayout.from_json(layout.to_json()) == layout
    assert ModalityLayout(state=(("arm", 2),), action=(("arm", 2),), video=("front", "wrist"),
                          image_sizes=(("front", 480, 640),)) == layout


@pytest.mark.parametrize("video, sizes, match", [
    ([{"key": "front", "height": 0, "width": 640}], (), r"height of 'front' must be an integer in \[1, 16384\]"),
    ([{"key": "front", "height": 480}], (), r"width of 'front' must be an integer"),
    ([{"key": "front", "height": 4, "width": 4, "depth": 3}], (), "a camera name or"),
    (["front"], (("wrist", 4, 4),), r"'wrist' is not a camera of this layout"),
    ([{"key": "front", "height": 4, "width": 4}], (("front", 4, 4),), "'front' declared twice"),
])
def test_invalid_camera_frame_sizes_refused(video, sizes, match):
    with pytest.raises(LayoutError, match=match):
        ModalityLayout(state=(("arm", 2),), action=(("arm", 2),), video=video, image_sizes=sizes)
