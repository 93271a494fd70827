"""The run key: one id per DAG run, safe for every AWS name it appears in.

It names the Batch job, the S3 prefix ``runs/<run_key>/``, the pipeline execution display
name, the ``sim2real:run-key`` tag, model package metadata and the Greengrass deployment name,
and it is how a retried task finds what its earlier try started.

Constraints it satisfies (AWS API reference):

* Batch ``jobName``: ``[A-Za-z0-9][A-Za-z0-9_-]{1,127}``
* SageMaker ``PipelineExecutionDisplayName``: ``[a-zA-Z0-9](-*[a-zA-Z0-9]){0,81}``
* S3 key segment, tag value, Greengrass ``deploymentName``: any of the above is safe.

So the key is lower-case ``[a-z0-9-]``, starts with a letter or digit, has no ``--`` runs,
no trailing ``-``, and is at most 63 characters (fits every limit above with room for a suffix).
"""

from __future__ import annotations

import hashlib
import re

MAX_LEN = 63
_PATTERN = re.compile(r"^[a-z0-9](?:-?[a-z0-9])*$")


def _slug(text: str) -> str:
    text = re.sub(r"[^a-z0-9]+", "-", text.lower())
    return re.sub(r"-{2,}", "-", text).strip("-")


def make_run_key(dag_id: str, run_id: str) -> str:
    """Derive the run key from ``dag_id`` and ``run_id``.

    Deterministic (a retry of any task in the same DAG run gets the same key) and unique per
    (dag_id, run_id): an 8-hex-digit sha256 of the exact pair is appended, so two run ids that
    slug to the same text (``manual__2026-01-01T00:00:00+00:00`` vs ``...T00-00-00``) still differ.

    :param dag_id: the DAG id.
    :param run_id: the DAG run id (``manual__<iso date>``, ``scheduled__...``, any string).
    :return: a string matching ``^[a-z0-9](-?[a-z0-9])*$`` of at most 63 characters.
    :raises ValueError: when ``dag_id`` or ``run_id`` is empty.
    """
    if not dag_id or not run_id:
        raise ValueError("make_run_key needs a non-empty dag_id and run_id")
    digest = hashlib.sha256(f"{dag_id}\x00{run_id}".encode()).hexdigest()[:8]
    body = _slug(f"{dag_id}-{run_id}") or "run"
    body = body[: MAX_LEN - len(digest) - 1].rstrip("-")
    key = f"{body}-{digest}"
    assert is_valid_run_key(key), key
    return key


def is_valid_run_key(key: str) -> bool:
    """True when ``key`` has the shape ``make_run_key`` produces."""
    return bool(key) and len(key) <= MAX_LEN and bool(_PATTERN.match(key))


def run_prefix(run_key: str) -> str:
    """S3 key prefix of everything a run writes: ``runs/<run_key>/`` (with trailing slash)."""
    return f"runs/{run_key}/"
