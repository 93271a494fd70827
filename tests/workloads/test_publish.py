"""sim2real.workloads.publish: Isaac Lab skrl log dir -> OUTPUT_URI (local and moto S3), resume discovery, and the
launcher's isaaclab style (dry run and a real torchrun with a stand-in for Isaac Lab's train.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from sim2real.contract import schemas
from sim2real.workloads import publish
from tests.workloads.conftest import LAUNCHER, clean_env, fake_train_multigpu

TASK = "Isaac-Velocity-Rough-H1-v0"
ROLLOUTS = 24
NUM_ENVS = 16

# Writes what Isaac Lab's scripts/reinforcement_learning/skrl/train.py writes (params/*.yaml, TensorBoard events in
# the run dir, checkpoints/agent_<step>.pt every `rollouts` steps + best_agent.pt), under <cwd>/logs/skrl/<exp>/.
FAKE_ISAACLAB_TRAIN = textwrap.dedent('''
    import argparse, datetime, os, time
    import torch
    from torch.utils.tensorboard import SummaryWriter

    ROLLOUTS, NUM_ENVS = {rollouts}, {num_envs}
    parser = argparse.ArgumentParser()
    parser.add_argument("--task"); parser.add_argument("--max_iterations", type=int, default=3)
    parser.add_argument("--checkpoint"); parser.add_argument("--num_envs", type=int); parser.add_argument("--seed")
    parser.add_argument("--distributed", action="store_true"); parser.add_argument("--headless", action="store_true")
    args = parser.parse_args()
    with open("calls.log", "a") as fh:
        fh.write(f"max_iterations={{args.max_iterations}} checkpoint={{args.checkpoint}}\\n")
    if args.checkpoint:
        assert "policy" in torch.load(args.checkpoint, weights_only=True)
    root = os.path.abspath(os.path.join("logs", "skrl", "h1_rough"))
    while True:
        run = os.path.join(root, datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S") + "_ppo_torch")
        if not os.path.exists(run):
            break
        time.sleep(0.2)
    os.makedirs(os.path.join(run, "checkpoints")); os.makedirs(os.path.join(run, "params"))
    with open(os.path.join(run, "params", "agent.yaml"), "w") as fh:
        fh.write(f"seed: 42\\nagent:\\n  class: PPO\\n  rollouts: {{ROLLOUTS}}\\n")
    with open(os.path.join(run, "params", "env.yaml"), "w") as fh:
        fh.write(f"scene:\\n  num_envs: {{NUM_ENVS}}\\n  env_spacing: 2.5\\n")
    writer = SummaryWriter(log_dir=run)
    for it in range(1, args.max_iterations + 1):
        step = it * ROLLOUTS
        writer.add_scalar("Reward / Total reward (mean)", float(it), step)
        torch.save({{"policy": {{"w": torch.full((2,), float(it))}}, "value": {{"w": torch.zeros(1)}}}},
                   os.path.join(run, "checkpoints", f"agent_{{step}}.pt"))
    torch.save({{"policy": {{"w": torch.ones(2)}}}}, os.path.join(run, "checkpoints", "best_agent.pt"))
    writer.close()
''').format(rollouts=ROLLOUTS, num_envs=NUM_ENVS)


def skrl_checkpoint(path: Path, marker: float) -> None:
    """A dict shaped like skrl's whole-agent checkpoint (agents/torch/base.py write_checkpoint)."""
    import torch

    policy = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ELU(), torch.nn.Linear(8, 2))
    value = torch.nn.Linear(4, 1)
    with torch.no_grad():
        policy[0].bias.fill_(marker)
    optimizer = torch.optim.Adam(list(policy.parameters()) + list(value.parameters()))
    torch.save({"policy": policy.state_dict(), "value": value.state_dict(), "optimizer": optimizer.state_dict(),
                "observation_preprocessor": {"running_mean": torch.zeros(4), "running_variance": torch.ones(4),
                                             "current_count": torch.ones(())},
                "value_preprocessor": {"running_mean": torch.zeros(1), "running_variance": torch.ones(1),
                                       "current_count": torch.ones(())}}, path)


