"""TransformDataset: a LeRobot dataset → a checked LeRobot v2.1 dataset for GR00T fine-tuning.

Runs in the processing image (``containers/groot/processing``) as the pipeline's
``TransformDataset`` step: SageMaker downloads ``DatasetS3Uri`` to ``--input`` and uploads
``--output`` to S3 when the job ends. The step is cached for 30 days, so a rerun with the same
dataset URI skips it.

* ``v3.0`` (many episodes per parquet/mp4 file, ``meta/episodes/*.parquet``, ``meta/tasks.parquet``)
  is converted to ``v2.1`` (one parquet and one mp4 per episode, ``meta/episodes.jsonl``,
  ``meta/tasks.jsonl``, ``meta/episodes_stats.jsonl``) — the layout Isaac-GR00T's loader reads.
  Video segments are cut with ffmpeg (re-encoded, frame-exact at the episode's timestamps).
* ``v2.1`` is checked and copied unchanged; ``v2.0`` gets ``meta/episodes_stats.jsonl`` computed.
* Every case is checked before anything is written: ``meta/info.json`` keys, features, every
  episode's data (and video) file, episode lengths against the rows, task indices, and
  ``meta/modality.json`` (GR00T's key map; required with ``--require-modality``), and that the
  model's modality layout can be built from it (every camera with a readable frame size).

* ``--field-manifest=<uri>`` (pipeline parameter ``FieldDatasetManifestS3Uri``; empty: none): a field dataset
  version's episodes are checked and appended to the v2.1 output (:mod:`sim2real.workloads.groot.field_episodes`).

Writes ``<output>/transform_report.json`` (source version, episodes, frames, files, each camera's frame
size) and exits 0;
exits 2 with the list of problems when the dataset is not usable (the step fails with them).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sim2real.contract.modality import LayoutError, ModalityLayout

V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
INFO_KEYS = ("codebase_version", "fps", "features", "total_episodes", "total_frames", "data_path")
#: Columns every LeRobot frame table has (besides the features themselves).
INDEX_COLUMNS = ("episode_index", "frame_index", "timestamp", "index", "task_index")

Runner = Callable[[list[str]], None]


class DatasetError(ValueError):
    """The dataset cannot be used; ``problems`` lists every reason found."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def _pq():
    import pyarrow.parquet as pq  # the processing image and the pipeline venv have pyarrow

    return pq


def read_json(path: Path) -> Any:
    """Parse a JSON file."""
    return json.loads(path.read_text())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Parse a JSON-lines file (blank lines ignored)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write rows as JSON lines (keys in insertion order, like LeRobot)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def video_keys(info: dict[str, Any]) -> list[str]:
    """Names of the video features."""
    return sorted(k for k, f in info.get("features", {}).items() if f.get("dtype") == "video")


def numeric_keys(info: dict[str, Any]) -> list[str]:
    """Names of the numeric (non-index, non-media) features, for statistics."""
    skip = set(INDEX_COLUMNS)
    return sorted(k for k, f in info.get("features", {}).items()
                  if k not in skip and f.get("dtype") in ("float32", "float64", "int32", "int64", "bool"))


def source_version(info: dict[str, Any]) -> str:
    """``"v2.0"``, ``"v2.1"`` or ``"v3.0"`` from ``codebase_version``.

    :raises DatasetError: any other version.
    """
    version = str(info.get("codebase_version", ""))
    for known in ("v2.0", "v2.1", "v3.0"):
        if version.startswith(known):
            return known
    raise DatasetError([f"unsupported LeRobot codebase_version {version!r} (expected v2.0, v2.1 or v3.0)"])


def check_info(info: dict[str, Any]) -> list[str]:
    """Problems with ``meta/info.json`` itself."""
    problems = [f"meta/info.json lacks {k!r}" for k in INFO_KEYS if k not in info]
    features = info.get("features") or {}
    if not isinstance(features, dict) or not features:
        problems.append("meta/info.json has no features")
    elif "action" not in features:
        problems.append("meta/info.json has no 'action' feature")
    elif not any(k.startswith("observation.state") for k in features):
        problems.append("meta/info.json has no 'observation.state' feature")
    return problems


def episode_stats(table: Any, keys: list[str]) -> dict[str, dict[str, list[float]]]:
    """Per-feature min/max/mean/std/count of one episode's frames (LeRobot v2.1 ``episodes_stats``)."""
    import numpy as np

    stats: dict[str, dict[str, list[float]]] = {}
    for key in keys:
        if key not in table.column_names:
            continue
        values = np.asarray(table.column(key).to_pylist(), dtype=np.float64)
        if values.ndim == 1:
            values = values[:, None]
        stats[key] = {"min": values.min(0).tolist(), "max": values.max(0).tolist(),
                      "mean": values.mean(0).tolist(), "std": values.std(0).tolist(), "count": [int(len(values))]}
    return stats


