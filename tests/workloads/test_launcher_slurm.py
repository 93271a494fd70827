"""containers/rl/distributed_run.bash under Slurm (SageMaker HyperPod): SLURM_* env → torchrun argv (dry run)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from tests.workloads.conftest import LAUNCHER, clean_env


def slurm_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in clean_env().items() if not k.startswith("SLURM_")}
    env.update(extra)
    return env


def flags(**extra: str) -> dict[str, str]:
    proc = subprocess.run(["bash", str(LAUNCHER), "--dry-run"], env=slurm_env(PROC_PER_NODE="1", **extra),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "scheduler=slurm" in proc.stderr
    return dict(a[2:].split("=", 1) for a in shlex.split(proc.stdout) if a.startswith("--") and "=" in a)


def test_slurm_node_zero_hosts_the_rendezvous_on_master_addr():
    f = flags(SLURM_JOB_ID="4242", SLURM_NNODES="2", SLURM_NODEID="0", MASTER_ADDR="ip-10-1-2-3")
    assert f["nnodes"] == "2" and f["node_rank"] == "0"
    assert f["rdzv_endpoint"] == "ip-10-1-2-3:5555"
    assert f["rdzv_id"] == "slurm-4242"
    assert "is_host=1" in f["rdzv_conf"]


def test_slurm_other_node_joins_master_addr():
    f = flags(SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="3", SLURM_NODEID="2", MASTER_ADDR="ip-10-1-2-3",
              RDZV_PORT="29500")
    assert f["nnodes"] == "3" and f["node_rank"] == "2"
    assert f["rdzv_endpoint"] == "ip-10-1-2-3:29500" and "is_host=0" in f["rdzv_conf"]
    assert f["rdzv_id"] == "slurm-4242"


def test_slurm_single_node_is_local():
    f = flags(SLURM_JOB_ID="7", SLURM_NNODES="1", SLURM_NODEID="0")
    assert f["nnodes"] == "1" and f["rdzv_endpoint"] == "127.0.0.1:5555" and f["rdzv_id"] == "slurm-7"


def test_batch_env_wins_over_a_slurm_env():
    # A Batch job on an instance that happens to have SLURM_* set still follows Batch's variables.
    proc = subprocess.run(["bash", str(LAUNCHER), "--dry-run"], capture_output=True, text=True, timeout=30,
                          env=slurm_env(PROC_PER_NODE="1", SLURM_JOB_ID="9", SLURM_NNODES="4",
                                        AWS_BATCH_JOB_NUM_NODES="1", AWS_BATCH_JOB_ID="abc#0"))
    assert proc.returncode == 0, proc.stderr
    assert "scheduler=batch" in proc.stderr and "--rdzv_id=abc" in proc.stdout


def isaaclab3_argv(**extra: str) -> list[str]:
    proc = subprocess.run(["bash", str(LAUNCHER), "--dry-run"], capture_output=True, text=True, timeout=30,
                          env=slurm_env(PROC_PER_NODE="8", TRAIN_ARGS_STYLE="isaaclab3", TASK="Isaac-Velocity-Rough-H1",
                                        MAX_ITERATIONS="3000", SLURM_JOB_ID="4242", SLURM_NNODES="2",
                                        MASTER_ADDR="ip-10-1-2-3", **extra))
    assert proc.returncode == 0, proc.stderr
    assert "scheduler=slurm" in proc.stderr
    return shlex.split(proc.stdout)


@pytest.mark.parametrize("node", ["0", "1"])
def test_isaaclab3_slurm_nodes_pass_slurms_rank_and_master_addr_to_train_multigpu(node):
    assert isaaclab3_argv(SLURM_NODEID=node) == [
        "isaaclab", "train_multigpu", "--rl_library", "skrl",
        "--num_gpus=8", "--nnodes=2", f"--node_rank={node}", "--rdzv_backend=c10d",
        "--rdzv_endpoint=ip-10-1-2-3:5555", "--rdzv_id=slurm-4242", "--max_restarts=0",
        "--task", "Isaac-Velocity-Rough-H1", "--max_iterations", "3000"]


@pytest.mark.parametrize("env, needle", [
    ({"SLURM_JOB_ID": "1", "SLURM_NNODES": "2", "SLURM_NODEID": "0"}, "needs MASTER_ADDR"),
    ({"SLURM_JOB_ID": "1", "SLURM_NNODES": "2", "SLURM_NODEID": "2", "MASTER_ADDR": "h"}, "SLURM_NODEID=2 is not below"),
    ({"SLURM_JOB_ID": "1", "SLURM_NNODES": "zero"}, "SLURM_NNODES must be an integer"),
])
def test_bad_slurm_env_fails_clearly(env, needle):
    proc = subprocess.run(["bash", str(LAUNCHER), "--dry-run"], env=slurm_env(PROC_PER_NODE="1", **env),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
