"""Helpers shared by the sandbox tests (a uniquely named module: every test folder's conftest.py
is a module named ``conftest``, so tests must not import from it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
