"""ZMQ policy server (and client) that serves an ONNX policy with onnxruntime.

Protocol (the GR00T policy server's, seed-repo.md §4.1): ZeroMQ REQ/REP, default port 5555, msgpack
payloads with numpy arrays as ``{"__ndarray_class__": True, "as_npy": <np.save bytes>}``
(:mod:`sim2real.edge.codec`). Every request is a map ``{"endpoint": <name>, "data": {...}}``:

``ping``
    → ``{"status": "ok", "message": "Server is running"}``
``get_action`` with ``data = {"observation": {"state": {<key>: array}, ...}}``
    Each state array is float32, shape ``(B, T, D_k)`` (T stacked steps; the **last** step is used)
    or ``(B, D_k)``. The keys are concatenated along the feature axis in the model's declared order
    (ONNX metadata property ``sim2real:state_keys``, comma separated) or, without it, in sorted key
    order; the concatenated width must equal the model's input width. ``video``/``language`` entries
    are accepted and ignored (an MLP state policy has no use for them).
    → ``[{"action": float32 (B, H, A)}, {"latency_ms": float, "inference_ms": float,
    "provider": str, "chunking": "repeat" | "model"}]``.
    **Action chunks.** GR00T returns an H-step chunk (H=16). A single-step policy (ONNX output
    ``(B, A)``) has no dynamics model to roll out, so the server returns that one action repeated
    over the H steps (``chunking="repeat"``, a zero-order hold: a client that executes the whole chunk
    holds the action for H control steps; a client that re-queries every step gets the plain policy).
    A model whose output is already ``(B, H, A)`` is passed through (``chunking="model"``).
``get_metadata`` (alias ``get_modality_config``)
    → model inputs/outputs (name, shape, dtype), execution provider, action horizon, model sha256,
    and GR00T-style ``state_keys`` / ``action_keys`` / ``video_keys`` / ``language_keys``.

Any failure (payload not msgpack, larger than ``max_request_bytes``, unknown endpoint, bad shapes or
dtypes, non-finite values) is answered with ``{"error": "<message>"}``; the server keeps serving.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from sim2real.edge.codec import DEFAULT_MAX_REQUEST_BYTES, CodecError, packb, unpackb
from sim2real.workloads.storage import sha256_file

log = logging.getLogger(__name__)

#: Execution providers in order of preference (TensorRT on Jetson/NVIDIA GPUs, then CUDA, then CPU).
PREFERRED_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
#: ONNX metadata property listing the state keys in input order (comma separated), optional.
STATE_KEYS_PROPERTY = "sim2real:state_keys"
DEFAULT_ACTION_HORIZON = 16
PING_REPLY = {"status": "ok", "message": "Server is running"}


class PolicyServerError(RuntimeError):
    """The server answered ``{"error": ...}``; the message is the server's."""


class PolicyServerTimeout(TimeoutError):
    """No reply within the client's timeout (server down, stuck or unreachable)."""


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


def _dim(d: Any) -> int | str | None:
    return d if isinstance(d, int) else (str(d) if d else None)


