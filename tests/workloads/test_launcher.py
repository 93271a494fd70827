"""containers/rl/distributed_run.bash: env → torchrun argv (dry run), errors, and a real 2-node rendezvous."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from tests.workloads.conftest import LAUNCHER, clean_env, fake_train_multigpu, free_port, launch_nodes


def dry_run(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LAUNCHER), "--dry-run", "--extra", "x y"], env=clean_env(**env),
                          capture_output=True, text=True, timeout=30)


def argv(**env: str) -> list[str]:
    proc = dry_run(**env)
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout.strip())


def flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)


def test_single_node_defaults():
    args = argv(PROC_PER_NODE="1")
    assert args[0] == "torchrun" or args[:3] == ["python3", "-m", "torch.distributed.run"]
    f = flags(args)
    assert f["nnodes"] == "1" and f["nproc_per_node"] == "1" and f["node_rank"] == "0"
    assert f["rdzv_backend"] == "c10d"
    assert f["rdzv_endpoint"] == "127.0.0.1:5555"
    assert f["rdzv_id"] == "sim2real-local"
    assert "is_host=1" in f["rdzv_conf"]
    # entrypoint default, then extra args passed through verbatim
    assert args[-4:] == ["-m", "sim2real.workloads.train", "--extra", "x y"]


def test_dry_run_env_var_and_rdzv_port():
    proc = subprocess.run(["bash", str(LAUNCHER)], env=clean_env(DRY_RUN="1", RDZV_PORT="6000", PROC_PER_NODE="1"),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert flags(shlex.split(proc.stdout))["rdzv_endpoint"] == "127.0.0.1:6000"


def test_two_nodes_four_procs_main_uses_own_address():
    f = flags(argv(AWS_BATCH_JOB_NUM_NODES="2", AWS_BATCH_JOB_NODE_INDEX="0", AWS_BATCH_JOB_MAIN_NODE_INDEX="0",
                   AWS_BATCH_JOB_ID="3f2a-uuid#0", PROC_PER_NODE="4", NODE_IP="10.0.1.17"))
    assert f["nnodes"] == "2" and f["nproc_per_node"] == "4" and f["node_rank"] == "0"
    assert f["rdzv_endpoint"] == "10.0.1.17:5555"
    assert f["rdzv_id"] == "3f2a-uuid"
    assert "is_host=1" in f["rdzv_conf"]


def test_two_nodes_worker_uses_main_address():
    f = flags(argv(AWS_BATCH_JOB_NUM_NODES="2", AWS_BATCH_JOB_NODE_INDEX="1", AWS_BATCH_JOB_MAIN_NODE_INDEX="0",
                   AWS_BATCH_JOB_ID="3f2a-uuid#1", AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS="10.0.1.17",
                   PROC_PER_NODE="4"))
    assert f["node_rank"] == "1" and f["rdzv_endpoint"] == "10.0.1.17:5555"
    assert f["rdzv_id"] == "3f2a-uuid"
    assert "is_host=0" in f["rdzv_conf"]


def test_rdzv_id_strips_multi_digit_node_suffix():
    # the workshop's launcher cut 2 characters, which breaks from node index 10 on
    f = flags(argv(AWS_BATCH_JOB_NUM_NODES="16", AWS_BATCH_JOB_NODE_INDEX="12", AWS_BATCH_JOB_MAIN_NODE_INDEX="0",
                   AWS_BATCH_JOB_ID="abcd-1234#12", AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS="10.0.0.2",
                   PROC_PER_NODE="1"))
    assert f["rdzv_id"] == "abcd-1234"


def test_main_node_not_index_zero():
    f = flags(argv(AWS_BATCH_JOB_NUM_NODES="3", AWS_BATCH_JOB_NODE_INDEX="2", AWS_BATCH_JOB_MAIN_NODE_INDEX="2",
                   AWS_BATCH_JOB_ID="j#2", NODE_IP="10.9.9.9", PROC_PER_NODE="1"))
    assert f["rdzv_endpoint"] == "10.9.9.9:5555" and "is_host=1" in f["rdzv_conf"]


def test_isaaclab_style_appends_task_flags():
    args = argv(PROC_PER_NODE="1", TRAIN_ARGS_STYLE="isaaclab", TASK="Isaac-Velocity-Rough-H1-v0",
                MAX_ITERATIONS="100", PYTHON="/isaac-sim/python.sh",
                TRAIN_ENTRYPOINT="/ws/skrl/train.py --distributed --headless")
    assert args[:3] == ["/isaac-sim/python.sh", "-m", "torch.distributed.run"]
    i = args.index("/ws/skrl/train.py")
    assert args[i:] == ["/ws/skrl/train.py", "--distributed", "--headless", "--task", "Isaac-Velocity-Rough-H1-v0",
                        "--max_iterations", "100", "--extra", "x y"]


#: Isaac Lab 3.0's multi-GPU launcher as the image runs it (containers/isaaclab/Dockerfile)
ISAACLAB3_ENTRY = "/isaac-sim/python.sh -m isaaclab train_multigpu --rl_library skrl --viz none"
ISAACLAB3_BATCH = dict(TRAIN_ARGS_STYLE="isaaclab3", TASK="Isaac-Velocity-Rough-H1", MAX_ITERATIONS="3000",
                       PROC_PER_NODE="4", TRAIN_ENTRYPOINT=ISAACLAB3_ENTRY, AWS_BATCH_JOB_NUM_NODES="2",
                       AWS_BATCH_JOB_MAIN_NODE_INDEX="0")


def test_isaaclab3_batch_main_node_zero_passes_the_rendezvous_as_train_multigpu_flags():
    # no torchrun of our own: train_multigpu builds it from these flags (isaaclab/cli/multigpu.py, v3.0.0)
    args = argv(**ISAACLAB3_BATCH, AWS_BATCH_JOB_NODE_INDEX="0", AWS_BATCH_JOB_ID="3f2a-uuid#0", NODE_IP="10.0.1.17")
    assert args == [
        "/isaac-sim/python.sh", "-m", "isaaclab", "train_multigpu", "--rl_library", "skrl", "--viz", "none",
        "--num_gpus=4", "--nnodes=2", "--node_rank=0", "--rdzv_backend=c10d", "--rdzv_endpoint=10.0.1.17:5555",
        "--rdzv_id=3f2a-uuid", "--max_restarts=0",
        "--task", "Isaac-Velocity-Rough-H1", "--max_iterations", "3000", "--extra", "x y"]


def test_isaaclab3_batch_worker_node_one_joins_the_main_nodes_address():
    args = argv(**ISAACLAB3_BATCH, AWS_BATCH_JOB_NODE_INDEX="1", AWS_BATCH_JOB_ID="3f2a-uuid#1",
                AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS="10.0.1.17", NUM_ENVS="4096", SEED="7")
    assert args == [
        "/isaac-sim/python.sh", "-m", "isaaclab", "train_multigpu", "--rl_library", "skrl", "--viz", "none",
        "--num_gpus=4", "--nnodes=2", "--node_rank=1", "--rdzv_backend=c10d", "--rdzv_endpoint=10.0.1.17:5555",
        "--rdzv_id=3f2a-uuid", "--max_restarts=0",
        "--task", "Isaac-Velocity-Rough-H1", "--max_iterations", "3000", "--num_envs", "4096", "--seed", "7",
        "--extra", "x y"]


def test_isaaclab3_default_entrypoint_is_the_isaaclab_cli():
    args = argv(TRAIN_ARGS_STYLE="isaaclab3", TASK="Isaac-Velocity-Rough-H1", PROC_PER_NODE="1")
    assert args[:4] == ["isaaclab", "train_multigpu", "--rl_library", "skrl"]
    assert "--rdzv_endpoint=127.0.0.1:5555" in args and "--rdzv_id=sim2real-local" in args
    assert not [a for a in args if a.startswith("--rdzv_conf")]  # train_multigpu has no such flag


@pytest.mark.parametrize("env,needle", [
    ({"TRAIN_ARGS_STYLE": "isaaclab3", "TASK": "T", "RDZV_JOIN_TIMEOUT": "60"}, "no --rdzv_conf"),
    ({"TRAIN_ARGS_STYLE": "isaaclab3", "TASK": "T",
      "TRAIN_ENTRYPOINT": "/workspace/isaaclab/scripts/reinforcement_learning/skrl/train.py --distributed"},
     "Isaac Lab 2.x's skrl script"),
    ({"TRAIN_ARGS_STYLE": "isaaclab3", "TASK": "T", "TRAIN_ENTRYPOINT": "isaaclab train_multigpu --ml_framework jax"},
     "JAX launcher"),
    ({"TRAIN_ARGS_STYLE": "isaaclab", "TASK": "T", "TRAIN_ENTRYPOINT": "isaaclab train_multigpu --rl_library skrl"},
     "use TRAIN_ARGS_STYLE=isaaclab3"),
    ({"TRAIN_ARGS_STYLE": "isaaclab3"}, "TRAIN_ARGS_STYLE=isaaclab3 needs TASK"),
    ({"TRAIN_ARGS_STYLE": "isaaclab4"}, "'isaaclab3' (Isaac Lab 3.0)"),
])
def test_isaaclab3_refuses_what_train_multigpu_cannot_do(env, needle):
    proc = dry_run(PROC_PER_NODE="1", **env)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "error" in proc.stderr
    assert proc.stdout == ""


def test_isaaclab3_warns_about_a_2x_task_id():
    proc = dry_run(PROC_PER_NODE="1", TRAIN_ARGS_STYLE="isaaclab3", TASK="Isaac-Velocity-Rough-H1-v0")
    assert proc.returncode == 0, proc.stderr
    assert "without the -v0 suffix" in proc.stderr


@pytest.mark.parametrize("env,needle", [
    ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1", "AWS_BATCH_JOB_ID": "j#1"},
     "AWS_BATCH_JOB_MAIN_NODE_INDEX"),
    ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0"},
     "AWS_BATCH_JOB_ID"),
    ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
      "AWS_BATCH_JOB_ID": "j#1"}, "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"),
    ({"AWS_BATCH_JOB_NUM_NODES": "two"}, "AWS_BATCH_JOB_NUM_NODES"),
    ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "2"}, "not below"),
    ({"PROC_PER_NODE": "0"}, "PROC_PER_NODE"),
    ({"TRAIN_ARGS_STYLE": "isaaclab"}, "TASK"),
])
def test_missing_or_bad_variables_fail_clearly(env, needle):
    proc = dry_run(PROC_PER_NODE=env.pop("PROC_PER_NODE", "1"), **env)
    assert proc.returncode == 2
    assert needle in proc.stderr and "error" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("style", ["env", "isaaclab3"])
def test_real_two_node_rendezvous_on_loopback(style, tmp_path):
    port = free_port()
    common = dict(AWS_BATCH_JOB_NUM_NODES="2", AWS_BATCH_JOB_MAIN_NODE_INDEX="0", PROC_PER_NODE="1",
                  RDZV_PORT=str(port), RDZV_JOIN_TIMEOUT="60", TRAIN_ENTRYPOINT="-m sim2real.workloads.selfcheck",
                  EXPECTED_WORLD_SIZE="2", GLOO_SOCKET_IFNAME="lo")
    if style == "isaaclab3":
        # Isaac Lab 3.0's launcher takes no --rdzv_conf: torchrun itself decides which node hosts the store
        common.update(TRAIN_ARGS_STYLE="isaaclab3", TASK="Isaac-Velocity-Rough-H1", RDZV_JOIN_TIMEOUT="600",
                      TRAIN_ENTRYPOINT=fake_train_multigpu(tmp_path / "train_multigpu.py",
                                                           ["-m", "sim2real.workloads.selfcheck"]))
    lines = launch_nodes([
        clean_env(**common, AWS_BATCH_JOB_NODE_INDEX="0", AWS_BATCH_JOB_ID="job-77#0", NODE_IP="127.0.0.1"),
        clean_env(**common, AWS_BATCH_JOB_NODE_INDEX="1", AWS_BATCH_JOB_ID="job-77#1",
                  AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS="127.0.0.1"),
    ], tmp_path)
    assert sorted(line["rank"] for line in lines) == [0, 1]
    for line in lines:
        assert line["selfcheck"] == "ok"
        assert line["world_size"] == 2
        assert line["sum"] == 1  # 0 + 1
    if style == "isaaclab3":  # both nodes went through train_multigpu, each with its own --node_rank
        launched = (tmp_path / "launcher.log").read_text().splitlines()
        assert sorted(a for line in launched for a in line.split() if a.startswith("--node_rank=")) == [
            "--node_rank=0", "--node_rank=1"]
