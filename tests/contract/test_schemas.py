"""sim2real.contract.schemas: every shipped schema loads and is a valid draft 2020-12 schema."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from sim2real.contract import schemas


def test_every_schema_file_is_named_and_valid():
    folder = schemas.path("lineage").parent
    assert sorted(p.name for p in folder.glob("*.schema.json")) == sorted(f"{n}.schema.json" for n in schemas.NAMES)
    for name in schemas.NAMES:
        schema = schemas.load(name)
        Draft202012Validator.check_schema(schema)
        assert schema["$id"].endswith(f"/{name}.schema.json")
        assert schema == json.loads(schemas.path(name).read_text(encoding="utf-8"))


def test_load_returns_a_copy_and_refuses_unknown_names():
    schema = schemas.load("eval_report")
    schema["required"].append("nothing")
    assert "nothing" not in schemas.load("eval_report")["required"]
    with pytest.raises(KeyError, match="no JSON schema named 'report'; known: checkpoint_manifest, eval_report"):
        schemas.load("report")


MANIFEST = {
    "schema_version": 1, "run_key": "sim-to-real-manual-1", "task": "Reacher-v5",
    "checkpoint_uri": "s3://b/runs/k/checkpoints/agent_000002.pt", "sha256": "a" * 64, "iteration": 2,
    "timesteps": 512, "mean_reward": -12.5, "library_versions": {"torch": "2.9.1"}, "image_digest": None,
    "resumed_from": None, "created_at": "2026-12-01T22:18:53.868053Z", "tensorboard_uri": "s3://b/runs/k/tb/",
    "rollouts": 64, "num_envs": 4, "completed": True,
}


def test_errors_names_each_mismatch_with_its_path():
    assert schemas.errors("checkpoint_manifest", MANIFEST) == []
    bad = dict(MANIFEST, sha256="ABC", iteration=-1, extra=1)
    del bad["task"]
    assert schemas.errors("checkpoint_manifest", bad) == [
        "$: 'task' is a required property",
        "$: Additional properties are not allowed ('extra' was unexpected)",
        "$.iteration: -1 is less than the minimum of 0",
        "$.sha256: 'ABC' does not match '^[0-9a-f]{64}$'",
    ]


def test_manifest_fields_the_readers_rely_on_are_required():
    """The checkpoint sensor reads sha256 / checkpoint_uri / task, the report and lineage iteration and
    mean_reward, the evaluation stage checkpoint_sha256 / episodes / successes / success_rate / ci95."""
    manifest, report = schemas.load("checkpoint_manifest"), schemas.load("eval_report")
    assert {"sha256", "checkpoint_uri", "task", "iteration", "mean_reward"} <= set(manifest["required"])
    assert {"checkpoint_sha256", "episodes", "successes", "success_rate", "ci95", "task",
            "checkpoint_uri"} <= set(report["required"])
