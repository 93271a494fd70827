"""Logic of the Greengrass component ``com.sim2real.PolicySetup`` (runs in its Install step).

Given the model URI and its expected sha256 (both from the deployment's configuration merge, i.e.
the lineage of the approved model package), :func:`run_setup`:

1. downloads the model from S3 (boto3; honours ``AWS_ENDPOINT_URL``) or copies a local path /
   ``file://`` URI into ``<work_dir>/source/``;
2. verifies the sha256 of the downloaded bytes (mismatch → :class:`ModelIntegrityError`, file deleted);
3. resolves an ONNX model: a ``.onnx`` file as is; a ``.tar.gz``/``.tgz`` is extracted (safe
   ``data`` filter) and must hold one ``.onnx`` or one torch checkpoint; a torch checkpoint
   (``.pt``/``.pth``/``.ckpt``) is converted by the ``exporter`` callable
   ``exporter(checkpoint_path: str, onnx_path: str)`` (its return value is ignored unless it is the
   path of the written file; ``sim2real.workloads.export:export_onnx`` fits); the result is checked with ``onnx.checker``;
4. builds a TensorRT engine where possible: with onnxruntime's TensorRT execution provider it warms
   that provider's engine cache (``<work_dir>/trt_cache``, reused by the server); else with the
   ``tensorrt`` Python package it serialises ``<work_dir>/model.<precision>.engine``; else it logs
   that TensorRT is absent and records ``engine_path: null``;
5. writes ``<work_dir>/ready.json`` atomically (last). Fields: ``schema_version, source_uri, sha256,
   model_path, onnx_sha256, engine_path, trt_cache_dir, engine_builder, engine_precision,
   model_package_arn, created_at``.

Idempotent: when ``ready.json`` already records the same URI, sha256 and precision and the ONNX file
still has the recorded hash, nothing is done and the log says so (``changed: False``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sim2real.contract.storage import sha256_file
from sim2real.edge.security import StrictArgumentParser

log = logging.getLogger(__name__)

MARKER_NAME = "ready.json"
PRECISIONS = ("fp16", "fp32")
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")
Exporter = Callable[[str, str], Any]


class SetupError(RuntimeError):
    """The model cannot be prepared (bad input, unsupported format, failed export/build)."""


class ModelIntegrityError(SetupError):
    """The downloaded bytes do not have the expected sha256."""


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _atomic_write_json(path: Path, doc: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def load_exporter(spec: str | None) -> Exporter | None:
    """``"package.module:function"`` → that callable (None/empty → None).

    Raises:
        SetupError: malformed spec or nothing importable at it.
    """
    if not spec:
        return None
    mod, _, attr = spec.partition(":")
    if not mod or not attr:
        raise SetupError(f"exporter must be 'module:function', got {spec!r}")
    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as exc:
        raise SetupError(f"cannot import exporter {spec!r}: {exc}") from exc


def fetch(uri: str, dest_dir: Path, s3_client: Any = None) -> Path:
    """Copy ``uri`` (``s3://bucket/key``, ``file://path`` or a path) into ``dest_dir``; returns the file.

    Raises:
        SetupError: the object/file does not exist or cannot be read (the message names it).
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    parsed = urlparse(uri)
    name = Path(parsed.path).name or "model"
    dest = dest_dir / name
    tmp = dest_dir / f".{name}.part"
    if parsed.scheme == "s3":
        bucket, key = parsed.netloc, parsed.path.lstrip("/")
        if not bucket or not key:
            raise SetupError(f"malformed S3 URI {uri!r}: expected s3://bucket/key")
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        client = s3_client or boto3.client("s3")
        try:
            client.download_file(bucket, key, str(tmp))
        except (ClientError, BotoCoreError) as exc:
            tmp.unlink(missing_ok=True)
            raise SetupError(f"cannot download {uri}: {exc}. Check that the object exists and that the "
                             "Greengrass token exchange role may s3:GetObject on it.") from exc
    elif parsed.scheme in ("", "file"):
        src = Path(parsed.path if parsed.scheme == "file" else uri)
        if not src.is_file():
            raise SetupError(f"model file not found: {src}")
        shutil.copyfile(src, tmp)
    else:
        raise SetupError(f"unsupported model URI scheme {parsed.scheme!r} in {uri!r} (use s3://, file:// or a path)")
    os.replace(tmp, dest)
    return dest


def _resolve_onnx(source: Path, work_dir: Path, exporter: Exporter | None) -> Path:
    """Return an ONNX file for ``source`` (see module docstring, step 3)."""
    target = work_dir / "model.onnx"
    name = source.name.lower()
    if name.endswith((".tar.gz", ".tgz")):
        out = work_dir / "extracted"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        with tarfile.open(source) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(out, filter="data")
            else:  # pragma: no cover - Python < 3.11.4
                tar.extractall(out)
        onnx_files = sorted(out.rglob("*.onnx"))
        ckpts = sorted(p for s in CHECKPOINT_SUFFIXES for p in out.rglob(f"*{s}"))
        if len(onnx_files) == 1:
            source = onnx_files[0]
        elif not onnx_files and len(ckpts) == 1:
            source = ckpts[0]
        else:
            raise SetupError(f"{source.name} must contain exactly one .onnx file (or, without one, exactly one "
                             f"checkpoint); found {[p.name for p in onnx_files]} and {[p.name for p in ckpts]}")
        name = source.name.lower()
    tmp = work_dir / ".model.part.onnx"
    if name.endswith(".onnx"):
        shutil.copyfile(source, tmp)
    elif name.endswith(CHECKPOINT_SUFFIXES):
        if exporter is None:
            raise SetupError(f"{source.name} is a torch checkpoint and no exporter was given; pass "
                             "exporter= (CLI: --exporter module:function) to convert it to ONNX")
        try:
            result = exporter(str(source), str(tmp))
        except Exception as exc:
            raise SetupError(f"exporter failed on {source.name}: {type(exc).__name__}: {exc}") from exc
        if isinstance(result, (str, os.PathLike)) and Path(result) != tmp:
            shutil.copyfile(result, tmp)
        if not tmp.is_file():
            raise SetupError(f"exporter wrote no ONNX file for {source.name}")
    else:
        raise SetupError(f"unsupported model file {source.name!r}: expected .onnx, .tar.gz/.tgz or {CHECKPOINT_SUFFIXES}")
    import onnx

    try:
        onnx.checker.check_model(str(tmp))
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise SetupError(f"{source.name} is not a valid ONNX model: {exc}") from exc
    os.replace(tmp, target)
    return target


def build_engine(onnx_path: Path, work_dir: Path, precision: str) -> dict[str, Any]:
    """Build a TensorRT engine if TensorRT is reachable; never raises for its absence.

    Returns:
        ``{"engine_path", "trt_cache_dir", "engine_builder"}``; all None when TensorRT is absent.

    Raises:
        SetupError: TensorRT is present but the build fails (the model would not run there).
    """
    import onnxruntime as ort

    none = {"engine_path": None, "trt_cache_dir": None, "engine_builder": None}
    if "TensorrtExecutionProvider" in ort.get_available_providers():
        import numpy as np

        cache = work_dir / "trt_cache"
        cache.mkdir(exist_ok=True)
        opts = {"trt_engine_cache_enable": True, "trt_engine_cache_path": str(cache),
                "trt_fp16_enable": precision == "fp16"}
        try:
            sess = ort.InferenceSession(str(onnx_path), providers=[("TensorrtExecutionProvider", opts)])
            inp = sess.get_inputs()[0]
            shape = [d if isinstance(d, int) else 1 for d in inp.shape]
            sess.run(None, {inp.name: np.zeros(shape, np.float32)})
        except Exception as exc:
            raise SetupError(f"TensorRT engine build (onnxruntime TensorRT provider) failed: {exc}") from exc
        log.info("TensorRT engine cached by onnxruntime in %s (%s)", cache, precision)
        return {"engine_path": str(cache), "trt_cache_dir": str(cache), "engine_builder": "onnxruntime-tensorrt"}
    if importlib.util.find_spec("tensorrt") is not None:
        import tensorrt as trt

        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        flag = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
        network = builder.create_network(1 << int(flag) if flag is not None else 0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(onnx_path.read_bytes()):
            errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise SetupError(f"TensorRT cannot parse {onnx_path}: {errs}")
        config = builder.create_builder_config()
        if precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        inp = network.get_input(0)
        if any(d < 0 for d in inp.shape):
            profile = builder.create_optimization_profile()
            lo = tuple(1 if d < 0 else d for d in inp.shape)
            hi = tuple(64 if d < 0 else d for d in inp.shape)
            profile.set_shape(inp.name, lo, lo, hi)
            config.add_optimization_profile(profile)
        blob = builder.build_serialized_network(network, config)
        if blob is None:
            raise SetupError(f"TensorRT engine build failed for {onnx_path} ({precision})")
        engine = work_dir / f"model.{precision}.engine"
        engine.write_bytes(bytes(blob))
        log.info("TensorRT engine written to %s (%s)", engine, precision)
        return {"engine_path": str(engine), "trt_cache_dir": None, "engine_builder": "tensorrt"}
    log.info("TensorRT not available (no onnxruntime TensorRT provider, tensorrt not importable); "
             "skipping the engine build; the server will use CUDA or CPU")
    return none


def run_setup(model_uri: str, expected_sha256: str, work_dir: str | Path, *, exporter: Exporter | None = None,
              engine_precision: str = "fp16", model_package_arn: str | None = None, s3_client: Any = None,
              build_trt: bool = True) -> dict[str, Any]:
    """Prepare the model for the inference component; see the module docstring.

    Args:
        model_uri: ``s3://bucket/key``, ``file://path`` or a local path of the model artifact.
        expected_sha256: 64 hex digits, the sha256 of the artifact's bytes (from the lineage).
        work_dir: folder owned by the component (``{work:path}/model``); created if needed.
        exporter: ``exporter(checkpoint_path: str, onnx_path: str)`` for torch checkpoints.
        engine_precision: ``fp16`` or ``fp32`` for the TensorRT engine.
        model_package_arn: recorded in the marker (lineage), optional.
        s3_client: a boto3 S3 client (default ``boto3.client("s3")``).
        build_trt: False skips the TensorRT step.

    Returns:
        The marker dict plus ``changed`` (False when the setup was already done).

    Raises:
        SetupError: bad arguments, download/export/build failure. ModelIntegrityError: sha256 mismatch.
    """
    if not model_uri:
        raise SetupError("ModelS3Uri is empty: set it in the deployment's configuration merge")
    expected = (expected_sha256 or "").strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise SetupError(f"ModelSha256 must be 64 hex digits, got {expected_sha256!r}")
    if engine_precision not in PRECISIONS:
        raise SetupError(f"EnginePrecision must be one of {PRECISIONS}, got {engine_precision!r}")
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    marker_path = work / MARKER_NAME

    if marker_path.is_file():
        try:
            marker = json.loads(marker_path.read_text())
            same = (marker.get("source_uri") == model_uri and marker.get("sha256") == expected
                    and marker.get("engine_precision") == engine_precision
                    and Path(marker["model_path"]).is_file()
                    and sha256_file(marker["model_path"]) == marker.get("onnx_sha256"))
        except (ValueError, KeyError, TypeError, OSError):
            same = False
        if same:
            log.info("model %s (sha256 %s) is already set up in %s; nothing to do", model_uri, expected, work)
            return {**marker, "changed": False}
        marker_path.unlink()  # a half-done setup must never look ready

    log.info("fetching %s", model_uri)
    source = fetch(model_uri, work / "source", s3_client=s3_client)
    actual = sha256_file(str(source))
    if actual != expected:
        source.unlink(missing_ok=True)
        raise ModelIntegrityError(
            f"sha256 mismatch for {model_uri}: expected {expected}, got {actual}. The artifact changed after "
            "approval or the deployment configuration is stale; refusing to serve it (redeploy with the "
            "lineage's sha256).")
    log.info("sha256 verified: %s", actual)
    onnx_path = _resolve_onnx(source, work, exporter)
    engine = build_engine(onnx_path, work, engine_precision) if build_trt else {
        "engine_path": None, "trt_cache_dir": None, "engine_builder": None}
    marker = {"schema_version": 1, "source_uri": model_uri, "sha256": expected, "model_path": str(onnx_path),
              "onnx_sha256": sha256_file(str(onnx_path)), **engine, "engine_precision": engine_precision,
              "model_package_arn": model_package_arn or None, "created_at": _now()}
    _atomic_write_json(marker_path, marker)
    log.info("ready: %s", marker_path)
    return {**marker, "changed": True}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI used by the component's Install step. Exit 0 = ready, 2 = setup error, 3 = sha256 mismatch."""
    p = StrictArgumentParser(prog="python -m sim2real.edge.setup_component", description=__doc__.split("\n")[0])
    p.add_argument("--model-uri", required=True)
    p.add_argument("--sha256", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--precision", default="fp16", choices=PRECISIONS)
    p.add_argument("--model-package-arn", default="")
    p.add_argument("--exporter", default="", help="module:function converting a checkpoint to ONNX")
    p.add_argument("--no-engine", action="store_true", help="skip the TensorRT step")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result = run_setup(args.model_uri, args.sha256, args.work_dir, exporter=load_exporter(args.exporter),
                           engine_precision=args.precision, model_package_arn=args.model_package_arn,
                           build_trt=not args.no_engine)
    except ModelIntegrityError as exc:
        log.error("%s", exc)
        return 3
    except SetupError as exc:
        log.error("%s", exc)
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
