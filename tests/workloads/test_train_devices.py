"""The trainer's GPU path, checked on CPU: device choice per LOCAL_RANK, the env wrapper following that device,
per-rank parameter digests, and the throughput line."""

from __future__ import annotations

import re

import pytest
import torch

from sim2real.workloads.policy import load_checkpoint, state_digest
from sim2real.workloads.train import throughput_line
from sim2real.workloads.train_args import UsageError, parse_args, select_device
from sim2real.workloads.train_env import wrap_for_device
from tests.workloads.conftest import clean_env, run_train

DIGEST = re.compile(r"^\[sim2real\] rank=(\d+) iteration=(\d+) params_sha256=([0-9a-f]{64}) "
                    r"preprocessors_sha256=([0-9a-f]{64})$")
THROUGHPUT = re.compile(r"^\[sim2real\] throughput world_size=(\d+) num_envs_per_rank=(\d+) iterations=(\d+) "
                        r"env_steps=(\d+) wall_s=([\d.]+) env_steps_per_s=([\d.]+) steady_env_steps_per_s=(\S+)$")


@pytest.mark.parametrize("requested,cuda,count,world,local_rank,expected", [
    ("auto", False, 0, 1, 0, "cpu"),
    ("auto", True, 1, 1, 0, "cuda:0"),       # one GPU, one process: the GPU (was the CPU before)
    ("auto", True, 2, 2, 1, "cuda:1"),       # rank with LOCAL_RANK=1 on its own GPU
    ("cuda", True, 2, 2, 0, "cuda:0"),
    ("cpu", True, 1, 1, 0, "cpu"),
])
def test_select_device(requested, cuda, count, world, local_rank, expected):
    assert select_device(requested, cuda_available=cuda, cuda_count=count, world_size=world,
                         local_rank=local_rank) == expected


@pytest.mark.parametrize("requested,cuda,count,world,local_rank,needle", [
    ("auto", False, 0, 2, 0, "NCCL"),
    ("cpu", True, 2, 2, 0, "DEVICE=cpu with WORLD_SIZE=2"),
    ("cuda", False, 0, 1, 0, "no CUDA device"),
    ("auto", True, 1, 2, 1, "LOCAL_RANK=1 but only 1 CUDA device"),
])
def test_select_device_refusals(requested, cuda, count, world, local_rank, needle):
    with pytest.raises(UsageError, match=re.escape(needle)):
        select_device(requested, cuda_available=cuda, cuda_count=count, world_size=world, local_rank=local_rank)


def test_bad_device_and_digest_interval_are_usage_errors(monkeypatch):
    for key, value in {"TASK": "Reacher-v5", "MAX_ITERATIONS": "1", "OUTPUT_URI": "/tmp/x"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DEVICE", "tpu")
    with pytest.raises(UsageError, match="DEVICE must be one of"):
        parse_args([])
    monkeypatch.setenv("DEVICE", "CPU")
    assert parse_args([]).device == "cpu"
    monkeypatch.setenv("DIGEST_INTERVAL", "-1")
    with pytest.raises(UsageError, match="DIGEST_INTERVAL"):
        parse_args([])


def test_env_wrapper_follows_the_chosen_device():
    # skrl's wrapper defaults to cuda:0 whenever CUDA exists, whatever the rank; "meta" stands for "not its default"
    import gymnasium

    vec = gymnasium.make_vec("Reacher-v5", num_envs=2, vectorization_mode="sync")
    try:
        assert wrap_for_device(vec, torch.device("meta")).device == torch.device("meta")
    finally:
        vec.close()


def test_state_digest_is_bit_exact_and_order_free():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert state_digest({"policy": a, "value": None}) == state_digest({"policy": b})
    assert state_digest({"x": a.state_dict(), "y": {"count": torch.tensor(3.0)}}) == \
        state_digest({"y": {"count": torch.tensor(3.0)}, "x": b})
    with torch.no_grad():
        b.weight[0, 0] = torch.nextafter(b.weight[0, 0], torch.tensor(10.0))  # one ulp
    assert state_digest({"policy": a}) != state_digest({"policy": b})


def test_throughput_line_counts_every_rank():
    line = throughput_line(world_size=2, num_envs=4, rollouts=64, iter_times=[2.0, 1.0, 1.0], wall_s=4.0)
    m = THROUGHPUT.match(line)
    assert m, line
    assert m.groups() == ("2", "4", "3", str(2 * 4 * 64 * 3), "4.00", "384.0", "512.0")


def test_digest_lines_match_the_checkpoint(tmp_path):
    proc = run_train(clean_env(TASK="Reacher-v5", MAX_ITERATIONS="3", NUM_ENVS="2", OUTPUT_URI=str(tmp_path),
                               DIGEST_INTERVAL="2", DEVICE="cpu"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert "[sim2real] rank=0 local_rank=0 world_size=1 device=cpu" in lines
    digests = [m.groups() for m in map(DIGEST.match, lines) if m]
    assert [(r, it) for r, it, _, _ in digests] == [("0", "2"), ("0", "3")]  # every 2nd and the last
    assert digests[0][2] != digests[1][2]  # an update changed the parameters
    ckpt = load_checkpoint(str(tmp_path / "agent_000003.pt"))
    assert digests[1][2] == state_digest({"policy": ckpt["policy"], "value": ckpt["value"]})
    assert digests[1][3] == state_digest({k: v for k, v in ckpt.items() if "preprocessor" in k})
    assert not any("digests iteration=" in line for line in lines)  # no group to compare with
    (m,) = [m for m in map(THROUGHPUT.match, lines) if m]
    assert m.group(1, 2, 3, 4) == ("1", "2", "3", str(3 * 64 * 2))
    assert float(m.group(6)) > 0
