"""ModalityLayout: construction checks and the JSON form carried in the ONNX metadata."""

from __future__ import annotations

import pytest
from edge_helpers import SO101

from sim2real.contract.modality import LayoutError, ModalityLayout, lerobot_frame_size


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


# -- the layout of a model trained on a LeRobot dataset ----------------------------------------------------
def _camera(shape, names, **extra):
    return {"dtype": "video", "shape": shape, "names": names, **extra}


LEROBOT_INFO = {"codebase_version": "v2.1", "features": {
    "observation.state": {"dtype": "float32", "shape": [6], "names": None},
    "action": {"dtype": "float32", "shape": [6], "names": None},
    "observation.images.front": _camera([480, 640, 3], ["height", "width", "channels"]),  # LeRobot v2.1
    "observation.images.wrist": _camera([3, 240, 320], ["channel", "height", "width"]),  # ported to v2.0
}}
GROOT_MODALITY = {"state": {"single_arm": {"start": 0, "end": 5}, "gripper": {"start": 5, "end": 6}},
                  "action": {"single_arm": {"start": 0, "end": 5}, "gripper": {"start": 5, "end": 6}},
                  "video": {"front": {"original_key": "observation.images.front"}, "wrist": {}},
                  "annotation": {"human.task_description": {"original_key": "task_index"}}}


def test_layout_from_lerobot_declares_every_camera_frame_size():
    layout = ModalityLayout.from_lerobot(LEROBOT_INFO, GROOT_MODALITY, action_horizon=8)
    assert layout.state == (("single_arm", 5), ("gripper", 1)) and layout.action == layout.state
    assert layout.action_horizon == 8 and layout.language == ("annotation.human.task_description",)
    assert layout.video == ("front", "wrist")  # wrist: no original_key = observation.images.wrist
    assert layout.image_sizes == (("front", 480, 640), ("wrist", 240, 320))
    assert layout.to_dict()["video"] == [{"key": "front", "height": 480, "width": 640},
                                         {"key": "wrist", "height": 240, "width": 320}]


def test_lerobot_frame_size_reads_the_dimension_names():
    assert lerobot_frame_size("c", _camera([48, 64, 3], ["height", "width", "channel"])) == (48, 64)
    assert lerobot_frame_size("c", {**_camera([48, 64, 3], ["width", "height", "channels"]), "dtype": "image"}) \
        == (64, 48)
    assert lerobot_frame_size("c", _camera([48, 64, 3], None, info={"video.height": 48, "video.width": 64})) == (48, 64)


@pytest.mark.parametrize("feature, match", [
    (_camera([48, 64, 3], ["h", "w", "c"]), r"names \['h', 'w', 'c'\] do not say which of the shape \[48, 64, 3\]"),
    (_camera([48, 64], ["height", "width"]), "shape must have 3 dimensions"),
    ({"dtype": "float32", "shape": [6]}, "is not a camera"),
    (_camera([0, 64, 3], ["height", "width", "channels"]), r"height must be an integer in \[1, 16384\], got 0"),
])
def test_lerobot_frame_size_refuses_what_it_cannot_read(feature, match):
    with pytest.raises(LayoutError, match=match):
        lerobot_frame_size("observation.images.front", feature)


@pytest.mark.parametrize("modality, match", [
    ({**GROOT_MODALITY, "video": {"top": {}}},
     r"camera 'top' reads 'observation.images.top', which is not a feature of meta/info.json"),
    ({**GROOT_MODALITY, "state": {"arm": {"start": 3, "end": 3}}}, r"state.arm needs integers 0 <= start < end"),
    ({**GROOT_MODALITY, "action": {}}, "'action' must be a non-empty map"),
    ({**GROOT_MODALITY, "video": {"front": "observation.images.front"}}, r"video.front must be a map"),
])
def test_layout_from_lerobot_refuses_what_it_cannot_read(modality, match):
    with pytest.raises(LayoutError, match=match):
        ModalityLayout.from_lerobot(LEROBOT_INFO, modality)
