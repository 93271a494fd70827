"""Field episodes on the robot: record one summary per episode, spool it locally, upload it to S3 exactly once.

The robot's control loop holds a :class:`FieldRecorder` and calls ``start_episode()``, ``record_step(latency_ms)``
per action, ``record_intervention()`` when an operator takes over and ``end_episode(success, source)``. The
summary (``sim2real.contract.field``, schema ``field_episode``) is validated and written to a local spool folder
first (temporary file, fsync, rename: a process that dies mid-write leaves only a ``.part`` file, which is never
uploaded), so nothing is lost while the process restarts or the network is down.

With ``record_data=True`` (the ``com.sim2real.FieldUploader`` configuration's ``RecordData``) the recorder also
keeps each step's observation state and applied action and, at ``end_episode``, spools the episode's data before
its summary: ``<episode_id>.parquet``, one LeRobot v2.1 episode data table (:func:`episode_table`), written with
``pyarrow``. The summary then names it (``data_uri``, ``data_sha256``, ``data_frames``, ``data_fps``, ``task``).

:func:`upload_spool` (``python -m sim2real.edge.field_recorder upload``, run periodically by the Greengrass
component ``com.sim2real.FieldUploader``) sends each spooled summary with ``PutObject(IfNoneMatch="*")`` to
``<prefix>field/episodes/<thing_name>/<episode_id>.json``; a summary with ``data_uri`` has its data file sent first,
the same way, to ``<prefix>field/data/<thing_name>/<episode_id>.parquet`` with ``ChecksumSHA256`` (S3 refuses a
body whose SHA-256 differs: PutObject, "Checking object integrity" in the S3 User Guide), and the summary only after
S3 confirmed the data. S3 refuses a second write of the key with 412 PreconditionFailed; the uploader then writes
again with ``IfMatch=<MD5 of its body>`` (S3's ETag of a single-part upload to an SSE-S3 bucket), which S3 accepts
only when the stored object has the same bytes (an earlier upload whose answer was lost: "already uploaded", the
spool file is removed; on the versioned artifacts bucket this write adds an identical version) and refuses with 412
otherwise (another body under the key: reported, moved to ``conflicts/`` with its data file, never overwritten).
Only ``s3:PutObject`` is needed. A spool file (and its data file) is removed only after S3 confirmed the summary;
when S3 is unreachable the pass retries with exponential backoff and leaves the files for the next pass.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sim2real.contract import field as contract
from sim2real.contract.stats import nearest_rank

log = logging.getLogger("sim2real.edge.field_recorder")

#: Subfolders of the spool: summaries S3 holds another body for, and files that are not valid episodes.
CONFLICTS, REJECTED = "conflicts", "rejected"
PART_SUFFIX = ".part"
#: Suffix of an episode's data file in the spool (``<episode_id>.parquet``) and its S3 content type.
DATA_SUFFIX, DATA_CONTENT_TYPE = ".parquet", "application/vnd.apache.parquet"
#: A spooled data file without its summary this many seconds after it was written is an orphan (the process died
#: between writing the data and its summary, or between removing an uploaded summary and its data): removed by the
#: next pass. Younger ones may be an episode whose summary is being written now.
ORPHAN_DATA_AGE_S = 3600.0
#: botocore errors that mean "S3 not reachable now" (retried with backoff), by class name.
UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
               "ProxyConnectionError", "NoCredentialsError", "CredentialRetrievalError"}
#: S3 error codes retried with backoff (a concurrent conditional write, throttling, server errors).
RETRY_CODES = {"ConditionalRequestConflict", "SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable",
               "503", "500"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that ``path`` either does not exist or holds all of it: a ``.part`` file in
    the same folder, fsync, rename, fsync of the folder."""
    part = path.with_name(path.name + PART_SUFFIX)
    with open(part, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class EpisodeDataError(ValueError):
    """An episode's recorded data cannot make a data file (a step without its vectors, or vectors whose length
    changed within the episode)."""


#: The columns of a LeRobot v2.1 episode data file this recorder writes, in order.
DATA_COLUMNS = ("observation.state", "action", "timestamp", "frame_index", "episode_index", "index", "task_index")


def episode_table(states: Sequence[Sequence[float] | None], actions: Sequence[Sequence[float] | None],
                  fps: float) -> Any:
    """One episode's data as a LeRobot v2.1 episode data table (``pyarrow.Table``; LeRobot's
    ``data/chunk-000/episode_000000.parquet`` layout): one row per control step with ``observation.state`` and
    ``action`` (``list<float32>``), ``timestamp`` (``float32``, seconds: ``frame_index / fps``) and ``frame_index``,
    ``episode_index`` (0), ``index`` (= ``frame_index``), ``task_index`` (0), all ``int64``. The dataset's
    ``meta/`` files are the field dataset's (its publisher re-indexes episodes and tasks).

    :param states: each step's observation state; :param actions: each step's applied action (same count).
    :param fps: frames (control steps) per second.
    :raises EpisodeDataError: no step, a step without its state or action, or a vector whose length differs from
        the first step's.
    """
    import pyarrow as pa

    if not states or len(states) != len(actions):
        raise EpisodeDataError(f"recording data: {len(states)} observation state(s) and {len(actions)} action(s); "
                               "every step needs both (record_step(..., observation_state=, action=))")
    for name, vectors in (("observation_state", states), ("action", actions)):
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            raise EpisodeDataError(f"recording data: step(s) {missing[:5]} recorded without {name}")
        widths = sorted({len(v) for v in vectors})  # type: ignore[arg-type]
        if len(widths) > 1 or widths[0] == 0:
            raise EpisodeDataError(f"recording data: {name} length changed within the episode: {widths}")
    frames = list(range(len(states)))
    vector = pa.list_(pa.float32())
    return pa.table({
        "observation.state": pa.array(states, vector), "action": pa.array(actions, vector),
        "timestamp": pa.array([i / fps for i in frames], pa.float32()),
        "frame_index": pa.array(frames, pa.int64()), "episode_index": pa.array([0] * len(frames), pa.int64()),
        "index": pa.array(frames, pa.int64()), "task_index": pa.array([0] * len(frames), pa.int64())})


def episode_parquet(states: Sequence[Sequence[float] | None], actions: Sequence[Sequence[float] | None],
                    fps: float) -> bytes:
    """:func:`episode_table` as parquet file bytes (``pyarrow.parquet.write_table``). :raises EpisodeDataError:
    as :func:`episode_table`."""
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(episode_table(states, actions, fps), buffer)
    return buffer.getvalue()


def recording_options(configuration: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`FieldRecorder` data options from the ``com.sim2real.FieldUploader`` configuration (its recipe's
    ``DefaultConfiguration`` merged with the deployment's ``configurationUpdate``): ``record_data`` from
    ``RecordData`` (default off), ``bucket`` from ``FieldBucket`` (the bucket the uploader writes to, so the summary's
    ``data_uri`` names the object the uploader sends) and ``prefix`` ``""`` (the uploader's Run step passes none).

    :raises ValueError: ``RecordData`` that is not a boolean (Greengrass keeps JSON types; ``"true"`` / ``"false"``
        strings are accepted as a deployment's merge may carry them).
    """
    value = configuration.get("RecordData", False)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    if not isinstance(value, bool):
        raise ValueError(f"RecordData must be a boolean, got {value!r}")
    return {"record_data": value, "bucket": configuration.get("FieldBucket") or None, "prefix": ""}


class FieldRecorder:
    """Builds one field episode summary per episode and spools it.

    :param spool_dir: the local spool folder (created if missing); one ``<episode_id>.json`` per episode.
    :param thing_name: this robot's IoT thing name (Greengrass: ``AWS_IOT_THING_NAME``).
    :param model_version: what the robot serves (the deployment's ``ModelSha256``, or a package version).
    :param deployment_id: the Greengrass deployment that installed it.
    :param model_package_arn: the deployment's ``ModelPackageArn`` (``None`` or ``""``: none).
    :param component_versions: ``{component name: semver}`` the robot runs.
    :param session_id: the first part of every episode id (default: a new UUID per recorder, so ids stay unique
        across restarts; the second part is a sequence number from 1).
    :param clock: returns the current time as an RFC 3339 string (tests pass a fixed clock).
    :param record_data: also spool each episode's data (LeRobot v2.1, :func:`episode_table`); then ``task`` (the
        task's language instruction, 1-512 characters), ``fps`` (control steps per second, > 0) and ``bucket`` /
        ``prefix`` (where the uploader sends it: the ``com.sim2real.FieldUploader`` configuration's ``FieldBucket``
        and its ``--prefix``, which name ``data_uri``) are required.
    :raises ValueError: ``record_data`` without a task, a positive fps or a bucket, or a prefix not ending in ``/``.
        ImportError: ``record_data`` and no ``pyarrow``.
    """

    def __init__(self, spool_dir: str | Path, *, thing_name: str, model_version: str, deployment_id: str,
                 model_package_arn: str | None = None, component_versions: Mapping[str, str] | None = None,
                 session_id: str | None = None, clock: Callable[[], str] = _now, record_data: bool = False,
                 task: str | None = None, fps: float | None = None, bucket: str | None = None,
                 prefix: str = "") -> None:
        if record_data:
            import pyarrow  # noqa: F401 - fail at start, not at the first episode's end

            if not task or len(task) > 512 or not fps or fps <= 0 or not bucket:
                raise ValueError(f"record_data needs a task (1-512 characters), fps > 0 and a bucket; got task={task!r}, "
                                 f"fps={fps!r}, bucket={bucket!r}")
            contract.data_key(prefix, thing_name, "check")  # a prefix / thing name the keys accept
        self.record_data, self.task, self.fps, self.bucket, self.prefix = record_data, task, fps, bucket, prefix
        self.spool_dir = Path(spool_dir)
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.static = {"thing_name": thing_name, "model_package_arn": model_package_arn or None,
                       "model_version": model_version, "deployment_id": deployment_id,
                       "component_versions": dict(component_versions or {})}
        self.session_id = session_id or str(uuid.uuid4())
        self.clock = clock
        self.sequence = 0
        self._episode: dict[str, Any] | None = None

    def start_episode(self) -> str:
        """Start the next episode (one that was not ended is dropped, with a warning). :return: its id."""
        if self._episode is not None:
            log.warning("episode %s was not ended; dropped", self._episode["episode_id"])
        self.sequence += 1
        episode_id = f"{self.session_id}-{self.sequence:06d}"
        self._episode = {"episode_id": episode_id, "started_at": self.clock(), "latencies": [], "interventions": 0,
                         "states": [], "actions": []}
        return episode_id

    def _current(self) -> dict[str, Any]:
        if self._episode is None:
            raise RuntimeError("no episode started (call start_episode first)")
        return self._episode

    def record_step(self, latency_ms: float, *, observation_state: Sequence[float] | None = None,
                    action: Sequence[float] | None = None) -> None:
        """One action applied, ``latency_ms`` milliseconds after its observation.

        :param observation_state: the observation the policy answered (kept when recording data; any sequence of
            numbers, e.g. a numpy array).
        :param action: the action applied at this step (kept when recording data).
        :raises RuntimeError: no episode started.
        """
        episode = self._current()
        episode["latencies"].append(float(latency_ms))
        if self.record_data:
            for name, vector in (("states", observation_state), ("actions", action)):
                episode[name].append(None if vector is None else [float(v) for v in vector])

    def record_intervention(self) -> None:
        """An operator took over once. :raises RuntimeError: no episode started."""
        self._current()["interventions"] += 1

    def end_episode(self, success: bool, source: str) -> Path:
        """End the episode: build its summary, validate it with the contract, spool it (its data file first, when
        recording data: ``<spool_dir>/<episode_id>.parquet``, named in the summary's ``data_*`` fields).

        :param success: the outcome.
        :param source: who decided it: ``task_success_fn``, ``operator_label`` or ``intervention``.
        :return: the spool file (``<spool_dir>/<episode_id>.json``).
        :raises RuntimeError: no episode started. contract.FieldEpisodeError: the summary is not valid (e.g. no
            step recorded, an unknown source). EpisodeDataError: recording data and a step without its observation
            state or action, or vectors whose length changed. In each case nothing is spooled and the episode stays
            open.
        """
        episode = self._current()
        latencies = episode["latencies"]
        summary: dict[str, Any] = {
            "schema_version": contract.SCHEMA_VERSION, "episode_id": episode["episode_id"], **self.static,
            "started_at": episode["started_at"], "ended_at": self.clock(),
            "outcome": {"success": success, "source": source}, "interventions": episode["interventions"],
            "steps": len(latencies),
            "action_latency_ms": {"p50": nearest_rank(latencies, 0.5), "p95": nearest_rank(latencies, 0.95),
                                  "max": max(latencies)} if latencies else {"p50": 0.0, "p95": 0.0, "max": 0.0},
        }
        data = None
        if self.record_data and latencies:
            data = episode_parquet(episode["states"], episode["actions"], self.fps)
            summary.update(data_uri=contract.data_uri(self.bucket, self.prefix, self.static["thing_name"],
                                                      episode["episode_id"]),
                           data_sha256=hashlib.sha256(data).hexdigest(), data_frames=len(latencies),
                           data_fps=self.fps, task=self.task)
        contract.validate(summary)
        path = self.spool_dir / f"{summary['episode_id']}.json"
        if data is not None:
            write_atomically(path.with_suffix(DATA_SUFFIX), data)
        write_atomically(path, json.dumps(summary, sort_keys=True, separators=(",", ":")).encode())
        self._episode = None
        return path


@dataclass
class UploadResult:
    """What one pass over the spool did, by spool file name.

    ``uploaded``: written now; ``already``: S3 already held the same bytes; ``conflicts``: S3 holds another body
    under the key (moved to ``conflicts/``); ``rejected``: not a valid episode or not this robot's (moved to
    ``rejected/``); ``pending``: left for the next pass (S3 unreachable or an error); ``orphans_removed``: data files
    without a summary, older than :data:`ORPHAN_DATA_AGE_S`, removed.
    """

    uploaded: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    orphans_removed: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.conflicts or self.rejected or self.pending)


class Unreachable(Exception):
    """S3 did not answer after every retry."""


def _code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, Mapping) else None
    return str(code) if code else None


def _put(client: Any, attempts: int, base_delay_s: float, sleep: Callable[[float], None], **kwargs: Any) -> str:
    """``PutObject`` with retries: ``"ok"`` or ``"precondition_failed"``. :raises Unreachable: S3 unreachable or
    busy after ``attempts`` tries. Any other ``ClientError`` is raised as is."""
    for attempt in range(1, attempts + 1):
        try:
            client.put_object(**kwargs)
            return "ok"
        except Exception as exc:  # botocore's errors, told apart by class name / code (no botocore import here)
            code = _code(exc)
            if code in ("PreconditionFailed", "412"):
                return "precondition_failed"
            if type(exc).__name__ not in UNREACHABLE and code not in RETRY_CODES:
                raise
            if attempt == attempts:
                raise Unreachable(f"{type(exc).__name__}: {exc}") from exc
            delay = min(60.0, base_delay_s * 2 ** (attempt - 1))
            log.warning("PutObject s3://%s/%s: %s; retrying in %.1f s (%d/%d)", kwargs["Bucket"], kwargs["Key"],
                        exc, delay, attempt, attempts)
            sleep(delay)
    raise AssertionError("unreachable")


def _move(path: Path, folder: str) -> None:
    """Move a spooled summary and its data file (when there is one) into ``folder`` of the spool."""
    (path.parent / folder).mkdir(exist_ok=True)
    for each in (path.with_suffix(DATA_SUFFIX), path):
        if each.exists():
            os.replace(each, path.parent / folder / each.name)


def _put_once(client: Any, put: dict[str, Any], attempts: int, base_delay_s: float,
              sleep: Callable[[float], None]) -> str:
    """Write ``put`` (PutObject's arguments) unless its key exists: ``"uploaded"``; S3 already holds these bytes
    (``IfMatch`` on the body's MD5, the ETag of a single-part SSE-S3 object): ``"already"``; S3 holds other bytes:
    ``"conflict"`` (nothing written). :raises Unreachable: as :func:`_put`."""
    if _put(client, attempts, base_delay_s, sleep, IfNoneMatch="*", **put) == "ok":
        return "uploaded"
    etag = '"%s"' % hashlib.md5(put["Body"], usedforsecurity=False).hexdigest()
    return "already" if _put(client, attempts, base_delay_s, sleep, IfMatch=etag, **put) == "ok" else "conflict"


def _data_put(doc: Mapping[str, Any], data_path: Path, bucket: str, prefix: str) -> tuple[dict[str, Any] | None, str]:
    """PutObject's arguments for a summary's data file, or ``(None, problem)``: a ``data_uri`` that is not this
    uploader's key for it, a missing data file, or one whose sha256 is not ``data_sha256``."""
    key = contract.data_key(prefix, doc["thing_name"], doc["episode_id"])
    expected = contract.data_uri(bucket, prefix, doc["thing_name"], doc["episode_id"])
    if doc["data_uri"] != expected:
        return None, f"data_uri {doc['data_uri']!r} is not {expected}"
    if not data_path.is_file():
        return None, f"its data file {data_path.name} is not in the spool"
    data = data_path.read_bytes()
    digest = hashlib.sha256(data).digest()
    if digest.hex() != doc["data_sha256"]:
        return None, f"its data file's sha256 {digest.hex()} is not data_sha256 {doc['data_sha256']}"
    # ChecksumAlgorithm beside the value: S3 uses the value given ("Checking object integrity"); the algorithm
    # header also has S3 emulators keep it for HeadObject(ChecksumMode="ENABLED")
    return {"Bucket": bucket, "Key": key, "Body": data, "ContentType": DATA_CONTENT_TYPE,
            "ChecksumAlgorithm": "SHA256", "ChecksumSHA256": base64.b64encode(digest).decode()}, ""


def upload_spool(client: Any, spool_dir: str | Path, bucket: str, prefix: str = "", *, thing_name: str | None = None,
                 attempts: int = 5, base_delay_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep) -> UploadResult:
    """Upload every spooled episode once (in file name order); remove each spool file only after S3 confirmed it.

    :param client: a boto3 S3 client (needs ``s3:PutObject`` on ``<prefix>field/episodes/*`` and
        ``<prefix>field/data/*`` only).
    :param spool_dir: the recorder's spool folder; ``*.part`` files (writes not finished) are skipped. A summary
        with ``data_uri`` has its data file (``<episode_id>.parquet`` beside it) sent first, with ``ChecksumSHA256``,
        and the summary only after S3 confirmed the data; the pair is removed, or moved to ``conflicts/`` (S3 holds
        other bytes under either key) or ``rejected/`` (a ``data_uri`` not at this bucket and prefix's
        :func:`sim2real.contract.field.data_key`, a missing data file, or one whose sha256 is not ``data_sha256``),
        together.
    :param bucket: the bucket; ``prefix``: the key prefix (``""`` or ending in ``/``).
    :param thing_name: this robot's thing name; a spooled episode of another thing is rejected (the robot's role
        may write only what it ran).
    :param attempts: tries per request when S3 is unreachable or busy, ``base_delay_s`` doubling between them (at
        most 60 s). When they are spent the pass stops and leaves the rest pending.
    :return: :class:`UploadResult`. Conflicts and rejections are logged as errors.
    :raises ClientError: an S3 error other than unreachable / busy / 412 (e.g. AccessDenied), after which the
        remaining files stay in the spool.
    """
    spool = Path(spool_dir)
    result = UploadResult()
    files = sorted(p for p in spool.glob("*.json") if p.is_file()) if spool.is_dir() else []
    for i, path in enumerate(files):
        body = path.read_bytes()
        try:
            doc = json.loads(body)
        except ValueError as exc:
            problems = [f"not JSON: {exc}"]
        else:
            problems = contract.errors(doc)
            if not problems and thing_name and doc["thing_name"] != thing_name:
                problems = [f"thing_name {doc['thing_name']!r} is not this robot's ({thing_name!r})"]
        puts: list[dict[str, Any]] = []
        if not problems and "data_uri" in doc:
            data_put, problem = _data_put(doc, path.with_suffix(DATA_SUFFIX), bucket, prefix)
            puts, problems = ([data_put], []) if data_put else ([], [problem])
        if problems:
            log.error("spooled episode %s refused, moved to %s/: %s", path.name, REJECTED, "; ".join(problems))
            _move(path, REJECTED)
            result.rejected.append(path.name)
            continue
        key = contract.episode_key(prefix, doc["thing_name"], doc["episode_id"])
        puts.append({"Bucket": bucket, "Key": key, "Body": body, "ContentType": "application/json"})
        try:
            for put in puts:  # the data file first: the summary is sent only once S3 holds its data
                outcome = _put_once(client, put, attempts, base_delay_s, sleep)
                if outcome == "conflict":
                    log.error("s3://%s/%s holds another body than spooled episode %s: not overwritten, moved to %s/",
                              bucket, put["Key"], path.name, CONFLICTS)
                    break
        except Unreachable as exc:
            log.warning("S3 unreachable (%s): %d episode(s) stay spooled for the next pass", exc, len(files) - i)
            result.pending.extend(p.name for p in files[i:])
            return result
        if outcome == "conflict":
            _move(path, CONFLICTS)
            result.conflicts.append(path.name)
            continue
        # "already": the same bytes were there (an earlier upload's answer was lost)
        (result.uploaded if outcome == "uploaded" else result.already).append(path.name)
        path.unlink()  # the summary first: a data file left by a crash here is removed later as an orphan
        path.with_suffix(DATA_SUFFIX).unlink(missing_ok=True)
    _remove_orphan_data(spool, result)
    return result


def _remove_orphan_data(spool: Path, result: UploadResult, now: float | None = None) -> None:
    """Remove spooled data files that have no summary beside them and are older than :data:`ORPHAN_DATA_AGE_S`
    (nothing would ever upload or remove them); logged, listed in ``result.orphans_removed``."""
    if not spool.is_dir():
        return
    now = time.time() if now is None else now
    for data in sorted(spool.glob(f"*{DATA_SUFFIX}")):
        if data.with_suffix(".json").exists() or now - data.stat().st_mtime < ORPHAN_DATA_AGE_S:
            continue
        log.warning("spooled data file %s has no summary (written %.0f s ago): removed", data.name,
                    now - data.stat().st_mtime)
        data.unlink(missing_ok=True)
        result.orphans_removed.append(data.name)


def _client(region: str | None, endpoint_url: str | None) -> Any:
    import boto3
    from botocore.config import Config

    # One try per request here: upload_spool retries with its own backoff.
    return boto3.client("s3", region_name=region, endpoint_url=endpoint_url,
                        config=Config(retries={"mode": "standard", "max_attempts": 1}, connect_timeout=10,
                                      read_timeout=30))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sim2real.edge.field_recorder upload --spool DIR --bucket B [--prefix P] [--thing-name T]
    [--interval-s N]``: one pass (``--interval-s 0``, the default; exit 0 when the spool is left empty of
    uploadable episodes, 1 otherwise), or a pass every N seconds until stopped (SIGTERM)."""
    parser = argparse.ArgumentParser(prog="python -m sim2real.edge.field_recorder",
                                     description="Upload the spooled field episodes to S3, each once.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("upload", help="send the spooled episodes with a conditional PutObject")
    up.add_argument("--spool", required=True, help="the recorder's spool folder")
    up.add_argument("--bucket", required=True)
    up.add_argument("--prefix", default="", help="key prefix, '' or ending in '/' (default '')")
    up.add_argument("--thing-name", default=os.environ.get("AWS_IOT_THING_NAME") or None,
                    help="refuse episodes of another thing (default: $AWS_IOT_THING_NAME)")
    up.add_argument("--interval-s", type=float, default=0.0, help="seconds between passes; 0: one pass")
    up.add_argument("--attempts", type=int, default=5, help="tries per request while S3 is unreachable")
    up.add_argument("--region", default=None)
    up.add_argument("--endpoint-url", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.prefix and not args.prefix.endswith("/"):
        parser.error(f"--prefix must be empty or end with '/', got {args.prefix!r}")
    client = _client(args.region, args.endpoint_url)
    while True:
        try:
            result = upload_spool(client, args.spool, args.bucket, args.prefix, thing_name=args.thing_name,
                                  attempts=args.attempts)
        except Exception:  # e.g. AccessDenied: logged; the files stay spooled for the next pass
            log.exception("field episode upload failed")
            result = UploadResult(pending=["(error)"])
        log.info("field episodes: %d uploaded, %d already there, %d conflicts, %d rejected, %d pending",
                 len(result.uploaded), len(result.already), len(result.conflicts), len(result.rejected),
                 len(result.pending))
        if args.interval_s <= 0:
            return 0 if result.clean else 1
        time.sleep(args.interval_s)


if __name__ == "__main__":
    sys.exit(main())
