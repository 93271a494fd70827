"""GR00T policy clients of both generations, written for these tests from the public protocol.

They share no code with ``sim2real.edge`` (plain ``msgpack`` and ``zmq``), so the server is checked
against the protocol, not against its own codec:

- :class:`N16PolicyClient` behaves as Isaac-GR00T N1.6's ``PolicyClient`` (``gr00t/policy/server_client.py``):
  ``ping``/``kill``/``get_modality_config`` send no ``data``; ``get_action`` sends
  ``{"observation", "options"}`` and returns ``(action, info)``; ``reset`` sends ``{"options"}``;
  ``ModalityConfig`` maps are decoded with ``ModalityConfig(**as_json)``; an error map raises.
  GR00T N1.7's ``PolicyClient`` (tag ``n1.7-release``) is the same ``gr00t/policy/server_client.py``
  (endpoints, request maps, msgpack codec and ``ModalityConfig`` fields), so no separate N1.7 client is written:
  a ``--modality-config-format n1.7`` server is driven by this one (``test_policy_server.py``).
- :class:`N15RobotClient` behaves as N1.5's ``ExternalRobotInferenceClient`` (``gr00t/eval/service.py``):
  ``get_action(observations)`` sends the flat observation itself as ``data`` and returns the reply map;
  ``ModalityConfig`` is decoded with ``json.loads(as_json)``.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import zmq


@dataclass
class N16ModalityConfig:
    """The fields of N1.6's ``ModalityConfig`` dataclass, with its check of ``modality_keys``."""

    delta_indices: list[int]
    modality_keys: list[str]
    sin_cos_embedding_keys: list[str] | None = None
    mean_std_embedding_keys: list[str] | None = None
    action_configs: list[Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.delta_indices, list):
            raise ValueError(f"delta_indices must be a list, got {self.delta_indices!r}")
        if not isinstance(self.modality_keys, list) or not self.modality_keys:
            raise ValueError(f"modality_keys must be a non-empty list, got {self.modality_keys!r}")


@dataclass
class N15ModalityConfig:
    """The fields of N1.5's pydantic ``ModalityConfig``."""

    delta_indices: list[int]
    modality_keys: list[str]


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        buf = io.BytesIO()
        np.save(buf, obj, allow_pickle=False)
        return {"__ndarray_class__": True, "as_npy": buf.getvalue()}
    return obj


def _decode_n16(obj: dict) -> Any:
    if "__ModalityConfig_class__" in obj:
        return N16ModalityConfig(**obj["as_json"])
    if "__ndarray_class__" in obj:
        return np.load(io.BytesIO(obj["as_npy"]), allow_pickle=False)
    return obj


def _decode_n15(obj: dict) -> Any:
    if "__ModalityConfig_class__" in obj:
        obj = N15ModalityConfig(**json.loads(obj["as_json"]))
    elif "__ndarray_class__" in obj:
        obj = np.load(io.BytesIO(obj["as_npy"]), allow_pickle=False)
    return obj


class _ZmqClient:
    decode = staticmethod(_decode_n16)

    def __init__(self, host: str = "127.0.0.1", port: int = 5555, timeout_ms: int = 5000, api_token: str | None = None):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.REQ)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
        self.socket.connect(f"tcp://{host}:{port}")
        self.api_token = api_token

    def call_endpoint(self, endpoint: str, data: Any = None, requires_input: bool = True) -> Any:
        request: dict[str, Any] = {"endpoint": endpoint}
        if requires_input:
            request["data"] = data
        if self.api_token:
            request["api_token"] = self.api_token
        self.socket.send(msgpack.packb(request, default=_encode))
        response = msgpack.unpackb(self.socket.recv(), object_hook=self.decode)
        if isinstance(response, dict) and "error" in response:
            raise RuntimeError(f"Server error: {response['error']}")
        return response

    def close(self) -> None:
        self.socket.close(0)
        self.context.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class N16PolicyClient(_ZmqClient):
    decode = staticmethod(_decode_n16)

    def ping(self) -> bool:
        try:
            self.call_endpoint("ping", requires_input=False)
            return True
        except zmq.error.ZMQError:
            return False

    def kill_server(self) -> Any:
        return self.call_endpoint("kill", requires_input=False)

    def get_action(self, observation: dict[str, Any], options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        return tuple(self.call_endpoint("get_action", {"observation": observation, "options": options}))

    def reset(self, options: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.call_endpoint("reset", {"options": options})

    def get_modality_config(self) -> dict[str, N16ModalityConfig]:
        return self.call_endpoint("get_modality_config", requires_input=False)


class N15RobotClient(_ZmqClient):
    decode = staticmethod(_decode_n15)

    def get_action(self, observations: dict[str, Any]) -> dict[str, Any]:
        return self.call_endpoint("get_action", observations)

    def get_modality_config(self) -> dict[str, N15ModalityConfig]:
        return self.call_endpoint("get_modality_config", requires_input=False)
