"""containers/rl/distributed_run.bash in a Kubeflow PyTorchJob (HyperPod EKS): the training operator's replica env
(kubeflow/training-operator v1.9.0, pkg/controller.v1/pytorch/envvar.go and master.go) → torchrun / train_multigpu
argv per node (dry run), refusals, and a real two-replica rendezvous on loopback."""

from __future__ import annotations

import pytest

from tests.workloads.conftest import clean_env, fake_train_multigpu, free_port, launch_nodes
from tests.workloads.test_launcher import ISAACLAB3_ENTRY, argv, dry_run, flags


def replica_env(rank: int, *, nnodes: int = 2, nproc: int = 4, job: str = "s2r-k", port: int = 23456) -> dict[str, str]:
    """What the operator sets on replica ``rank`` (Master 0, Worker i → i + 1) of a job with ``spec.nprocPerNode``."""
    addr = f"{job}-master-0"
    return dict(PET_NNODES=str(nnodes), PET_NODE_RANK=str(rank), RANK=str(rank), WORLD_SIZE=str(nnodes * nproc),
                PET_NPROC_PER_NODE=str(nproc), MASTER_ADDR=addr, PET_MASTER_ADDR=addr, MASTER_PORT=str(port),
                PET_MASTER_PORT=str(port), PYTHONUNBUFFERED="1")


@pytest.mark.parametrize("rank,is_host", [(0, 1), (1, 0)])
def test_each_replica_joins_the_masters_service_with_its_node_rank(rank, is_host):
    proc = dry_run(**replica_env(rank))
    assert proc.returncode == 0, proc.stderr
    assert "scheduler=pytorchjob" in proc.stderr
    f = flags(argv(**replica_env(rank)))
    assert f["nnodes"] == "2" and f["nproc_per_node"] == "4" and f["node_rank"] == str(rank)
    assert f["rdzv_endpoint"] == "s2r-k-master-0:23456"
    assert f["rdzv_id"] == "s2r-k"  # the job name, the same on every replica
    assert f"is_host={is_host}" in f["rdzv_conf"]


def test_rdzv_port_and_rdzv_id_overrides():
    f = flags(argv(**replica_env(1), RDZV_PORT="6000", PET_RDZV_ID="job-uid-1"))
    assert f["rdzv_endpoint"] == "s2r-k-master-0:6000" and f["rdzv_id"] == "job-uid-1"


def test_equal_elastic_bounds_and_a_single_replica():
    assert flags(argv(**{**replica_env(1), "PET_NNODES": "2:2"}))["nnodes"] == "2"
    f = flags(argv(**replica_env(0, nnodes=1, nproc=1)))
    assert f["nnodes"] == "1" and f["rdzv_endpoint"] == "127.0.0.1:23456" and f["rdzv_id"] == "s2r-k"


@pytest.mark.parametrize("rank", [0, 1])
def test_isaaclab3_replica_passes_the_same_per_node_flags_to_train_multigpu(rank):
    args = argv(**replica_env(rank), TRAIN_ARGS_STYLE="isaaclab3", TASK="Isaac-Velocity-Rough-H1",
                MAX_ITERATIONS="3000", TRAIN_ENTRYPOINT=ISAACLAB3_ENTRY)
    assert args == [
        "/isaac-sim/python.sh", "-m", "isaaclab", "train_multigpu", "--rl_library", "skrl", "--viz", "none",
        "--num_gpus=4", "--nnodes=2", f"--node_rank={rank}", "--rdzv_backend=c10d",
        "--rdzv_endpoint=s2r-k-master-0:23456", "--rdzv_id=s2r-k", "--max_restarts=0",
        "--task", "Isaac-Velocity-Rough-H1", "--max_iterations", "3000", "--extra", "x y"]


@pytest.mark.parametrize("change,needle", [
    ({"PET_NODE_RANK": None}, "needs PET_NODE_RANK"),
    ({"PET_MASTER_ADDR": None, "MASTER_ADDR": None}, "needs PET_MASTER_ADDR or MASTER_ADDR"),
    ({"PET_NNODES": "1:4"}, "elastic range"),
    ({"PET_NNODES": "two"}, "PET_NNODES must be an integer"),
    ({"PET_NODE_RANK": "2", "RANK": "2"}, "PET_NODE_RANK=2 is not below PET_NNODES=2"),
    ({"RANK": "0"}, "RANK=0 disagrees with PET_NODE_RANK=1"),
    ({"MASTER_ADDR": "other-master-0"}, "disagrees with MASTER_ADDR=other-master-0"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is not PET_NNODES x nprocPerNode = 2 x 4"),
    ({"PROC_PER_NODE": "8"}, "PROC_PER_NODE=8 disagrees with PET_NPROC_PER_NODE=4"),
])
def test_missing_or_inconsistent_operator_variables_fail_clearly(change, needle):
    env = {**replica_env(1), **change}
    env = {k: v for k, v in env.items() if v is not None}
    proc = dry_run(**env)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "error" in proc.stderr
    assert proc.stdout == ""


def test_batch_and_slurm_variables_win_over_the_operators():
    proc = dry_run(**replica_env(1), SLURM_JOB_ID="42", SLURM_NNODES="1", SLURM_NODEID="0")
    assert proc.returncode == 0, proc.stderr
    assert "scheduler=slurm" in proc.stderr


@pytest.mark.parametrize("style", ["env", "isaaclab3"])
def test_real_two_replica_rendezvous_on_loopback(style, tmp_path):
    port = free_port()
    # PET_STANDALONE (elasticPolicy.standalone) would make torchrun start a rendezvous of its own on each replica:
    # the launcher must not hand the operator's PET_* (nor its replica-counting RANK/WORLD_SIZE) to torchrun
    common = dict(PROC_PER_NODE="1", TRAIN_ENTRYPOINT="-m sim2real.workloads.selfcheck", EXPECTED_WORLD_SIZE="2",
                  GLOO_SOCKET_IFNAME="lo", RDZV_JOIN_TIMEOUT="60", PET_STANDALONE="1")
    if style == "isaaclab3":
        common.update(TRAIN_ARGS_STYLE="isaaclab3", TASK="Isaac-Velocity-Rough-H1", RDZV_JOIN_TIMEOUT="600",
                      TRAIN_ENTRYPOINT=fake_train_multigpu(tmp_path / "train_multigpu.py",
                                                           ["-m", "sim2real.workloads.selfcheck"]))
    envs = [{**replica_env(rank, nproc=1, port=port), "MASTER_ADDR": "127.0.0.1", "PET_MASTER_ADDR": "127.0.0.1",
             "PET_RDZV_ID": "s2r-k"} for rank in (0, 1)]
    lines = launch_nodes([clean_env(**common, **env) for env in envs], tmp_path)
    assert sorted(line["rank"] for line in lines) == [0, 1]
    assert all(line["selfcheck"] == "ok" and line["world_size"] == 2 and line["sum"] == 1 for line in lines)
