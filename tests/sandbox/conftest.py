"""One provisioned Sandbox for the sandbox tests (moto state is per process: one at a time)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sim2real.sandbox import Sandbox

SCRIPTS = Path(__file__).parent / "scripts"


def wait_until(fn: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Poll ``fn`` until it returns a truthy value; return it (AssertionError on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
        time.sleep(interval)


@pytest.fixture(scope="session")
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
