"""TransformDataset on tiny synthetic LeRobot datasets (v3.0 → v2.1, v2.1 check, v2.0 stats, refusals)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from lerobot_fixtures import EPISODES, FPS, TASKS, VIDEO, write_v2, write_v30

from sim2real.workloads.groot.transform_dataset import V21_DATA_PATH, DatasetError, transform


def test_v30_is_converted_to_v21(tmp_path):
    src, dst = write_v30(tmp_path / "src"), tmp_path / "dst"
    commands: list[list[str]] = []
    report = transform(src, dst, require_modality=True, run=commands.append)

    assert report["source_version"] == "v3.0" and report["output_version"] == "v2.1"
    assert report["episodes"] == 3 and report["frames"] == sum(e[1] for e in EPISODES)
    info = json.loads((dst / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["data_path"] == V21_DATA_PATH
    assert info["total_frames"] == report["frames"] and info["splits"] == {"train": "0:3"}
    assert "data_files_size_in_mb" not in info
    # one parquet per episode, with exactly that episode's rows, in order
    for ep, length, task, _ in EPISODES:
        table = pq.read_table(dst / V21_DATA_PATH.format(episode_chunk=0, episode_index=ep))
        assert table.num_rows == length
        assert set(table.column("episode_index").to_pylist()) == {ep}
        assert table.column("frame_index").to_pylist() == list(range(length))
        assert set(table.column("task_index").to_pylist()) == {task}
    episodes = [json.loads(x) for x in (dst / "meta/episodes.jsonl").read_text().splitlines()]
    assert episodes == [{"episode_index": e, "tasks": [TASKS[t]], "length": n} for e, n, t, _ in EPISODES]
    tasks = [json.loads(x) for x in (dst / "meta/tasks.jsonl").read_text().splitlines()]
    assert tasks == [{"task_index": 0, "task": TASKS[0]}, {"task_index": 1, "task": TASKS[1]}]
    stats = [json.loads(x) for x in (dst / "meta/episodes_stats.jsonl").read_text().splitlines()]
    ep1 = pq.read_table(dst / V21_DATA_PATH.format(episode_chunk=0, episode_index=1))
    state = np.asarray(ep1.column("observation.state").to_pylist())
    assert stats[1]["episode_index"] == 1
    assert np.allclose(stats[1]["stats"]["observation.state"]["mean"], state.mean(0))
    assert stats[1]["stats"]["action"]["count"] == [7]
    assert (dst / "meta/modality.json").exists() and (dst / "meta/stats.json").exists()
    # each episode's video segment is cut from its shared file at the episode's timestamps
    assert len(commands) == 3
    second = commands[1]
    assert second[0] == "ffmpeg"
    assert second[second.index("-ss") + 1] == f"{5 / FPS:.6f}" and second[second.index("-to") + 1] == f"{12 / FPS:.6f}"
    assert second[second.index("-i") + 1].endswith(f"videos/{VIDEO}/chunk-000/file-000.mp4")
    assert second[-1].endswith(f"videos/chunk-000/{VIDEO}/episode_000001.mp4")
    third = commands[2]
    assert third[third.index("-ss") + 1] == f"{0:.6f}" and third[third.index("-i") + 1].endswith("file-001.mp4")
    assert json.loads((dst / "transform_report.json").read_text()) == report
    assert report["camera_frame_sizes"] == {"front": [64, 64]}  # meta/info.json's [height, width, channels]


def test_v21_is_checked_and_copied(tmp_path):
    src, dst = write_v2(tmp_path / "src"), tmp_path / "dst"
    report = transform(src, dst)
    assert report["action"] == "checked v2.1, copied" and report["frames"] == 16
    assert (dst / "data/chunk-000/episode_000002.parquet").read_bytes() == (
        src / "data/chunk-000/episode_000002.parquet").read_bytes()


def test_v20_gets_episode_stats(tmp_path):
    src, dst = write_v2(tmp_path / "src", version="v2.0"), tmp_path / "dst"
    report = transform(src, dst)
    assert report["source_version"] == "v2.0"
    assert json.loads((dst / "meta/info.json").read_text())["codebase_version"] == "v2.1"
    stats = [json.loads(x) for x in (dst / "meta/episodes_stats.jsonl").read_text().splitlines()]
    assert [s["episode_index"] for s in stats] == [0, 1, 2] and stats[2]["stats"]["action"]["count"] == [4]


def test_problems_are_all_listed_and_nothing_is_written(tmp_path):
    src, dst = write_v30(tmp_path / "src", video=True), tmp_path / "dst"
    (src / "data/chunk-000/file-001.parquet").unlink()
    (src / f"videos/{VIDEO}/chunk-000/file-000.mp4").unlink()
    with pytest.raises(DatasetError) as err:
        transform(src, dst, run=lambda cmd: None)
    text = " | ".join(err.value.problems)
    assert "episode 2: data file data/chunk-000/file-001.parquet is missing" in text
    assert f"episode 0: video videos/{VIDEO}/chunk-000/file-000.mp4 is missing" in text
    assert not any(dst.rglob("*.parquet"))


def test_length_mismatch_and_missing_modality(tmp_path):
    src = write_v2(tmp_path / "src")
    lines = (src / "meta/episodes.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["length"] = 99
    (src / "meta/episodes.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(DatasetError, match="episode 0: episodes.jsonl says 99 frames, data has 5"):
        transform(src, tmp_path / "dst")
    (src / "meta/modality.json").unlink()
    with pytest.raises(DatasetError, match="modality.json is missing"):
        transform(src, tmp_path / "dst2", require_modality=True)


def test_camera_without_a_readable_frame_size_refused(tmp_path):
    """The fine-tune needs each camera's frame size for the model's modality layout: refused here, before
    any GPU time."""
    src = write_v30(tmp_path / "src")
    info = json.loads((src / "meta/info.json").read_text())
    info["features"][VIDEO]["names"] = None
    (src / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=r"the model's modality layout cannot be built: dataset feature "
                                           r"'observation.images.front': names None do not say which"):
        transform(src, tmp_path / "dst", run=lambda cmd: None)
    assert not (tmp_path / "dst").exists()


def test_unknown_version_and_not_a_dataset(tmp_path):
    with pytest.raises(DatasetError, match="not a LeRobot dataset"):
        transform(tmp_path, tmp_path / "out")
    src = write_v2(tmp_path / "src")
    info = json.loads((src / "meta/info.json").read_text())
    (src / "meta/info.json").write_text(json.dumps(dict(info, codebase_version="v1.6")))
    with pytest.raises(DatasetError, match="unsupported LeRobot codebase_version"):
        transform(src, tmp_path / "dst")


def test_cli_exit_codes(tmp_path):
    src = write_v30(tmp_path / "src", video=False)
    ok = subprocess.run([sys.executable, "-m", "sim2real.workloads.groot.transform_dataset", "--input", str(src),
                         "--output", str(tmp_path / "out"), "--require-modality"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "out/transform_report.json").read_text())["episodes"] == 3
    (src / "meta/tasks.parquet").unlink()
    bad = subprocess.run([sys.executable, "-m", "sim2real.workloads.groot.transform_dataset", "--input", str(src),
                          "--output", str(tmp_path / "out2")], capture_output=True, text=True)
    assert bad.returncode == 2 and "meta/tasks.parquet is missing" in bad.stderr
