"""The trainer at toy scale: local and S3 (moto) outputs, manifest, sidecars, resume, time budget, bad input."""

from __future__ import annotations

import json
import re
import shutil

import boto3
import pytest

from sim2real.contract import schemas
from sim2real.contract import storage
from sim2real.workloads.policy import deterministic_policy, load_checkpoint
from sim2real.workloads.checkpoints import find_latest_complete_checkpoint
from sim2real.workloads.train_args import parse_args, UsageError
from tests.workloads.conftest import clean_env, run_train

PROGRESS = re.compile(
    r"^\[sim2real\] iteration=(\d+)/(\d+) timesteps=(\d+) mean_reward=(\S+) elapsed_s=([\d.]+) eta_s=([\d.]+)$")


def test_local_run_writes_checkpoints_sidecars_tensorboard_and_one_manifest(trained_dir):
    names = sorted(p.name for p in trained_dir.iterdir())
    assert names.count("manifest.json") == 1
    assert {"agent_000001.pt", "agent_000001.pt.sha256", "agent_000002.pt", "agent_000002.pt.sha256"} <= set(names)
    assert list((trained_dir / "tensorboard").glob("events.out.tfevents.*"))
    manifest = json.loads((trained_dir / "manifest.json").read_text())
    assert manifest["schema_version"] == 1 and manifest["task"] == "Reacher-v5" and manifest["run_key"] == "toy-run"
    assert manifest["iteration"] == 2
    assert manifest["timesteps"] == 2 * 64 * 4  # iterations x rollouts x num_envs
    assert manifest["checkpoint_uri"] == str(trained_dir / "agent_000002.pt")
    assert manifest["sha256"] == storage.sha256_file(manifest["checkpoint_uri"])
    assert manifest["resumed_from"] is None and manifest["image_digest"] is None
    assert set(manifest["library_versions"]) == {"torch", "skrl", "gymnasium", "mujoco"}
    assert manifest["created_at"].endswith("Z")
    assert schemas.errors("checkpoint_manifest", manifest) == []
    ckpt = load_checkpoint(manifest["checkpoint_uri"])
    assert ckpt["sim2real"]["iteration"] == 2 and ckpt["sim2real"]["obs_dim"] == 10
    policy = deterministic_policy(ckpt)
    import torch

    assert policy(torch.zeros(3, 10)).shape == (3, 2)


def test_progress_lines_are_machine_parsable(trained_run):
    _, proc = trained_run  # 2 iterations x 64 rollouts x 4 envs
    matches = [PROGRESS.match(line) for line in proc.stdout.splitlines() if line.startswith("[sim2real] iteration=")]
    assert all(matches)
    assert [m.group(1, 2, 3) for m in matches] == [("1", "2", "256"), ("2", "2", "512")]
    float(matches[-1].group(4))  # a number (or nan)


def test_cli_flags_override_env(tmp_path):
    proc = run_train(clean_env(TASK="InvertedPendulum-v5", MAX_ITERATIONS="9", OUTPUT_URI="/nonexistent/x"),
                     "--task", "Reacher-v5", "--max-iterations", "1", "--num-envs", "2",
                     "--output-uri", str(tmp_path), "--run-key", "flag-key", "--image-digest", "sha256:abc")
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (manifest["task"], manifest["iteration"], manifest["run_key"], manifest["image_digest"]) == (
        "Reacher-v5", 1, "flag-key", "sha256:abc")


