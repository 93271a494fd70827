"""TransformDataset's v2.1 output read back with LeRobot's own v2.1 reader (``lerobot==0.3.3``: codebase v2.1,
``lerobot.datasets.lerobot_dataset.LeRobotDataset``), the layout Isaac-GR00T N1.6 and N1.7 train on.

LeRobot 0.3.x pins torch<2.8 and LeRobot >=0.4 reads v3.0 only, so neither installs beside this repository's pins:
``make test`` runs this file through tests/pipelines/test_lerobot_reader.py, with ``make lerobot-site``'s
directory (lerobot and the packages its reader imports, ``--no-deps``, over the dev venv's torch) on ``PYTHONPATH``.
Elsewhere (the pipeline venv) ``lerobot`` is absent and the file is skipped. Toy size: three episodes, 16 frames,
no cameras (LeRobot decodes video only when a frame is indexed; the site has no torchvision).
"""

from __future__ import annotations

import numpy as np
import pytest
from lerobot_fixtures import EPISODES, STATE_DIM, TASKS, write_v2, write_v30

from sim2real.workloads.groot.transform_dataset import transform

lerobot_dataset = pytest.importorskip(
    "lerobot.datasets.lerobot_dataset",
    reason="lerobot==0.3.3 (torch<2.8) is in no venv: run through tests/pipelines/test_lerobot_reader.py "
    "(make lerobot-site)")


def _read(root):
    """Open ``root`` as LeRobot does (local metadata, parquet through ``datasets``, its timestamp check)."""
    assert lerobot_dataset.CODEBASE_VERSION == "v2.1"
    return lerobot_dataset.LeRobotDataset("sim2real/toy", root=root, download_videos=False)


@pytest.mark.parametrize("source", ["v3.0", "v2.0"])
def test_transformed_dataset_is_read_by_lerobots_v21_reader(tmp_path, source):
    src = write_v30(tmp_path / "src", video=False) if source == "v3.0" else write_v2(tmp_path / "src", "v2.0")
    dst = tmp_path / "dst"
    transform(src, dst, require_modality=True, run=lambda cmd: None)
    ds = _read(dst)
    assert ds.meta.info["codebase_version"] == "v2.1"
    assert ds.num_episodes == len(EPISODES) and ds.num_frames == sum(e[1] for e in EPISODES)
    assert [ds.meta.tasks[i] for i in range(len(TASKS))] == TASKS
    first_of_last = sum(e[1] for e in EPISODES[:-1])
    item = ds[first_of_last]  # the first frame of the last episode, through LeRobot's __getitem__
    assert int(item["episode_index"]) == EPISODES[-1][0] and int(item["frame_index"]) == 0
    assert tuple(item["observation.state"].shape) == (STATE_DIM,) and item["task"] == TASKS[EPISODES[-1][2]]
    # the per-episode statistics TransformDataset wrote (v2.0 source: computed) aggregate in LeRobot
    stats = ds.meta.stats["observation.state"]
    states = np.concatenate([np.asarray(ds.hf_dataset["observation.state"])])
    np.testing.assert_allclose(stats["mean"], states.mean(axis=0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats["max"], states.max(axis=0), rtol=1e-6)
