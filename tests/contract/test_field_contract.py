"""sim2real.contract.field: the field episode schema, its standard-library validator and the key layout."""

from __future__ import annotations

import copy

import pytest

from sim2real.contract import field, schemas

EPISODE = {
    "schema_version": 1, "episode_id": "0b5c3a0e-6d9b-4c7e-9a57-1f2e3d4c5b6a-000007", "thing_name": "so101-arm-03",
    "model_package_arn": "arn:aws:sagemaker:us-east-1:123456789012:model-package/sim2real-groot/4",
    "model_version": "ab" * 32, "deployment_id": "4f1e2d3c-0000-4000-8000-000000000001",
    "component_versions": {"com.sim2real.PolicyInference": "1.0.0", "com.sim2real.PolicySetup": "1.0.0"},
    "started_at": "2026-12-04T06:00:00Z", "ended_at": "2026-12-04T06:00:41.250+00:00",
    "outcome": {"success": True, "source": "task_success_fn"}, "interventions": 0, "steps": 820,
    "action_latency_ms": {"p50": 11.5, "p95": 19.0, "max": 33.2},
}


def _with(**changes):
    doc = copy.deepcopy(EPISODE)
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = doc
        for p in parents:
            target = target[p]
        if value is ...:
            del target[last]
        else:
            target[last] = value
    return doc


def test_a_good_episode_is_valid_on_both_validators():
    assert field.errors(EPISODE) == [] == schemas.errors("field_episode", EPISODE)
    assert field.validate(EPISODE) is EPISODE
    for variant in (_with(model_package_arn=None), _with(data_uri="s3://b/field/data/arm-3/ep7.parquet",
                                                              data_sha256="ab" * 32, data_frames=40, data_fps=50,
                                                              task="Balance the pole"),
                    _with(component_versions={}), _with(steps=1, interventions=3,
                                                        outcome={"success": False, "source": "intervention"})):
        assert field.errors(variant) == [] == schemas.errors("field_episode", variant)


BAD = [
    ("missing", _with(steps=...), ["$: 'steps' is a required property"]),
    ("extra", _with(robot="x"), ["$: Additional properties are not allowed ('robot' was unexpected)"]),
    ("version", _with(schema_version=2), ["$.schema_version: 1 was expected"]),
    ("version-bool", _with(schema_version=True), ["$.schema_version: 1 was expected"]),
    ("id-slash", _with(episode_id="a/b"), ["$.episode_id: 'a/b' does not match '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'"]),
    ("thing", _with(thing_name="arm 3"), ["$.thing_name: 'arm 3' does not match '^[A-Za-z0-9:_-]{1,128}$'"]),
    ("arn", _with(model_package_arn="pkg-4"), ["$.model_package_arn: 'pkg-4' does not match "
                                               "'^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:model-package/.+$'"]),
    ("model-empty", _with(model_version=""), ["$.model_version: '' should be non-empty"]),
    ("semver", _with(component_versions={"com.sim2real.PolicySetup": "1.0"}),
     ["$.component_versions['com.sim2real.PolicySetup']: '1.0' does not match "
      "'^(0|[1-9][0-9]*)\\\\.(0|[1-9][0-9]*)\\\\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\\\\+[0-9A-Za-z.-]+)?$'"]),
    ("time", _with(started_at="2026-12-04 06:00:00"), ["$.started_at: '2026-12-04 06:00:00' is not a 'date-time'"]),
    ("no-offset", _with(ended_at="2026-12-04T06:00:41"), ["$.ended_at: '2026-12-04T06:00:41' is not a 'date-time'"]),
    ("success-type", _with(outcome__success="yes"), ["$.outcome.success: 'yes' is not of type 'boolean'"]),
    ("source", _with(outcome__source="guess"),
     ["$.outcome.source: 'guess' is not one of ['task_success_fn', 'operator_label', 'intervention']"]),
    ("interventions", _with(interventions=-1), ["$.interventions: -1 is less than the minimum of 0"]),
    ("steps-zero", _with(steps=0), ["$.steps: 0 is less than the minimum of 1"]),
    ("steps-float", _with(steps=2.5), ["$.steps: 2.5 is not of type 'integer'"]),
    ("latency", _with(action_latency_ms__p95=-0.1, action_latency_ms__max=...),
     ["$.action_latency_ms.p95: -0.1 is less than the minimum of 0",
      "$.action_latency_ms: 'max' is a required property"]),
    ("latency-bool", _with(action_latency_ms__p50=True), ["$.action_latency_ms.p50: True is not of type 'number'"]),
    ("data-uri", _with(data_uri="/local/ep7", data_sha256="ab" * 32, data_frames=4, data_fps=50, task="t"),
     ["$.data_uri: '/local/ep7' does not match '^s3://[^/]+/.+$'"]),
    ("data-without-checksum", _with(data_uri="s3://b/k.parquet"),
     ["$: 'data_fps' is a dependency of 'data_uri'", "$: 'data_frames' is a dependency of 'data_uri'",
      "$: 'data_sha256' is a dependency of 'data_uri'", "$: 'task' is a dependency of 'data_uri'"]),
    ("data-sha256", _with(data_uri="s3://b/k.parquet", data_sha256="AB" * 32, data_frames=4, data_fps=50, task="t"),
     ["$.data_sha256: '" + "AB" * 32 + "' does not match '^[0-9a-f]{64}$'"]),
    ("not-object", ["x"], ["$: ['x'] is not of type 'object'"]),
]


@pytest.mark.parametrize("doc, expected", [(d, e) for _, d, e in BAD], ids=[i for i, _, _ in BAD])
def test_each_kind_of_bad_episode_is_named_with_its_path(doc, expected):
    assert field.errors(doc) == expected
    with pytest.raises(field.FieldEpisodeError) as info:
        field.validate(doc)
    assert info.value.errors == expected