def ffmpeg_cut(src: Path, dst: Path, start: float, end: float, run: Runner) -> None:
    """Cut ``[start, end)`` seconds of ``src`` into ``dst`` (re-encoded so the cut is frame-exact)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-ss", f"{start:.6f}", "-to", f"{end:.6f}",
         "-i", str(src), "-map", "0:v:0", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-an", str(dst)])


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True)


def check_modality(src: Path, info: dict[str, Any], require: bool = False) -> tuple[list[str], dict[str, list[int]]]:
    """Problems with ``meta/modality.json`` (GR00T's key map), and each camera's ``[height, width]``.

    The model's modality layout (:meth:`sim2real.contract.modality.ModalityLayout.from_lerobot`) must
    be buildable from it and ``info`` (``meta/info.json``): every camera it names is a feature with a
    readable frame size, every state/action key has ``0 <= start < end``. Checked here, before any
    GPU time, because the fine-tune needs the layout.

    :return: ``(problems, {camera: [height, width]})`` (sizes empty when there are problems or no file).
    """
    path = src / "meta" / "modality.json"
    if not path.exists():
        return (["meta/modality.json is missing (GR00T needs it for new_embodiment)"] if require else []), {}
    try:
        modality = read_json(path)
    except ValueError as exc:
        return [f"meta/modality.json is not JSON: {exc}"], {}
    missing = [k for k in ("state", "action") if k not in modality]
    if missing:
        return [f"meta/modality.json lacks {k!r}" for k in missing], {}
    try:
        layout = ModalityLayout.from_lerobot(info, modality)
    except LayoutError as exc:
        return [f"the model's modality layout cannot be built: {exc}"], {}
    return [], {camera: [height, width] for camera, height, width in layout.image_sizes}


def convert_v30(src: Path, dst: Path, info: dict[str, Any], run: Runner = _run) -> dict[str, Any]:
    """Convert a v3.0 dataset at ``src`` into v2.1 at ``dst``; return the report's counts.

    :raises DatasetError: with every problem found (missing files, length mismatches, ...).
    """
    pq = _pq()
    problems: list[str] = []
    episodes_files = sorted((src / "meta" / "episodes").rglob("*.parquet"))
    tasks_file = src / "meta" / "tasks.parquet"
    if not episodes_files:
        problems.append("meta/episodes/*.parquet is missing")
    if not tasks_file.exists():
        problems.append("meta/tasks.parquet is missing")
    if problems:
        raise DatasetError(problems)

    tasks_table = pq.read_table(tasks_file)
    cols = tasks_table.column_names
    task_col = "task" if "task" in cols else next((c for c in cols if c.startswith("__index_level")), None)
    if "task_index" not in cols or task_col is None:
        raise DatasetError([f"meta/tasks.parquet needs task_index and task columns, has {cols}"])
    tasks = sorted(zip(tasks_table.column("task_index").to_pylist(), tasks_table.column(task_col).to_pylist(), strict=True))
    episodes = sorted((row for f in episodes_files for row in pq.read_table(f).to_pylist()),
                      key=lambda r: r["episode_index"])
    if len(episodes) != int(info["total_episodes"]):
        problems.append(f"meta/info.json says {info['total_episodes']} episodes, meta/episodes has {len(episodes)}")

    chunks_size = int(info.get("chunks_size", 1000))
    videos = video_keys(info)
    numeric = numeric_keys(info)
    data_cache: dict[tuple[int, int], Any] = {}
    out_episodes, out_stats, frames, plan = [], [], 0, []
    for ep in episodes:
        index = int(ep["episode_index"])
        key = (int(ep.get("data/chunk_index", 0)), int(ep.get("data/file_index", 0)))
        data_file = src / info["data_path"].format(chunk_index=key[0], file_index=key[1])
        if key not in data_cache:
            if not data_file.exists():
                problems.append(f"episode {index}: data file {data_file.relative_to(src)} is missing")
                continue
            data_cache[key] = pq.read_table(data_file)
        table = data_cache[key]
        mask = [e == index for e in table.column("episode_index").to_pylist()]
        rows = table.filter(mask)
        if rows.num_rows != int(ep["length"]):
            problems.append(f"episode {index}: meta says {ep['length']} frames, data has {rows.num_rows}")
            continue
        frames += rows.num_rows
        chunk = index // chunks_size
        plan.append((index, chunk, rows))
        for vkey in videos:
            vc, vf = int(ep.get(f"videos/{vkey}/chunk_index", 0)), int(ep.get(f"videos/{vkey}/file_index", 0))
            vsrc = src / info.get("video_path", "").format(video_key=vkey, chunk_index=vc, file_index=vf)
            if not vsrc.exists():
                problems.append(f"episode {index}: video {vsrc.relative_to(src)} is missing")
        task_names = ep.get("tasks") or []
        out_episodes.append({"episode_index": index, "tasks": list(task_names), "length": int(ep["length"])})
        out_stats.append({"episode_index": index, "stats": episode_stats(rows, numeric)})
    known_tasks = {t for t, _ in tasks}
    for _, _, rows in plan:
        if "task_index" in rows.column_names:
            unknown = set(rows.column("task_index").to_pylist()) - known_tasks
            if unknown:
                problems.append(f"episode {rows.column('episode_index')[0].as_py()}: unknown task_index {sorted(unknown)}")
    if problems:
        raise DatasetError(problems)

    for index, chunk, rows in plan:
        out = dst / V21_DATA_PATH.format(episode_chunk=chunk, episode_index=index)
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, out)
    ep_by_index = {int(e["episode_index"]): e for e in episodes}
    for index, chunk, _ in plan:
        ep = ep_by_index[index]
        for vkey in videos:
            vc, vf = int(ep.get(f"videos/{vkey}/chunk_index", 0)), int(ep.get(f"videos/{vkey}/file_index", 0))
            vsrc = src / info["video_path"].format(video_key=vkey, chunk_index=vc, file_index=vf)
            start = float(ep.get(f"videos/{vkey}/from_timestamp", 0.0))
            end = float(ep.get(f"videos/{vkey}/to_timestamp", start + int(ep["length"]) / float(info["fps"])))
            ffmpeg_cut(vsrc, dst / V21_VIDEO_PATH.format(episode_chunk=chunk, video_key=vkey, episode_index=index),
                       start, end, run)

    meta = dst / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    write_jsonl(meta / "episodes.jsonl", out_episodes)
    write_jsonl(meta / "tasks.jsonl", ({"task_index": int(t), "task": str(name)} for t, name in tasks))
    write_jsonl(meta / "episodes_stats.jsonl", out_stats)
    new_info = {k: v for k, v in info.items() if k not in ("data_files_size_in_mb", "video_files_size_in_mb")}
    new_info.update({
        "codebase_version": "v2.1",
        "data_path": V21_DATA_PATH,
        "video_path": V21_VIDEO_PATH if videos else None,
        "total_episodes": len(out_episodes),
        "total_frames": frames,
        "total_tasks": len(tasks),
        "total_chunks": max((c for _, c, _ in plan), default=-1) + 1,
        "total_videos": len(videos) * len(out_episodes),
        "chunks_size": chunks_size,
        "splits": {"train": f"0:{len(out_episodes)}"},
    })
    (meta / "info.json").write_text(json.dumps(new_info, indent=4))
    for name in ("stats.json", "modality.json"):
        if (src / "meta" / name).exists():
            shutil.copy2(src / "meta" / name, meta / name)
    return {"episodes": len(out_episodes), "frames": frames, "videos": len(videos) * len(out_episodes)}


def check_v2(src: Path, info: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """Check a v2.x dataset's episodes, files and lengths; return (episodes, frames).

    :raises DatasetError: with every problem found.
    """
    pq = _pq()
    problems: list[str] = []
    for name in ("episodes.jsonl", "tasks.jsonl"):
        if not (src / "meta" / name).exists():
            problems.append(f"meta/{name} is missing")
    if problems:
        raise DatasetError(problems)
    episodes = read_jsonl(src / "meta" / "episodes.jsonl")
    tasks = {int(t["task_index"]) for t in read_jsonl(src / "meta" / "tasks.jsonl")}
    if len(episodes) != int(info["total_episodes"]):
        problems.append(f"meta/info.json says {info['total_episodes']} episodes, episodes.jsonl has {len(episodes)}")
    chunks_size = int(info.get("chunks_size", 1000))
    frames = 0
    for ep in episodes:
        index = int(ep["episode_index"])
        chunk = index // chunks_size
        data_file = src / info["data_path"].format(episode_chunk=chunk, episode_index=index)
        if not data_file.exists():
            problems.append(f"episode {index}: data file {data_file.relative_to(src)} is missing")
            continue
        meta_rows = pq.read_metadata(data_file).num_rows
        if meta_rows != int(ep["length"]):
            problems.append(f"episode {index}: episodes.jsonl says {ep['length']} frames, data has {meta_rows}")
        frames += meta_rows
        task_column = pq.read_table(data_file, columns=["task_index"]).column("task_index").to_pylist() \
            if "task_index" in pq.read_schema(data_file).names else []
        unknown = set(task_column) - tasks
        if unknown:
            problems.append(f"episode {index}: unknown task_index {sorted(unknown)}")
        for vkey in video_keys(info):
            vfile = src / info.get("video_path", "").format(episode_chunk=chunk, video_key=vkey, episode_index=index)
            if not vfile.exists():
                problems.append(f"episode {index}: video {vfile.relative_to(src)} is missing")
    if frames != int(info["total_frames"]) and not problems:
        problems.append(f"meta/info.json says {info['total_frames']} frames, the data has {frames}")
    if problems:
        raise DatasetError(problems)
    return episodes, frames


def transform(src: Path, dst: Path, *, require_modality: bool = False, run: Runner = _run,
              field_manifest: str | None = None) -> dict[str, Any]:
    """Check (and convert when needed) the LeRobot dataset at ``src`` into v2.1 at ``dst``.

    :param field_manifest: a field dataset version's manifest (``s3://`` URI or local path) whose episodes are
        appended (:mod:`sim2real.workloads.groot.field_episodes`, checked before anything is written);
        ``None`` or ``""``: none.
    :return: the report also written to ``dst/transform_report.json``; with a field manifest, ``field_dataset``
        is ``{"dataset_version", "manifest_uri", "episodes", "frames"}`` (what was appended) and ``episodes`` /
        ``frames`` count the whole output.
    :raises DatasetError: the dataset (or the field dataset) is unusable (every problem listed; ``dst`` is left
        empty).
    """
    info_path = src / "meta" / "info.json"
    if not info_path.exists():
        raise DatasetError([f"meta/info.json is missing under {src} (not a LeRobot dataset)"])
    info = read_json(info_path)
    version = source_version(info)
    modality_problems, frame_sizes = check_modality(src, info, require_modality)
    problems = check_info(info) + modality_problems
    if problems:
        raise DatasetError(problems)
    field_dataset = None
    if field_manifest:
        from sim2real.workloads.groot.field_episodes import load_field_episodes

        field_dataset = load_field_episodes(field_manifest, info)
    dst.mkdir(parents=True, exist_ok=True)
    if version == "v3.0":
        counts = convert_v30(src, dst, info, run)
        action = "converted v3.0 -> v2.1"
    else:
        episodes, frames = check_v2(src, info)
        shutil.copytree(src, dst, dirs_exist_ok=True)
        action = "checked v2.1, copied" if version == "v2.1" else "checked v2.0, added episodes_stats.jsonl"
        if version == "v2.0":
            pq = _pq()
            chunks_size = int(info.get("chunks_size", 1000))
            stats = []
            for ep in episodes:
                index = int(ep["episode_index"])
                table = pq.read_table(src / info["data_path"].format(episode_chunk=index // chunks_size,
                                                                    episode_index=index))
                stats.append({"episode_index": index, "stats": episode_stats(table, numeric_keys(info))})
            write_jsonl(dst / "meta" / "episodes_stats.jsonl", stats)
            new_info = dict(info, codebase_version="v2.1")
            (dst / "meta" / "info.json").write_text(json.dumps(new_info, indent=4))
        counts = {"episodes": len(episodes), "frames": frames, "videos": len(video_keys(info)) * len(episodes)}
    field_entry = None
    if field_dataset is not None:
        from sim2real.workloads.groot.field_episodes import append_field_episodes

        field_entry = append_field_episodes(dst, field_dataset)
        counts["episodes"] += field_entry["episodes"]
        counts["frames"] += field_entry["frames"]
    report = {"source_version": version, "output_version": "v2.1", "action": action,
              "modality_json": (dst / "meta" / "modality.json").exists(), "camera_frame_sizes": frame_sizes, **counts,
              "fps": info["fps"], "features": sorted(info["features"]), "field_dataset": field_entry}
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (counts["episodes"], counts["frames"])):
        raise DatasetError(["internal error: non-numeric counts"])
    (dst / "transform_report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
    return report


def main(argv: list[str] | None = None) -> int:
    """CLI for the processing job; exit 2 with the problems when the dataset is unusable."""
    parser = argparse.ArgumentParser(description="LeRobot dataset -> checked LeRobot v2.1 (GR00T fine-tuning input)")
    parser.add_argument("--input", type=Path, required=True, help="dataset root (SageMaker processing input)")
    parser.add_argument("--output", type=Path, required=True, help="v2.1 dataset root (SageMaker processing output)")
    parser.add_argument("--require-modality", action="store_true", help="fail without meta/modality.json")
    parser.add_argument("--field-manifest", default="",
                        help="field dataset manifest (s3:// URI or path) whose episodes are appended; empty: none")
    args = parser.parse_args(argv)
    # the importable module, also under ``python -m`` (whose ``__main__`` has its own DatasetError class, not the
    # one field_episodes raises)
    from sim2real.workloads.groot import transform_dataset as module

    try:
        report = module.transform(args.input, args.output, require_modality=args.require_modality,
                                  field_manifest=args.field_manifest or None)
    except module.DatasetError as exc:
        print("TransformDataset: the dataset is not usable:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 2
    print("TransformDataset:", json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
