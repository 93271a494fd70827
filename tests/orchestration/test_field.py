"""sim2real.orchestration.field: reading the robots' field episodes (moto's S3; Stubber for the pages) and the
per model version summary (its interval is sim2real.contract.stats.wilson_interval's)."""

from __future__ import annotations

import copy
import io
import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.stub import Stubber

from tests.orchestration.conftest import FIELD_BUCKET

from sim2real.contract import field as contract
from sim2real.contract.stats import wilson_interval
from sim2real.orchestration.field import REASONS, collect_field_episodes, field_summary

BUCKET, SHA, OTHER_SHA = FIELD_BUCKET, "ab" * 32, "cd" * 32
THINGS = ["arm-1", "arm-2"]
WINDOW = {"not_before": "2026-12-04T06:00:00Z", "not_after": datetime(2026, 12, 4, 8, tzinfo=timezone.utc)}
ASKED = {"model_version": SHA, "deployment_ids": ["dep-1"], "thing_names": THINGS, **WINDOW}


def episode(thing="arm-1", n=1, *, success=True, model=SHA, deployment="dep-1", start="06:10:00", end="06:11:00",
            interventions=0, p95=20.0, latency_max=40.0) -> dict:
    return {"schema_version": 1, "episode_id": f"s1-{n:06d}", "thing_name": thing, "model_package_arn": None,
            "model_version": model, "deployment_id": deployment, "component_versions": {"com.sim2real.X": "1.0.0"},
            "started_at": f"2026-12-04T{start}Z", "ended_at": f"2026-12-04T{end}Z",
            "outcome": {"success": success, "source": "task_success_fn"}, "interventions": interventions,
            "steps": 100, "action_latency_ms": {"p50": 10.0, "p95": p95, "max": latency_max}}


def put(client, doc, key=None, prefix="fleet/") -> str:
    key = key or contract.episode_key(prefix, doc["thing_name"], doc["episode_id"])
    client.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(doc).encode() if isinstance(doc, dict) else doc)
    return key


def test_each_kind_of_refusal_is_counted_and_named(s3):
    good = [put(s3, episode("arm-1", 1)), put(s3, episode("arm-2", 2, success=False, interventions=2))]
    bad_schema = episode("arm-1", 3)
    bad_schema["steps"] = 0
    refused = {
        put(s3, bad_schema): ("malformed", "$.steps: 0 is less than the minimum of 1"),
        put(s3, b"{half", key="fleet/field/episodes/arm-1/s1-000004.json"): ("malformed", "not JSON"),
        put(s3, episode("arm-1", 5), key="fleet/field/episodes/arm-2/s1-000005.json"):
            ("malformed", "the key is not 'fleet/field/episodes/arm-1/s1-000005.json'"),
        put(s3, episode("arm-1", 6, model=OTHER_SHA)): ("foreign", f"model_version '{OTHER_SHA}' is not '{SHA}'"),
        put(s3, episode("arm-1", 7, deployment="dep-0")): ("foreign", "deployment_id 'dep-0' is not one of ['dep-1']"),
        put(s3, episode("arm-9", 8)): ("foreign", "thing_name 'arm-9' is not a thing of the group"),
        put(s3, episode("arm-1", 9, start="05:59:59")): ("early", "started 2026-12-04T05:59:59Z, before the window"),
        put(s3, episode("arm-1", 10, end="08:00:01")): ("late", "ended 2026-12-04T08:00:01Z, after the window"),
        # written by hand: the same episode under a second key (the layout alone never does that); the copy is
        # refused, the episode under its own key is kept (before: both were refused)
        put(s3, episode("arm-2", 11), key="fleet/field/episodes/arm-2/copy.json"):
            ("duplicated", "a copy of episode 's1-000011' of 'arm-2', whose object is "
                           "'fleet/field/episodes/arm-2/s1-000011.json'"),
    }
    good = sorted(good + [put(s3, episode("arm-2", 11))])
    put(s3, episode("arm-1", 12), prefix="other/")  # outside the prefix: not listed at all
    result = collect_field_episodes(s3, BUCKET, "fleet/", **ASKED)
    assert [contract.episode_key("fleet/", d["thing_name"], d["episode_id"]) for d in result.accepted] == good
    assert result.refused == {"malformed": 3, "duplicated": 1, "foreign": 3, "early": 1, "late": 1}
    assert list(result.refused) == list(REASONS)
    assert [key for key, _, _ in result.refusals] == sorted(refused)
    for key, reason, detail in result.refusals:
        assert reason == refused[key][0] and refused[key][1] in detail, (key, reason, detail)



