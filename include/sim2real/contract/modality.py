"""The modality layout of a policy: its observation and action keys, in order, with their widths.

A GR00T-style policy reads an observation made of named parts — camera frames (``video``), proprioceptive
vectors (``state``) and instructions (``language``) — and answers one array per named action part over an
H-step chunk. A flat network (the exported MLP) sees one concatenated state vector and emits one
concatenated action vector; the layout says how the named parts map onto those vectors:

- ``state``: ``[(key, width), ...]`` in concatenation order (the model input is ``concat(state[k][:, -1])``);
- ``action``: ``[(key, width), ...]`` in split order (the model output's last axis is split in that order);
- ``action_horizon``: H, the steps of every action chunk;
- ``video``: camera names (each frame uint8 ``(B, T, H, W, 3)``), each with the frame size (H, W) the
  model was trained on when the layout declares it (``image_sizes``; in JSON a ``video`` entry is then
  ``{"key": "front", "height": 224, "width": 224}`` instead of ``"front"``); ``language``: instruction keys;
- ``state_horizon`` / ``video_horizon``: T, the stacked steps a request carries (1 = the current one).

:meth:`ModalityLayout.from_lerobot` builds the layout of a model trained on a LeRobot dataset from the
dataset's own metadata (``meta/info.json`` and GR00T's ``meta/modality.json``), camera frame sizes included.

The layout travels with the model as the ONNX metadata property :data:`LAYOUT_PROPERTY` (JSON from
:meth:`ModalityLayout.to_json`), and the policy server checks every request against it.

Stdlib only: the edge device and the export import it without torch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: ONNX ``metadata_props`` key holding :meth:`ModalityLayout.to_json`.
LAYOUT_PROPERTY = "sim2real:modality_layout"
LAYOUT_VERSION = 1
DEFAULT_ACTION_HORIZON = 16
#: Key names: letters, digits, ``_ . -``; the GR00T convention (``single_arm``,
#: ``annotation.human.task_description``) fits.
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
MAX_HORIZON = 1024
#: Largest frame height or width a layout may declare, in pixels.
MAX_IMAGE_SIDE = 16384


class LayoutError(ValueError):
    """A modality layout that is malformed or inconsistent; the message names the field at fault."""


def _keys(name: str, values: Iterable[Any]) -> tuple[str, ...]:
    out = tuple(values)
    for key in out:
        if not isinstance(key, str) or not KEY_PATTERN.match(key):
            raise LayoutError(f"{name}: key {key!r} must be 1-128 characters of letters, digits, '_', '.', '-'")
    dupes = sorted({k for k in out if out.count(k) > 1})
    if dupes:
        raise LayoutError(f"{name}: duplicate keys {dupes}")
    return out


def _widths(name: str, values: Iterable[Any]) -> tuple[tuple[str, int], ...]:
    pairs = []
    for item in values:
        if isinstance(item, Mapping):
            key, width = item.get("key"), item.get("width")
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            key, width = item
        else:
            raise LayoutError(f"{name}: each entry must be {{'key': str, 'width': int}}, got {item!r}")
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise LayoutError(f"{name}: width of {key!r} must be a positive integer, got {width!r}")
        pairs.append((key, width))
    if not pairs:
        raise LayoutError(f"{name}: at least one key is needed")
    _keys(name, (k for k, _ in pairs))
    return tuple(pairs)


def _video(values: Iterable[Any], sizes: Iterable[Any]) -> tuple[tuple[str, ...], tuple[tuple[str, int, int], ...]]:
    """Camera names and declared frame sizes from ``video`` entries (a name, or ``{"key", "height",
    "width"}``) and ``image_sizes`` (``(key, height, width)`` triples)."""
    names, declared = [], [tuple(s) for s in sizes]
    for item in values:
        if isinstance(item, Mapping):
            unknown = sorted(set(item) - {"key", "height", "width"})
            if unknown or "key" not in item:
                raise LayoutError(f"video: an entry is a camera name or {{'key', 'height', 'width'}}, got {item!r}")
            names.append(item["key"])
            if "height" in item or "width" in item:
                declared.append((item["key"], item.get("height"), item.get("width")))
        else:
            names.append(item)
    keys = _keys("video", names)
    out: dict[str, tuple[int, int]] = {}
    for entry in declared:
        if len(entry) != 3:
            raise LayoutError(f"image_sizes: each entry must be (key, height, width), got {entry!r}")
        key, height, width = entry
        if key not in keys:
            raise LayoutError(f"image_sizes: {key!r} is not a camera of this layout (video: {list(keys)})")
        if key in out:
            raise LayoutError(f"image_sizes: {key!r} declared twice")
        for name, value in (("height", height), ("width", width)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_IMAGE_SIDE:
                raise LayoutError(f"video: {name} of {key!r} must be an integer in [1, {MAX_IMAGE_SIDE}], got {value!r}")
        out[key] = (height, width)
    return keys, tuple((k, *out[k]) for k in keys if k in out)


#: The dimension names LeRobot writes for a frame's height and width (``meta/info.json`` features).
FRAME_DIMENSIONS = ("height", "width")


def lerobot_frame_size(feature_key: str, feature: Any) -> tuple[int, int]:
    """``(height, width)`` in pixels of a LeRobot camera feature (``meta/info.json`` ``features[key]``).

    LeRobot (v2.0 to v3.0) describes a camera as ``{"dtype": "video" | "image", "shape": [...],
    "names": [...]}`` with three dimensions; ``names`` says which is which: ``["height", "width",
    "channels"]`` in v2.1/v3.0, ``["height", "width", "channel"]`` or ``["channel", "height", "width"]``
    in datasets ported to v2.0. Height and width are read where ``names`` puts them; without both names
    the feature's ``info`` ``video.height`` / ``video.width`` (written for videos) are used.

    Raises:
        LayoutError: not a camera feature, not three dimensions, or no way to tell height from width.
    """
    if not isinstance(feature, Mapping) or feature.get("dtype") not in ("video", "image"):
        raise LayoutError(f"dataset feature {feature_key!r} is not a camera (dtype video or image): {feature!r}")
    shape, names = feature.get("shape"), feature.get("names")
    if not isinstance(shape, (list, tuple)) or len(shape) != 3:
        raise LayoutError(f"dataset feature {feature_key!r}: shape must have 3 dimensions, got {shape!r}")
    if isinstance(names, (list, tuple)) and len(names) == 3 and all(n in names for n in FRAME_DIMENSIONS):
        height, width = (shape[list(names).index(n)] for n in FRAME_DIMENSIONS)
    elif isinstance(feature.get("info"), Mapping) and {"video.height", "video.width"} <= set(feature["info"]):
        height, width = feature["info"]["video.height"], feature["info"]["video.width"]
    else:
        raise LayoutError(f"dataset feature {feature_key!r}: names {names!r} do not say which of the shape {shape!r} "
                          "is the height and which the width (and info has no video.height/video.width)")
    for name, value in (("height", height), ("width", width)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_IMAGE_SIDE:
            raise LayoutError(f"dataset feature {feature_key!r}: {name} must be an integer in [1, {MAX_IMAGE_SIDE}], "
                              f"got {value!r}")
    return height, width


def _modality_widths(section: str, entries: Any) -> list[tuple[str, int]]:
    if not isinstance(entries, Mapping) or not entries:
        raise LayoutError(f"meta/modality.json: {section!r} must be a non-empty map of key -> {{'start', 'end'}}")
    out = []
    for key, spec in entries.items():
        start, end = (spec.get("start"), spec.get("end")) if isinstance(spec, Mapping) else (None, None)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (start, end)) or not 0 <= start < end:
            raise LayoutError(f"meta/modality.json: {section}.{key} needs integers 0 <= start < end, got {spec!r}")
        out.append((key, end - start))
    return out


def _horizon(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_HORIZON:
        raise LayoutError(f"{name} must be an integer in [1, {MAX_HORIZON}], got {value!r}")
    return value


@dataclass(frozen=True)
class ModalityLayout:
    """Keys, widths and horizons of a policy's observation and action (see the module docstring).

    Raises:
        LayoutError: on construction, for empty ``state``/``action``, non-positive widths, bad or
            duplicate keys, horizons outside ``[1, 1024]``.
    """

    state: tuple[tuple[str, int], ...]
    action: tuple[tuple[str, int], ...]
    action_horizon: int = DEFAULT_ACTION_HORIZON
    video: tuple[str, ...] = ()
    language: tuple[str, ...] = ()
    state_horizon: int = 1
    video_horizon: int = 1
    #: ``((camera, height, width), ...)``: the frame size each camera's images must have, in pixels, for
    #: the cameras whose size is declared (in ``video`` order); a camera not listed is not size-checked.
    image_sizes: tuple[tuple[str, int, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", _widths("state", self.state))
        object.__setattr__(self, "action", _widths("action", self.action))
        video, sizes = _video(self.video, self.image_sizes)
        object.__setattr__(self, "video", video)
        object.__setattr__(self, "image_sizes", sizes)
        object.__setattr__(self, "language", _keys("language", self.language))
        for name in ("action_horizon", "state_horizon", "video_horizon"):
            _horizon(name, getattr(self, name))

    @property
    def state_dim(self) -> int:
        """Width of the concatenated state vector (sum of the state widths)."""
        return sum(w for _, w in self.state)

    @property
    def action_dim(self) -> int:
        """Width of the concatenated action vector (sum of the action widths)."""
        return sum(w for _, w in self.action)

    def image_size(self, camera: str) -> tuple[int, int] | None:
        """``(height, width)`` in pixels the layout declares for ``camera``; None when not declared."""
        for key, height, width in self.image_sizes:
            if key == camera:
                return height, width
        return None

    @property
    def state_keys(self) -> list[str]:
        return [k for k, _ in self.state]

    @property
    def action_keys(self) -> list[str]:
        return [k for k, _ in self.action]

    @classmethod
    def flat(cls, state_dim: int, action_dim: int, action_horizon: int = DEFAULT_ACTION_HORIZON) -> ModalityLayout:
        """The layout of a policy with one state vector ``observation`` and one action vector ``action``
        (gymnasium's terms), no cameras and no instruction."""
        return cls(state=(("observation", int(state_dim)),), action=(("action", int(action_dim)),),
                   action_horizon=int(action_horizon))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"version", "state": [{"key","width"}], "action": [...], "action_horizon",
        "state_horizon", "video": [str | {"key","height","width"}], "video_horizon", "language": [str]}``
        (a camera with a declared frame size is written as a map)."""
        sizes = {k: (h, w) for k, h, w in self.image_sizes}
        video = [{"key": c, "height": sizes[c][0], "width": sizes[c][1]} if c in sizes else c for c in self.video]
        return {
            "version": LAYOUT_VERSION,
            "state": [{"key": k, "width": w} for k, w in self.state],
            "action": [{"key": k, "width": w} for k, w in self.action],
            "action_horizon": self.action_horizon, "state_horizon": self.state_horizon,
            "video": video, "video_horizon": self.video_horizon, "language": list(self.language),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_lerobot(cls, info: Any, modality: Any, action_horizon: int = DEFAULT_ACTION_HORIZON) -> ModalityLayout:
        """The layout of a model trained on a LeRobot dataset, from the dataset's metadata.

        Args:
            info: ``meta/info.json`` (its ``features`` give each camera's frame size, see
                :func:`lerobot_frame_size`).
            modality: GR00T's ``meta/modality.json``: ``state`` / ``action`` ``{key: {"start", "end"}}``
                (width ``end - start``, in the file's order), ``video`` ``{camera: {"original_key"}}``
                (the feature holding its frames; ``observation.images.<camera>`` when absent) and
                ``annotation`` ``{name: ...}`` (language key ``annotation.<name>``).
            action_horizon: H, the steps of each action chunk the model emits.

        Returns:
            The layout, with every camera's (height, width) declared, so the policy server refuses
            frames of another size.

        Raises:
            LayoutError: naming the entry at fault (a camera whose feature is missing or has no
                readable size, bad start/end, ...).
        """
        if not isinstance(info, Mapping) or not isinstance(info.get("features"), Mapping):
            raise LayoutError("meta/info.json must be a map with a 'features' map")
        if not isinstance(modality, Mapping):
            raise LayoutError(f"meta/modality.json must be a map, got {type(modality).__name__}")
        cameras = modality.get("video") or {}
        annotations = modality.get("annotation") or {}
        if not isinstance(cameras, Mapping) or not isinstance(annotations, Mapping):
            raise LayoutError("meta/modality.json: 'video' and 'annotation' must be maps")
        sizes = []
        for camera, spec in cameras.items():
            if not isinstance(spec, Mapping):
                raise LayoutError(f"meta/modality.json: video.{camera} must be a map ({{'original_key': ...}}), "
                                  f"got {spec!r}")
            feature_key = spec.get("original_key") or f"observation.images.{camera}"
            if feature_key not in info["features"]:
                raise LayoutError(f"meta/modality.json: camera {camera!r} reads {feature_key!r}, which is not a "
                                  "feature of meta/info.json")
            sizes.append((camera, *lerobot_frame_size(feature_key, info["features"][feature_key])))
        return cls(state=_modality_widths("state", modality.get("state")),
                   action=_modality_widths("action", modality.get("action")), action_horizon=action_horizon,
                   video=tuple(cameras), language=tuple(f"annotation.{name}" for name in annotations),
                   image_sizes=tuple(sizes))

    @classmethod
    def from_dict(cls, doc: Any) -> ModalityLayout:
        """Inverse of :meth:`to_dict`.

        Raises:
            LayoutError: not a map, unknown keys, unsupported ``version``, or any field invalid.
        """
        if not isinstance(doc, Mapping):
            raise LayoutError(f"a modality layout must be a JSON object, got {type(doc).__name__}")
        known = {"version", "state", "action", "action_horizon", "state_horizon", "video", "video_horizon", "language"}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise LayoutError(f"unknown modality layout fields {unknown} (known: {sorted(known)})")
        if doc.get("version", LAYOUT_VERSION) != LAYOUT_VERSION:
            raise LayoutError(f"modality layout version {doc.get('version')!r} is not supported "
                              f"(only {LAYOUT_VERSION})")
        for name in ("state", "action", "video", "language"):
            if not isinstance(doc.get(name, []), list):
                raise LayoutError(f"{name} must be a list")
        return cls(state=doc.get("state", ()), action=doc.get("action", ()),
                   action_horizon=doc.get("action_horizon", DEFAULT_ACTION_HORIZON),
                   video=doc.get("video", ()), language=doc.get("language", ()),
                   state_horizon=doc.get("state_horizon", 1), video_horizon=doc.get("video_horizon", 1))

    @classmethod
    def from_json(cls, text: str) -> ModalityLayout:
        """Parse :meth:`to_json` output. Raises LayoutError (also for invalid JSON)."""
        try:
            doc = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise LayoutError(f"modality layout is not valid JSON: {exc}") from exc
        return cls.from_dict(doc)