def make_run(log_dir: Path, name: str, steps: list[int], rewards: dict[int, float] | None = None,
             params: bool = True) -> Path:
    """One Isaac Lab run directory: params/*.yaml, TensorBoard events, checkpoints/agent_<step>.pt, best_agent.pt."""
    from torch.utils.tensorboard import SummaryWriter

    run = log_dir / "h1_rough" / name
    (run / "checkpoints").mkdir(parents=True)
    if params:
        (run / "params").mkdir()
        # Isaac Lab's dump_yaml writes tuples as python tags: the reader must not choke on them
        (run / "params" / "agent.yaml").write_text(
            f"seed: 42\nagent:\n  class: PPO\n  rollouts: {ROLLOUTS}\n  experiment:\n    directory: h1_rough\n")
        (run / "params" / "env.yaml").write_text(
            f"scene:\n  num_envs: {NUM_ENVS}\n  env_spacing: 2.5\nsim:\n  gravity: !!python/tuple\n  - 0.0\n"
            "  - 0.0\n  - -9.81\n")
    if rewards is not None:
        writer = SummaryWriter(log_dir=str(run))
        for step, value in sorted(rewards.items()):
            writer.add_scalar(publish.REWARD_TAG, value, step)
            writer.add_scalar("Loss / Policy loss", 0.1, step)
        writer.close()
    for i, step in enumerate(steps):
        skrl_checkpoint(run / "checkpoints" / f"agent_{step}.pt", marker=float(step))
        os.utime(run / "checkpoints" / f"agent_{step}.pt", (1_700_000_000 + i, 1_700_000_000 + i))
    skrl_checkpoint(run / "checkpoints" / "best_agent.pt", marker=-1.0)
    return run


@pytest.fixture()
def log_dir(tmp_path) -> Path:
    """An older run with higher steps and a newer run (the one to publish) whose highest step is 72."""
    logs = tmp_path / "logs" / "skrl"
    make_run(logs, "2026-01-01_10-00-00_ppo_torch", [240, 480], rewards={240: -50.0, 480: -40.0})
    make_run(logs, "2026-01-02_09-30-00_ppo_torch", [24, 48, 72], rewards={24: -30.0, 48: -20.0, 72: -12.5, 96: -5.0})
    return logs


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_newest_run_then_highest_step_is_chosen(log_dir):
    found = publish.find_newest_checkpoint(str(log_dir))
    assert found is not None
    assert found.step == 72 and found.path.endswith("2026-01-02_09-30-00_ppo_torch/checkpoints/agent_72.pt")
    assert publish.run_params(found.run_dir) == (ROLLOUTS, NUM_ENVS)


def test_publish_to_local_dir_is_complete_and_idempotent(log_dir, tmp_path):
    out = tmp_path / "out" / "checkpoints"
    rc = publish.main(["--log-dir", str(log_dir), "--output-uri", str(out), "--task", TASK, "--run-key", "rk-1",
                       "--image-digest", "sha256:abc"])
    assert rc == 0
    manifests = list((tmp_path / "out").rglob("manifest.json"))
    assert manifests == [out / "manifest.json"]
    manifest = json.loads(manifests[0].read_text())
    source = log_dir / "h1_rough" / "2026-01-02_09-30-00_ppo_torch" / "checkpoints" / "agent_72.pt"
    assert manifest["checkpoint_uri"] == str(out / "agent_000072.pt")
    assert manifest["sha256"] == sha(out / "agent_000072.pt") == sha(source)
    assert (out / "agent_000072.pt.sha256").read_text() == f"{manifest['sha256']}  agent_000072.pt\n"
    assert manifest["iteration"] == 72 // ROLLOUTS and manifest["timesteps"] == 72 * NUM_ENVS
    assert manifest["step"] == 72 and manifest["rollouts"] == ROLLOUTS and manifest["num_envs"] == NUM_ENVS
    assert manifest["mean_reward"] == pytest.approx(-12.5)  # the value at the checkpoint's step, not the later one
    assert manifest["trainer"] == "isaaclab-skrl" and manifest["task"] == TASK and manifest["run_key"] == "rk-1"
    assert manifest["image_digest"] == "sha256:abc" and manifest["resumed_from"] is None
    assert manifest["schema_version"] == 1 and manifest["created_at"].endswith("Z")
    assert {"torch", "skrl", "gymnasium", "mujoco"} <= set(manifest["library_versions"])
    assert manifest["tensorboard_uri"] == str(out / "tensorboard") + "/"
    assert schemas.errors("checkpoint_manifest", manifest) == []
    events = list((out / "tensorboard" / "2026-01-02_09-30-00_ppo_torch").glob("events.out.tfevents.*"))
    assert len(events) == 1
    assert sorted(p.name for p in out.iterdir()) == ["agent_000072.pt", "agent_000072.pt.sha256", "manifest.json",
                                                     "tensorboard"]
    # the published checkpoint is a byte copy skrl's agent.load() reads back
    import torch

    assert set(torch.load(out / "agent_000072.pt", weights_only=True)) >= {"policy", "value", "optimizer"}

    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}
    assert publish.main(["--log-dir", str(log_dir), "--output-uri", str(out), "--task", TASK]) == 0
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()
             if "tensorboard" not in p.parts}
    assert {p: v for p, v in before.items() if "tensorboard" not in p.parts} == after


