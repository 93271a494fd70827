"""Field episodes for TransformDataset: a field dataset version appended to the LeRobot v2.1 training dataset.

``--field-manifest`` names one version's manifest (``<prefix>field/datasets/<version>/manifest.json``, schema
``field_dataset``, :mod:`sim2real.contract.field`): an ``s3://`` URI, read with boto3 ``GetObject`` in the
processing job (the data files from the manifest's ``bucket``), or a local path (tests: the data files then lie
under the folder that stands for the bucket, the path less the manifest's key).

:func:`load_field_episodes` checks everything before anything is written: the manifest
(:func:`sim2real.contract.field.dataset_errors`, ``jsonschema``), each data file's sha256 against the manifest,
its frames and fps, and its columns against the base dataset's features (every feature present, each vector of
the feature's length; a base feature the field data lacks, e.g. a camera video, is a problem, never dropped).
:func:`append_field_episodes` then adds the episodes to the v2.1 output with new episode indices, their tasks
merged into ``meta/tasks.jsonl``, and ``episodes.jsonl`` / ``episodes_stats.jsonl`` / ``info.json`` totals
updated.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim2real.workloads.groot.transform_dataset import (
    V21_DATA_PATH,
    DatasetError,
    episode_stats,
    numeric_keys,
    read_jsonl,
    write_jsonl,
)

#: Reads an object: ``(bucket, key) -> bytes``; ``bucket`` is None for a local manifest (``key`` a path).
Reader = Callable[[str | None, str], bytes]


@dataclass
class FieldEpisode:
    """One checked field episode: its manifest entry and its frames (a ``pyarrow.Table``)."""

    entry: dict[str, Any]
    table: Any


@dataclass
class FieldDataset:
    """A checked field dataset version: ``dataset_version``, ``manifest_uri`` and its episodes."""

    dataset_version: str
    manifest_uri: str
    episodes: list[FieldEpisode]


def _s3_reader(client: Any = None) -> Reader:
    if client is None:
        import boto3  # in the processing image (requirements-processing.txt) and the pipeline venv

        client = boto3.client("s3")

    def read(bucket: str | None, key: str) -> bytes:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()

    return read


def _local_reader(bucket: str | None, key: str) -> bytes:
    return Path(key).read_bytes()


def _feature_problems(name: str, table: Any, features: dict[str, Any]) -> list[str]:
    """Columns of one field data file against the base dataset's features (names, vector lengths, value types: a
    float64 column under a float32 feature would give the output dataset mixed parquet schemas)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    problems = []
    columns = set(table.column_names)
    for key, feature in sorted(features.items()):
        if key not in columns:
            kind = f" ({feature.get('dtype')})" if feature.get("dtype") in ("video", "image") else ""
            problems.append(f"{name}: lacks the base dataset's feature {key!r}{kind}")
            continue
        shape = list(feature.get("shape") or [1])
        column = table.column(key)
        is_list = pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or \
            pa.types.is_fixed_size_list(column.type)
        value_type = column.type.value_type if is_list else column.type
        try:
            found = np.dtype(value_type.to_pandas_dtype()).name
        except (NotImplementedError, TypeError):
            found = str(value_type)
        wanted = feature.get("dtype")
        if wanted not in (None, "video", "image", "string") and found != wanted:
            problems.append(f"{name}: {key!r} holds {found} values, the base dataset's feature is {wanted}")
        if is_list:
            lengths = set(pc.list_value_length(column).to_pylist())
            if lengths != {shape[0]}:
                problems.append(f"{name}: {key!r} has vectors of length {sorted(lengths, key=str)}, the base "
                                f"dataset's feature has shape {shape}")
        elif shape != [1]:
            problems.append(f"{name}: {key!r} is a scalar column, the base dataset's feature has shape {shape}")
    extra = sorted(columns - set(features))
    if extra:
        problems.append(f"{name}: has columns the base dataset does not: {extra}")
    return problems


