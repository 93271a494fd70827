"""Tiny synthetic LeRobot datasets (v3.0 and v2.x layouts), written with pyarrow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FPS = 10
STATE_DIM = 6
VIDEO = "observation.images.front"
MODALITY = {"state": {"single_arm": {"start": 0, "end": 5}, "gripper": {"start": 5, "end": 6}},
            "action": {"single_arm": {"start": 0, "end": 5}, "gripper": {"start": 5, "end": 6}},
            "video": {"front": {"original_key": VIDEO}},
            "annotation": {"human.task_description": {"original_key": "task_index"}}}


def _without_cameras(modality: dict) -> dict:
    return {k: v for k, v in modality.items() if k != "video"}


def features(video: bool) -> dict:
    out = {
        "observation.state": {"dtype": "float32", "shape": [STATE_DIM], "names": None},
        "action": {"dtype": "float32", "shape": [STATE_DIM], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    if video:
        out[VIDEO] = {"dtype": "video", "shape": [64, 64, 3], "names": ["height", "width", "channels"]}
    return out


def frames(episode: int, length: int, start_index: int, task: int) -> pa.Table:
    rng = np.random.default_rng(episode)
    state = rng.normal(size=(length, STATE_DIM)).astype(np.float32)
    action = (state + 0.1).astype(np.float32)
    return pa.table({
        "observation.state": pa.array(state.tolist(), type=pa.list_(pa.float32())),
        "action": pa.array(action.tolist(), type=pa.list_(pa.float32())),
        "timestamp": pa.array(np.arange(length, dtype=np.float32) / FPS),
        "frame_index": pa.array(np.arange(length, dtype=np.int64)),
        "episode_index": pa.array(np.full(length, episode, dtype=np.int64)),
        "index": pa.array(np.arange(start_index, start_index + length, dtype=np.int64)),
        "task_index": pa.array(np.full(length, task, dtype=np.int64)),
    })


#: (episode, length, task, data file index)
EPISODES = [(0, 5, 0, 0), (1, 7, 1, 0), (2, 4, 0, 1)]
TASKS = ["pick the orange", "place the orange"]


def write_v30(root: Path, *, video: bool = True, modality: bool = True) -> Path:
    """A v3.0 dataset: episodes 0-1 share data file 0, episode 2 is in file 1; one video file per key."""
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    tables: dict[int, list[pa.Table]] = {}
    index, rows, t0 = 0, [], {0: 0.0, 1: 0.0}
    for ep, length, task, file_index in EPISODES:
        tables.setdefault(file_index, []).append(frames(ep, length, index, task))
        row = {"episode_index": ep, "tasks": [TASKS[task]], "length": length,
               "data/chunk_index": 0, "data/file_index": file_index,
               "dataset_from_index": index, "dataset_to_index": index + length}
        if video:
            row.update({f"videos/{VIDEO}/chunk_index": 0, f"videos/{VIDEO}/file_index": file_index,
                        f"videos/{VIDEO}/from_timestamp": t0[file_index],
                        f"videos/{VIDEO}/to_timestamp": t0[file_index] + length / FPS})
            t0[file_index] += length / FPS
        rows.append(row)
        index += length
    for file_index, parts in tables.items():
        path = root / f"data/chunk-000/file-{file_index:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(parts), path)
        if video:
            vpath = root / f"videos/{VIDEO}/chunk-000/file-{file_index:03d}.mp4"
            vpath.parent.mkdir(parents=True, exist_ok=True)
            vpath.write_bytes(b"\x00\x00\x00\x18ftypmp42")
    pq.write_table(pa.Table.from_pylist(rows), root / "meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(pa.table({"task_index": [0, 1], "task": TASKS}), root / "meta/tasks.parquet")
    info = {"codebase_version": "v3.0", "robot_type": "so101_follower", "fps": FPS,
            "total_episodes": len(EPISODES), "total_frames": index, "total_tasks": len(TASKS),
            "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4" if video else None,
            "splits": {"train": f"0:{len(EPISODES)}"}, "features": features(video)}
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (root / "meta" / "stats.json").write_text(json.dumps({"action": {"mean": [0.0] * STATE_DIM}}))
    if modality:  # a camera it names must be a feature of the dataset
        (root / "meta" / "modality.json").write_text(json.dumps(MODALITY if video else _without_cameras(MODALITY)))
    return root


def write_v2(root: Path, version: str = "v2.1") -> Path:
    """A v2.x dataset (no videos): one parquet per episode, JSON-lines metadata."""
    index = 0
    episodes = []
    for ep, length, task, _ in EPISODES:
        path = root / f"data/chunk-000/episode_{ep:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(frames(ep, length, index, task), path)
        episodes.append({"episode_index": ep, "tasks": [TASKS[task]], "length": length})
        index += length
    meta = root / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    (meta / "tasks.jsonl").write_text("".join(json.dumps({"task_index": i, "task": t}) + "\n"
                                              for i, t in enumerate(TASKS)))
    if version == "v2.1":
        (meta / "episodes_stats.jsonl").write_text("".join(
            json.dumps({"episode_index": e["episode_index"], "stats": {}}) + "\n" for e in episodes))
    info = {"codebase_version": version, "fps": FPS, "total_episodes": len(EPISODES), "total_frames": index,
            "total_tasks": len(TASKS), "chunks_size": 1000, "total_chunks": 1,
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": None, "splits": {"train": f"0:{len(EPISODES)}"}, "features": features(False)}
    (meta / "info.json").write_text(json.dumps(info))
    (meta / "modality.json").write_text(json.dumps(_without_cameras(MODALITY)))  # no camera in this dataset
    return root


#: (thing_name, episode_id, frames, task) of the field episodes :func:`write_field_dataset` writes by default.
FIELD_EPISODES = [("robot-1", "ep-a", 6, "pick the orange"), ("robot-2", "ep-b", 3, "wipe the table")]


def field_frames(seed: int, length: int, *, state_dim: int = STATE_DIM) -> pa.Table:
    """One field episode's data file (LeRobot v2.1, episode_index 0, index from 0, task_index 0)."""
    rng = np.random.default_rng(100 + seed)
    state = rng.normal(size=(length, state_dim)).astype(np.float32)
    return pa.table({
        "observation.state": pa.array(state.tolist(), type=pa.list_(pa.float32())),
        "action": pa.array((state - 0.1).tolist(), type=pa.list_(pa.float32())),
        "timestamp": pa.array(np.arange(length, dtype=np.float32) / FPS),
        "frame_index": pa.array(np.arange(length, dtype=np.int64)),
        "episode_index": pa.array(np.zeros(length, dtype=np.int64)),
        "index": pa.array(np.arange(length, dtype=np.int64)),
        "task_index": pa.array(np.zeros(length, dtype=np.int64)),
    })