def test_resume_continues_from_latest_complete_checkpoint(trained_dir, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(trained_dir, out)  # the first run: 2 iterations, a checkpoint each (the shared toy run)
    env = dict(TASK="Reacher-v5", NUM_ENVS="4", OUTPUT_URI=str(out), CHECKPOINT_INTERVAL="1", RUN_KEY="toy-run")
    # an incomplete checkpoint (no sidecar) with a higher number must be ignored
    (out / "agent_000009.pt").write_bytes(b"partial upload")
    second = run_train(clean_env(**env, MAX_ITERATIONS="4"))
    assert second.returncode == 0, second.stderr[-2000:]
    assert "iteration=3/4" in second.stdout and "iteration=1/4" not in second.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resumed_from"] == str(out / "agent_000002.pt")
    assert manifest["iteration"] == 4 and manifest["timesteps"] == 4 * 64 * 4
    assert schemas.errors("checkpoint_manifest", manifest) == []
    assert load_checkpoint(manifest["checkpoint_uri"])["sim2real"]["iteration"] == 4


def test_corrupt_checkpoint_is_skipped_on_resume(tmp_path):
    storage.write_bytes(str(tmp_path / "agent_000001.pt"), b"good")
    storage.write_bytes(str(tmp_path / "agent_000001.pt.sha256"), (storage.sha256_file(str(tmp_path / "agent_000001.pt")) + "\n").encode())
    storage.write_bytes(str(tmp_path / "agent_000002.pt"), b"truncated")
    storage.write_bytes(str(tmp_path / "agent_000002.pt.sha256"), b"0" * 64 + b"\n")
    it, uri, _ = find_latest_complete_checkpoint(str(tmp_path))
    assert it == 1 and uri.endswith("agent_000001.pt")


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    """10000 iterations with a 2 s time budget (far too few seconds for them): the OUTPUT_URI and the process."""
    out = tmp_path_factory.mktemp("budget")
    proc = run_train(clean_env(TASK="Reacher-v5", MAX_ITERATIONS="10000", NUM_ENVS="2", OUTPUT_URI=str(out),
                               CHECKPOINT_INTERVAL="10000", TIME_BUDGET_SECONDS="2"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, proc


def test_time_budget_stops_early_and_still_writes_checkpoint_and_manifest(budget_run):
    tmp_path, proc = budget_run
    assert "time budget" in proc.stdout
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert 1 <= manifest["iteration"] < 10000 and manifest["completed"] is False
    assert (tmp_path / f"agent_{manifest['iteration']:06d}.pt").exists()
    assert manifest["sha256"] == storage.sha256_file(manifest["checkpoint_uri"])


def test_s3_output_through_moto_server(moto_server, monkeypatch):
    out = "s3://sim2real-test/runs/k1/checkpoints/"
    proc = run_train(clean_env(TASK="Reacher-v5", MAX_ITERATIONS="2", NUM_ENVS="2", OUTPUT_URI=out,
                               CHECKPOINT_INTERVAL="1", RUN_KEY="k1", AWS_ENDPOINT_URL=moto_server))
    assert proc.returncode == 0, proc.stderr[-3000:]
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket="sim2real-test")["Contents"]]
    assert keys.count("runs/k1/checkpoints/manifest.json") == 1
    assert "runs/k1/checkpoints/agent_000002.pt" in keys and "runs/k1/checkpoints/agent_000002.pt.sha256" in keys
    assert any(k.startswith("runs/k1/checkpoints/tensorboard/events.out.tfevents.") for k in keys)
    manifest = json.loads(storage.read_bytes(out + "manifest.json"))
    assert manifest["checkpoint_uri"] == "s3://sim2real-test/runs/k1/checkpoints/agent_000002.pt"
    assert manifest["tensorboard_uri"] == "s3://sim2real-test/runs/k1/checkpoints/tensorboard/"
    assert storage.sha256_uri(manifest["checkpoint_uri"]) == manifest["sha256"]
    assert schemas.errors("checkpoint_manifest", manifest) == []
    assert load_checkpoint(manifest["checkpoint_uri"])["sim2real"]["task"] == "Reacher-v5"


def test_rank_nonzero_writes_nothing(tmp_path):
    # RANK=1 with WORLD_SIZE=1 is not a real setup, but shows the writer gate without NCCL
    proc = run_train(clean_env(TASK="Reacher-v5", MAX_ITERATIONS="1", NUM_ENVS="2", OUTPUT_URI=str(tmp_path / "o"),
                               RANK="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_cpu_refuses_world_size_above_one(tmp_path):
    proc = run_train(clean_env(TASK="Reacher-v5", MAX_ITERATIONS="1", OUTPUT_URI=str(tmp_path), WORLD_SIZE="2",
                               RANK="0", LOCAL_RANK="0"), timeout=60)
    assert proc.returncode == 2
    assert "WORLD_SIZE=2" in proc.stderr and "NCCL" in proc.stderr


@pytest.mark.parametrize("env,needle", [
    ({"MAX_ITERATIONS": "1", "OUTPUT_URI": "/tmp/x"}, "TASK"),
    ({"TASK": "Reacher-v5", "OUTPUT_URI": "/tmp/x"}, "MAX_ITERATIONS"),
    ({"TASK": "Reacher-v5", "MAX_ITERATIONS": "1"}, "OUTPUT_URI"),
    ({"TASK": "Reacher-v5", "MAX_ITERATIONS": "ten", "OUTPUT_URI": "/tmp/x"}, "not an integer"),
    ({"TASK": "Nope-v0", "MAX_ITERATIONS": "1", "OUTPUT_URI": "/tmp/x"}, "known tasks"),
    ({"TASK": "Isaac-Velocity-Rough-H1-v0", "MAX_ITERATIONS": "1", "OUTPUT_URI": "/tmp/x"}, "Isaac Lab image"),
    ({"TASK": "Reacher-v5", "MAX_ITERATIONS": "0", "OUTPUT_URI": "/tmp/x"}, ">= 1"),
])
def test_bad_input_is_a_clear_usage_error(env, needle, monkeypatch):
    for key in ("TASK", "MAX_ITERATIONS", "OUTPUT_URI"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(UsageError, match=re.escape(needle)):
        parse_args([])


def test_progress_eta_respects_the_time_budget(budget_run):
    # 10000 iterations would take far longer than the 2 s budget: every ETA stays within the budget left
    _, proc = budget_run
    lines = [m.groups() for m in map(PROGRESS.match, proc.stdout.splitlines()) if m]
    assert lines
    for *_, elapsed, eta in lines:
        assert float(eta) <= max(2.0 - float(elapsed), 0.0) + 0.05, (elapsed, eta)


PROBE = """
import os, sys, threading, time
print(sys.argv[1:], os.environ.get("PROBE"), "HOME" in os.environ, sys.path[0] == os.getcwd(), sys.stdin.read())
if sys.argv[1] == "raise":
    raise RuntimeError("probe failed")
if sys.argv[1] == "thread":  # a non-daemon thread is joined before the process ends, as at a normal exit
    threading.Thread(target=lambda: (time.sleep(0.2), print("joined", file=sys.stderr))).start()
if sys.argv[1] == "hang":
    time.sleep(60)
sys.exit(int(sys.argv[2]))
"""


def test_the_runs_are_processes_of_their_own_as_python_m(tmp_path):
    """What the tests' ``run_train``/``run_evaluate`` fork from their warm server behaves as ``python -m``: argv, the
    given environment only, the working directory first on sys.path, stdin empty, the exit code, a traceback and
    code 1 on an exception, non-daemon threads joined, killed past its timeout."""
    import subprocess

    from tests.workloads.warm_python import run_module

    (tmp_path / "probe_mod.py").write_text(PROBE)
    env = {"PROBE": "x", "PATH": "/usr/bin:/bin"}
    ok = run_module("probe_mod", "exit", "3", env=env, cwd=str(tmp_path))
    assert (ok.returncode, ok.stdout, ok.stderr) == (3, "['exit', '3'] x False True \n", "")
    failed = run_module("probe_mod", "raise", env=env, cwd=str(tmp_path))
    assert failed.returncode == 1 and "RuntimeError: probe failed" in failed.stderr and "Traceback" in failed.stderr
    threaded = run_module("probe_mod", "thread", "0", env=env, cwd=str(tmp_path))
    assert threaded.returncode == 0 and threaded.stderr == "joined\n"
    with pytest.raises(subprocess.TimeoutExpired):
        run_module("probe_mod", "hang", env=env, cwd=str(tmp_path), timeout=1)
    assert run_module("probe_mod", "exit", "0", env=env, cwd=str(tmp_path)).returncode == 0  # the server goes on
