"""The emulated Slurm's job records: the state folder of one JSON file per job, shared by its commands.

``SIM2REAL_SLURM_STATE`` names the folder (set on the sandbox's HyperPod head node only). A job is written whole
(tmp file + rename, :func:`_save`) and changed under the folder's lock (:func:`_update`: a cancelled job stays
cancelled); :func:`_next_id` hands out job ids from 1001 under the same lock; :func:`_order` sorts job ids and
array task ids (``<array>_<index>``). :func:`_die` and :func:`_note` are how the commands fail and log. The commands
and the responder: :mod:`sim2real.dev.sandbox.responders.slurm`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from sim2real.dev.sandbox._core import PREFIX

def _state_dir() -> Path:
    path = os.environ.get("SIM2REAL_SLURM_STATE")
    if not path:
        _die("SIM2REAL_SLURM_STATE is not set (the emulated Slurm runs only on the sandbox's HyperPod head node)")
    return Path(path)


def _die(message: str, code: int = 1) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(code)


def _note(message: str) -> None:
    print(f"{PREFIX} slurm: {message}", file=sys.stderr, flush=True)


def _read(path: Path) -> dict[str, Any]:
    for _ in range(50):
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, FileNotFoundError):
            time.sleep(0.02)
    return json.loads(path.read_text(encoding="utf-8"))


def _job_path(job_id: str) -> Path:
    return _state_dir() / f"{job_id}.json"


def _load(job_id: str) -> dict[str, Any] | None:
    path = _job_path(job_id)
    return _read(path) if path.exists() else None


def _save(job: dict[str, Any]) -> None:
    path = _job_path(job["job_id"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(job), encoding="utf-8")
    os.replace(tmp, path)


def _update(job_id: str, **changes: Any) -> dict[str, Any]:
    import fcntl

    with open(_state_dir() / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        job = _load(job_id) or {}
        if job.get("state") == "CANCELLED" and changes.get("state") not in (None, "CANCELLED"):
            return job  # a cancelled job stays cancelled
        job.update(changes)
        _save(job)
        return job


def _order(job_id: str) -> tuple[int, int]:
    """Sort key of a job id: ``(base, -1)`` for a job, ``(array, index)`` for an array task."""
    base, _, index = str(job_id).partition("_")
    return int(base), int(index) if index else -1


def _all_jobs() -> list[dict[str, Any]]:
    return sorted((_read(p) for p in _state_dir().glob("*.json")), key=lambda j: _order(j["job_id"]))


def _next_id() -> str:
    import fcntl

    with open(_state_dir() / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        counter = _state_dir() / "next_id"
        job_id = int(counter.read_text()) if counter.exists() else 1001
        counter.write_text(str(job_id + 1))
        return str(job_id)