def load_field_episodes(manifest_uri: str, info: dict[str, Any], *, s3_client: Any = None) -> FieldDataset:
    """Read and check a field dataset version against the base dataset's ``meta/info.json`` (``info``).

    :param manifest_uri: ``s3://<bucket>/<key>`` of the manifest, or a local path.
    :param info: the base dataset's info (``features``, ``fps``).
    :param s3_client: the boto3 S3 client for an ``s3://`` manifest (default: ``boto3.client("s3")``; the job's
        role needs ``s3:GetObject`` on the manifest and the data files).
    :return: the version with every episode's frames.
    :raises DatasetError: every problem found (manifest, sha256, frames, fps, columns).
    """
    import pyarrow.parquet as pq

    from sim2real.contract import field
    from sim2real.contract.storage import split_s3

    local = not manifest_uri.startswith("s3://")
    read = _local_reader if local else _s3_reader(s3_client)
    if local:
        bucket, key = None, manifest_uri
    else:
        bucket, key = split_s3(manifest_uri)
    try:
        document = json.loads(read(bucket, key))
    except Exception as exc:  # noqa: BLE001 - any read or parse error is the step's reason
        raise DatasetError([f"field manifest {manifest_uri}: cannot be read: {type(exc).__name__}: {exc}"]) from exc
    try:
        manifest_problems = field.dataset_errors(document)
    except ImportError as exc:
        raise DatasetError([f"field manifest {manifest_uri}: cannot be checked, jsonschema is not installed"]) from exc
    if manifest_problems:
        raise DatasetError([f"field manifest {manifest_uri}: {p}" for p in manifest_problems])
    root = None
    if local:
        suffix = field.manifest_key(document["prefix"], document["dataset_version"])
        if not manifest_uri.endswith(suffix):
            raise DatasetError([f"field manifest {manifest_uri}: a local manifest must lie at <root>/{suffix}"])
        root = manifest_uri[: -len(suffix)]
    problems: list[str] = []
    episodes = []
    for entry in document["episodes"]:
        name = f"field episode {entry['thing_name']}/{entry['episode_id']}"
        try:
            body = read(None, str(Path(root) / entry["data_key"])) if local else \
                read(document["bucket"], entry["data_key"])
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{name}: data file {entry['data_key']} cannot be read: {type(exc).__name__}: {exc}")
            continue
        digest = hashlib.sha256(body).hexdigest()
        if digest != entry["sha256"]:
            problems.append(f"{name}: data file sha256 {digest} is not the manifest's {entry['sha256']}")
            continue
        try:
            table = pq.read_table(io.BytesIO(body))
        except Exception as exc:  # noqa: BLE001 - pyarrow's ArrowInvalid and kin: the step's reason, not a traceback
            problems.append(f"{name}: data file {entry['data_key']} is not a parquet file: {type(exc).__name__}: {exc}")
            continue
        if table.num_rows != entry["frames"]:
            problems.append(f"{name}: the manifest says {entry['frames']} frames, the data file has {table.num_rows}")
        if float(entry["fps"]) != float(info["fps"]):
            problems.append(f"{name}: {entry['fps']} fps, the base dataset has {info['fps']}")
        problems += _feature_problems(name, table, info.get("features") or {})
        episodes.append(FieldEpisode(entry, table))
    if problems:
        raise DatasetError(problems)
    return FieldDataset(document["dataset_version"], manifest_uri, episodes)


def append_field_episodes(dst: Path, dataset: FieldDataset) -> dict[str, Any]:
    """Append checked field episodes to the v2.1 dataset at ``dst`` (already written).

    Each episode gets the next episode index, global frame indices ``index`` following the dataset's frames, and
    the ``task_index`` of its task (an unknown task is added to ``meta/tasks.jsonl``); its ``episodes.jsonl`` /
    ``episodes_stats.jsonl`` rows are appended and ``info.json``'s totals and train split updated.

    :return: ``{"dataset_version", "manifest_uri", "episodes", "frames"}`` (what was appended).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = dst / "meta"
    info = json.loads((meta / "info.json").read_text())
    episodes = read_jsonl(meta / "episodes.jsonl")
    tasks = read_jsonl(meta / "tasks.jsonl")
    stats_path = meta / "episodes_stats.jsonl"
    stats = read_jsonl(stats_path) if stats_path.exists() else []
    task_index = {t["task"]: int(t["task_index"]) for t in tasks}
    chunks_size = int(info.get("chunks_size", 1000))
    next_episode = max((int(e["episode_index"]) for e in episodes), default=-1) + 1
    next_frame = int(info["total_frames"])
    order = list(info["features"])
    frames = 0
    for offset, episode in enumerate(dataset.episodes):
        index, length, task = next_episode + offset, episode.table.num_rows, episode.entry["task"]
        if task not in task_index:
            task_index[task] = max(task_index.values(), default=-1) + 1
            tasks.append({"task_index": task_index[task], "task": task})
        table = episode.table.select(order)
        for column, values in (("episode_index", [index] * length),
                               ("index", list(range(next_frame, next_frame + length))),
                               ("task_index", [task_index[task]] * length)):
            table = table.set_column(order.index(column), column, pa.array(values, type=pa.int64()))
        out = dst / V21_DATA_PATH.format(episode_chunk=index // chunks_size, episode_index=index)
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out)
        episodes.append({"episode_index": index, "tasks": [task], "length": length})
        stats.append({"episode_index": index, "stats": episode_stats(table, numeric_keys(info))})
        next_frame += length
        frames += length
    write_jsonl(meta / "episodes.jsonl", episodes)
    write_jsonl(meta / "tasks.jsonl", tasks)
    write_jsonl(stats_path, stats)
    total = len(episodes)
    info.update({"total_episodes": total, "total_frames": next_frame, "total_tasks": len(tasks),
                 "total_chunks": (max(int(e["episode_index"]) for e in episodes) // chunks_size + 1) if episodes else 0,
                 "splits": {"train": f"0:{total}"}})
    (meta / "info.json").write_text(json.dumps(info, indent=4))
    return {"dataset_version": dataset.dataset_version, "manifest_uri": dataset.manifest_uri,
            "episodes": len(dataset.episodes), "frames": frames}
