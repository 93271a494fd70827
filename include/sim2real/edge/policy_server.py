"""ZMQ policy server (and client) that serves an ONNX policy with onnxruntime over the GR00T protocol.

Protocol (NVIDIA Isaac-GR00T's policy server: ``gr00t/policy/server_client.py`` in N1.6,
``gr00t/eval/service.py`` in N1.5): ZeroMQ REQ/REP, default port 5555, one msgpack message each way,
numpy arrays as ``{"__ndarray_class__": True, "as_npy": <np.save bytes>}`` (:mod:`sim2real.edge.codec`;
never pickle). A request is the map ``{"endpoint": str, "data": ..., "api_token": str}``: without
``endpoint`` it is a ``get_action``; without ``data`` the data is empty; ``api_token`` is required
when the server has one. Any refusal is answered ``{"error": str}`` and the server keeps serving.

``ping``
    → ``{"status": "ok", "message": "Server is running"}``.
``get_action``, GR00T N1.6 form: ``data = {"observation": obs, "options": None | map}`` with
    ``obs = {"video": {cam: uint8 (B, T, H, W, 3)}, "state": {key: float32 (B, T, D_key)},
    "language": {key: [[str]] (B lists of one string)}}``
    → ``[{action_key: float32 (B, H, D_key)}, info]`` with ``info = {"latency_ms", "inference_ms",
    "provider", "chunking", "ignored_modalities"}``.
``get_action``, GR00T N1.5 form: ``data`` is the observation itself with flat keys
    ``video.<cam>`` uint8 ``(T, H, W, 3)``, ``state.<key>`` float ``(T, D_key)`` (float64 accepted, as
    N1.5 clients send it), ``<language key>`` str or ``[str]``; or batched: ``(B, T, ...)`` arrays and B
    strings → ``{"action.<key>": float32 (B, H, D_key)}``, unbatched requests answered like N1.5's
    ``Gr00tPolicy`` (``np.squeeze`` of the batch of one: ``(H, D_key)``, a width-1 key ``(H,)``).
``reset`` (``data = {"options": ...}`` or none) → ``{}`` (the served network keeps no state).
``get_modality_config`` → ``{"video"|"state"|"action"|"language": ModalityConfig}``, each encoded as
    upstream encodes it (:func:`sim2real.edge.codec.modality_config_wire`; N1.6 by default, N1.5 with
    ``modality_config_format="n1.5"``: the two generations' decoders are incompatible, and the request
    does not say which one the client runs). A modality without keys is left out.
``kill`` → ``{"status": "ok", "message": "Server is shutting down"}``, then the server stops; only when
    the server was started with ``enable_kill``; otherwise an error.
``get_metadata`` (this server's own) → model inputs/outputs, provider, sha256, the modality layout with
    widths, limits, endpoints.

**Modality layout.** Keys, order and widths come from the model's ONNX metadata
(:mod:`sim2real.contract.modality`); a model without one is served as ``observation`` → ``action``. Every
request must carry exactly the layout's keys with the declared widths, horizons and dtypes. The served
network is state-only: camera frames and instructions are checked, then not used, and ``info`` lists
them under ``ignored_modalities``. **Action chunks.** A network emitting ``(B, A)`` has its action
repeated over the H steps (``chunking="repeat"``, a zero-order hold); one emitting ``(B, H, A)`` is passed
through (``chunking="model"``). The action vector is split into the layout's action keys.

**Security.** With an ``api_token`` every request must carry it (compared in constant time; refusals are
logged, at most one line per 10 s). The token is read before anything else of the request is decoded
(:func:`sim2real.edge.codec.read_request_token` skips every other value unbuilt), so a peer without it
costs the server a scan of its bytes, never an array decode. Without a token the server binds only a
loopback address: binding anything else (``0.0.0.0``, ``*``, a LAN address, an interface or host name)
without a token is refused at start.

**Limits**, each refused with an error reply (the REP socket answers every request it receives):
``max_request_bytes`` (16 MiB; checked first, unread), ``max_arrays`` (256 numpy arrays per request; the
decode stops at the first one over), camera frames of another size than the layout declares. A message
larger than ``max_frame_bytes`` (``ZMQ_MAXMSGSIZE``, default :data:`HARD_LIMIT_FACTOR` times
``max_request_bytes``) never reaches the server: ZMQ disconnects its sender, and nothing can answer it;
:class:`PolicyClient` reports that at once (:class:`PolicyServerDisconnected`), GR00T's clients, which set
no receive timeout, wait until closed. ZMQ queues at most :data:`RCV_HWM` messages per peer.
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from sim2real.edge.codec import (DEFAULT_MAX_ARRAYS, DEFAULT_MAX_REQUEST_BYTES, MISSING, CodecError,
                                 modality_config_wire, packb, read_request_token, unpackb)
from sim2real.contract.modality import LAYOUT_PROPERTY, LayoutError, ModalityLayout
from sim2real.edge.security import StrictArgumentParser, check_api_token, is_loopback, read_api_token_file
from sim2real.contract.storage import sha256_file

log = logging.getLogger(__name__)

#: Execution providers in order of preference (TensorRT on Jetson/NVIDIA GPUs, then CUDA, then CPU).
PREFERRED_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
PING_REPLY = {"status": "ok", "message": "Server is running"}
KILL_REPLY = {"status": "ok", "message": "Server is shutting down"}
#: The refusal text of upstream GR00T servers, kept so clients that match on it keep working.
UNAUTHORIZED = "Unauthorized: Invalid API token"
#: The default frame ceiling (``ZMQ_MAXMSGSIZE``) is this many times ``max_request_bytes`` (256 MiB by
#: default): far above the largest request the server decodes, so that an oversized request gets an error
#: reply. Above the ceiling ZMQ disconnects the sender and no reply is possible, and GR00T's clients set
#: no receive timeout: they would wait forever.
HARD_LIMIT_FACTOR = 16
#: Messages ZMQ queues per connected peer before it stops reading that peer's socket (``ZMQ_RCVHWM``): a
#: GR00T client has one request in flight, so a peer holds at most a few frames of server memory.
RCV_HWM = 2
MODALITY_CONFIG_FORMATS = ("n1.6", "n1.5")
#: Environment variable the CLI reads the token from when no ``--api-token-file`` is given.
API_TOKEN_ENV = "SIM2REAL_POLICY_API_TOKEN"
REJECTION_LOG_INTERVAL_S = 10.0
_MODALITIES = ("video", "state", "language")
_MODALITY_SET = frozenset(_MODALITIES)
_GET_ACTION_KEYS = frozenset(("observation", "options"))


class PolicyServerError(RuntimeError):
    """The server answered ``{"error": ...}``; the message is the server's."""


