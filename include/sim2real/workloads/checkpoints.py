"""The trainer's checkpoint directory (OUTPUT_URI): checkpoint names, the newest complete one, the TensorBoard copy.

A checkpoint ``agent_<iteration:06d>.pt`` is complete iff its ``.sha256`` sidecar exists and matches
(:func:`find_latest_complete_checkpoint`, which the trainer resumes from and :mod:`sim2real.workloads.publish`
reads); ``manifest.json`` (:data:`MANIFEST_NAME`, schema version :data:`SCHEMA_VERSION`) is written last. The
layout and the writing order: :mod:`sim2real.workloads.train`.
"""

from __future__ import annotations

import os
import re
import sys

from sim2real.contract import storage
from sim2real.contract.progress import PREFIX

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1
_CKPT_RE = re.compile(r"^agent_(\d{6,})\.pt$")


def checkpoint_name(iteration: int) -> str:
    """``agent_<iteration:06d>.pt``."""
    return f"agent_{iteration:06d}.pt"


def find_latest_complete_checkpoint(output_uri: str) -> tuple[int, str, str] | None:
    """Newest complete checkpoint under ``output_uri``: ``(iteration, uri, sha256)`` or ``None``.

    Complete = ``agent_<n>.pt`` and ``agent_<n>.pt.sha256`` both exist and the sidecar's hex equals the
    sha256 of the checkpoint bytes. Incomplete/corrupt ones are skipped (with a note on stderr).
    """
    names = set(storage.list_names(output_uri))
    candidates = sorted(
        ((int(m.group(1)), n) for n in names if (m := _CKPT_RE.match(n)) and f"{n}.sha256" in names), reverse=True
    )
    for iteration, name in candidates:
        uri = storage.join(output_uri, name)
        expected = storage.read_bytes(uri + ".sha256").decode().strip().split()[0]
        actual = storage.sha256_uri(uri)
        if actual == expected:
            return iteration, uri, actual
        print(f"{PREFIX} skipping checkpoint {uri}: sha256 {actual} != sidecar {expected}", file=sys.stderr)
    return None


def _sync_tensorboard(agent, tb_dir: str, out: str, local_out: bool) -> None:
    writer = getattr(agent, "writer", None)
    if writer is not None:
        writer.flush()
    if local_out or not os.path.isdir(tb_dir):
        return
    for name in sorted(os.listdir(tb_dir)):
        path = os.path.join(tb_dir, name)
        if os.path.isfile(path):
            storage.upload_file(path, storage.join(out, "tensorboard", name))