def write_field_dataset(root: Path, episodes=FIELD_EPISODES, *, tables: dict | None = None,
                        bucket: str = "field-bucket") -> Path:
    """A published field dataset under ``root`` (standing for the bucket): the data files and a valid manifest
    (sim2real.contract.field); ``tables`` replaces an episode's data (by episode id). :return: the manifest's path."""
    import hashlib

    from sim2real.contract import field

    entries = []
    for seed, (thing, episode_id, length, task) in enumerate(sorted(episodes)):
        key = field.data_key("", thing, episode_id)
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table((tables or {}).get(episode_id, field_frames(seed, length)), path)
        body = path.read_bytes()
        entries.append({"thing_name": thing, "episode_id": episode_id,
                        "summary_key": field.episode_key("", thing, episode_id), "data_key": key,
                        "sha256": hashlib.sha256(body).hexdigest(), "size_bytes": len(body), "frames": length,
                        "fps": FPS, "task": task, "success": True, "model_version": "1.0.0",
                        "ended_at": "2026-12-04T06:00:00Z"})
    version = field.dataset_version(entries)
    manifest = {"schema_version": 1, "dataset_version": version, "created_at": "2026-12-04T07:00:00Z",
                "bucket": bucket, "prefix": "", "parent_version": None, "codebase_version": "v2.1",
                "episodes": entries,
                "totals": {"episodes": len(entries), "frames": sum(e["frames"] for e in entries),
                           "successes": len(entries), "things": sorted({e["thing_name"] for e in entries}),
                           "new_episodes": len(entries)},
                "refused": {}}
    path = root / field.manifest_key("", version)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path