class PolicyServerTimeout(TimeoutError):
    """No reply within the client's timeout (server down, stuck or unreachable)."""


class PolicyServerDisconnected(PolicyServerTimeout):
    """The server closed the connection while a request was in flight, so no reply will come: the server
    stopped, or the request was larger than its frame ceiling (``max_frame_bytes``, ``ZMQ_MAXMSGSIZE``)."""


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

    N1.6 keys are bare (``front``, ``single_arm``) and each config has ``delta_indices``,
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
    n15 = fmt == "n1.5"
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


class _RejectionLog:
    """Logs refused (unauthenticated) requests: the first at once, then at most one line per interval
    with the count of those in between."""

    def __init__(self, interval_s: float = REJECTION_LOG_INTERVAL_S):
        self.interval_s, self.total, self._pending, self._last = interval_s, 0, 0, float("-inf")

    def __call__(self, reason: str, peer: Callable[[], str]) -> None:
        self.total += 1
        self._pending += 1
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            log.warning("refused request (%s api_token) from %s, unread; %d refused so far (%d since the "
                        "last report)", reason, peer(), self.total, self._pending)
            self._last, self._pending = now, 0


def _peer_of(frame: Any) -> str:
    try:
        return frame.get("Peer-Address") or "unknown peer"
    except Exception:  # noqa: BLE001 - metadata is best effort (not every transport has it)
        return "unknown peer"


