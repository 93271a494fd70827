"""Latency and throughput of the policy: torch vs onnxruntime (vs TensorRT) vs end-to-end over ZMQ.

Every measurement runs ``n`` sequential requests of one zero-mean random observation batch after
``warmup`` untimed ones and reports, in milliseconds per request, ``p50_ms``, ``p99_ms``, ``mean_ms``,
plus ``throughput_rps`` (= n / wall seconds, sequential, one request in flight). Numbers depend on the
machine; they belong in ``make bench`` output, never in test assertions.

The ZMQ measurement is a client of the public protocol only: it reads the modality layout with
``get_metadata``, builds a GR00T N1.6 observation from it (camera frames of ``image_size``) and times
``get_action`` round trips, with the server's api token when it has one.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from sim2real.edge.codec import packb
from sim2real.contract.modality import ModalityLayout
from sim2real.edge.onnx_policy import OnnxPolicy
from sim2real.edge.policy_client import PolicyClient, layout_observation, wait_for_server
from sim2real.edge.policy_server import PolicyServer
from sim2real.edge.security import StrictArgumentParser, read_api_token_file


def _measure(fn: Callable[[], Any], n: int, warmup: int) -> dict[str, float]:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for _ in range(warmup):
        fn()
    lat = np.empty(n)
    t0 = time.perf_counter()
    for i in range(n):
        s = time.perf_counter()
        fn()
        lat[i] = time.perf_counter() - s
    wall = time.perf_counter() - t0
    ms = lat * 1e3
    return {"n": n, "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(ms.mean()), "throughput_rps": float(n / wall)}


def bench_torch(module: Any, state_dim: int, n: int = 500, batch: int = 1, warmup: int = 20) -> dict[str, float]:
    """Time ``module(x)`` for ``x`` float32 (batch, state_dim) under ``torch.inference_mode`` (CPU)."""
    import torch

    x = torch.randn(batch, state_dim)
    module.eval()

    def step() -> None:
        with torch.inference_mode():
            module(x)

    return {"threads": torch.get_num_threads(), **_measure(step, n, warmup)}


def bench_onnxruntime(model_path: str | Path, n: int = 500, batch: int = 1, providers: Sequence[Any] | None = None,
                      warmup: int = 20) -> dict[str, Any]:
    """Time ``session.run`` of the ONNX policy (the server's own path, without transport)."""
    pol = OnnxPolicy(model_path, providers=providers)
    x = np.random.default_rng(0).standard_normal((batch, pol.layout.state_dim)).astype(np.float32)
    return {"provider": pol.provider, **_measure(lambda: pol.run(x), n, warmup)}


def bench_zmq(host: str, port: int, n: int = 500, batch: int = 1, warmup: int = 20,
              timeout_ms: int = 5000, api_token: str | None = None,
              image_size: tuple[int, int] | None = None) -> dict[str, Any]:
    """Time full ``get_action`` round trips (encode, ZMQ, decode, checks, inference) against a running server.

    Args:
        host, port: the server. n, batch, warmup: see the module docstring.
        timeout_ms: client timeout per request. api_token: the server's token, if it has one.
        image_size: (H, W) of the camera frames sent when the layout has cameras; None = the size the
            layout declares for each camera, else 224x224.

    Raises:
        PolicyServerTimeout / PolicyServerError: the server is not answering or refuses the request.
    """
    with PolicyClient(host, port, timeout_ms=timeout_ms, api_token=api_token) as client:
        meta = client.metadata()
        layout = ModalityLayout.from_dict(meta["modality_layout"])
        obs = layout_observation(layout, batch=batch, image_size=image_size)
        request: dict[str, Any] = {"endpoint": "get_action", "data": {"observation": obs, "options": None}}
        if api_token:
            request["api_token"] = api_token
        reply_bytes = len(client.request_raw(packb(request)))
        res = _measure(lambda: client.get_action(obs), n, warmup)
    return {"provider": meta.get("provider"), "model_sha256": meta.get("model_sha256"),
            "request_bytes": len(packb(request)), "reply_bytes": reply_bytes, **res}


def zmq_round_trip(request_bytes: int, reply_bytes: int, n: int = 500, warmup: int = 20) -> dict[str, float]:
    """The transport floor under the server's numbers: REQ/REP round trips on a free loopback port of
    messages of the given sizes, the REP thread answering a fixed reply without decoding anything.

    Returns:
        ``{"n", "p50_ms", "p99_ms", "mean_ms", "throughput_rps"}`` (see the module docstring).
    """
    ctx = zmq.Context()
    rep, req = ctx.socket(zmq.REP), ctx.socket(zmq.REQ)
    for sock in (rep, req):
        sock.setsockopt(zmq.LINGER, 0)
    port = rep.bind_to_random_port("tcp://127.0.0.1")
    req.setsockopt(zmq.RCVTIMEO, 5000)
    req.connect(f"tcp://127.0.0.1:{port}")
    reply, payload, stop = b"\x00" * reply_bytes, b"\x00" * request_bytes, threading.Event()

    def serve() -> None:
        while not stop.is_set():
            if rep.poll(50):
                rep.recv()
                rep.send(reply)

    thread = threading.Thread(target=serve, name="zmq-round-trip", daemon=True)
    thread.start()
    try:
        def step() -> None:
            req.send(payload)
            req.recv()

        return _measure(step, n, warmup)
    finally:
        stop.set()
        thread.join(5)
        rep.close(0)
        req.close(0)
        ctx.term()


def policy_server_latency(model_path: str | Path, n: int = 500, batch: int = 1) -> dict[str, Any]:
    """End-to-end latency of a fresh server on a free loopback port (for ``make bench``), with the
    transport floor (:func:`zmq_round_trip` of the same message sizes) measured right after, as anchor.

    Returns:
        ``{"p50_ms", "p99_ms", "mean_ms", "throughput_rps", "n", "provider", "model_sha256", "request_bytes",
        "reply_bytes", "transport": {"p50_ms", "p99_ms", "mean_ms", "throughput_rps", "n"}}``.
    """
    handle = PolicyServer(model_path, host="127.0.0.1", port=0).start_in_thread()
    try:
        result = bench_zmq("127.0.0.1", handle.port, n=n, batch=batch)
    finally:
        handle.stop()
    result["transport"] = zmq_round_trip(result["request_bytes"], result["reply_bytes"], n=n)
    return result


def many_array_request(arrays: int, api_token: str | None = None) -> bytes:
    """A ``get_action`` request whose data is ``arrays`` one-byte uint8 arrays, encoded as GR00T clients
    encode (``api_token`` last, when given): the shape of the unauthenticated flood of the benchmark."""
    req: dict[str, Any] = {"endpoint": "get_action", "data": {f"k{i}": np.zeros(1, np.uint8) for i in range(arrays)}}
    if api_token is not None:
        req["api_token"] = api_token
    return packb(req)


def _flood(port: int, arrays: int, stop: Any, sent: Any, max_requests: int) -> None:
    """One flooding peer (run in its own process): unauthenticated many-array requests back to back on a
    REQ socket until ``stop`` is set or ``max_requests`` were answered; adds the answered count to ``sent``."""
    payload = many_array_request(arrays)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    for opt, val in ((zmq.LINGER, 0), (zmq.RCVTIMEO, 5000), (zmq.SNDTIMEO, 5000)):
        sock.setsockopt(opt, val)
    sock.connect(f"tcp://127.0.0.1:{port}")
    done = 0
    try:
        while not stop.is_set() and done < max_requests:
            sock.send(payload)
            sock.recv()
            done += 1
    except zmq.Again:
        pass
    finally:
        with sent.get_lock():
            sent.value += done
        sock.close(0)
        ctx.term()


def flood_latency(model_path: str | Path, n: int = 300, flooders: int = 2, arrays: int = 20_000,
                  warmup: int = 20, max_flood_requests: int = 100_000) -> dict[str, Any]:
    """An authenticated client's ``get_action`` latency alone, then while ``flooders`` other processes send
    unauthenticated requests of ``arrays`` tiny arrays back to back (loopback, a fresh server with a token).

    Each flooding peer has one request in flight (REQ), and the server's REP socket queues its peers
    fairly, so a legitimate request waits behind at most one flood request per flooding peer; with the
    token read before any decode (:func:`sim2real.edge.codec.read_request_token`) each costs a scan of
    its bytes. Two figures follow: ``bound_p99_ms = p99 alone + flooders x refusal time`` (the refusal
    time, ``refuse_ms``, is the median of :meth:`PolicyServer.handle` on one flood request), what the server
    itself adds when the flood does not also take its CPU (a remote attacker); and ``decode_ms``, one full
    decode of a flood request, what each refusal cost when the server decoded before authenticating: the
    ``make bench`` row checks that the p99 under flood stays below it (flooders on the same machine compete
    for its cores, so only that bound holds on a small loaded machine).

    Returns:
        ``{"alone": {p50_ms, p99_ms, ...}, "flood": {p50_ms, p99_ms, ...}, "flooders", "flood_arrays",
        "flood_request_bytes", "flood_refused", "flood_rps", "refuse_ms", "decode_ms", "bound_p99_ms"}``.
    """
    import multiprocessing
    import secrets

    from sim2real.edge.codec import unpackb

    token = secrets.token_urlsafe(32)
    server = PolicyServer(model_path, host="127.0.0.1", port=0, api_token=token)
    payload = many_array_request(arrays)
    logging.disable(logging.WARNING)  # the refusals measured here are not an attack to report
    try:
        refuse = _measure(lambda: server.handle(payload), 20, 2)["p50_ms"]
    finally:
        logging.disable(logging.NOTSET)
    decode = _measure(lambda: unpackb(payload, max_bytes=None), 3, 1)["p50_ms"]
    handle = server.start_in_thread()
    ctx = multiprocessing.get_context("spawn")
    stop, sent = ctx.Event(), ctx.Value("l", 0)
    procs = [ctx.Process(target=_flood, args=(handle.port, arrays, stop, sent, max_flood_requests), daemon=True)
             for _ in range(flooders)]
    try:
        with PolicyClient("127.0.0.1", handle.port, timeout_ms=30_000, api_token=token) as client:
            layout = ModalityLayout.from_dict(client.metadata()["modality_layout"])
            obs = layout_observation(layout)
            alone = _measure(lambda: client.get_action(obs), n, warmup)
            refused_before = server.rejections.total
            for proc in procs:
                proc.start()
            deadline = time.monotonic() + 60
            while server.rejections.total - refused_before < 2 * flooders and time.monotonic() < deadline:
                time.sleep(0.05)  # every flooder is sending
            t0 = time.perf_counter()
            flood = _measure(lambda: client.get_action(obs), n, 0)
            wall = time.perf_counter() - t0
            refused = server.rejections.total - refused_before
    finally:
        stop.set()
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
        handle.stop()
    return {"alone": alone, "flood": flood, "flooders": flooders, "flood_arrays": arrays,
            "flood_request_bytes": len(payload), "flood_refused": refused, "flood_rps": refused / wall,
            "refuse_ms": refuse, "decode_ms": decode, "bound_p99_ms": alone["p99_ms"] + flooders * refuse}


def run_benchmark(model_path: str | Path, n: int = 500, batch: int = 1, torch_module: Any = None,
                  output: str | Path | None = None) -> dict[str, Any]:
    """torch (if ``torch_module``), onnxruntime on each available provider, TensorRT where present,
    and ZMQ end-to-end; returns the report and writes it as JSON to ``output`` if given."""
    import onnxruntime as ort

    report: dict[str, Any] = {"model_path": str(model_path), "batch": batch, "host": platform.node(),
                              "machine": platform.machine(), "onnxruntime": ort.__version__, "results": {}}
    pol = OnnxPolicy(model_path, providers=["CPUExecutionProvider"])
    if torch_module is not None:
        report["results"]["torch_cpu"] = bench_torch(torch_module, pol.layout.state_dim, n=n, batch=batch)
    for prov in ("CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"):
        if prov in ort.get_available_providers():
            report["results"][f"onnxruntime_{prov.removesuffix('ExecutionProvider').lower()}"] = \
                bench_onnxruntime(model_path, n=n, batch=batch, providers=[prov])
    report["results"]["zmq_end_to_end"] = policy_server_latency(model_path, n=n, batch=batch)
    if output:
        Path(output).write_text(json.dumps(report, indent=2))
    return report


def _image_size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HxW (e.g. 224x224), got {text!r}") from None
    if h < 1 or w < 1:
        raise argparse.ArgumentTypeError(f"expected positive HxW, got {text!r}")
    return h, w


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sim2real.edge.benchmark``: local model (``--model-path``) or running server (``--port``)."""
    p = StrictArgumentParser(prog="python -m sim2real.edge.benchmark", description=__doc__.split("\n")[0])
    p.add_argument("--model-path", help="benchmark this .onnx locally (onnxruntime + fresh ZMQ server)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, help="benchmark the server already listening here")
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--wait-s", type=float, default=0.0, help="wait this long for the server to answer ping")
    p.add_argument("--api-token-file", help="file holding the server's api token (mode 600; empty = none)")
    p.add_argument("--image-size", default=None, type=_image_size,
                   help="HxW of the camera frames sent when the model's layout has cameras (default: the size "
                        "the layout declares for each camera, else 224x224)")
    p.add_argument("--output", help="write the JSON report here")
    args = p.parse_args(argv)
    if args.model_path:
        report = run_benchmark(args.model_path, n=args.requests, batch=args.batch, output=args.output)
    elif args.port:
        token = read_api_token_file(args.api_token_file) if args.api_token_file else None
        if args.wait_s:
            wait_for_server(args.host, args.port, timeout_s=args.wait_s, api_token=token)
        report = {"endpoint": f"tcp://{args.host}:{args.port}", "batch": args.batch,
                  "results": {"zmq_end_to_end": bench_zmq(args.host, args.port, n=args.requests, batch=args.batch,
                                                          api_token=token, image_size=args.image_size)}}
        if args.output:
            Path(args.output).write_text(json.dumps(report, indent=2))
    else:
        p.error("give --model-path or --port")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
