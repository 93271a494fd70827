"""storage (local + moto S3) and the task registry's success definitions on a real MuJoCo env."""

from __future__ import annotations

import hashlib
import os

import boto3
import gymnasium
import numpy as np
import pytest
from moto import mock_aws

from sim2real.contract import storage
from sim2real.workloads.tasks import REACHER_SUCCESS_DISTANCE_M, TASKS, get_task


def test_local_roundtrip_atomic_and_listing(tmp_path):
    target = str(tmp_path / "a" / "b" / "x.bin")
    storage.write_bytes(target, b"hello")
    assert storage.read_bytes(target) == b"hello"
    assert not [n for n in os.listdir(tmp_path / "a" / "b") if n.startswith(".tmp-")]
    assert storage.sha256_uri(target) == hashlib.sha256(b"hello").hexdigest()
    assert storage.list_names(str(tmp_path / "a" / "b")) == ["x.bin"]
    assert storage.list_names(str(tmp_path / "missing")) == []
    assert storage.exists(target) and not storage.exists(target + ".no")
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(str(tmp_path / "nope"))


@mock_aws
def test_s3_roundtrip_listing_and_sha(tmp_path):
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bkt")
    data = os.urandom(3 * 1024 * 1024 + 5)  # several 1 MiB chunks
    storage.write_bytes("s3://bkt/p/a.bin", data)
    local = tmp_path / "f.bin"
    local.write_bytes(b"xyz")
    storage.upload_file(str(local), "s3://bkt/p/b.bin")
    storage.write_bytes("s3://bkt/p/sub/c.bin", b"nested")
    assert storage.read_bytes("s3://bkt/p/a.bin") == data
    assert storage.sha256_uri("s3://bkt/p/a.bin") == hashlib.sha256(data).hexdigest()
    assert storage.list_names("s3://bkt/p") == ["a.bin", "b.bin"]
    assert storage.exists("s3://bkt/p/b.bin") and not storage.exists("s3://bkt/p/zz")
    storage.download_file("s3://bkt/p/b.bin", str(tmp_path / "dl" / "b.bin"))
    assert (tmp_path / "dl" / "b.bin").read_bytes() == b"xyz"
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("s3://bkt/p/missing")


def test_join_and_split():
    assert storage.join("s3://b/runs/k/checkpoints/", "agent_000001.pt") == "s3://b/runs/k/checkpoints/agent_000001.pt"
    assert storage.join("s3://b/x", "tensorboard", "e") == "s3://b/x/tensorboard/e"
    assert storage.split_s3("s3://b/k/y") == ("b", "k/y")
    with pytest.raises(ValueError):
        storage.split_s3("/local/path")


def test_reacher_success_reads_final_distance_from_info():
    spec = get_task("Reacher-v5", kind="gymnasium")
    env = gymnasium.make("Reacher-v5")
    obs, _ = env.reset(seed=3)
    obs, _r, term, trunc, info = env.step(np.zeros(2, dtype=np.float32))
    distance = -info["reward_dist"]
    assert distance == pytest.approx(float(np.hypot(obs[-2], obs[-1])), abs=1e-6)  # same vector, both sources
    flag = spec.success(observation=obs, info=info, terminated=term, truncated=trunc, length=1)
    assert flag == (distance < REACHER_SUCCESS_DISTANCE_M)
    assert spec.success(observation=obs, info={"reward_dist": -0.01}, terminated=False, truncated=True, length=50)
    assert not spec.success(observation=obs, info={"reward_dist": -0.2}, terminated=False, truncated=True, length=50)


def test_pendulum_success_is_surviving_the_time_limit():
    spec = TASKS["InvertedPendulum-v5"]
    assert spec.success(observation=None, info={}, terminated=False, truncated=True, length=1000)
    assert not spec.success(observation=None, info={}, terminated=True, truncated=False, length=37)


def test_pusher_success_is_the_object_on_the_goal_disc_at_the_last_step():
    from sim2real.workloads.tasks import PUSHER_SUCCESS_DISTANCE_M

    spec = get_task("Pusher-v5", kind="gymnasium")
    env = gymnasium.make("Pusher-v5")
    try:
        obs, _ = env.reset(seed=3)
        data = env.unwrapped.data
        object_xy = env.unwrapped.get_body_com("object")[:2]
        goal_xy = env.unwrapped.get_body_com("goal")[:2]
        assert np.allclose(obs[17:19], object_xy) and np.allclose(obs[20:22], goal_xy)  # the layout the check reads
        start = float(np.hypot(*(object_xy - goal_xy)))
        assert start > 0.17  # reset_model: the object starts off the goal
        assert not spec.success(observation=obs, info={}, terminated=False, truncated=True, length=100)
        # move the object onto the goal (planar offset 0.05 m < 0.08 m disc radius; heights differ by design)
        qpos, qvel = data.qpos.copy(), data.qvel.copy()
        qpos[-4:-2] = qpos[-2:] + np.array([0.05, 0.0])
        env.unwrapped.set_state(qpos, qvel)
        obs, *_ = env.step(np.zeros(7, dtype=np.float32))
        assert abs(float(obs[19]) - float(obs[22])) > 0.04  # a 3-D distance would not see it on the disc
        assert spec.success(observation=obs, info={}, terminated=False, truncated=True, length=100)
        qpos[-4:-2] = qpos[-2:] + np.array([PUSHER_SUCCESS_DISTANCE_M + 0.01, 0.0])
        env.unwrapped.set_state(qpos, qvel)
        obs, *_ = env.step(np.zeros(7, dtype=np.float32))
        assert not spec.success(observation=obs, info={}, terminated=False, truncated=True, length=100)
    finally:
        env.close()


def test_isaaclab_tasks_are_known_but_refused_by_the_cpu_trainer():
    for task_id in ("Isaac-Velocity-Rough-H1-v0", "Workshop-SO101-Reach-v0", "Workshop-SO101-Lift-v0"):
        assert TASKS[task_id].kind == "isaaclab" and TASKS[task_id].source
        with pytest.raises(ValueError, match="Isaac Lab image"):
            get_task(task_id, kind="gymnasium")
