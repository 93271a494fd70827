"""Fixtures for the workload tests: real torch/skrl/MuJoCo at toy scale, moto for S3."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from tests.workloads.warm_python import run_module

LAUNCHER = REPO_ROOT / "containers" / "rl" / "distributed_run.bash"
VENV_BIN = str(Path(sys.executable).parent)
#: The folder holding the ``sim2real`` package the tests import.
INCLUDE = Path(list(__import__("sim2real").__path__)[0]).resolve().parent


# Stands in for Isaac Lab 3.0's `isaaclab train_multigpu --rl_library skrl`: takes the torchrun-style flags its
# parser takes (source/isaaclab/isaaclab/cli/multigpu.py, v3.0.0), hands them to torchrun and forwards every other
# argument, plus --distributed, to the trainer on each rank. Logs its own arguments to ./launcher.log.
FAKE_TRAIN_MULTIGPU = """
import argparse, subprocess, sys
parser = argparse.ArgumentParser(allow_abbrev=False)
parser.add_argument("--rl_library"); parser.add_argument("--num_gpus", dest="nproc_per_node", default="gpu")
for name in ("nnodes", "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "max_restarts"):
    parser.add_argument(f"--{name}")
args, train_args = parser.parse_known_args()
with open("launcher.log", "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", args.nproc_per_node]
for name in ("nnodes", "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "max_restarts"):
    if getattr(args, name) is not None:
        cmd += [f"--{name}", getattr(args, name)]
sys.exit(subprocess.call(cmd + TRAINER + train_args + ["--distributed"]))
"""


def fake_train_multigpu(path: Path, trainer: list[str]) -> str:
    """Write the ``train_multigpu`` stand-in to ``path``, running ``trainer`` (an argv) on each rank.

    :return: the TRAIN_ENTRYPOINT that runs it (``<python> <path> --rl_library skrl``)."""
    path.write_text(f"TRAINER = {trainer!r}\n" + FAKE_TRAIN_MULTIGPU)
    return f"{sys.executable} {path} --rl_library skrl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_nodes(envs: list[dict[str, str]], cwd: Path, timeout: int = 120) -> list[dict]:
    """Run the launcher once per env in ``envs`` (one node each, concurrently, in ``cwd``); every node must exit 0.

    :return: the JSON lines (``{...}``) the nodes printed on stdout, parsed."""
    import json

    procs = [subprocess.Popen(["bash", str(LAUNCHER)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=cwd, env=env) for env in envs]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    lines = []
    for rc, out, err in results:
        assert rc == 0, err[-3000:]
        lines += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return lines


def clean_env(**extra: str) -> dict[str, str]:
    """The test process env minus anything Batch/torchrun/training-related, plus ``extra``."""
    drop = ("AWS_BATCH_", "TASK", "MAX_ITERATIONS", "NUM_ENVS", "SEED", "OUTPUT_URI", "CHECKPOINT_INTERVAL",
            "TIME_BUDGET_SECONDS", "RUN_KEY", "IMAGE_DIGEST", "PROC_PER_NODE", "RDZV_", "TRAIN_", "WORLD_SIZE",
            "RANK", "LOCAL_RANK", "MASTER_", "PET_", "NODE_IP", "DRY_RUN", "PYTHON", "AWS_ENDPOINT_URL", "SIM2REAL_RESUMED_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(INCLUDE)  # the workload runs the sim2real this test imported (a work tree's, too)
    env.update(extra)
    return env


def run_train(env: dict[str, str], *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """``python -m sim2real.workloads.train *args`` with ``env``, a process of its own (forked from a server that has
    torch imported: :mod:`tests.workloads.warm_python`)."""
    return run_module("sim2real.workloads.train", *args, env=env, timeout=timeout)


def run_evaluate(env: dict[str, str], *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """``python -m sim2real.workloads.evaluate *args`` with ``env``, as :func:`run_train`."""
    return run_module("sim2real.workloads.evaluate", *args, env=env, timeout=timeout)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A toy training run (Reacher-v5, 2 iterations × 64 steps × 4 envs, a checkpoint every iteration): its local
    OUTPUT_URI and its finished process (stdout: the progress lines). Tests only read it."""
    out = tmp_path_factory.mktemp("trained")
    proc = run_train(clean_env(TASK="Reacher-v5", MAX_ITERATIONS="2", NUM_ENVS="4", OUTPUT_URI=str(out),
                               CHECKPOINT_INTERVAL="1", RUN_KEY="toy-run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


@pytest.fixture(scope="session")
def trained_dir(trained_run) -> Path:
    """The local OUTPUT_URI of :func:`trained_run`."""
    return trained_run[0]


@pytest.fixture()
def moto_server():
    """A ThreadedMotoServer on a free port with a bucket ``sim2real-test``; yields its endpoint URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        boto3.client("s3", endpoint_url=url, region_name="us-east-1").create_bucket(Bucket="sim2real-test")
        yield url
    finally:
        server.stop()
