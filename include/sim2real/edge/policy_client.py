"""The client of the GR00T-protocol policy server: :class:`PolicyClient` (ZMQ REQ, msgpack), and its helpers.

:class:`PolicyClient` speaks the protocol :mod:`sim2real.edge.policy_server` serves (N1.6 request forms, the api
token with every request when set) and turns a missing reply into :class:`PolicyServerTimeout` (or, as soon as the
server drops the connection, :class:`PolicyServerDisconnected`) and an ``{"error": ...}`` reply into
:class:`PolicyServerError`. :func:`layout_observation` builds a valid observation for a modality layout;
:func:`wait_for_server` pings until a server answers. Used by the device check, the benchmark and the tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import zmq

from sim2real.edge.codec import packb, unpackb
from sim2real.contract.modality import ModalityLayout

class PolicyServerError(RuntimeError):
    """The server answered ``{"error": ...}``; the message is the server's."""


class PolicyServerTimeout(TimeoutError):
    """No reply within the client's timeout (server down, stuck or unreachable)."""


class PolicyServerDisconnected(PolicyServerTimeout):
    """The server closed the connection while a request was in flight, so no reply will come: the server
    stopped, or the request was larger than its frame ceiling (``max_frame_bytes``, ``ZMQ_MAXMSGSIZE``)."""


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