def test_publish_to_moto_s3(log_dir, moto_server, monkeypatch):
    import boto3

    for key, value in {"AWS_ENDPOINT_URL": moto_server, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    uri = "s3://sim2real-test/runs/rk-2/checkpoints/"
    manifest = publish.publish(log_dir=str(log_dir), output_uri=uri, task=TASK, run_key="rk-2")
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")

    def listing():
        objs = s3.list_objects_v2(Bucket="sim2real-test", Prefix="runs/rk-2/")["Contents"]
        return {o["Key"]: o["ETag"] for o in objs}

    keys = listing()
    assert [k for k in keys if k.endswith("manifest.json")] == ["runs/rk-2/checkpoints/manifest.json"]
    assert manifest["checkpoint_uri"] == uri + "agent_000072.pt"
    body = s3.get_object(Bucket="sim2real-test", Key="runs/rk-2/checkpoints/agent_000072.pt")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == manifest["sha256"]
    sidecar = s3.get_object(Bucket="sim2real-test", Key="runs/rk-2/checkpoints/agent_000072.pt.sha256")["Body"].read()
    assert sidecar.decode().split()[0] == manifest["sha256"]
    assert any(k.startswith("runs/rk-2/checkpoints/tensorboard/2026-01-02_09-30-00_ppo_torch/events.out.tfevents")
               for k in keys)
    stored = json.loads(s3.get_object(Bucket="sim2real-test", Key="runs/rk-2/checkpoints/manifest.json")["Body"].read())
    assert stored == manifest

    again = publish.publish(log_dir=str(log_dir), output_uri=uri, task=TASK, run_key="rk-2")
    assert again == manifest and listing() == keys
    # and the project's resume discovery sees it as the newest complete checkpoint
    from sim2real.workloads.checkpoints import find_latest_complete_checkpoint

    assert find_latest_complete_checkpoint(uri) == (72, uri + "agent_000072.pt", manifest["sha256"])


def test_resume_discovery_returns_newest_complete_checkpoint(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    for step in (24, 48, 60, 72):
        skrl_checkpoint(out / publish.checkpoint_name(step), marker=float(step))
    for step in (24, 48):
        digest = sha(out / publish.checkpoint_name(step))
        (out / f"{publish.checkpoint_name(step)}.sha256").write_text(f"{digest}  {publish.checkpoint_name(step)}\n")
    (out / "agent_000060.pt.sha256").write_text("0" * 64 + "  agent_000060.pt\n")  # corrupt: skipped
    # agent_000072.pt has no sidecar: an interrupted upload, skipped
    (out / "manifest.json").write_text(json.dumps({"task": TASK, "rollouts": ROLLOUTS}))

    dest = tmp_path / "resume"
    assert publish.main(["--find-resume", str(dest), "--output-uri", str(out), "--task", TASK]) == 0
    values = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    values = {k: shlex.split(v)[0] if v else "" for k, v in values.items()}
    assert values["RESUME_URI"] == str(out / "agent_000048.pt")
    assert values["RESUME_STEP"] == "48" and values["RESUME_ITERATION"] == "2"
    assert sha(Path(values["RESUME_PATH"])) == values["RESUME_SHA256"] == sha(out / "agent_000048.pt")

    assert publish.main(["--find-resume", str(dest), "--output-uri", str(out), "--task", "Other-v0"]) == 2
    empty = tmp_path / "empty"
    assert publish.main(["--find-resume", str(dest), "--output-uri", str(empty), "--task", TASK]) == 0
    assert "RESUME_PATH=''" in capsys.readouterr().out


def test_resume_discovery_takes_a_seeded_rounds_iteration_when_no_manifest_gives_it(tmp_path, capsys, monkeypatch):
    # a retraining round's OUTPUT_URI: prepare_run copied agent_<n>.pt + sidecar, no manifest.json
    out = tmp_path / "out"
    out.mkdir()
    for step in (72, 96):
        skrl_checkpoint(out / publish.checkpoint_name(step), marker=float(step))
    seeded = out / publish.checkpoint_name(72)
    (out / "agent_000072.pt.sha256").write_text(f"{sha(seeded)}  agent_000072.pt\n")
    dest = tmp_path / "resume"
    args = ["--find-resume", str(dest), "--output-uri", str(out), "--task", TASK]

    def values() -> dict[str, str]:
        pairs = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
        return {k: shlex.split(v)[0] if v else "" for k, v in pairs.items()}

    assert publish.main(args) == 0 and values()["RESUME_ITERATION"] == ""  # nothing says which iteration
    monkeypatch.setenv("SIM2REAL_RESUMED_CHECKPOINT_URI", str(seeded))
    monkeypatch.setenv("SIM2REAL_RESUMED_ITERATION", "3")
    found = values() if publish.main(args) == 0 else {}
    assert found["RESUME_URI"] == str(seeded) and found["RESUME_ITERATION"] == "3"
    # a manifest of an earlier attempt of this round says otherwise: it wins
    (out / "manifest.json").write_text(json.dumps({"task": TASK, "rollouts": 36}))
    assert publish.main(args) == 0 and values()["RESUME_ITERATION"] == "2"
    (out / "manifest.json").unlink()
    # a newer complete checkpoint than the seeded one: its iteration is not the seeded one's
    (out / "agent_000096.pt.sha256").write_text(f"{sha(out / 'agent_000096.pt')}  agent_000096.pt\n")
    found = values() if publish.main(args) == 0 else {}
    assert found["RESUME_STEP"] == "96" and found["RESUME_ITERATION"] == ""
    monkeypatch.setenv("SIM2REAL_RESUMED_ITERATION", "three")
    assert publish.main(args) == 2
    assert "SIM2REAL_RESUMED_ITERATION='three' is not a non-negative integer" in capsys.readouterr().err


def test_resumed_run_continues_step_numbering(tmp_path):
    logs = tmp_path / "logs"
    make_run(logs, "2026-01-03_00-00-00_ppo_torch", [24, 48], rewards=None, params=False)
    out = tmp_path / "out"
    resumed = str(out / "agent_000072.pt")
    manifest = publish.publish(log_dir=str(logs), output_uri=str(out), task=TASK, resumed_from=resumed,
                               max_iterations=200)
    assert manifest["checkpoint_uri"] == str(out / "agent_000120.pt") and manifest["step"] == 120
    assert manifest["resumed_from"] == resumed
    # no params/*.yaml and no events: iteration/timesteps fall back to the step, reward is unknown
    assert manifest["iteration"] == 120 and manifest["timesteps"] == 120 and manifest["rollouts"] is None
    assert manifest["mean_reward"] is None and manifest["completed"] is False
    assert schemas.errors("checkpoint_manifest", manifest) == []


def test_no_checkpoint_other_rank_and_bad_input(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    (logs / "h1_rough" / "2026-01-01_00-00-00_ppo_torch" / "checkpoints").mkdir(parents=True)
    out = tmp_path / "out"
    args = ["--log-dir", str(logs), "--output-uri", str(out), "--task", TASK]
    assert publish.main(args) == 1
    assert publish.main([*args, "--if-present"]) == 0
    assert publish.main([*args, "--if-present", "--resumed-from", str(out / "agent_000024.pt")]) == 0
    assert not out.exists()
    assert publish.main(["--log-dir", str(tmp_path / "nope"), "--output-uri", str(out), "--task", TASK]) == 2
    assert publish.main(["--log-dir", str(logs), "--task", TASK, "--output-uri", ""]) == 2
    make_run(logs, "2026-01-02_00-00-00_ppo_torch", [24])
    monkeypatch.setenv("RANK", "1")
    assert publish.main(args) == 0 and not out.exists()
    monkeypatch.setenv("RANK", "0")
    assert publish.main(args) == 0 and (out / "manifest.json").exists()
    assert publish.main(["--log-dir", str(logs), "--output-uri", str(out), "--task", "Other-v0"]) == 2


def test_main_node_waits_for_the_manifest_of_the_rank0_node(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    out = tmp_path / "out"
    args = ["--log-dir", str(logs), "--output-uri", str(out), "--task", TASK, "--since", "0"]
    assert publish.main([*args, "--wait-for-manifest", "0"]) == 1  # nothing appeared
    other = tmp_path / "other"
    make_run(other, "2026-01-02_00-00-00_ppo_torch", [24])
    publish.publish(log_dir=str(other), output_uri=str(out), task=TASK)  # "the other node"
    assert publish.main([*args, "--wait-for-manifest", "0"]) == 0


# --- the launcher, TRAIN_ARGS_STYLE=isaaclab ---

def launcher_env(**extra: str) -> dict[str, str]:
    return clean_env(PROC_PER_NODE="1", TRAIN_ARGS_STYLE="isaaclab", TASK=TASK, PYTHON=sys.executable, **extra)


def test_launcher_dry_run_shows_resume_and_publish_steps(tmp_path):
    proc = subprocess.run(["bash", str(LAUNCHER), "--dry-run"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=30, env=launcher_env(MAX_ITERATIONS="5", OUTPUT_URI="s3://b/runs/k/checkpoints/",
                                                       TRAIN_ENTRYPOINT="/ws/skrl/train.py --distributed --headless",
                                                       RUN_KEY="k"))
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.strip())
    assert argv[argv.index("/ws/skrl/train.py"):] == ["/ws/skrl/train.py", "--distributed", "--headless", "--task", TASK,
                                                      "--max_iterations", "5"]
    steps = [line for line in proc.stderr.splitlines() if "dry-run:" in line]
    assert len(steps) == 2
    assert "sim2real.workloads.publish --find-resume" in steps[0] and "--checkpoint" in steps[0]
    publish_argv = shlex.split(steps[1].split("after torchrun exits 0: ", 1)[1])
    assert publish_argv[:3] == [sys.executable, "-m", "sim2real.workloads.publish"]
    assert publish_argv[publish_argv.index("--log-dir") + 1] == str(tmp_path / "logs" / "skrl")
    assert publish_argv[publish_argv.index("--output-uri") + 1] == "s3://b/runs/k/checkpoints/"
    assert "--if-present" not in publish_argv  # single node: a missing checkpoint is an error
    # nothing was downloaded or written in a dry run
    assert list(tmp_path.iterdir()) == []


def stand_in_launches(tmp_path: Path, run_key: str, entrypoint: Callable[[Path], str], **extra: str):
    """The stand-in skrl trainer written under ``tmp_path``, and ``launch(max_iterations)``: the launcher run in
    ``tmp_path/work`` with ``TRAIN_ENTRYPOINT=entrypoint(<trainer path>)`` into OUTPUT_URI ``.../<run_key>/checkpoints``.
    Returns ``(work, out, launch)``."""
    script = tmp_path / "fake_isaaclab_train.py"
    script.write_text(FAKE_ISAACLAB_TRAIN)
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "efs" / "runs" / run_key / "checkpoints"
    env = {**launcher_env(OUTPUT_URI=str(out), RUN_KEY=run_key, TRAIN_ENTRYPOINT=entrypoint(script),
                          RESUME_DIR=str(tmp_path / "resume")), **extra}

    def launch(max_iterations: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(LAUNCHER)], cwd=work, capture_output=True, text=True, timeout=180,
                              env={**env, "MAX_ITERATIONS": max_iterations, "RDZV_PORT": str(_port())})

    return work, out, launch


def test_launcher_runs_stand_in_isaaclab_trains_publishes_and_resumes(tmp_path):
    work, out, launch = stand_in_launches(tmp_path, "rk", lambda script: f"{script} --headless")
    first = launch("3")
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["checkpoint_uri"] == str(out / "agent_000072.pt") and manifest["iteration"] == 3
    assert manifest["sha256"] == sha(out / "agent_000072.pt") and manifest["mean_reward"] == pytest.approx(3.0)
    assert manifest["resumed_from"] is None and manifest["completed"] is True
    assert (work / "calls.log").read_text().splitlines() == ["max_iterations=3 checkpoint=None"]

    # a longer run into the same OUTPUT_URI resumes: --checkpoint, only the remaining 2 iterations, steps continue
    second = launch("5")
    assert second.returncode == 0, second.stderr[-3000:]
    calls = (work / "calls.log").read_text().splitlines()
    assert calls[1] == f"max_iterations=2 checkpoint={tmp_path / 'resume' / 'agent_000072.pt'}"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["checkpoint_uri"] == str(out / "agent_000120.pt") and manifest["iteration"] == 5
    assert manifest["resumed_from"] == str(out / "agent_000072.pt") and manifest["step"] == 120
    assert len(list(out.rglob("manifest.json"))) == 1

    # target already reached: no training, manifest untouched
    before = (out / "manifest.json").read_bytes()
    third = launch("5")
    assert third.returncode == 0, third.stderr[-3000:]
    assert len((work / "calls.log").read_text().splitlines()) == 2
    assert (out / "manifest.json").read_bytes() == before


def test_launcher_trains_only_the_rounds_iterations_from_a_seeded_checkpoint(tmp_path):
    # round 2: OUTPUT_URI holds the copy of round 1's checkpoint (iteration 3, step 72) and no manifest;
    # MAX_ITERATIONS = 3 + round_iterations 2
    script = tmp_path / "fake_isaaclab_train.py"
    script.write_text(FAKE_ISAACLAB_TRAIN)
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "efs" / "runs" / "rk2" / "checkpoints"
    out.mkdir(parents=True)
    seeded = out / "agent_000072.pt"
    skrl_checkpoint(seeded, marker=3.0)
    (out / "agent_000072.pt.sha256").write_text(f"{sha(seeded)}  agent_000072.pt\n")
    proc = subprocess.run(["bash", str(LAUNCHER)], cwd=work, capture_output=True, text=True, timeout=180,
                          env=launcher_env(OUTPUT_URI=str(out), RUN_KEY="rk2", TRAIN_ENTRYPOINT=f"{script} --headless",
                                           RESUME_DIR=str(tmp_path / "resume"), MAX_ITERATIONS="5",
                                           RDZV_PORT=str(_port()), SIM2REAL_RESUMED_CHECKPOINT_URI=str(seeded),
                                           SIM2REAL_RESUMED_ITERATION="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (work / "calls.log").read_text().splitlines() == [
        f"max_iterations=2 checkpoint={tmp_path / 'resume' / 'agent_000072.pt'}"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["checkpoint_uri"] == str(out / "agent_000120.pt") and manifest["iteration"] == 5
    assert manifest["resumed_from"] == str(seeded) and manifest["completed"] is True


def test_launcher_isaaclab3_trains_through_train_multigpu_publishes_and_resumes(tmp_path):
    multigpu = tmp_path / "fake_train_multigpu.py"

    def entrypoint(train: Path) -> str:
        return fake_train_multigpu(multigpu, [str(train)])

    work, out, launch = stand_in_launches(tmp_path, "rk3", entrypoint, TRAIN_ARGS_STYLE="isaaclab3")
    first = launch("3")
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["checkpoint_uri"] == str(out / "agent_000072.pt") and manifest["iteration"] == 3
    assert manifest["resumed_from"] is None and manifest["completed"] is True

    second = launch("5")  # resumes from the newest complete checkpoint: --checkpoint, the 2 remaining iterations
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = tmp_path / "resume" / "agent_000072.pt"
    assert (work / "calls.log").read_text().splitlines() == ["max_iterations=3 checkpoint=None",
                                                             f"max_iterations=2 checkpoint={resumed}"]
    launched = [shlex.split(line) for line in (work / "launcher.log").read_text().splitlines()]
    assert launched[1] == ["--rl_library", "skrl", "--num_gpus=1", "--nnodes=1", "--node_rank=0",
                           "--rdzv_backend=c10d", launched[1][6], "--rdzv_id=sim2real-local", "--max_restarts=0",
                           "--task", TASK, "--max_iterations", "2", "--checkpoint", str(resumed)]
    assert launched[1][6].startswith("--rdzv_endpoint=127.0.0.1:")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["checkpoint_uri"] == str(out / "agent_000120.pt") and manifest["iteration"] == 5
    assert manifest["resumed_from"] == str(out / "agent_000072.pt") and manifest["step"] == 120


def test_launcher_propagates_training_failure_and_publishes_nothing(tmp_path):
    script = tmp_path / "failing_train.py"
    script.write_text("import sys\nsys.exit(3)\n")
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(LAUNCHER)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=launcher_env(OUTPUT_URI=str(out), MAX_ITERATIONS="1", TRAIN_ENTRYPOINT=str(script),
                                           RDZV_PORT=str(_port()), RESUME_DIR=str(tmp_path / "resume")))
    assert proc.returncode != 0
    assert "not publishing" in proc.stderr
    assert not (out / "manifest.json").exists()


def _port() -> int:
    from tests.workloads.conftest import free_port

    return free_port()
