"""The served ONNX policy: the model and its modality layout, and the checks every ``get_action`` request passes.

:class:`OnnxPolicy` loads the ``.onnx`` file with onnxruntime (providers: :func:`select_providers`), reads the
modality layout from its metadata (:mod:`sim2real.contract.modality`; none: ``observation`` -> ``action``), checks
an observation against that layout (keys, widths, horizons, dtypes, frame sizes; N1.6 nested or N1.5 flat form)
into the flat state the network takes, and splits the action output into the layout's action keys.
:func:`modality_configs` is the ``get_modality_config`` reply for a layout. A refused request raises
:class:`RequestError`. The server that serves it over ZMQ: :mod:`sim2real.edge.policy_server`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sim2real.edge.codec import modality_config_wire
from sim2real.contract import groot
from sim2real.contract.modality import LAYOUT_PROPERTY, LayoutError, ModalityLayout
from sim2real.contract.storage import sha256_file

#: Execution providers in order of preference (TensorRT on Jetson/NVIDIA GPUs, then CUDA, then CPU).
PREFERRED_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
#: GR00T generations whose clients this server answers (:mod:`sim2real.contract.groot`; N1.7 speaks N1.6's protocol).
MODALITY_CONFIG_FORMATS = ("n1.6", "n1.5", "n1.7")
_MODALITIES = ("video", "state", "language")
_MODALITY_SET = frozenset(_MODALITIES)


class RequestError(ValueError):
    """A request the server refuses (answered as ``{"error": str(exc)}``)."""


def select_providers(requested: Sequence[Any] | None = None) -> list[Any]:
    """Execution providers to give onnxruntime.

    Args:
        requested: provider names (or ``(name, options)`` tuples) in preference order; None = the
            available ones among TensorRT, CUDA, CPU, in that order.

    Returns:
        The requested providers that this onnxruntime build has (CPU always appended last).

    Raises:
        ValueError: none of the requested providers is available.
    """
    import onnxruntime as ort

    available = set(ort.get_available_providers())
    wanted = list(requested) if requested else list(PREFERRED_PROVIDERS)
    chosen = [p for p in wanted if (p[0] if isinstance(p, tuple) else p) in available]
    if not chosen:
        raise ValueError(f"none of the providers {wanted} is available; this onnxruntime has {sorted(available)}")
    names = [p[0] if isinstance(p, tuple) else p for p in chosen]
    if "CPUExecutionProvider" not in names and "CPUExecutionProvider" in available:
        chosen.append("CPUExecutionProvider")
    return chosen


def _is_map(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # msgpack gives dicts: skip the ABC check


def _dim(d: Any) -> int | str | None:
    return d if isinstance(d, int) else (str(d) if d else None)


class OnnxPolicy:
    """An ONNX policy ``state (B, D) float32 -> action (B, A) or (B, H, A) float32`` and its layout.

    Args:
        model_path: the ``.onnx`` file. Its first input is the flat state; the output named
            ``actions``/``action``/``mean_actions`` if present, else the first output, is the action.
        action_horizon: H of the returned chunks; None = the layout's (16 without a layout). When the
            model declares a layout, a different value is refused.
        providers: see :func:`select_providers`.

    Raises:
        FileNotFoundError: no model file. ValueError: the model's input is not a rank-2 float tensor,
        its output rank is not 2 or 3, its layout is invalid or its widths/horizon disagree with the
        network's input/output (the message says which).
    """

    def __init__(self, model_path: str | Path, action_horizon: int | None = None,
                 providers: Sequence[Any] | None = None):
        import onnxruntime as ort

        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model file not found: {self.model_path}")
        if action_horizon is not None and int(action_horizon) < 1:
            raise ValueError(f"action_horizon must be >= 1, got {action_horizon}")
        self.sha256 = sha256_file(str(self.model_path))
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(self.model_path), sess_options=opts,
                                            providers=select_providers(providers))
        self.provider = self.session.get_providers()[0]
        inp = self.session.get_inputs()[0]
        if len(inp.shape) != 2 or inp.type != "tensor(float)":
            raise ValueError(f"{self.model_path}: input {inp.name!r} must be float32 (batch, state_dim); "
                             f"it is {inp.type} {inp.shape}")
        self.input_name = inp.name
        self.state_dim = inp.shape[1] if isinstance(inp.shape[1], int) else None
        outs = self.session.get_outputs()
        by_name = {o.name: o for o in outs}
        out = next((by_name[n] for n in ("actions", "action", "mean_actions") if n in by_name), outs[0])
        if len(out.shape) not in (2, 3):
            raise ValueError(f"{self.model_path}: output {out.name!r} must be (batch, action_dim) or "
                             f"(batch, horizon, action_dim); it is {out.shape}")
        self.output_name = out.name
        self.chunking = "repeat" if len(out.shape) == 2 else "model"
        self.action_dim = out.shape[-1] if isinstance(out.shape[-1], int) else None
        self.layout = self._read_layout(action_horizon)
        self.action_horizon = self.layout.action_horizon
        if self.state_dim is not None and self.layout.state_dim != self.state_dim:
            raise ValueError(f"{self.model_path}: layout state widths {self.layout.state} add up to "
                             f"{self.layout.state_dim}, but the model input is {self.state_dim} wide")
        if self.action_dim is not None and self.layout.action_dim != self.action_dim:
            raise ValueError(f"{self.model_path}: layout action widths {self.layout.action} add up to "
                             f"{self.layout.action_dim}, but the model output is {self.action_dim} wide")
        if self.chunking == "model" and isinstance(out.shape[1], int) and out.shape[1] != self.action_horizon:
            raise ValueError(f"{self.model_path}: model emits chunks of {out.shape[1]} steps, "
                             f"but the action horizon is {self.action_horizon}")
        self._splits: list[tuple[str, int, int]] = []
        start = 0
        for key, width in self.layout.action:
            self._splits.append((key, start, start + width))
            start += width
        self.ignored_modalities = [m for m, keys in (("video", self.layout.video), ("language", self.layout.language))
                                   if keys]
        self._prepare_checks()

    def _read_layout(self, action_horizon: int | None) -> ModalityLayout:
        meta = self.session.get_modelmeta().custom_metadata_map or {}
        text = meta.get(LAYOUT_PROPERTY)
        if text is None:
            if self.state_dim is None or self.action_dim is None:
                raise ValueError(f"{self.model_path}: the model has dynamic input/output widths and no "
                                 f"{LAYOUT_PROPERTY!r} metadata; export it with a modality layout")
            return ModalityLayout.flat(self.state_dim, self.action_dim,
                                       action_horizon if action_horizon is not None else 16)
        try:
            layout = ModalityLayout.from_json(text)
        except LayoutError as exc:
            raise ValueError(f"{self.model_path}: invalid {LAYOUT_PROPERTY!r} metadata: {exc}") from exc
        if action_horizon is not None and int(action_horizon) != layout.action_horizon:
            raise ValueError(f"{self.model_path}: the model's layout has an action horizon of "
                             f"{layout.action_horizon}, not {action_horizon}; leave the horizon unset")
        return layout

    def run(self, state: np.ndarray) -> np.ndarray:
        """Run the policy on ``state`` float32 ``(B, D)``; return float32 ``(B, H, A)``."""
        out = self.session.run([self.output_name], {self.input_name: state})[0].astype(np.float32, copy=False)
        if self.chunking == "repeat":
            out = np.repeat(out[:, None, :], self.action_horizon, axis=1)
        return out

    def split_actions(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        """``(B, H, A)`` → ``{action_key: (B, H, width)}`` in layout order (C-contiguous copies)."""
        if len(self._splits) == 1:
            return {self._splits[0][0]: actions}
        return {key: np.ascontiguousarray(actions[..., a:b]) for key, a, b in self._splits}

    # -- observation checks (hot path: labels and key sets are prepared once, messages built on failure) ---
    def _prepare_checks(self) -> None:
        lay = self.layout
        self._keysets = {"state": frozenset(lay.state_keys), "video": frozenset(lay.video),
                         "language": frozenset(lay.language)}
        self._nested_state = [(k, w, f"state[{k!r}]") for k, w in lay.state]
        self._nested_video = [(c, f"video[{c!r}]", lay.image_size(c)) for c in lay.video]
        self._flat_state = [(f"state.{k}", w, f"observation['state.{k}']") for k, w in lay.state]
        self._flat_video = [(f"video.{c}", f"observation['video.{c}']", lay.image_size(c)) for c in lay.video]
        self._flat_expected = [f"video.{c}" for c in lay.video] + [f"state.{k}" for k in lay.state_keys] + list(
            lay.language)
        self._flat_keyset = frozenset(self._flat_expected)

    def _state_part(self, where: str, arr: Any, width: int, batched: bool, any_float: bool) -> np.ndarray:
        if type(arr) is not np.ndarray and not isinstance(arr, np.ndarray):
            raise RequestError(f"{where} must be a numpy array, got {type(arr).__name__}")
        dtype = arr.dtype
        if any_float:
            if dtype.kind != "f":
                raise RequestError(f"{where} must be a float array (float32 or float64), got {dtype}")
        elif dtype != np.float32:
            raise RequestError(f"{where} must be float32, got {dtype}")
        shape, horizon = arr.shape, self.layout.state_horizon
        if len(shape) != (3 if batched else 2) or shape[-2] != horizon or shape[-1] != width:
            want = "(B, T, D)" if batched else "(T, D)"
            raise RequestError(f"{where} must have shape {want} with T={horizon}, D={width}; got {shape}")
        last = arr[:, -1, :] if batched else arr[-1:, :]
        return last if dtype == np.float32 else last.astype(np.float32)

    def _video_part(self, where: str, arr: Any, batched: bool, size: tuple[int, int] | None) -> int:
        if not isinstance(arr, np.ndarray):
            raise RequestError(f"{where} must be a numpy array, got {type(arr).__name__}")
        if arr.dtype != np.uint8:
            raise RequestError(f"{where} must be uint8, got {arr.dtype}")
        horizon = self.layout.video_horizon
        if arr.ndim != (5 if batched else 4) or arr.shape[-4] != horizon or arr.shape[-1] != 3:
            want = "(B, T, H, W, 3)" if batched else "(T, H, W, 3)"
            raise RequestError(f"{where} must have shape {want} with T={horizon}; got {arr.shape}")
        if size is not None and arr.shape[-3:-1] != size:
            want = (arr.shape[0], horizon, *size, 3) if batched else (horizon, *size, 3)
            raise RequestError(f"{where} frames must be {size[0]}x{size[1]} (H x W), the size the model's modality "
                               f"layout declares for this camera: expected shape {want}, got {arr.shape}")
        return arr.shape[0] if batched else 1

    @staticmethod
    def _exact_keys(where: str, got: Mapping[str, Any], expected: Sequence[str], keyset: frozenset) -> None:
        if got.keys() == keyset:
            return
        missing = [k for k in expected if k not in got]
        unexpected = sorted(str(k) for k in got if k not in keyset)
        raise RequestError(f"{where} keys must be exactly {list(expected)} (the model's layout); "
                           f"missing {missing}, unexpected {unexpected}")

    @staticmethod
    def _finish(parts: list[np.ndarray], sizes: list[int], labels: list[str]) -> np.ndarray:
        if sizes.count(sizes[0]) != len(sizes):
            raise RequestError(f"batch sizes differ across the observation: {dict(zip(labels, sizes, strict=True))}")
        if sizes[0] == 0:
            raise RequestError("batch size must be >= 1")
        flat = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        flat = np.ascontiguousarray(flat)
        if not np.isfinite(flat).all():
            raise RequestError("state contains NaN or Inf")
        return flat

    def nested_state(self, obs: Any) -> np.ndarray:
        """Check a GR00T N1.6 observation against the layout; return the flat state float32 ``(B, D)``.

        Raises:
            RequestError: unknown modality, keys other than the layout's, wrong dtype/rank/horizon/width,
                batch sizes that differ, language not ``[[str]]``, non-finite state.
        """
        if not _is_map(obs):
            raise RequestError("observation must be a map {'video': {...}, 'state': {...}, 'language': {...}}")
        if not obs.keys() <= _MODALITY_SET:
            unknown = sorted(str(k) for k in obs if k not in _MODALITY_SET)
            raise RequestError(f"unknown observation modalities {unknown}; expected {list(_MODALITIES)}")
        lay = self.layout
        state = obs.get("state")
        if not _is_map(state):
            raise RequestError("observation['state'] must be a map of key -> float32 (B, T, D) array")
        self._exact_keys("observation['state']", state, lay.state_keys, self._keysets["state"])
        parts, sizes, labels = [], [], []
        for key, width, where in self._nested_state:
            part = self._state_part(where, state[key], width, True, False)
            parts.append(part)
            sizes.append(part.shape[0])
            labels.append(where)
        video = obs.get("video") or {}
        if not _is_map(video):
            raise RequestError("observation['video'] must be a map of camera -> uint8 (B, T, H, W, 3) array")
        self._exact_keys("observation['video']", video, lay.video, self._keysets["video"])
        for cam, where, size in self._nested_video:
            sizes.append(self._video_part(where, video[cam], True, size))
            labels.append(where)
        language = obs.get("language") or {}
        if not _is_map(language):
            raise RequestError("observation['language'] must be a map of key -> [[str]]")
        self._exact_keys("observation['language']", language, lay.language, self._keysets["language"])
        for key in lay.language:
            items = language[key]
            if not isinstance(items, list) or not all(
                    isinstance(i, list) and len(i) == 1 and isinstance(i[0], str) for i in items):
                raise RequestError(f"language[{key!r}] must be a list of B lists of one string ([[str]]), "
                                   f"got {type(items).__name__}")
            sizes.append(len(items))
            labels.append(f"language[{key!r}]")
        return self._finish(parts, sizes, labels)

    def flat_state(self, obs: Mapping[str, Any]) -> tuple[np.ndarray, bool]:
        """Check a GR00T N1.5 flat observation against the layout.

        Returns:
            ``(state float32 (B, D), batched)``: batched when the state arrays are ``(B, T, D)``,
            unbatched (B=1) when they are ``(T, D)``.

        Raises:
            RequestError: keys other than ``video.<cam>``/``state.<key>``/language keys of the layout,
                mixed batched/unbatched arrays, wrong dtype/rank/horizon/width, bad language values.
        """
        self._exact_keys("flat observation (GR00T N1.5 form)", obs, self._flat_expected, self._flat_keyset)
        ranks = {obs[k].ndim for k, _, _ in self._flat_state if isinstance(obs[k], np.ndarray)}
        if len(ranks) > 1:
            raise RequestError("state arrays must all be batched (B, T, D) or all unbatched (T, D)")
        batched = ranks == {3}
        parts, sizes, labels = [], [], []
        for key, width, where in self._flat_state:
            part = self._state_part(where, obs[key], width, batched, True)
            parts.append(part)
            sizes.append(part.shape[0])
            labels.append(where)
        for key, where, size in self._flat_video:
            sizes.append(self._video_part(where, obs[key], batched, size))
            labels.append(where)
        for key in self.layout.language:
            value = obs[key]
            if isinstance(value, str):
                value = [value]
            one_string = lambda v: isinstance(v, str) or (  # noqa: E731
                isinstance(v, list) and len(v) == 1 and isinstance(v[0], str))
            if not isinstance(value, list) or not all(one_string(v) for v in value):
                raise RequestError(f"observation[{key!r}] must be a string or a list of strings, "
                                   f"got {type(obs[key]).__name__}")
            if not batched and len(value) != 1:
                raise RequestError(f"observation[{key!r}] must hold one string for an unbatched observation, "
                                   f"got {len(value)}")
            sizes.append(len(value))
            labels.append(f"observation[{key!r}]")
        return self._finish(parts, sizes, labels), batched

    def describe(self) -> dict[str, Any]:
        """Model facts for ``get_metadata`` (JSON/msgpack-safe)."""
        import onnxruntime as ort

        io_ = lambda xs: [{"name": x.name, "shape": [_dim(d) for d in x.shape], "dtype": x.type} for x in xs]  # noqa: E731
        return {
            "model_path": str(self.model_path), "model_sha256": self.sha256,
            "provider": self.provider, "providers": self.session.get_providers(),
            "available_providers": ort.get_available_providers(), "onnxruntime_version": ort.__version__,
            "inputs": io_(self.session.get_inputs()), "outputs": io_(self.session.get_outputs()),
            "input_name": self.input_name, "output_name": self.output_name,
            "state_dim": self.state_dim, "action_dim": self.action_dim,
            "action_horizon": self.action_horizon, "chunking": self.chunking,
            "modality_layout": self.layout.to_dict(), "ignored_modalities": self.ignored_modalities,
        }


def modality_configs(layout: ModalityLayout, fmt: str = "n1.6") -> dict[str, Any]:
    """The ``get_modality_config`` reply for ``layout``: ``{modality: ModalityConfig wire map}``.

    N1.6 and N1.7 (the same ``ModalityConfig`` and codec: ``gr00t/policy/server_client.py``) keys are bare
    (``front``, ``single_arm``) and each config has ``delta_indices``,
    ``modality_keys``, ``sin_cos_embedding_keys``, ``mean_std_embedding_keys``, ``action_configs``
    (None: not known to this server). N1.5 keys carry the modality prefix (``video.front``,
    ``state.single_arm``, ``action.single_arm``; language keys as they are) and the config is the JSON
    string of ``delta_indices`` and ``modality_keys``. Modalities without keys are left out (the N1.6
    ``ModalityConfig`` refuses empty ``modality_keys``).

    Raises:
        ValueError: ``fmt`` not in :data:`MODALITY_CONFIG_FORMATS`.
    """
    if fmt not in MODALITY_CONFIG_FORMATS:
        raise ValueError(f"modality config format must be one of {MODALITY_CONFIG_FORMATS}, got {fmt!r}")
    n15 = groot.release(fmt).wire_format == "n1.5"
    history = lambda t: list(range(-(t - 1), 1))  # noqa: E731 - T stacked steps ending at the current one
    spec = {
        "video": (history(layout.video_horizon), list(layout.video), "video."),
        "state": (history(layout.state_horizon), layout.state_keys, "state."),
        "action": (list(range(layout.action_horizon)), layout.action_keys, "action."),
        "language": ([0], list(layout.language), ""),
    }
    out: dict[str, Any] = {}
    for modality, (delta, keys, prefix) in spec.items():
        if not keys:
            continue
        if n15:
            fields = {"delta_indices": delta, "modality_keys": [prefix + k for k in keys]}
        else:
            fields = {"delta_indices": delta, "modality_keys": keys, "sin_cos_embedding_keys": None,
                      "mean_std_embedding_keys": None, "action_configs": None}
        out[modality] = modality_config_wire(fields, as_json_string=n15)
    return out
