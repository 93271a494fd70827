"""Structure lint of the Dockerfiles (no Docker engine here) and the launcher's shell hygiene."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.workloads.conftest import LAUNCHER, REPO_ROOT

#: Where both training images install the launcher (their CMD).
IMAGE_LAUNCHER = "/usr/local/bin/distributed_run.bash"

DOCKERFILES = {
    "rl": REPO_ROOT / "containers" / "rl" / "Dockerfile",
    "isaaclab": REPO_ROOT / "containers" / "isaaclab" / "Dockerfile",
}


def test_the_launcher_path_is_the_same_in_the_job_definition_and_hyperpods_default():
    from sim2real.orchestration.config import HYPERPOD_DEFAULTS

    assert HYPERPOD_DEFAULTS["launcher"] == IMAGE_LAUNCHER
    batch_stack = (REPO_ROOT / "infra" / "sim2real_infra" / "batch.py").read_text()
    assert f'LAUNCHER = "{IMAGE_LAUNCHER}"' in batch_stack and "command=[LAUNCHER]" in batch_stack


def instructions(path):
    text = re.sub(r"\\\n", " ", path.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def arg_defaults(lines: list[str]) -> dict[str, str]:
    """``ARG NAME=default`` lines (quotes stripped): what ``${NAME}`` is in a build without --build-arg."""
    pairs = [line.split(None, 1)[1].split("=", 1) for line in lines if line.upper().startswith("ARG ") and "=" in line]
    return {name: value.strip('"') for name, value in pairs}


def resolve(word: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], word)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_structure(name):
    lines = instructions(DOCKERFILES[name])
    args = arg_defaults(lines)
    froms = [resolve(line.split()[1], args) for line in lines if line.upper().startswith("FROM ")]
    assert froms, "no FROM"
    for image in froms:
        assert ":" in image.split("/")[-1], f"unpinned base image {image}"
        assert not image.endswith(":latest"), f"'latest' base image {image}"
    copies = [line for line in lines if line.upper().startswith("COPY ")]
    assert any("containers/rl/distributed_run.bash" in line for line in copies), "launcher not copied"
    # The launcher is the image's CMD, at the path the Batch job definition's command and HyperPod's srun
    # name: no ENTRYPOINT, which would receive that command as arguments and run the launcher twice over
    # (`ENTRYPOINT []` only clears one a base image set).
    assert [line for line in lines if line.upper().startswith("ENTRYPOINT ")] in ([], ["ENTRYPOINT []"])
    assert [line for line in lines if line.upper().startswith("CMD ")] == [f'CMD ["{IMAGE_LAUNCHER}"]']
    assert f"COPY containers/rl/distributed_run.bash {IMAGE_LAUNCHER}" in lines


def test_rl_image_installs_pinned_workload_requirements():
    text = DOCKERFILES["rl"].read_text()
    assert "requirements-workload.txt" in text and "constraints.txt" in text
    assert "FROM python:3.11" in text


def test_isaaclab_image_settings():
    text = DOCKERFILES["isaaclab"].read_text()
    lines = instructions(DOCKERFILES["isaaclab"])
    args = arg_defaults(lines)
    # Isaac Lab 3.0 by default: its train_multigpu launcher, the launcher's isaaclab3 style, a 3.0 task id
    assert "FROM ${ISAACLAB_IMAGE}" in lines and args["ISAACLAB_IMAGE"] == "nvcr.io/nvidia/isaac-lab:3.0.0"
    assert args["TRAIN_ARGS_STYLE"] == "isaaclab3" and args["TASK"] == "Isaac-Velocity-Rough-H1"
    assert args["TRAIN_ENTRYPOINT"] == "/isaac-sim/python.sh -m isaaclab train_multigpu --rl_library skrl --viz none"
    for needle in ("ACCEPT_EULA=Y", "PRIVACY_CONSENT=Y", "OMNI_KIT_ALLOW_ROOT=1", "TRAIN_ARGS_STYLE=${TRAIN_ARGS_STYLE}",
                   'TRAIN_ENTRYPOINT="${TRAIN_ENTRYPOINT}"', "TASK=${TASK}", "PYTHON=/isaac-sim/python.sh"):
        assert needle in text
    # 2.x stays one documented build away (the build args that the launcher's isaaclab style needs)
    for needle in ("--build-arg ISAACLAB_IMAGE=nvcr.io/nvidia/isaac-lab:2.1.0", "--build-arg TRAIN_ARGS_STYLE=isaaclab ",
                   "--build-arg TASK=Isaac-Velocity-Rough-H1-v0",
                   "scripts/reinforcement_learning/skrl/train.py --distributed --headless"):
        assert needle in text


def test_isaaclab_image_clears_the_isaac_sim_entrypoint():
    # Isaac Sim's image (the Isaac Lab image's base) sets ENTRYPOINT ["/isaac-sim/runheadless.sh"]
    # (isaac-sim/IsaacSim tools/docker/Dockerfile): the Batch job's command would become Kit's arguments.
    lines = instructions(DOCKERFILES["isaaclab"])
    entrypoints = [i for i, line in enumerate(lines) if line.upper().startswith("ENTRYPOINT ")]
    assert [lines[i] for i in entrypoints] == ["ENTRYPOINT []"]
    last_from = max(i for i, line in enumerate(lines) if line.upper().startswith("FROM "))
    assert entrypoints[0] > last_from  # in the final stage


def test_launcher_shell_hygiene():
    text = LAUNCHER.read_text()
    assert text.startswith("#!/usr/bin/env bash")
    assert "set -euo pipefail" in text
    assert 'exec "${CMD[@]}"' in text
    assert subprocess.run(["bash", "-n", str(LAUNCHER)]).returncode == 0


def test_gpu_check_script_keeps_multicast_off_and_parses():
    script = LAUNCHER.parent / "gpu_check.bash"
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash")
    assert "export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1" in text
    assert "DIGEST_INTERVAL" in text and "params_match=true" in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
