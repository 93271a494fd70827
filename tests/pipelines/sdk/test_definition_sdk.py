"""A fresh generation with the pinned SageMaker SDK equals the committed template and the golden copy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from golden_env import GOLDEN_NAME, KWARGS  # noqa: E402

import pytest  # noqa: E402

from sim2real.dev import pipeline_build as build  # noqa: E402
from sim2real.orchestration.pipelines import groot  # noqa: E402


class NetworkUsed(AssertionError):
    pass


@pytest.fixture(scope="module")
def fresh() -> str:
    """One fresh generation with the pinned SDK, with every outbound connection refused: the
    definition must come out without reaching AWS (or anything else)."""
    import socket

    attempts: list = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise NetworkUsed(f"connection attempted to {address}")

    mp = pytest.MonkeyPatch()
    mp.setattr(socket.socket, "connect", refuse)
    mp.setattr(socket.socket, "connect_ex", refuse)
    try:
        text = build.generate()
    finally:
        mp.undo()
    assert attempts == []
    return text


def test_sdk_version_is_the_pinned_one():
    from importlib.metadata import version

    pinned = [line.split("==")[1].strip() for line in (HERE.parents[2] / "requirements-pipeline.txt").read_text().splitlines()
              if line.startswith("sagemaker==")]
    assert pinned and version("sagemaker") == pinned[0]


def test_fresh_generation_equals_committed_template_and_is_deterministic(fresh):
    first = fresh
    assert first == groot.TEMPLATE_PATH.read_text(), (
        "include/sim2real/orchestration/pipelines/groot_pipeline.template.json is stale: run `make pipeline-definition`")
    assert build.generate() == first


def test_fresh_generation_filled_equals_golden_copy(fresh):
    filled = groot.fill_template(json.loads(fresh), **KWARGS)
    golden = json.loads((HERE.parent / GOLDEN_NAME).read_text())
    assert filled == golden


def test_check_mode_detects_a_stale_template(tmp_path, fresh, monkeypatch):
    monkeypatch.setattr(build, "generate", lambda: fresh)
    stale = tmp_path / "t.json"
    stale.write_text(groot.TEMPLATE_PATH.read_text().replace("P30D", "P1D"))
    assert build.main(["--out", str(stale), "--check"]) == 1
    assert build.main(["--out", str(groot.TEMPLATE_PATH), "--check"]) == 0
