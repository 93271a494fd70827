"""ZMQ policy server that serves an ONNX policy with onnxruntime over the GR00T protocol.

Protocol (NVIDIA Isaac-GR00T's policy server: ``gr00t/policy/server_client.py`` in N1.6 and N1.7,
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
:class:`sim2real.edge.policy_client.PolicyClient` reports that at once (``PolicyServerDisconnected``), GR00T's clients, which set
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

from sim2real.edge.codec import (DEFAULT_MAX_ARRAYS, DEFAULT_MAX_REQUEST_BYTES, MISSING, CodecError, packb,
                                 read_request_token, unpackb)
from sim2real.edge.onnx_policy import MODALITY_CONFIG_FORMATS, OnnxPolicy, RequestError, _is_map, modality_configs
from sim2real.edge.security import StrictArgumentParser, check_api_token, is_loopback, read_api_token_file

log = logging.getLogger(__name__)

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
#: Environment variable the CLI reads the token from when no ``--api-token-file`` is given.
API_TOKEN_ENV = "SIM2REAL_POLICY_API_TOKEN"
REJECTION_LOG_INTERVAL_S = 10.0
_GET_ACTION_KEYS = frozenset(("observation", "options"))


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
        modality_config_format: ``"n1.6"``, ``"n1.7"`` (N1.6's encoding) or ``"n1.5"``, the GR00T generation of the
            clients: how ``get_modality_config`` encodes its reply.

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
                   help="GR00T generation of the clients: the get_modality_config reply's encoding (N1.7 clients "
                        "decode N1.6's)")
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