class OnnxPolicy:
    """An ONNX policy ``state (B, D) float32 -> action (B, A) or (B, H, A) float32``.

    Args:
        model_path: the ``.onnx`` file. Its first input is the flat state; the output named
            ``actions``/``action``/``mean_actions`` if present, else the first output, is the action.
        action_horizon: H of the returned chunks (positive int).
        providers: see :func:`select_providers`.

    Raises:
        FileNotFoundError: no model file. ValueError: the model's input is not a rank-2 float tensor,
        its output rank is not 2 or 3, or a chunked output's horizon differs from ``action_horizon``.
    """

    def __init__(self, model_path: str | Path, action_horizon: int = DEFAULT_ACTION_HORIZON,
                 providers: Sequence[Any] | None = None):
        import onnxruntime as ort

        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model file not found: {self.model_path}")
        if int(action_horizon) < 1:
            raise ValueError(f"action_horizon must be >= 1, got {action_horizon}")
        self.action_horizon = int(action_horizon)
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
        if self.chunking == "model" and isinstance(out.shape[1], int) and out.shape[1] != self.action_horizon:
            raise ValueError(f"{self.model_path}: model emits chunks of {out.shape[1]} steps, "
                             f"but action_horizon={self.action_horizon}")
        meta = self.session.get_modelmeta().custom_metadata_map or {}
        keys = meta.get(STATE_KEYS_PROPERTY, "")
        self.state_keys: list[str] | None = [k.strip() for k in keys.split(",") if k.strip()] or None

    def run(self, state: np.ndarray) -> np.ndarray:
        """Run the policy on ``state`` float32 ``(B, D)``; return float32 ``(B, H, A)``."""
        out = self.session.run([self.output_name], {self.input_name: state})[0].astype(np.float32, copy=False)
        if self.chunking == "repeat":
            out = np.repeat(out[:, None, :], self.action_horizon, axis=1)
        return out

    def flatten_state(self, state: Any) -> np.ndarray:
        """Validate ``observation["state"]`` and concatenate it to float32 ``(B, D)``.

        Raises:
            RequestError: not a non-empty map of float32 (B,T,D)/(B,D) arrays with one batch size,
                missing/extra keys against the model's declared keys, wrong total width, non-finite.
        """
        if not isinstance(state, Mapping) or not state:
            raise RequestError("observation['state'] must be a non-empty map of key -> float32 array")
        if self.state_keys is not None:
            missing = [k for k in self.state_keys if k not in state]
            extra = sorted(set(state) - set(self.state_keys))
            if missing or extra:
                raise RequestError(f"state keys must be exactly {self.state_keys}; missing {missing}, unexpected {extra}")
            order = self.state_keys
        else:
            order = sorted(state)
        parts, batch = [], None
        for key in order:
            arr = state[key]
            if not isinstance(arr, np.ndarray):
                raise RequestError(f"state[{key!r}] must be a numpy array, got {type(arr).__name__}")
            if arr.dtype != np.float32:
                raise RequestError(f"state[{key!r}] must be float32, got {arr.dtype}")
            if arr.ndim == 3:
                if arr.shape[1] < 1:
                    raise RequestError(f"state[{key!r}] has an empty time axis: {arr.shape}")
                arr = arr[:, -1, :]
            elif arr.ndim != 2:
                raise RequestError(f"state[{key!r}] must be (B, T, D) or (B, D), got shape {arr.shape}")
            if batch is None:
                batch = arr.shape[0]
            elif arr.shape[0] != batch:
                raise RequestError(f"state[{key!r}] has batch {arr.shape[0]}, others have {batch}")
            parts.append(arr)
        if not batch:
            raise RequestError("state batch size must be >= 1")
        flat = np.ascontiguousarray(np.concatenate(parts, axis=1))
        if self.state_dim is not None and flat.shape[1] != self.state_dim:
            raise RequestError(f"state width {flat.shape[1]} (keys {order}) != model input width {self.state_dim}")
        if not np.isfinite(flat).all():
            raise RequestError("state contains NaN or Inf")
        return flat

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
            "state_keys": self.state_keys, "action_keys": ["action"], "video_keys": [], "language_keys": [],
        }


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
        model_path: ``.onnx`` policy file.
        host: interface to bind (``0.0.0.0`` = all; tests use ``127.0.0.1``).
        port: TCP port; 0 picks a free one (read ``.port`` after binding).
        action_horizon: H, steps per returned action chunk.
        max_request_bytes: larger requests are refused with an error reply before decoding.
        providers: onnxruntime providers in preference order; None = TensorRT, CUDA, CPU as available.

    Raises:
        FileNotFoundError / ValueError: see :class:`OnnxPolicy`. zmq.ZMQError on bind (port in use).
    """

    def __init__(self, model_path: str | Path, host: str = "0.0.0.0", port: int = 5555,
                 action_horizon: int = DEFAULT_ACTION_HORIZON,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 providers: Sequence[Any] | None = None):
        self.policy = OnnxPolicy(model_path, action_horizon=action_horizon, providers=providers)
        self.host, self.port = host, int(port)
        self.max_request_bytes = int(max_request_bytes)
        self.requests = 0
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._stop = threading.Event()
        self._handlers = {
            "ping": self._ping, "get_action": self._get_action,
            "get_metadata": self._metadata, "get_modality_config": self._metadata,
        }

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    # -- handlers -------------------------------------------------------------------------------
    def _ping(self, data: Any) -> Any:
        return dict(PING_REPLY)

    def _metadata(self, data: Any) -> Any:
        return {**self.policy.describe(), "max_request_bytes": self.max_request_bytes,
                "endpoints": sorted(self._handlers)}

    def _get_action(self, data: Any) -> Any:
        t0 = time.perf_counter()
        if not isinstance(data, Mapping) or not isinstance(data.get("observation"), Mapping):
            raise RequestError("get_action needs data = {'observation': {'state': {key: array}}}")
        state = self.policy.flatten_state(data["observation"].get("state"))
        t1 = time.perf_counter()
        action = self.policy.run(state)
        t2 = time.perf_counter()
        info = {"latency_ms": (t2 - t0) * 1e3, "inference_ms": (t2 - t1) * 1e3,
                "provider": self.policy.provider, "chunking": self.policy.chunking}
        return [{"action": action}, info]

    def handle(self, raw: bytes) -> bytes:
        """Answer one raw request (bytes in, bytes out); never raises."""
        try:
            req = unpackb(raw, max_bytes=self.max_request_bytes)
            if not isinstance(req, Mapping) or not isinstance(req.get("endpoint"), str):
                raise RequestError("request must be a map with a string 'endpoint'")
            handler = self._handlers.get(req["endpoint"])
            if handler is None:
                raise RequestError(f"unknown endpoint {req['endpoint']!r}; known: {sorted(self._handlers)}")
            reply = handler(req.get("data") or {})
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
        try:
            sock.bind(f"tcp://{self.host}:{self.port if self.port else '*'}")
        except zmq.ZMQError as exc:
            sock.close()
            self._ctx.term()
            self._ctx = None
            raise zmq.ZMQError(exc.errno, f"cannot bind tcp://{self.host}:{self.port}: {exc}") from exc
        self._sock = sock
        self.port = int(sock.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
        return self.port

    def serve_forever(self, poll_ms: int = 100) -> None:
        """Bind (if needed) and answer requests until :meth:`stop`; closes the socket on return."""
        self.bind()
        assert self._sock is not None
        log.info("Server ready — listening on %s (provider %s, model sha256 %s)",
                 self.endpoint, self.policy.provider, self.policy.sha256)
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if not poller.poll(poll_ms):
                    continue
                frames = self._sock.recv_multipart()
                if len(frames) == 1:
                    reply = self.handle(frames[0])
                else:
                    reply = packb({"error": "multipart requests are not supported"})
                self._sock.send(reply)
                self.requests += 1
                if self.requests % 100 == 0:
                    log.info("served %d requests", self.requests)
        finally:
            self._sock.close(0)
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
    """REQ client for :class:`PolicyServer` (or any GR00T-protocol server).

    Args:
        host, port: server address.
        timeout_ms: per-request send/receive timeout in milliseconds.

    Every method raises :class:`PolicyServerTimeout` when no reply arrives in time (the REQ socket
    is then closed and reopened, so the client stays usable) and :class:`PolicyServerError` when
    the server answers ``{"error": ...}``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 5555, timeout_ms: int = 5000):
        self.host, self.port, self.timeout_ms = host, int(port), int(timeout_ms)
        self._ctx = zmq.Context()
        self._sock: zmq.Socket | None = None
        self._connect()

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    def _connect(self) -> None:
        self._sock = self._ctx.socket(zmq.REQ)
        for opt, val in ((zmq.LINGER, 0), (zmq.RCVTIMEO, self.timeout_ms), (zmq.SNDTIMEO, self.timeout_ms)):
            self._sock.setsockopt(opt, val)
        self._sock.connect(self.endpoint)

    def _reset(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
        self._connect()

    def request_raw(self, payload: bytes) -> bytes:
        """Send raw bytes, return the raw reply (for protocol tests and other encoders)."""
        assert self._sock is not None
        try:
            self._sock.send(payload)
            return self._sock.recv()
        except zmq.Again as exc:
            self._reset()
            raise PolicyServerTimeout(
                f"no reply from {self.endpoint} within {self.timeout_ms} ms: the policy server is down, "
                "stuck or unreachable (REQ socket reset; check that the server runs and the port is right)"
            ) from exc

    def call(self, endpoint: str, data: Any = None) -> Any:
        """Call ``endpoint`` with ``data``; returns the decoded reply. Raises on an error reply."""
        req: dict[str, Any] = {"endpoint": endpoint}
        if data is not None:
            req["data"] = data
        reply = unpackb(self.request_raw(packb(req)), max_bytes=None)
        if isinstance(reply, Mapping) and "error" in reply:
            raise PolicyServerError(f"{self.endpoint} {endpoint}: {reply['error']}")
        return reply

    def ping(self) -> dict[str, Any]:
        """``{"status": "ok", ...}`` from the server."""
        return self.call("ping")

    def get_action(self, observation: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Send one observation (``{"state": {key: float32 (B,T,D)|(B,D)}}``); returns (actions, info)
        where ``actions["action"]`` is float32 (B, H, A) and ``info["latency_ms"]`` the server time."""
        reply = self.call("get_action", {"observation": dict(observation)})
        if not isinstance(reply, list) or len(reply) != 2:
            raise PolicyServerError(f"{self.endpoint} get_action: unexpected reply {type(reply).__name__}")
        return reply[0], reply[1]

    def metadata(self) -> dict[str, Any]:
        """The server's ``get_metadata`` reply."""
        return self.call("get_metadata")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None
        self._ctx.term()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def wait_for_server(host: str, port: int, timeout_s: float = 60.0, interval_s: float = 0.5) -> dict:
    """Ping until the server answers or ``timeout_s`` passes; returns the ping reply.

    Raises:
        PolicyServerTimeout: no answer within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    with PolicyClient(host, port, timeout_ms=max(100, int(interval_s * 1000))) as client:
        while True:
            try:
                return client.ping()
            except PolicyServerTimeout:
                if time.monotonic() >= deadline:
                    raise PolicyServerTimeout(f"policy server tcp://{host}:{port} did not answer ping within {timeout_s}s")


def _read_marker(marker: Path, wait_s: float) -> dict:
    deadline = time.monotonic() + wait_s
    while not marker.is_file():
        if time.monotonic() >= deadline:
            raise SystemExit(f"setup marker {marker} not found after {wait_s}s: did com.sim2real.PolicySetup succeed?")
        time.sleep(1.0)
    return json.loads(marker.read_text())


def main(argv: Sequence[str] | None = None) -> int:
    """``sim2real-policy-server``: serve an ONNX policy until SIGINT/SIGTERM.

    ``--model-path`` or ``--setup-marker`` (the ready.json of :mod:`sim2real.edge.setup_component`,
    whose ``model_path`` is served; with ``engine_path`` set, the TensorRT provider caches there).
    """
    p = argparse.ArgumentParser(prog="sim2real-policy-server", description=main.__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-path", help=".onnx policy file")
    src.add_argument("--setup-marker", help="ready.json written by the setup component")
    p.add_argument("--marker-wait-s", type=float, default=0.0, help="wait this long for the marker to appear")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=5555)
    p.add_argument("--action-horizon", type=int, default=DEFAULT_ACTION_HORIZON)
    p.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    p.add_argument("--providers", default="", help="comma-separated onnxruntime providers (default: TensorRT,CUDA,CPU)")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
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
                          max_request_bytes=args.max_request_bytes, providers=providers)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop())
    server.serve_forever()
    log.info("stopped after %d requests", server.requests)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
