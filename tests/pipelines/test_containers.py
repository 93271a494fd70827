"""containers/groot: pinned bases and GR00T commit, no baked secret, entry points that exist."""

from __future__ import annotations

import importlib
import re
import subprocess

from sim2real.orchestration.pipelines import groot

from tests.paths import REPO_ROOT as REPO
GROOT = REPO / "containers" / "groot"
PINNED_COMMIT = "4b1dca9d88d2a0b9ea5a65aa61c82ff89f5c4f0e"


def _text(name: str) -> str:
    return (GROOT / name).read_text()


def test_base_images_are_pinned_tags():
    for name in ("Dockerfile.processing", "Dockerfile.gr00t"):
        for line in _text(name).splitlines():
            if line.startswith("FROM ") and not line.startswith("FROM groot-base"):
                image = line.split()[1]
                assert ":" in image and not image.endswith(":latest"), line


def test_groot_commit_pinned_and_verified():
    text = _text("Dockerfile.gr00t")
    assert f"ARG GROOT_COMMIT={PINNED_COMMIT}" in text
    assert 'checkout --detach "${GROOT_COMMIT}"' in text
    assert 'rev-parse HEAD)" = "${GROOT_COMMIT}"' in text
    assert {"AS training", "AS smoke-eval"} <= set(re.findall(r"AS [a-z-]+", text))


def test_no_token_in_images_or_code():
    sources = [_text(n) for n in ("Dockerfile.processing", "Dockerfile.gr00t", "train")]
    sources += [p.read_text() for p in (REPO / "include/sim2real/workloads/groot").glob("*.py")]
    sources.append(groot.TEMPLATE_PATH.read_text())
    for text in sources:
        assert not re.search(r"hf_[A-Za-z0-9]{20,}", text)
        assert not re.search(r"^\s*ENV\s+HF_TOKEN", text, re.M)
        assert not re.search(r"ARG\s+HF_TOKEN", text)


def test_requirements_pinned_and_processing_matches_the_tested_lock():
    lock = dict(line.split("==", 1) for line in (REPO / "requirements-pipeline.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name in ("requirements-processing.txt", "requirements-gr00t.txt"):
        for line in _text(name).splitlines():
            if line.strip() and not line.startswith("#"):
                assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[\w.]+", line.strip()), line
    for line in _text("requirements-processing.txt").splitlines():
        if "==" in line:
            pkg, version = line.split("==")
            assert lock[pkg] == version, f"{pkg}: image {version}, tested with {lock[pkg]}"


def test_entry_points_named_by_the_definition_exist():
    template = groot.TEMPLATE_PATH.read_text()
    modules = set(re.findall(r'"-m","(sim2real\.workloads\.groot\.[a-z_]+)"', template))
    assert modules == {"sim2real.workloads.groot.transform_dataset", "sim2real.workloads.groot.smoke_eval"}
    for module in modules | {"sim2real.workloads.groot.finetune_entry"}:
        assert callable(importlib.import_module(module).main)
    train = _text("train")
    assert "exec python3 -m sim2real.workloads.groot.finetune_entry" in train
    assert subprocess.run(["bash", "-n", str(GROOT / "train")]).returncode == 0
    assert (GROOT / "train").stat().st_mode & 0o111
    assert 'COPY containers/groot/train /usr/local/bin/train' in _text("Dockerfile.gr00t")
