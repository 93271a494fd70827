"""One provisioned Sandbox for the sandbox tests (moto state is per process: one at a time)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sim2real.dev.sandbox import Sandbox

from sandbox_helpers import SCRIPTS, wait_until  # noqa: F401 - re-exported for fixtures


# One sandbox per test module, stopped after it: moto keeps its state and the sandbox's patches per
# process, and a sandbox kept for the session leaked them into later files' own moto servers
# (tests/orchestration/operators/test_ssm.py failed when run after this package, as parallel workers may order files).
@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(step_seconds=0.05, batch_launcher=SCRIPTS / "launcher_ok.sh") as sb:
        sb.provision()
        yield sb


@pytest.fixture
def sb(sandbox: Sandbox) -> Iterator[Sandbox]:
    """The shared sandbox with faults and the Batch launcher reset after each test."""
    launcher = sandbox.batch.launcher
    yield sandbox
    sandbox.faults.clear()
    sandbox.batch.launcher = launcher