def test_only_the_groups_folders_and_only_objects_uploaded_in_the_window_are_read(s3):
    """A canary reads its few robots' folders, not the fleet's, and not their history: an object uploaded before
    the window starts is counted as earlier, without a GetObject (its episode ended before the window), and is no
    refusal (before: every episode of a robot's history was a refused "early" object in every later canary)."""
    kept = put(s3, episode("arm-1", 1))
    put(s3, episode("arm-9", 2))  # another robot's folder: not listed
    uploaded = s3.head_object(Bucket=BUCKET, Key=kept)["LastModified"]
    asked = {**ASKED, "not_after": uploaded + timedelta(hours=1)}
    result = collect_field_episodes(s3, BUCKET, "fleet/", **asked, thing_folders_only=True)
    assert [d["episode_id"] for d in result.accepted] == ["s1-000001"] and result.refusals == []
    later = uploaded + timedelta(seconds=1)  # a window that starts after the upload
    with Stubber(s3) as stub:  # one listing per robot of the group, no GetObject
        for thing in THINGS:
            contents = [{"Key": kept, "LastModified": uploaded}] if thing == "arm-1" else []
            stub.add_response("list_objects_v2", {"Contents": contents, "IsTruncated": False},
                              {"Bucket": BUCKET, "Prefix": f"fleet/field/episodes/{thing}/"})
        result = collect_field_episodes(s3, BUCKET, "fleet/", **{**asked, "not_before": later},
                                        thing_folders_only=True, skip_uploaded_before=True)
        stub.assert_no_pending_responses()
    assert result.accepted == [] and result.refused["early"] == 0 and result.refusals == []
    assert result.earlier_objects == 1

def test_an_empty_prefix_gives_nothing_and_bad_arguments_are_refused(s3):
    result = collect_field_episodes(s3, BUCKET, "", **ASKED)
    assert (result.accepted, set(result.refused.values()), result.refusals) == ([], {0}, [])
    with pytest.raises(ValueError, match="prefix must be empty or end with '/'"):
        collect_field_episodes(s3, BUCKET, "fleet", **ASKED)
    with pytest.raises(ValueError, match="has no time zone"):
        collect_field_episodes(s3, BUCKET, "", **{**ASKED, "not_after": datetime(2026, 12, 4, 8)})
    with pytest.raises(ValueError, match="the window ends .* before it starts"):
        collect_field_episodes(s3, BUCKET, "", **{**ASKED, "not_after": "2026-12-04T05:00:00Z"})


def test_every_page_is_read_through_an_s3_hook():
    """Two ListObjectsV2 pages (Stubber: the requests checked against botocore's S3 model), given as a hook."""
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    docs = [episode("arm-1", 1), episode("arm-2", 2)]
    keys = [contract.episode_key("", d["thing_name"], d["episode_id"]) for d in docs]
    listing = {"Bucket": BUCKET, "Prefix": "field/episodes/"}

    class Hook:  # what collect_field_episodes reads of an Airflow S3Hook
        def get_conn(self):
            return client

    with Stubber(client) as stub:
        stub.add_response("list_objects_v2", {"Contents": [{"Key": keys[0]}], "IsTruncated": True,
                                              "NextContinuationToken": "t1"}, listing)
        stub.add_response("list_objects_v2", {"Contents": [{"Key": keys[1]}], "IsTruncated": False},
                          {**listing, "ContinuationToken": "t1"})
        for key, doc in zip(keys, docs, strict=True):
            stub.add_response("get_object", {"Body": io.BytesIO(json.dumps(doc).encode())},
                              {"Bucket": BUCKET, "Key": key})
        result = collect_field_episodes(Hook(), BUCKET, "", **ASKED)
        stub.assert_no_pending_responses()
    assert result.accepted == docs


def test_the_summary_per_model_version():
    docs = [episode("arm-1", 1, p95=10.0, latency_max=12.0), episode("arm-1", 2, success=False, interventions=3),
            episode("arm-2", 3, p95=30.0, latency_max=90.0), episode("arm-2", 4, model=OTHER_SHA)]
    docs += [episode("arm-2", 5 + i, success=i % 3 != 0, p95=15.0 + i) for i in range(17)]
    summary = field_summary(copy.deepcopy(docs))
    assert list(summary) == [SHA, OTHER_SHA]
    ours = summary[SHA]
    successes = 2 + sum(1 for i in range(17) if i % 3 != 0)
    assert (ours["n"], ours["successes"], ours["interventions"]) == (20, successes, 3)
    assert ours["rate"] == successes / 20
    assert ours["ci95"] == list(wilson_interval(successes, 20))
    low, high = ours["ci95"]
    assert 0 < low < ours["rate"] < high < 1
    # nearest rank: the 19th smallest of the 20 episode p95s (10, 20, 30, 15..31) is 30.0; the max of the maxima
    assert (ours["latency_p95_ms"], ours["latency_max_ms"]) == (30.0, 90.0)
    assert ours["robots"] == {"arm-1": {"n": 2, "successes": 1, "interventions": 3},
                              "arm-2": {"n": 18, "successes": successes - 1, "interventions": 0}}
    assert summary[OTHER_SHA]["ci95"] == list(wilson_interval(1, 1)) == [pytest.approx(0.2065, abs=1e-4), 1.0]
    assert field_summary([]) == {}