def test_ended_before_started_is_refused():
    doc = _with(ended_at="2026-12-04T05:59:59Z")
    assert field.errors(doc) == ["$.ended_at: '2026-12-04T05:59:59Z' is before started_at '2026-12-04T06:00:00Z'"]


def test_a_robot_without_a_date_time_checker_still_refuses_a_time_without_offset(monkeypatch):
    """jsonschema checks ``format: date-time`` only with rfc3339-validator installed (the robots' venv has no
    reason to install it): :func:`field.errors` checks both times itself then."""
    monkeypatch.setattr(schemas, "errors", lambda name, doc: [])
    assert field.errors(_with(ended_at="2026-12-04T06:00:41")) == [
        "$.ended_at: '2026-12-04T06:00:41' is not an RFC 3339 date-time with an offset"]


def test_episode_key_is_stable_and_one_path_segment_per_part():
    key = field.episode_key("", "so101-arm-03", "s-000007")
    assert key == "field/episodes/so101-arm-03/s-000007.json" == field.episode_key("", "so101-arm-03", "s-000007")
    assert field.episode_key("sandbox/", "arm", "e1") == "sandbox/field/episodes/arm/e1.json"
    assert field.episodes_prefix("p/", "arm") == "p/field/episodes/arm/"
    for args, match in ((("sandbox", "arm", "e1"), "prefix must be empty or end with '/'"),
                        (("", "arm/2", "e1"), "thing_name 'arm/2' does not match"),
                        (("", "arm", "../e1"), "episode_id '../e1' does not match")):
        with pytest.raises(ValueError, match=match):
            field.episode_key(*args)


def test_parse_time_reads_rfc3339_with_an_offset():
    assert field.parse_time("2026-12-04T06:00:00.5+02:00").isoformat() == "2026-12-04T06:00:00.500000+02:00"
    with pytest.raises(ValueError, match="not an RFC 3339 date-time"):
        field.parse_time("2026-12-04T06:00:00")


def test_nearest_rank_is_one_of_the_values():
    from sim2real.contract.stats import nearest_rank

    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert [nearest_rank(values, q) for q in (0.2, 0.5, 0.95, 1.0)] == [1.0, 3.0, 5.0, 5.0]
    assert nearest_rank([7], 0.5) == 7.0
    for args, match in ((([], 0.5), "of no values"), (([1.0], 0.0), r"need 0 < q <= 1")):
        with pytest.raises(ValueError, match=match):
            nearest_rank(*args)


def _dataset(**changes):
    episodes = [{"thing_name": thing, "episode_id": f"s-00000{i}", "summary_key": f"field/episodes/{thing}/s-00000{i}.json",
                 "data_key": f"field/data/{thing}/s-00000{i}.parquet", "sha256": f"{i}" * 64, "size_bytes": 900,
                 "frames": 40 + i, "fps": 50, "task": "Balance the pole", "success": i % 2 == 0, "model_version": "m1",
                 "ended_at": "2026-12-04T06:00:41Z"} for thing, i in (("arm-1", 1), ("arm-1", 2), ("arm-2", 3))]
    doc = {"schema_version": 1, "dataset_version": field.dataset_version(episodes), "created_at": "2026-12-04T07:00:00Z",
           "bucket": "bkt", "prefix": "", "parent_version": None, "codebase_version": "v2.1", "episodes": episodes,
           "totals": {"episodes": 3, "frames": 126, "successes": 1, "things": ["arm-1", "arm-2"], "new_episodes": 3},
           "refused": {"no_data": 2}}
    doc.update(changes)
    return doc


def test_a_field_dataset_manifest_is_checked_beyond_its_schema():
    assert field.dataset_errors(_dataset()) == []
    assert field.validate_dataset(good := _dataset()) is good
    # the version is the episodes' content: the same episodes, the same version; another episode, another one
    assert field.dataset_version(_dataset()["episodes"]) == _dataset()["dataset_version"]
    assert field.dataset_version(_dataset()["episodes"][:2]) != _dataset()["dataset_version"]
    swapped = _dataset()
    swapped["episodes"] = swapped["episodes"][::-1]
    assert field.dataset_errors(swapped) == [
        f"$.dataset_version: {swapped['dataset_version']!r} is not the episodes' version "
        f"{field.dataset_version(swapped['episodes'])!r}",
        "$.episodes: not ordered by (thing_name, episode_id) or an episode is listed twice"]
    wrong_totals = _dataset(totals={"episodes": 3, "frames": 1, "successes": 1, "things": ["arm-1"],
                                    "new_episodes": 4})
    assert field.dataset_errors(wrong_totals) == [
        "$.totals.frames: 1, the episodes give 126", "$.totals.new_episodes: 4 is more than the 3 episodes",
        "$.totals.things: ['arm-1'], the episodes give ['arm-1', 'arm-2']"]
    assert field.dataset_errors(_dataset(dataset_version="v1")) == [
        "$.dataset_version: 'v1' does not match '^fd-[0-9a-f]{16}$'"]
    with pytest.raises(field.FieldEpisodeError):
        field.validate_dataset(wrong_totals)


def test_data_and_manifest_keys():
    assert field.data_key("sandbox/", "arm-1", "s-000001") == "sandbox/field/data/arm-1/s-000001.parquet"
    assert field.manifest_key("", "fd-0123456789abcdef") == "field/datasets/fd-0123456789abcdef/manifest.json"
    with pytest.raises(ValueError, match="16 hex digits"):
        field.manifest_key("", "latest")
    with pytest.raises(ValueError, match="episode_id"):
        field.data_key("", "arm-1", "../x")