class ServerHandle:
    """A server running in a background thread. ``port`` is the bound TCP port."""

    def __init__(self, server: PolicyServer, thread: threading.Thread):
        self.server, self.thread = server, thread

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving, close the socket, join the thread (at most ``timeout`` seconds)."""
        self.server.stop()
        self.thread.join(timeout)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class PolicyServer:
    """ZMQ REP server for an ONNX policy (protocol in the module docstring).

    Args:
        model_path: ``.onnx`` policy file (its modality layout is read from its metadata).
        host: interface to bind: a loopback address by default; any other needs ``api_token``.
        port: TCP port; 0 picks a free one (read ``.port`` after binding).
        action_horizon: H, steps per action chunk; None = the model layout's.
        max_request_bytes: larger requests are refused with an error reply before decoding (at least 1024).
        max_arrays: requests holding more numpy arrays are refused with an error reply; at most this many
            are built (at least 1).
        max_frame_bytes: ZMQ's frame ceiling (``ZMQ_MAXMSGSIZE``): a peer sending a larger message is
            disconnected unread and gets no reply (ZMQ cannot answer it); None = ``HARD_LIMIT_FACTOR`` times
            ``max_request_bytes``. Must be larger than ``max_request_bytes``, so that the band between the two
            gets an error reply.
        providers: onnxruntime providers in preference order; None = TensorRT, CUDA, CPU as available.
        api_token: when set, every request must carry it (``api_token`` field); at least 16 characters.
        enable_kill: answer the ``kill`` endpoint by stopping (off: ``kill`` is refused).
        modality_config_format: ``"n1.6"`` or ``"n1.5"``, how ``get_modality_config`` encodes its reply.

    Raises:
        PermissionError: ``host`` is not a loopback address and there is no ``api_token``.
        ValueError: bad token, format or limit; see also :class:`OnnxPolicy`. FileNotFoundError: no model.
        zmq.ZMQError on bind (port in use).
    """

    def __init__(self, model_path: str | Path, host: str = "127.0.0.1", port: int = 5555,
                 action_horizon: int | None = None,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 providers: Sequence[Any] | None = None, *, api_token: str | None = None,
                 enable_kill: bool = False, modality_config_format: str = "n1.6",
                 max_arrays: int = DEFAULT_MAX_ARRAYS, max_frame_bytes: int | None = None):
        self.api_token = check_api_token(api_token)
        if self.api_token is None and not is_loopback(host):
            raise PermissionError(
                f"refusing to bind {host!r} without an api_token: anyone who can reach that address could drive the "
                "robot. Bind 127.0.0.1 (the robot's client runs on the device) or configure a token (component "
                "configuration ApiTokenSecretId / ApiTokenSsmParameter; CLI --api-token-file)")
        if modality_config_format not in MODALITY_CONFIG_FORMATS:
            raise ValueError(f"modality_config_format must be one of {MODALITY_CONFIG_FORMATS}, "
                             f"got {modality_config_format!r}")
        if int(max_request_bytes) < 1024:
            raise ValueError(f"max_request_bytes must be >= 1024, got {max_request_bytes}")
        if int(max_arrays) < 1:
            raise ValueError(f"max_arrays must be >= 1, got {max_arrays}")
        frame = HARD_LIMIT_FACTOR * int(max_request_bytes) if max_frame_bytes is None else int(max_frame_bytes)
        if frame <= int(max_request_bytes):
            raise ValueError(f"max_frame_bytes ({frame}) must be larger than max_request_bytes ({max_request_bytes}): "
                             "requests between the two get an error reply, larger ones are dropped by ZMQ unanswered")
        self.policy = OnnxPolicy(model_path, action_horizon=action_horizon, providers=providers)
        self.host, self.port = host, int(port)
        self.max_request_bytes = int(max_request_bytes)
        self.max_arrays = int(max_arrays)
        self.max_frame_bytes = frame
        self.enable_kill = bool(enable_kill)
        self.modality_config_format = modality_config_format
        self._modality_config_reply = modality_configs(self.policy.layout, modality_config_format)
        self._token_bytes = self.api_token.encode() if self.api_token else None
        self._unauthorized_reply = packb({"error": UNAUTHORIZED})
        self.requests = 0
        self.killed = False
        self.rejections = _RejectionLog()
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._stop = threading.Event()
        self._handlers: dict[str, Callable[[Any], Any]] = {
            "ping": self._ping, "get_action": self._get_action, "reset": self._reset,
            "get_modality_config": self._modality_config, "kill": self._kill, "get_metadata": self._metadata,
        }

    @property
    def endpoint(self) -> str:
        host = self.host.strip("[]")
        return f"tcp://[{host}]:{self.port}" if ":" in host else f"tcp://{host}:{self.port}"

    # -- handlers -------------------------------------------------------------------------------
    def _ping(self, data: Any) -> Any:
        return dict(PING_REPLY)

    def _metadata(self, data: Any) -> Any:
        return {**self.policy.describe(), "max_request_bytes": self.max_request_bytes,
                "max_arrays": self.max_arrays, "max_frame_bytes": self.max_frame_bytes,
                "endpoints": sorted(self._handlers), "kill_enabled": self.enable_kill,
                "api_token_required": self.api_token is not None,
                "modality_config_format": self.modality_config_format}

    def _modality_config(self, data: Any) -> Any:
        return self._modality_config_reply

    def _reset(self, data: Any) -> Any:
        if data is not None and not isinstance(data, Mapping):
            raise RequestError("reset data must be a map {'options': None | map}")
        extra = sorted(str(k) for k in (data or {}) if k != "options")
        if extra:
            raise RequestError(f"reset takes only 'options'; unexpected {extra}")
        options = (data or {}).get("options")
        if options is not None and not isinstance(options, Mapping):
            raise RequestError("reset options must be a map or nil")
        return {}

    def _kill(self, data: Any) -> Any:
        if not self.enable_kill:
            raise RequestError("the kill endpoint is disabled on this server (component configuration EnableKill; "
                               "CLI --enable-kill)")
        log.warning("kill requested: stopping after this reply")
        self.killed = True
        self._stop.set()
        return dict(KILL_REPLY)

    def _get_action(self, data: Any) -> Any:
        t0 = time.perf_counter()
        if not _is_map(data) or not data:
            raise RequestError("get_action data must be {'observation': {'video': ..., 'state': ..., 'language': ...}, "
                               "'options': ...} (GR00T N1.6) or a flat observation {'state.<key>': array, "
                               "'video.<camera>': array, '<language key>': str} (GR00T N1.5)")
        if "observation" in data:
            if not data.keys() <= _GET_ACTION_KEYS:
                extra = sorted(str(k) for k in data if k not in _GET_ACTION_KEYS)
                raise RequestError(f"get_action data takes 'observation' and 'options'; unexpected {extra}")
            options = data.get("options")
            if options is not None and not _is_map(options):
                raise RequestError("get_action options must be a map or nil")
            state, nested, batched = self.policy.nested_state(data["observation"]), True, True
        else:
            (state, batched), nested = self.policy.flat_state(data), False
        t1 = time.perf_counter()
        actions = self.policy.split_actions(self.policy.run(state))
        t2 = time.perf_counter()
        if not nested:
            if batched:
                return {f"action.{k}": v for k, v in actions.items()}
            return {f"action.{k}": np.squeeze(v) for k, v in actions.items()}
        info = {"latency_ms": (t2 - t0) * 1e3, "inference_ms": (t2 - t1) * 1e3, "provider": self.policy.provider,
                "chunking": self.policy.chunking, "ignored_modalities": self.policy.ignored_modalities}
        return [actions, info]

    def _authorized(self, given: Any) -> bool:
        if self._token_bytes is None:
            return True
        if not isinstance(given, str):
            return False
        return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self._token_bytes)

    def handle(self, raw: bytes | memoryview, peer: Callable[[], str] = lambda: "unknown peer") -> bytes:
        """Answer one raw request (bytes in, bytes out); never raises.

        Order of the checks, cheapest first: the size (``max_request_bytes``); with an api token, the
        token, read by :func:`sim2real.edge.codec.read_request_token` without building any array, map
        or string of the request (a refused request is never decoded); then the decode, which stops
        at the ``max_arrays + 1``-th array; then the endpoint's own checks.

        Args:
            raw: the request message.
            peer: returns the sender's address, for the log of refused requests.
        """
        try:
            if len(raw) > self.max_request_bytes:
                raise CodecError(f"request of {len(raw)} bytes exceeds the limit of {self.max_request_bytes} bytes")
            if self._token_bytes is not None:
                given = read_request_token(raw)
                if not self._authorized(given):
                    self.rejections("missing" if given is MISSING or given is None else "invalid", peer)
                    return self._unauthorized_reply
            req = unpackb(raw, max_bytes=self.max_request_bytes, max_arrays=self.max_arrays)
            if not isinstance(req, Mapping):
                raise RequestError("request must be a map {'endpoint': str, 'data': ..., 'api_token': str}")
            endpoint = req.get("endpoint", "get_action")
            if not isinstance(endpoint, str):
                raise RequestError(f"'endpoint' must be a string, got {type(endpoint).__name__}")
            handler = self._handlers.get(endpoint)
            if handler is None:
                raise RequestError(f"Unknown endpoint: {endpoint!r} (this server has {sorted(self._handlers)})")
            reply: Any = handler(req.get("data"))
        except (CodecError, RequestError) as exc:
            reply = {"error": str(exc)}
        except Exception as exc:  # a model/runtime failure must not kill the server
            log.exception("request failed")
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            return packb(reply)
        except Exception as exc:
            return packb({"error": f"cannot encode reply: {exc}"})

    # -- serving --------------------------------------------------------------------------------
    def bind(self) -> int:
        """Create the REP socket and bind it; returns the bound port (resolves port 0)."""
        if self._sock is not None:
            return self.port
        self._ctx = zmq.Context()
        sock = self._ctx.socket(zmq.REP)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)
        sock.setsockopt(zmq.RCVHWM, RCV_HWM)
        host = self.host.strip("[]")
        if ":" in host:
            sock.setsockopt(zmq.IPV6, 1)
            host = f"[{host}]"
        try:
            sock.bind(f"tcp://{host}:{self.port if self.port else '*'}")
        except zmq.ZMQError as exc:
            sock.close()
            self._ctx.term()
            self._ctx = None
            raise zmq.ZMQError(exc.errno, f"cannot bind tcp://{host}:{self.port}: {exc}") from exc
        self._sock = sock
        self.port = int(sock.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
        return self.port

    def serve_forever(self, poll_ms: int = 100) -> None:
        """Bind (if needed) and answer requests until :meth:`stop` or ``kill``; closes the socket on return."""
        self.bind()
        assert self._sock is not None
        sock = self._sock
        layout = self.policy.layout
        log.info("Server ready — listening on %s (provider %s, model sha256 %s, api token %s, kill %s)",
                 self.endpoint, self.policy.provider, self.policy.sha256,
                 "required" if self.api_token else "not configured (loopback only)",
                 "enabled" if self.enable_kill else "disabled")
        log.info("modality layout: state %s, action %s, horizon %d, cameras %s, language %s",
                 list(layout.state), list(layout.action), layout.action_horizon, list(layout.video),
                 list(layout.language))
        log.info("limits: %d bytes and %d arrays per request (error reply beyond), frame ceiling %d bytes (ZMQ "
                 "disconnects the sender beyond); camera frame sizes %s", self.max_request_bytes, self.max_arrays,
                 self.max_frame_bytes, {k: f"{h}x{w}" for k, h, w in layout.image_sizes} or "not declared (not checked)")
        if self.policy.ignored_modalities:
            log.info("requests must carry %s (checked against the layout), which this state-only model does not read",
                     " and ".join(self.policy.ignored_modalities))
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if not poller.poll(poll_ms):
                    continue
                frame = sock.recv(copy=False)
                if frame.more:
                    while sock.getsockopt(zmq.RCVMORE):
                        sock.recv(copy=False)
                    reply = packb({"error": "multipart requests are not supported"})
                else:
                    reply = self.handle(frame.buffer, peer=lambda f=frame: _peer_of(f))
                sock.send(reply)
                self.requests += 1
                if self.requests % 1000 == 0:
                    log.info("served %d requests (%d refused for the api token)", self.requests,
                             self.rejections.total)
        finally:
            sock.close(0)
            self._sock = None
            if self._ctx is not None:
                self._ctx.term()
                self._ctx = None

    def stop(self) -> None:
        """Ask :meth:`serve_forever` to return (within one poll interval)."""
        self._stop.set()

    def start_in_thread(self, ready_timeout: float = 10.0) -> ServerHandle:
        """Serve from a daemon thread; returns once bound. Bind errors are raised here."""
        ready, failure = threading.Event(), []

        def _run() -> None:
            try:
                self.bind()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self.serve_forever()

        thread = threading.Thread(target=_run, name=f"policy-server-{self.port}", daemon=True)
        thread.start()
        if not ready.wait(ready_timeout):
            self.stop()
            raise TimeoutError(f"policy server did not bind within {ready_timeout}s")
        if failure:
            raise failure[0]
        return ServerHandle(self, thread)


class PolicyClient:
    """REQ client for :class:`PolicyServer` (or any GR00T-protocol server), N1.6 request forms.

    Args:
        host, port: server address.
        timeout_ms: per-request send/receive timeout in milliseconds.
        api_token: sent with every request when set.

    Every method raises :class:`PolicyServerTimeout` when no reply arrives in time (the REQ socket
    is then closed and reopened, so the client stays usable), :class:`PolicyServerDisconnected` (a
    :class:`PolicyServerTimeout`) as soon as the server drops the connection with the request in flight,
    and :class:`PolicyServerError` when the server answers ``{"error": ...}``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 5555, timeout_ms: int = 5000,
                 api_token: str | None = None):
        self.host, self.port, self.timeout_ms = host, int(port), int(timeout_ms)
        self.api_token = api_token or None
        self._ctx = zmq.Context()
        self._sock: zmq.Socket | None = None
        self._connect()

    @property
    def endpoint(self) -> str:
        host = self.host.strip("[]")
        return f"tcp://[{host}]:{self.port}" if ":" in host else f"tcp://{host}:{self.port}"

    def _connect(self) -> None:
        self._sock = self._ctx.socket(zmq.REQ)
        for opt, val in ((zmq.LINGER, 0), (zmq.RCVTIMEO, self.timeout_ms), (zmq.SNDTIMEO, self.timeout_ms)):
            self._sock.setsockopt(opt, val)
        if ":" in self.host.strip("[]"):
            self._sock.setsockopt(zmq.IPV6, 1)
        # ZMQ reports a dropped connection only as a socket event: watch for it so that a request the server
        # will never answer (it stopped, or ZMQ_MAXMSGSIZE disconnected us) fails at once, not at the timeout.
        self._monitor = self._sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._poller = zmq.Poller()
        self._poller.register(self._sock, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)
        self._sock.connect(self.endpoint)

    def _close_socket(self) -> None:
        if self._sock is not None:
            self._sock.disable_monitor()
            self._monitor.close(0)
            self._sock.close(0)
            self._sock = None

    def _reset(self) -> None:
        self._close_socket()
        self._connect()

    def request_raw(self, payload: bytes) -> bytes:
        """Send raw bytes, return the raw reply (for protocol tests and other encoders).

        Raises:
            PolicyServerDisconnected: the server dropped the connection with the request in flight.
            PolicyServerTimeout: no reply within ``timeout_ms``.
        """
        assert self._sock is not None
        while self._monitor.poll(0):  # disconnects from before this request
            self._monitor.recv_multipart()
        deadline = time.monotonic() + self.timeout_ms / 1e3
        try:
            self._sock.send(payload)
            while True:
                left_ms = int((deadline - time.monotonic()) * 1e3)
                if left_ms <= 0:
                    raise zmq.Again()
                events = dict(self._poller.poll(left_ms))
                if self._sock in events:
                    return self._sock.recv()
                if self._monitor in events:
                    self._monitor.recv_multipart()
                    self._reset()
                    raise PolicyServerDisconnected(
                        f"no reply from {self.endpoint}: it closed the connection with the request of {len(payload)} "
                        "bytes in flight. The server stopped, or the request is larger than its frame ceiling "
                        "(get_metadata: max_frame_bytes; max_request_bytes is the largest request it decodes)")
        except zmq.Again as exc:
            self._reset()
            raise PolicyServerTimeout(
                f"no reply from {self.endpoint} within {self.timeout_ms} ms: the policy server is down, "
                "stuck or unreachable (REQ socket reset; check that the server runs and the port is right)"
            ) from exc

    def call(self, endpoint: str, data: Any = None) -> Any:
        """Call ``endpoint`` with ``data`` (omitted when None); returns the decoded reply.

        Raises:
            PolicyServerError: the server answered ``{"error": ...}``.
        """
        req: dict[str, Any] = {"endpoint": endpoint}
        if data is not None:
            req["data"] = data
        if self.api_token:
            req["api_token"] = self.api_token
        reply = unpackb(self.request_raw(packb(req)), max_bytes=None)
        if isinstance(reply, Mapping) and "error" in reply:
            raise PolicyServerError(f"{self.endpoint} {endpoint}: {reply['error']}")
        return reply

    def ping(self) -> dict[str, Any]:
        """``{"status": "ok", ...}`` from the server."""
        return self.call("ping")

    def get_action(self, observation: Mapping[str, Any], options: Mapping[str, Any] | None = None
                   ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Send one N1.6 observation; returns ``(actions, info)``: ``actions[key]`` float32 (B, H, D_key)."""
        reply = self.call("get_action", {"observation": dict(observation), "options": options})
        if not isinstance(reply, list) or len(reply) != 2:
            raise PolicyServerError(f"{self.endpoint} get_action: unexpected reply {type(reply).__name__}")
        return reply[0], reply[1]

    def reset(self, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self.call("reset", {"options": options})

    def modality_config(self) -> dict[str, dict[str, Any]]:
        """``{modality: {"delta_indices", "modality_keys", ...}}`` from ``get_modality_config`` (either encoding)."""
        reply = self.call("get_modality_config")
        out = {}
        for modality, wire in reply.items():
            fields = wire.get("as_json") if isinstance(wire, Mapping) else None
            out[modality] = json.loads(fields) if isinstance(fields, str) else dict(fields or {})
        return out

    def metadata(self) -> dict[str, Any]:
        """The server's ``get_metadata`` reply (model facts and the modality layout with widths)."""
        return self.call("get_metadata")

    def kill(self) -> dict[str, Any]:
        return self.call("kill")

    def close(self) -> None:
        self._close_socket()
        self._ctx.term()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def layout_observation(layout: ModalityLayout, batch: int = 1, image_size: tuple[int, int] | None = None,
                       seed: int | None = 0) -> dict[str, Any]:
    """A valid N1.6 observation for ``layout``: standard-normal float32 states (zeros when ``seed`` is
    None), black uint8 frames, and ``"<key>"`` as every instruction. Frames are ``image_size`` (H, W)
    when given, else the size the layout declares for the camera, else 224x224."""
    rng = np.random.default_rng(seed) if seed is not None else None

    def state(width: int) -> np.ndarray:
        shape = (batch, layout.state_horizon, width)
        return rng.standard_normal(shape).astype(np.float32) if rng is not None else np.zeros(shape, np.float32)

    return {
        "video": {c: np.zeros((batch, layout.video_horizon, *(image_size or layout.image_size(c) or (224, 224)), 3),
                              np.uint8) for c in layout.video},
        "state": {k: state(w) for k, w in layout.state},
        "language": {k: [[k]] * batch for k in layout.language},
    }


def wait_for_server(host: str, port: int, timeout_s: float = 60.0, interval_s: float = 0.5,
                    api_token: str | None = None) -> dict:
    """Ping until the server answers or ``timeout_s`` passes; returns the ping reply.

    Raises:
        PolicyServerTimeout: no answer within ``timeout_s`` seconds.
        PolicyServerError: the server answered with an error (e.g. a wrong token).
    """
    deadline = time.monotonic() + timeout_s
    with PolicyClient(host, port, timeout_ms=max(100, int(interval_s * 1000)), api_token=api_token) as client:
        while True:
            try:
                return client.ping()
            except PolicyServerTimeout as err:
                if time.monotonic() >= deadline:
                    raise PolicyServerTimeout(f"policy server tcp://{host}:{port} did not answer ping within {timeout_s}s") from err


def _bool(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _read_marker(marker: Path, wait_s: float) -> dict:
    deadline = time.monotonic() + wait_s
    while not marker.is_file():
        if time.monotonic() >= deadline:
            raise SystemExit(f"setup marker {marker} not found after {wait_s}s: did com.sim2real.PolicySetup succeed?")
        time.sleep(1.0)
    return json.loads(marker.read_text())


def main(argv: Sequence[str] | None = None) -> int:
    """``sim2real-policy-server``: serve an ONNX policy until SIGINT/SIGTERM (or ``kill`` when enabled).

    ``--model-path`` or ``--setup-marker`` (the ready.json of :mod:`sim2real.edge.setup_component`,
    whose ``model_path`` is served; with ``engine_path`` set, the TensorRT provider caches there). The
    api token comes from ``--api-token-file`` (mode 600; empty = none) or the ``SIM2REAL_POLICY_API_TOKEN``
    environment variable, never from the command line (other users can read it there).
    """
    p = StrictArgumentParser(prog="sim2real-policy-server", description=main.__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-path", help=".onnx policy file")
    src.add_argument("--setup-marker", help="ready.json written by the setup component")
    p.add_argument("--marker-wait-s", type=float, default=0.0, help="wait this long for the marker to appear")
    p.add_argument("--host", default="127.0.0.1", help="address to bind; not loopback = a token is required")
    p.add_argument("--port", type=int, default=5555)
    p.add_argument("--action-horizon", type=int, default=None, help="default: the model layout's (16 without one)")
    p.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES,
                   help="larger requests get an error reply, unread (default 16 MiB)")
    p.add_argument("--max-arrays", type=int, default=DEFAULT_MAX_ARRAYS,
                   help=f"requests holding more numpy arrays get an error reply (default {DEFAULT_MAX_ARRAYS})")
    p.add_argument("--max-frame-bytes", type=int, default=None,
                   help=f"ZMQ frame ceiling: the sender of a larger message is disconnected without a reply "
                        f"(default {HARD_LIMIT_FACTOR} x --max-request-bytes)")
    p.add_argument("--providers", default="", help="comma-separated onnxruntime providers (default: TensorRT,CUDA,CPU)")
    p.add_argument("--api-token-file", help=f"file holding the api token (default: ${API_TOKEN_ENV})")
    p.add_argument("--enable-kill", type=_bool, nargs="?", const=True, default=False,
                   help="answer the kill endpoint by stopping (true/false; default false)")
    p.add_argument("--modality-config-format", choices=MODALITY_CONFIG_FORMATS, default="n1.6",
                   help="encoding of the get_modality_config reply (GR00T N1.6 or N1.5 clients)")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = read_api_token_file(args.api_token_file) if args.api_token_file else check_api_token(
        os.environ.get(API_TOKEN_ENV) or None)
    providers: list[Any] | None = [s.strip() for s in args.providers.split(",") if s.strip()] or None
    model_path = args.model_path
    if args.setup_marker:
        marker = _read_marker(Path(args.setup_marker), args.marker_wait_s)
        model_path = marker["model_path"]
        if marker.get("trt_cache_dir"):
            trt = ("TensorrtExecutionProvider", {
                "trt_engine_cache_enable": True, "trt_engine_cache_path": marker["trt_cache_dir"],
                "trt_fp16_enable": marker.get("engine_precision") == "fp16"})
            providers = [trt, *(providers or ["CUDAExecutionProvider", "CPUExecutionProvider"])]
    server = PolicyServer(model_path, host=args.host, port=args.port, action_horizon=args.action_horizon,
                          max_request_bytes=args.max_request_bytes, max_arrays=args.max_arrays,
                          max_frame_bytes=args.max_frame_bytes, providers=providers, api_token=token,
                          enable_kill=args.enable_kill, modality_config_format=args.modality_config_format)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop())
    server.serve_forever()
    log.info("stopped after %d requests (%s)", server.requests, "kill request" if server.killed else "signal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
